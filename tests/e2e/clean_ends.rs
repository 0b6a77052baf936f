//! A job that fails leaves nothing behind. Its queued tasks
//! leave the work queue and its running subagents stop and report
//! `cancelled`, as an explicit cancel does, so no worker keeps spending on a
//! job that has already ended.

use std::time::Duration;

use flotilla_protocol::JobStatus;
use flotilla_testkit::{EventLog, TestConfig, eventually};
use serde_json::Value;

use crate::durability::regions;
use flotilla_testkit::{Deployment, TIMEOUT};

fn is_started(s: &str, v: &Value) -> bool {
    s.contains(".progress.") && v["event"] == "started"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_times_out_cancels_its_running_and_queued_tasks() {
    // 2 workers x 2 slots, 10 s per model call: 4 tasks run, 4 wait; the
    // planner's own timeout (4 s) ends the job long before any task could.
    let d = Deployment::start(2, |url| {
        let mut c = TestConfig::demo(url, 2, 10_000);
        c.section_replace("task_timeout = 60\n", "task_timeout = 60\ntimeout = 4\n");
        c
    })
    .await;
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let job = d.submit(&regions(8)).await;
    log.until_count(TIMEOUT, 4, "task starts", is_started).await;
    let end = log.job_end(TIMEOUT).await;
    assert_eq!(end["event"], "failed", "{end}");
    assert_eq!(end["error"]["kind"], "timeout", "{end}");
    // The 4 running subagents stop within seconds (their model calls had ~10 s to go).
    log.until_count(Duration::from_secs(8), 4, "cancelled finishes", |s, v| {
        s.contains(".progress.") && v["event"] == "finished" && v["status"] == "cancelled"
    })
    .await;
    let stream = d.raw.js.get_stream(d.bus.subjects.tasks_stream()).await.unwrap();
    let left = eventually(TIMEOUT, "the job's tasks to leave the work queue", || async {
        let subjects = stream.clone().info_with_subjects(d.bus.subjects.tasks_of_job(&job)).await.ok()?;
        let left: Vec<_> = futures::StreamExt::collect::<Vec<_>>(subjects).await;
        left.is_empty().then_some(left)
    })
    .await;
    assert!(left.is_empty());
    log.drain();
    assert_eq!(log.events("started").len(), 4, "no queued task started after the job failed");
    assert_eq!(d.status(job).await.status, JobStatus::Failed);
}

/// `submit --wait` never hangs: when the job's terminal event never reaches
/// it (here the events stream no longer stores job events at all, as if they
/// were published while NATS was down), it learns the end from the job's
/// status and exits with the job's outcome.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_wait_ends_when_the_terminal_event_never_arrives() {
    let d = Deployment::start(1, |url| TestConfig::demo(url, 2, 500)).await;
    let mut stream = d.raw.js.get_stream(d.bus.subjects.events_stream()).await.unwrap();
    let mut config = stream.info().await.unwrap().config.clone();
    config.subjects.retain(|s| !s.ends_with(".event"));
    assert_eq!(config.subjects.len(), 1, "only progress is stored now");
    d.raw.js.update_stream(config).await.unwrap();
    d.orchestrator_ready().await;
    let cfg = d.config_arg();
    let wait = tokio::task::spawn_blocking(move || {
        flotilla_testkit::proc::run_cli(&["--config", &cfg, "submit", "--wait", &regions(1)], &[])
    });
    let (code, out, err) = tokio::time::timeout(TIMEOUT, wait).await.expect("submit --wait returned").unwrap();
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("| r0 | 100 | 50 | 0.5 |"), "the answer is printed: {out}");
}
