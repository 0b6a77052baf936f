//! A job whose record outgrows its KV value (NATS max_payload, 1 MiB) used to
//! retry the write forever and stay `running`. Permanent bus errors (too
//! large, permission) are no longer retried (shared/src/bus/retry.rs), and a
//! job whose record cannot be stored ends `failed` with a `limit` error that
//! names the cause (orchestrator/src/planner/mod.rs).

use std::time::Duration;

use flotilla_protocol::{ErrorKind, JobStatus};
use flotilla_tests::TestConfig;

use crate::common::Deployment;

/// A planner that writes a todo list of about 1.3 MB, then answers.
const PLANNER: &str = r#"
[[turns]]
[[turns.calls]]
tool = "write_todos"
args = '''{"todos": [{% for i in range(16000) %}{"content": "todo {{ i }}: padding text that makes the list grow past a megabyte", "status": "pending"}{% if not loop.last %},{% endif %}{% endfor %}]}'''

[[turns]]
content = "done"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_whose_record_outgrows_its_bucket_fails_with_a_limit_error() {
    let d = Deployment::start(0, |url| {
        let mut c = TestConfig::new(url);
        c.scripted_model("planner", PLANNER).section("[planner]\nmodel = \"planner\"\n");
        c
    })
    .await;
    let job = d.submit("plan a lot").await;
    let d = &d;
    let rec = flotilla_tests::eventually(Duration::from_secs(60), "the job to end", || async move {
        d.status_opt(job).await.filter(|r| r.status.is_terminal())
    })
    .await;
    assert_eq!(rec.status, JobStatus::Failed, "{rec:?}");
    let error = rec.error.expect("a reason");
    assert_eq!(error.kind, ErrorKind::Limit, "{error:?}");
    assert!(error.message.contains("outgrew") && error.message.contains("16000 todos"), "{}", error.message);
}
