//! A worker one release newer than the planner. Its report
//! says `"v": 2.1` and carries a field this build does not know; the planner
//! consolidates it like any other (peer messages accept unknown fields and
//! any minor version of their major, docs/PROTOCOL.md).

use flotilla_protocol::ids::{SubagentType, TaskId, Tenant};
use flotilla_protocol::{JobStatus, TaskReport, TaskStatus, Usage};
use flotilla_testkit::{EventLog, TestConfig};
use serde_json::json;

use flotilla_testkit::{Deployment, TIMEOUT};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_workers_report_with_unknown_fields_is_consolidated() {
    // No worker at all: the test itself answers the task as a newer worker would.
    let d = Deployment::start(0, |url| {
        let mut c = TestConfig::demo(url, 1, 0);
        c.section_replace("task_timeout = 60\n", "task_timeout = 60\nno_worker_timeout = 300\n");
        c.one_task_planner("finance", "margin of r0");
        c
    })
    .await;
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let job = d.submit("margin of r0").await;
    let dispatched =
        log.until(TIMEOUT, "the dispatch", |s, v| s.ends_with(".event") && v["event"] == "task_dispatched").await;
    let task: TaskId = dispatched["task_id"].as_str().unwrap().parse().unwrap();
    let now = flotilla_protocol::now();
    let report = TaskReport {
        v: flotilla_protocol::REPORT_VERSION,
        job_id: job,
        task_id: task,
        subagent_type: SubagentType::new("finance").unwrap(),
        status: TaskStatus::Completed,
        summary: "r0 margin 0.5".into(),
        summary_file: None,
        error: None,
        usage: Usage::default(),
        worker_id: "w-next".into(),
        attempt: 1,
        resumed_from_step: None,
        started_at: now,
        finished_at: now,
        duration_ms: 3,
    };
    let mut newer: serde_json::Value = serde_json::from_slice(&report.encode()).unwrap();
    newer["v"] = json!(2.1);
    newer["reasoning_tokens"] = json!(42); // a field of the next release
    let subject = d.bus.subjects.report(&Tenant::default(), &job, &report.subagent_type, &task);
    let ack = d.raw.js.publish(subject, serde_json::to_vec(&newer).unwrap().into()).await.unwrap();
    ack.await.expect("the reports stream stores it");
    let end = log.job_end(TIMEOUT).await;
    assert_eq!(end["event"], "completed", "{end}");
    let rec = d.status(job).await;
    assert_eq!(rec.status, JobStatus::Completed);
    assert!(rec.answer.unwrap().contains("r0 margin 0.5"), "the newer report reached the planner");
    let entry = &rec.tasks[0];
    assert_eq!(entry.status, Some(TaskStatus::Completed));
    assert_eq!(entry.worker_id.as_deref(), Some("w-next"));
}
