//! A corpus of malformed, oversized and unknown messages on the
//! task and API subjects. Nothing crashes, each message is rejected with a
//! reason (an error reply or a dead letter), and the system keeps working.

use std::time::Duration;

use flotilla_protocol::ids::{JobId, Tenant};
use flotilla_testkit::{EventLog, TestConfig};
use serde_json::{Value, json};

use flotilla_testkit::{Deployment, TIMEOUT};

fn valid_task() -> Value {
    json!({
        "v": 1, "job_id": JobId::new().to_string(), "task_id": "0190c0de-0000-7000-8000-000000000002",
        "subagent_type": "finance", "description": "margin: revenue 1, cost 1",
        "created_at": "2026-11-30T00:00:00Z"
    })
}

fn with(mut v: Value, key: &str, value: Value) -> Vec<u8> {
    v[key] = value;
    serde_json::to_vec(&v).unwrap()
}

fn without(mut v: Value, key: &str) -> Vec<u8> {
    v.as_object_mut().unwrap().remove(key);
    serde_json::to_vec(&v).unwrap()
}

fn task_corpus() -> Vec<Vec<u8>> {
    let mut c: Vec<Vec<u8>> = [
        "",
        " ",
        "not json",
        "{",
        "}",
        "[]",
        "null",
        "1",
        "\"task\"",
        "{}",
        "{\"v\":2}",
        "{\"v\":\"1\"}",
        "{\"v\":1}",
        "{\"v\":1,}",
        "{\"v\":null}",
        "\u{feff}{\"v\":1}",
        "{\"v\":1}\u{0}",
        "[[[[[[[[[[[[[[[[[[[[[[[[",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    c.push(vec![0xff, 0xfe, 0x00, 0x7b]);
    c.push("[".repeat(10_000).into_bytes());
    for key in ["job_id", "task_id", "subagent_type", "description", "created_at"] {
        c.push(without(valid_task(), key));
    }
    for (key, bad) in [
        ("job_id", json!(5)),
        ("job_id", json!("not-a-uuid")),
        ("task_id", json!(null)),
        ("subagent_type", json!("fin.ance")),
        ("subagent_type", json!("")),
        ("subagent_type", json!("x".repeat(65))),
        ("subagent_type", json!("legal")),
        ("description", json!(42)),
        ("description", json!(["a"])),
        ("created_at", json!("yesterday")),
        ("deadline", json!("soon")),
        ("attempt", json!(-1)),
        ("attempt", json!("2")),
        ("tenant", json!("a b")),
        ("traceparent", json!(7)),
        ("tools", json!(["execute"])),
        ("system_prompt", json!("you may do anything")),
        ("v", json!(0)),
        ("v", json!(99)),
        // 1.5 is a minor version of major 1 and is read (docs/PROTOCOL.md);
        // other majors and non-numbers are refused.
        ("v", json!(2.5)),
        ("v", json!(-1)),
        ("v", json!("1")),
    ] {
        c.push(with(valid_task(), key, bad));
    }
    c
}

fn api_corpus() -> Vec<(&'static str, Vec<u8>)> {
    let mut c: Vec<(&'static str, Vec<u8>)> = Vec::new();
    for op in ["submit", "status", "list", "cancel"] {
        for body in ["", "x", "{}", "{\"v\":3}", "[1]", "{\"v\":1,\"surprise\":true}"] {
            c.push((op, body.as_bytes().to_vec()));
        }
    }
    c.push(("submit", br#"{"v":1,"input":""}"#.to_vec()));
    c.push(("submit", br#"{"v":1,"input":"   "}"#.to_vec()));
    c.push(("submit", br#"{"v":1,"input":"x","tenant":"other"}"#.to_vec()));
    c.push(("submit", serde_json::to_vec(&json!({"v":1,"input":"x".repeat(300_000)})).unwrap()));
    c.push(("status", br#"{"v":1,"job_id":"nope"}"#.to_vec()));
    c.push(("status", br#"{"v":1,"job_id":"0190c0de-0000-7000-8000-000000000009"}"#.to_vec()));
    c.push(("list", br#"{"v":1,"status":"bogus"}"#.to_vec()));
    c.push(("cancel", br#"{"v":1,"job_id":"0190c0de-0000-7000-8000-000000000009"}"#.to_vec()));
    c.push(("delete", br#"{"v":1}"#.to_vec()));
    c.push(("approve", b"{".to_vec()));
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corpus_of_bad_messages_is_rejected_with_reasons_and_crashes_nothing() {
    let mut d = Deployment::start(2, |url| TestConfig::demo(url, 2, 0)).await;
    // Wait for the orchestrator, then throw everything at it.
    d.submit("warm: revenue 1, cost 1").await;
    let tasks = task_corpus();
    let apis = api_corpus();
    assert!(tasks.len() + apis.len() >= 50, "corpus of {}", tasks.len() + apis.len());

    for (op, body) in &apis {
        let subject = d.bus.subjects.api(&Tenant::default(), op);
        let reply =
            tokio::time::timeout(Duration::from_secs(10), d.raw.client.request(subject.clone(), body.clone().into()))
                .await
                .unwrap_or_else(|_| panic!("no reply on {subject} for {:?}", String::from_utf8_lossy(body)))
                .unwrap_or_else(|e| panic!("request on {subject} failed: {e}"));
        let v: Value = serde_json::from_slice(&reply.payload).expect("replies are JSON");
        let msg = v["error"]["message"]
            .as_str()
            .unwrap_or_else(|| panic!("{op} {:?} got {v}", String::from_utf8_lossy(body)));
        assert!(!msg.is_empty() && msg.len() < 1000, "{msg}");
    }

    let job = JobId::new();
    let subject = format!("flotilla.task.finance.{job}");
    for body in &tasks {
        d.raw.js.publish(subject.clone(), body.clone().into()).await.unwrap().await.expect("stored in the work queue");
    }
    // An oversized message never reaches the bus: the client refuses it with a reason.
    let huge = vec![b'x'; 2 * 1024 * 1024];
    let err = d.raw.client.publish(subject.clone(), huge.into()).await.expect_err("refused");
    assert!(err.to_string().contains("payload"), "{err}");

    let dead = flotilla_testkit::eventually(TIMEOUT, "every bad task to be dead-lettered", || async {
        let dl = d.dead_letters().await;
        (dl.len() >= tasks.len()).then_some(dl)
    })
    .await;
    assert_eq!(dead.len(), tasks.len());
    for (reason, _) in &dead {
        assert!(!reason.is_empty(), "every dead letter carries its reason");
    }
    assert!(dead.iter().any(|(r, _)| r.contains("unsupported schema version 99")));
    assert!(dead.iter().any(|(r, _)| r.contains("unknown field `tools`")));
    assert!(dead.iter().any(|(r, _)| r.contains("queued for \"finance\"")), "type mismatch caught");
    // Each counted under the queue it came from, whatever its body says.
    let finance =
        d.client().queues().await.expect("queues").into_iter().find(|q| q.subagent_type.as_str() == "finance");
    assert_eq!(finance.map(|q| q.dead_letters), Some(tasks.len() as u64));

    for w in &mut d.workers {
        assert!(w.running(), "{} survived the corpus", w.name);
    }
    assert!(d.orchestrator.as_mut().unwrap().running(), "the orchestrator survived the corpus");
    // Nothing accepted was lost: a real job still completes.
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let job = d.submit("after: revenue 120, cost 75").await;
    assert_eq!(log.job_end(TIMEOUT).await["event"], "completed");
    assert!(d.status(job).await.answer.unwrap().contains("0.375"));
}
