//! The walking skeleton: planner -> NATS -> worker processes -> consolidated report.

use std::collections::{HashMap, HashSet};

use flotilla_protocol::{JobStatus, TaskStatus};
use flotilla_testkit::{EventLog, TestConfig, proc::run_cli};

use flotilla_testkit::{Deployment, TIMEOUT};

const SIX_REGIONS: &str = "Gross margin table: a: revenue 120, cost 75; b: revenue 0, cost 30; c: revenue 250, cost 190; \
                           d: revenue 80, cost 20; e: revenue 100, cost 100; f: revenue 50, cost 60.";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn six_parallel_tasks_over_two_workers_are_consolidated_once_each() {
    // 3 slots per worker and 300 ms per model call: 6 concurrent tasks need both workers.
    let d = Deployment::start(2, |url| TestConfig::demo(url, 3, 300)).await;
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let job = d.submit(SIX_REGIONS).await;
    let end = log.job_end(TIMEOUT).await;
    assert_eq!(end["event"], "completed", "{end}");
    log.drain();

    let rec = d.status(job).await;
    assert_eq!(rec.status, JobStatus::Completed);
    assert_eq!(rec.tasks.len(), 6);
    let answer = rec.answer.clone().unwrap();
    for row in [
        "| a | 120 | 75 | 0.375 |",
        "| c | 250 | 190 | 0.24 |",
        "| d | 80 | 20 | 0.75 |",
        "| e | 100 | 100 | 0.0 |",
        "| f | 50 | 60 | -0.2 |",
    ] {
        assert!(answer.contains(row), "missing {row} in\n{answer}");
    }
    assert!(answer.contains("| b | 0 | 30 | not computable: revenue must be greater than zero |"), "{answer}");
    assert!(rec.tasks.iter().all(|t| t.status == Some(TaskStatus::Completed)));

    // Each task started exactly once, and both workers ran some.
    let started = log.events("started");
    assert_eq!(started.len(), 6, "one start per task");
    let tasks: HashSet<_> = log
        .seen
        .iter()
        .filter(|(s, v)| s.contains(".progress.") && v["event"] == "started")
        .map(|(s, v)| flotilla_testkit::events::task_of(s, v))
        .collect();
    assert_eq!(tasks.len(), 6);
    let mut per_worker: HashMap<String, usize> = HashMap::new();
    for t in &rec.tasks {
        *per_worker.entry(t.worker_id.clone().unwrap()).or_default() += 1;
    }
    assert_eq!(per_worker.len(), 2, "both workers got work: {per_worker:?}");
    assert!(per_worker.values().all(|n| *n <= 3), "no worker exceeded its 3 slots: {per_worker:?}");
    assert_eq!(log.events("task_reported").len(), 6, "each report consolidated once");

    // Usage adds up: job total = planner + every task.
    let tasks_usage: u64 = rec.tasks.iter().map(|t| t.usage.input_tokens).sum();
    assert_eq!(rec.usage.input_tokens, rec.planner_usage.input_tokens + tasks_usage);
    assert_eq!(rec.usage.model_calls, 4 + 12);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_subagent_type_is_an_error_the_planner_sees() {
    let d = Deployment::start(1, |url| {
        let mut c = TestConfig::demo(url, 2, 0);
        c.script(
            "planner.toml",
            r#"
[[turns]]
[[turns.calls]]
tool = "task"
args = '{"subagent_type": "legal", "description": "review the contract"}'
[[turns.calls]]
tool = "task"
args = '{"subagent_type": "finance", "description": "margin: revenue 120, cost 75"}'

[[turns]]
content = "{% for r in last %}{% if r.ok %}ok: {{ r.value }}{% else %}{{ r.error.kind }}: {{ r.error.message }}{% endif %}\n{% endfor %}"
"#,
        );
        c
    })
    .await;
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let job = d.submit("anything").await;
    assert_eq!(log.job_end(TIMEOUT).await["event"], "completed");
    let answer = d.status(job).await.answer.unwrap();
    assert!(
        answer.contains("validation: unknown subagent_type \"legal\"; valid types: finance"),
        "the model saw the error with the valid types:\n{answer}"
    );
    assert!(answer.contains("ok: 0.375"), "the sibling task was not cancelled:\n{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_submits_waits_watches_and_lists() {
    let d = Deployment::start(2, |url| TestConfig::demo(url, 2, 0)).await;
    let cfg = d.config_arg();
    // Wait until the orchestrator answers (the CLI itself does not retry).
    let first = d.submit("x: revenue 10, cost 5").await;

    let (code, out, err) =
        run_cli(&["--config", &cfg, "submit", "--wait", "north: revenue 120, cost 75; south: revenue 0, cost 1"], &[]);
    assert_eq!(code, 0, "{out}\n{err}");
    // stdout is the answer; the job id is on stderr (docs/OPERATIONS.md).
    let job = err.lines().find_map(|l| l.strip_prefix("job ")).unwrap_or_else(|| panic!("job id: {err}")).to_string();
    assert!(job.parse::<uuid::Uuid>().is_ok(), "job id on stderr: {err}");
    assert!(out.contains("| north | 120 | 75 | 0.375 |"), "{out}");

    let (code, out, _) = run_cli(&["--config", &cfg, "watch", &job], &[]);
    assert_eq!(code, 0);
    assert!(out.contains("already completed"), "{out}");
    assert!(out.contains("task_dispatched") || out.contains("-> finance:"), "a finished job is replayed: {out}");
    assert!(out.contains("job completed"), "the replay ends with the job's end: {out}");

    let (code, out, _) = run_cli(&["--config", &cfg, "status", &job, "--json"], &[]);
    assert_eq!(code, 0);
    let rec: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(rec["status"], "completed");
    assert_eq!(rec["tasks"].as_array().unwrap().len(), 2);

    let (code, out, _) = run_cli(&["--config", &cfg, "jobs", "--json"], &[]);
    assert_eq!(code, 0);
    let reply: serde_json::Value = serde_json::from_str(&out).unwrap();
    let ids: Vec<&str> = reply["jobs"].as_array().unwrap().iter().map(|j| j["id"].as_str().unwrap()).collect();
    assert_eq!(ids, vec![job.as_str(), first.to_string().as_str()], "newest first");

    let (code, _, err) = run_cli(&["--config", &cfg, "status", "0190c0de-0000-7000-8000-000000000001"], &[]);
    assert_eq!(code, 2);
    assert!(err.contains("no job"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_streams_todos_tasks_tool_calls_and_reports_live() {
    let d = Deployment::start(2, |url| TestConfig::demo(url, 2, 100)).await;
    let cfg = d.config_arg();
    let job = d.submit("north: revenue 120, cost 75; south: revenue 0, cost 1").await;
    let (code, out, err) = run_cli(&["--config", &cfg, "watch", &job.to_string(), "--json"], &[]);
    assert_eq!(code, 0, "{err}");
    let events: Vec<serde_json::Value> = out.lines().map(|l| serde_json::from_str(l).expect(l)).collect();
    let kinds: Vec<&str> = events.iter().map(|e| e["event"].as_str().unwrap()).collect();
    for k in [
        "submitted",
        "running",
        "todos_changed",
        "task_dispatched",
        "started",
        "model_call",
        "tool_call",
        "tool_result",
        "finished",
        "task_reported",
        "completed",
    ] {
        assert!(kinds.contains(&k), "no {k} in {kinds:?}");
    }
    assert_eq!(kinds.last(), Some(&"completed"));
    let pos = |k: &str| kinds.iter().position(|x| *x == k).unwrap();
    assert!(pos("submitted") < pos("todos_changed") && pos("todos_changed") < pos("task_dispatched"));
    assert!(pos("task_dispatched") < pos("task_reported"));
}
