//! A worker told to stop (SIGTERM) drains. It pulls no new
//! task, announces `draining` in its heartbeats, lets running tasks finish
//! within its grace and reports them itself; only what still runs when the
//! grace is over goes back to the queue, to finish on another worker.

use std::time::Duration;

use flotilla_protocol::{JobStatus, TaskStatus};
use flotilla_testkit::{EventLog, Proc, TestConfig};
use serde_json::Value;

use crate::durability::regions;
use flotilla_testkit::{Deployment, TIMEOUT};

fn is_started(s: &str, v: &Value) -> bool {
    s.contains(".progress.") && v["event"] == "started"
}

/// A worker of the deployment's config with its own `--grace`.
fn worker(d: &Deployment, id: &str, grace: &str) -> Proc {
    let cfg = d.config_arg();
    Proc::spawn(id, "flotilla-worker", &["--config", &cfg, "--id", id, "--grace", grace], &[])
}

/// SIGTERM on a blocking thread (it waits for the exit); returns the exit code.
fn terminate(mut w: Proc) -> tokio::task::JoinHandle<(Option<i32>, Proc)> {
    tokio::task::spawn_blocking(move || (w.terminate(), w))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigterm_lets_the_running_task_finish_on_the_same_worker() {
    // Two model calls of 2 s each: a task of about 4 s.
    let mut d = Deployment::start(0, |url| TestConfig::demo(url, 2, 2000)).await;
    d.workers.push(worker(&d, "w1", "30"));
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let mut beats = EventLog::subscribe(&d.raw.client, "flotilla.worker.heartbeat.*.w1").await;
    let job = d.submit(&regions(1)).await;
    log.until(TIMEOUT, "the task to start", is_started).await;
    tokio::time::sleep(Duration::from_secs(1)).await; // 1 s into the 4 s task
    let stopping = terminate(d.workers.remove(0));
    beats.until(TIMEOUT, "a draining heartbeat", |_, v| v["state"] == "draining").await;
    let (code, _w) = stopping.await.unwrap();
    assert_eq!(code, Some(0), "the worker exits cleanly after its drain");
    // The report was stored before the worker exited: no other worker is needed.
    let end = log.job_end(TIMEOUT).await;
    assert_eq!(end["event"], "completed", "{end}");
    let rec = d.status(job).await;
    let task = &rec.tasks[0];
    assert_eq!(task.status, Some(TaskStatus::Completed));
    assert_eq!(task.worker_id.as_deref(), Some("w1"), "finished by the worker that was told to stop");
    assert_eq!(task.attempt, 1, "never handed back");
    beats.until(TIMEOUT, "the last, stopping heartbeat", |_, v| v["state"] == "stopping").await;
}

/// A draining worker with a free slot has a pull in flight when the signal
/// comes; a task dispatched after it must wait for another worker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_dispatched_after_a_sigterm_never_starts_on_the_draining_worker() {
    // Two model calls of 2 s each: a task of about 4 s; two slots per worker.
    let mut d = Deployment::start(0, |url| TestConfig::demo(url, 2, 2000)).await;
    d.workers.push(worker(&d, "w1", "30"));
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let mut beats = EventLog::subscribe(&d.raw.client, "flotilla.worker.heartbeat.*.w1").await;
    let first = d.submit(&regions(1)).await;
    log.until(TIMEOUT, "the first task to start", is_started).await;
    let stopping = terminate(d.workers.remove(0));
    beats.until(TIMEOUT, "a draining heartbeat", |_, v| v["state"] == "draining").await;
    let second = d.submit(&regions(1)).await;
    let dispatched = log
        .until(TIMEOUT, "the second job's task to be dispatched", |s, v| {
            s.contains(&second.to_string()) && v["event"] == "task_dispatched"
        })
        .await;
    let task = dispatched["task_id"].as_str().expect("task id").to_string();
    // Only now a worker that may take it: before the fix the draining one
    // had already started it through its pull in flight.
    d.workers.push(worker(&d, "w2", "30"));
    let (code, _) = stopping.await.unwrap();
    assert_eq!(code, Some(0), "the draining worker exits 0");
    let job = second.to_string();
    let end = log
        .until(Duration::from_secs(60), "the second job to end", |s, v| {
            s.contains(&job)
                && s.ends_with(".event")
                && ["completed", "failed", "cancelled"].contains(&v["event"].as_str().unwrap_or(""))
        })
        .await;
    assert_eq!(end["event"], "completed", "{end}");
    let rec = d.status(second).await;
    assert_eq!(rec.tasks[0].worker_id.as_deref(), Some("w2"), "{:?}", rec.tasks[0]);
    let on_w1 = log
        .seen
        .iter()
        .any(|(s, v)| s.ends_with(&format!(".progress.{task}")) && v["event"] == "started" && v["worker_id"] == "w1");
    assert!(!on_w1, "the second task started on the draining worker");
    let rec = d.status(first).await;
    assert_eq!(rec.tasks[0].worker_id.as_deref(), Some("w1"), "the first task finished where it ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grace_that_runs_out_hands_the_task_back_to_another_worker() {
    // A task of about 8 s; the worker gets 1 s of grace.
    let mut d = Deployment::start(0, |url| {
        let mut c = TestConfig::demo(url, 2, 4000);
        c.nats(3, 5);
        c
    })
    .await;
    d.workers.push(worker(&d, "short-grace", "1"));
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let job = d.submit(&regions(1)).await;
    log.until(TIMEOUT, "the task to start", is_started).await;
    let (code, w) = terminate(d.workers.remove(0)).await.unwrap();
    assert_eq!(code, Some(0));
    assert!(w.log().contains("handing the running tasks back"), "{}", w.log());
    d.workers.push(worker(&d, "w2", "30"));
    let end = log.job_end(Duration::from_secs(90)).await;
    assert_eq!(end["event"], "completed", "{end}");
    let rec = d.status(job).await;
    assert_eq!(rec.status, JobStatus::Completed);
    let task = &rec.tasks[0];
    assert_eq!(task.worker_id.as_deref(), Some("w2"), "finished elsewhere: {task:?}");
    assert!(task.attempt >= 2, "redelivered after the hand-back: {task:?}");
}
