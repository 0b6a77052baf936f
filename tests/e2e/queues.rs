//! Fleet figures for an operator console, from real processes: each
//! subagent type's task queue (`Client::queues`, `flotilla queues`) while
//! tasks wait with no worker and after one drains them, and the resident
//! memory and busy time a worker's heartbeats carry (`flotilla workers`).
//! Dead-letter counts are checked where tasks are dead-lettered anyway
//! (durability.rs, bad_input.rs).

use flotilla_protocol::QueueStats;
use flotilla_testkit::{Deployment, EventLog, TIMEOUT, TestConfig, eventually};
use serde_json::Value;

use crate::approvals::cli;
use crate::durability::regions;

/// The finance queue as `Client::queues` lists it, once it exists.
async fn finance_queue(d: &Deployment) -> Option<QueueStats> {
    d.client().queues().await.ok()?.into_iter().find(|q| q.subagent_type.as_str() == "finance")
}

/// The entry of `ty` in `flotilla queues --json`.
async fn cli_queue(d: &Deployment, ty: &str) -> Value {
    let (code, out, err) = cli(d, &["queues", "--json"]).await;
    assert_eq!(code, 0, "queues --json: {out}{err}");
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let queues = v["queues"].as_array().unwrap_or_else(|| panic!("{{\"queues\": [...]}}: {v}"));
    queues.iter().find(|q| q["subagent_type"] == ty).cloned().unwrap_or_else(|| panic!("no {ty} queue: {v}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_tasks_show_in_their_queue_until_a_worker_drains_them_and_its_beats_tell_memory_and_busy_time() {
    // Two model calls of 50 ms per task; heartbeats every second.
    let mut d = Deployment::start(1, |url| {
        let mut c = TestConfig::demo(url, 4, 50);
        c.section_replace("task_timeout = 60\n", "task_timeout = 60\nno_worker_timeout = 300\n");
        c.section("[worker]\nheartbeat = 1\n");
        c
    })
    .await;
    // The first worker declares the finance queue, then leaves: tasks wait.
    let empty = eventually(TIMEOUT, "the finance queue to exist", || finance_queue(&d)).await;
    assert_eq!((empty.pending, empty.in_flight, empty.dead_letters, empty.oldest_waiting_at), (0, 0, 0, None));
    let mut w1 = d.workers.remove(0);
    let code = tokio::task::spawn_blocking(move || w1.terminate()).await.unwrap();
    assert_eq!(code, Some(0), "the worker stops cleanly");

    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let before = flotilla_protocol::now() - std::time::Duration::from_secs(1);
    let job = d.submit(&regions(3)).await;
    let q = eventually(TIMEOUT, "three finance tasks to wait", || async {
        finance_queue(&d).await.filter(|q| q.pending == 3)
    })
    .await;
    assert_eq!((q.in_flight, q.redelivered, q.dead_letters), (0, 0, 0), "{q:?}");
    let oldest = q.oldest_waiting_at.unwrap_or_else(|| panic!("three tasks wait, the oldest has a time: {q:?}"));
    assert!(before <= oldest && oldest <= q.at, "stored after the submit, before the reading: {q:?}");

    let listed = cli_queue(&d, "finance").await;
    assert_eq!((listed["pending"].as_u64(), listed["in_flight"].as_u64()), (Some(3), Some(0)), "{listed}");
    assert_eq!(listed["dead_letters"].as_u64(), Some(0), "{listed}");
    let same = serde_json::to_value(&q).unwrap()["oldest_waiting_at"].clone();
    assert!(same.is_string() && listed["oldest_waiting_at"] == same, "the oldest task Client::queues saw: {listed}");
    let (code, table, err) = cli(&d, &["queues"]).await;
    assert_eq!(code, 0, "{err}");
    let line = table.lines().find(|l| l.starts_with("finance")).unwrap_or_else(|| panic!("{table}"));
    let cells: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(cells[1], "3", "PENDING: {table}");
    assert!(cells.last().unwrap().ends_with('s'), "OLDEST WAITING as an age: {table}");

    // A worker comes and drains the queue.
    d.add_worker("w2");
    let end = log.job_end(TIMEOUT).await;
    assert_eq!(end["event"], "completed", "{end}");
    assert_eq!(d.status(job).await.tasks.len(), 3);
    let drained = eventually(TIMEOUT, "the finance queue to be empty", || async {
        finance_queue(&d).await.filter(|q| q.pending == 0 && q.in_flight == 0)
    })
    .await;
    assert_eq!(drained.oldest_waiting_at, None, "{drained:?}");
    let listed = cli_queue(&d, "finance").await;
    assert_eq!(listed["pending"].as_u64(), Some(0), "{listed}");
    assert!(listed.get("oldest_waiting_at").is_none_or(Value::is_null), "{listed}");

    // Its heartbeats: resident memory, and the time its three tasks took.
    let beat = eventually(TIMEOUT, "w2's beat to count its three tasks", || async {
        let (code, out, _) = cli(&d, &["workers", "--json"]).await;
        let v: Value = serde_json::from_str(&out).ok()?;
        let w = v["workers"].as_array()?.iter().find(|w| w["worker_id"] == "w2")?.clone();
        (code == 0 && w["types"][0]["completed"] == 3).then_some(w)
    })
    .await;
    let rss = beat["rss_bytes"].as_u64().unwrap_or_else(|| panic!("rss_bytes: {beat}"));
    assert!(rss > 1 << 20, "a worker takes more than 1 MiB: {beat}");
    let busy = beat["types"][0]["busy_ms"].as_u64().unwrap_or_else(|| panic!("busy_ms: {beat}"));
    assert!(busy >= 3 * 2 * 50, "three tasks of two 50 ms model calls each: {beat}");
    let (code, table, err) = cli(&d, &["workers"]).await;
    assert_eq!(code, 0, "{err}");
    let line = table.lines().find(|l| l.starts_with("w2")).unwrap_or_else(|| panic!("{table}"));
    assert!(line.contains(" MiB"), "RSS column: {table}");
}
