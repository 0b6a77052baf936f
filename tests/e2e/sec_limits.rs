//! A job whose record outgrows a KV value (NATS max_payload, 1 MiB) used to
//! retry the write forever and stay `running`. Tasks are keys of their own
//! now (orchestrator/src/jobs.rs), so what can still outgrow a value is the
//! todo list (`<job>.todos`) and the answer (in the header). Permanent bus
//! errors (too large, permission) are not retried, and such a job ends
//! `failed` with a `limit` error naming what was too large
//! (orchestrator/src/planner/mod.rs).

use std::time::Duration;

use flotilla_protocol::{ErrorKind, JobRecord, JobStatus};
use flotilla_testkit::TestConfig;

use flotilla_testkit::Deployment;

/// A planner that writes a todo list of about 1.3 MB, then answers.
const HUGE_TODOS: &str = r#"
[[turns]]
[[turns.calls]]
tool = "write_todos"
args = '''{"todos": [{% for i in range(16000) %}{"content": "todo {{ i }}: padding text that makes the list grow past a megabyte", "status": "pending"}{% if not loop.last %},{% endif %}{% endfor %}]}'''

[[turns]]
content = "done"
"#;

/// A planner whose answer is about 1.3 MB.
const HUGE_ANSWER: &str = r#"
[[turns]]
content = "{% for i in range(16000) %}answer line {{ i }}: padding text that makes the answer grow past a megabyte\n{% endfor %}"
"#;

/// Runs a job under `planner`; returns its record once it ended.
async fn run(planner: &str) -> JobRecord {
    let d = Deployment::start(0, |url| {
        let mut c = TestConfig::new(url);
        c.scripted_model("planner", planner).section("[planner]\nmodel = \"planner\"\ncontext_tokens = 10000000\n");
        c
    })
    .await;
    let job = d.submit("plan a lot").await;
    let d = &d;
    flotilla_testkit::eventually(Duration::from_secs(60), "the job to end", || async move {
        d.status_opt(job).await.filter(|r| r.status.is_terminal())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_whose_todo_list_outgrows_its_value_fails_with_a_limit_error() {
    let rec = run(HUGE_TODOS).await;
    assert_eq!(rec.status, JobStatus::Failed, "{rec:?}");
    let error = rec.error.expect("a reason");
    assert_eq!(error.kind, ErrorKind::Limit, "{error:?}");
    assert!(error.message.contains("outgrew") && error.message.contains("its 16000 todos hold"), "{}", error.message);
    assert!(rec.todos.len() < 16000, "the oversized list is not what was stored");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_whose_answer_outgrows_its_value_fails_with_a_limit_error() {
    let rec = run(HUGE_ANSWER).await;
    assert_eq!(rec.status, JobStatus::Failed, "{rec:?}");
    let error = rec.error.expect("a reason");
    assert_eq!(error.kind, ErrorKind::Limit, "{error:?}");
    // "… its answer <n> bytes …": the answer is named with its size.
    let size = error.message.split("its answer ").nth(1).and_then(|t| t.split(' ').next()?.parse::<usize>().ok());
    assert!(error.message.contains("outgrew") && size > Some(1_000_000), "{}", error.message);
    assert_eq!(rec.answer, None, "the answer was dropped");
}
