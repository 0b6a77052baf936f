//! A step's progress event travels in the step's journal entry
//! (docs/PROTOCOL.md, "Progress events carried by the journal"): one write
//! per step serves the journal and the watchers. The journal stream
//! republishes the entry's headers alone to the task's progress subject, so
//! a progress subscriber never receives the entry (tool arguments and
//! results), and the events stream stores the event like any other. An
//! entry without an event (the answering turn, markers, follow-ups taken)
//! goes to the task's quiet subject, which is not republished, and so does
//! the entry of a turn whose calls are all read-only, which the loop does
//! not wait for (workers/src/journal.rs). A journal
//! stream an older Flotilla declared does not republish: a worker then
//! publishes every event on its own.

use std::collections::HashMap;

use async_nats::HeaderMap;
use bytes::Bytes;
use flotilla_bus::PROGRESS_HEADER;
use flotilla_client::events::{self, Event, Scope};
use flotilla_protocol::ProgressKind;
use flotilla_protocol::ids::Tenant;
use flotilla_testkit::{Deployment, TIMEOUT, TestConfig, eventually};
use futures::StreamExt;
use serde_json::Value;

use crate::durability::regions;

/// One message as a core NATS subscriber receives it.
struct Seen {
    subject: String,
    headers: Option<HeaderMap>,
    payload: Bytes,
}

impl Seen {
    fn header_event(&self) -> Option<Value> {
        let h = self.headers.as_ref()?.get(PROGRESS_HEADER)?;
        Some(serde_json::from_str(h.as_str()).expect("the header is a progress event"))
    }
}

/// Every message on the bus from `d`'s job of `regions` until its end.
async fn run_job(d: &Deployment, regions: &str) -> (flotilla_protocol::ids::JobId, Vec<Seen>) {
    let mut sub = d.raw.client.subscribe("flotilla.>").await.expect("subscribe");
    d.raw.client.flush().await.expect("flush");
    let job = d.submit(regions).await;
    let mut seen = Vec::new();
    let ended = tokio::time::timeout(TIMEOUT, async {
        while let Some(m) = sub.next().await {
            let end = m.subject.ends_with(".event")
                && serde_json::from_slice::<Value>(&m.payload)
                    .is_ok_and(|v| matches!(v["event"].as_str(), Some("completed" | "failed" | "cancelled")));
            seen.push(Seen { subject: m.subject.to_string(), headers: m.headers, payload: m.payload });
            if end {
                return;
            }
        }
    })
    .await;
    assert!(ended.is_ok(), "the job did not end; saw {} messages", seen.len());
    (job, seen)
}

fn kinds(events: &[Value], kind: &str) -> usize {
    events.iter().filter(|e| e["event"] == kind).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steps_progress_event_rides_in_its_journal_entry_and_watchers_never_receive_the_entry() {
    let d = Deployment::start(1, |url| TestConfig::demo(url, 2, 0)).await;
    let (job, seen) = run_job(&d, &regions(2)).await;

    // What the worker wrote: journal entries, two model turns and a tool
    // result per task; the turn that calls the tool (awaited) carries its
    // event in the header; the tool result and the answering turn (neither
    // awaited, so an event they carried could be overtaken) do not.
    let journal: Vec<&Seen> = seen.iter().filter(|m| m.subject.starts_with("flotilla.journal.")).collect();
    assert_eq!(journal.len(), 6, "three entries a task");
    let carried: Vec<Value> = journal.iter().filter_map(|m| m.header_event()).collect();
    assert_eq!(
        (kinds(&carried, "model_call"), carried.len()),
        (2, 2),
        "two tasks' tool-calling turns carry their events: {carried:?}"
    );
    assert!(carried.iter().all(|e| e["event"] != "model_call" || e["step"] == 1), "{carried:?}");
    // An entry without an event is on the task's quiet subject, which is not
    // republished: no progress subscriber gets an empty message for it.
    for m in &journal {
        assert_eq!(m.header_event().is_none(), m.subject.ends_with(".quiet"), "{}", m.subject);
    }
    let empty = seen.iter().filter(|m| m.subject.contains(".progress.") && m.payload.is_empty());
    assert!(empty.clone().all(|m| m.header_event().is_some()), "an empty progress message without an event");
    for m in &journal {
        let entry: Value = serde_json::from_slice(&m.payload).expect("a journal entry body");
        assert_eq!(entry["entry"], "step", "{entry}");
    }

    // What a progress subscriber received: the carried events with an empty
    // body (the entry stays in the journal stream), each once, and no
    // carried event published on its own as well.
    let progress: Vec<&Seen> = seen.iter().filter(|m| m.subject.contains(".progress.")).collect();
    let republished: Vec<&Seen> = progress.iter().copied().filter(|m| m.header_event().is_some()).collect();
    assert_eq!(republished.len(), carried.len(), "each carried event reaches the progress subject once");
    for m in &republished {
        assert!(m.payload.is_empty(), "the journal entry leaked to {}: {:?}", m.subject, m.payload);
    }
    let on_their_own: Vec<Value> = progress
        .iter()
        .filter(|m| !m.payload.is_empty())
        .map(|m| serde_json::from_slice(&m.payload).unwrap())
        .collect();
    assert_eq!(
        (kinds(&on_their_own, "model_call"), kinds(&on_their_own, "tool_result")),
        (2, 2),
        "the answering turns' and the tool results' events are written on their own: {on_their_own:?}"
    );
    assert!(on_their_own.iter().all(|e| e["event"] != "model_call" || e["step"] == 2), "{on_their_own:?}");
    assert_eq!(kinds(&on_their_own, "started"), 2, "{on_their_own:?}");

    // Stored: a watcher replaying the job reads every event of each task,
    // the carried ones decoded from their header, in the loop's order.
    assert_events_in_loop_order(&d, job, 2).await;
}

/// A watcher replaying `job` reads every event of each of its `tasks`
/// tasks, the carried ones decoded from their header, in the loop's order.
async fn assert_events_in_loop_order(d: &Deployment, job: flotilla_protocol::ids::JobId, tasks: usize) {
    let (stored, replay) =
        events::follow_counted(&d.bus, Scope::Job(Tenant::default(), job), true).await.expect("follow the job");
    let replay: Vec<Event> = replay.take(stored).map(|e| e.expect("a stored event")).collect().await;
    let mut per_task: HashMap<_, Vec<String>> = HashMap::new();
    for e in replay {
        if let Event::Progress(p) = e {
            let kind = match p.kind {
                ProgressKind::ModelCall { step, .. } => format!("model_call {step}"),
                other => serde_json::to_value(&other).unwrap()["event"].as_str().unwrap().to_string(),
            };
            per_task.entry(p.task_id).or_default().push(kind);
        }
    }
    assert_eq!(per_task.len(), tasks, "{per_task:?}");
    for (task, kinds) in per_task {
        assert_eq!(
            kinds,
            ["started", "model_call 1", "tool_call", "tool_result", "model_call 2", "finished"],
            "task {task}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_of_read_only_calls_is_journaled_behind_the_loop_in_its_order_with_its_event_on_its_own() {
    // The finance type's native `calculate_margin` is read-only.
    let d = Deployment::start(1, |url| TestConfig::demo_native(url, 2, 0)).await;
    let (job, seen) = run_job(&d, &regions(2)).await;

    // Every step is still journaled, in the loop's order per task: the
    // turn that calls the tool, its result, the answering turn. None
    // carries an event: none is awaited, so each is on the quiet subject.
    let journal: Vec<&Seen> = seen.iter().filter(|m| m.subject.starts_with("flotilla.journal.")).collect();
    assert_eq!(journal.len(), 6, "three entries a task");
    let mut per_task: HashMap<String, Vec<String>> = HashMap::new();
    for m in &journal {
        assert!(m.header_event().is_none() && m.subject.ends_with(".quiet"), "{} carries an event", m.subject);
        let entry: Value = serde_json::from_slice(&m.payload).expect("a journal entry body");
        let step = &entry["step"];
        let what = match (step["step"].as_str(), step["message"]["tool_calls"].as_array()) {
            (Some("turn"), Some(calls)) if !calls.is_empty() => "calls calculate_margin",
            (Some("turn"), _) => "answers",
            (Some("tool_result"), _) => "tool result",
            _ => panic!("an entry no loop of this task makes: {entry}"),
        };
        let task = m.subject.trim_end_matches(".quiet").rsplit('.').next().unwrap().to_string();
        per_task.entry(task).or_default().push(what.to_string());
    }
    assert_eq!(per_task.len(), 2, "{per_task:?}");
    for (task, entries) in &per_task {
        assert_eq!(entries, &["calls calculate_margin", "tool result", "answers"], "task {task}");
    }

    // Each model_call and tool_result event is a message of its own.
    let own: Vec<Value> = seen
        .iter()
        .filter(|m| m.subject.contains(".progress.") && !m.payload.is_empty())
        .map(|m| serde_json::from_slice(&m.payload).unwrap())
        .collect();
    assert_eq!((kinds(&own, "model_call"), kinds(&own, "tool_result")), (4, 2), "{own:?}");
    assert_events_in_loop_order(&d, job, 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_on_a_journal_stream_that_does_not_republish_publishes_each_event_on_its_own() {
    let mut d = Deployment::start(0, |url| TestConfig::demo(url, 2, 0)).await;
    // The orchestrator declares the streams, then the buckets, the files
    // bucket among them: once that exists, no declaration is still to come.
    eventually(TIMEOUT, "the orchestrator to declare the topology", || async {
        d.raw.js.get_stream("OBJ_flotilla_files").await.ok()
    })
    .await;
    // The journal stream as a Flotilla before the republish declared it;
    // the worker declares nothing (a least-privilege worker never does).
    let mut stream = d.raw.js.get_stream("FLOTILLA_JOURNAL").await.expect("journal stream");
    let mut config = stream.info().await.expect("stream info").config.clone();
    assert!(config.republish.is_some(), "this Flotilla declares the republish");
    config.republish = None;
    d.raw.js.update_stream(config).await.expect("republish removed");
    let now = stream.info().await.expect("stream info").config.republish.clone();
    assert!(now.is_none(), "the stream still republishes: {now:?}");
    d.add_worker_env("w1", &[], &[("FLOTILLA_NATS__MANAGE_TOPOLOGY", "false")]);
    let (_, seen) = run_job(&d, &regions(1)).await;

    let journal: Vec<&Seen> = seen.iter().filter(|m| m.subject.starts_with("flotilla.journal.")).collect();
    assert!(journal.len() >= 3, "the steps are still journaled: {}", journal.len());
    assert!(journal.iter().all(|m| m.header_event().is_none()), "no entry carries an event nobody republishes");
    let own: Vec<Value> = seen
        .iter()
        .filter(|m| m.subject.contains(".progress.") && !m.payload.is_empty())
        .map(|m| serde_json::from_slice(&m.payload).unwrap())
        .collect();
    assert_eq!(
        (kinds(&own, "started"), kinds(&own, "model_call"), kinds(&own, "tool_result"), kinds(&own, "finished")),
        (1, 2, 1, 1),
        "every event published on its own: {own:?}"
    );
}
