//! Issue 14: subagents that finish on small real models. The subagents'
//! model is an OpenAI-compatible endpoint in this process
//! (tests/harness/chat_endpoint.rs) that behaves like the small local models
//! that loop: every turn it calls `finance_gross_margin` with the same
//! arguments, never trusting the 0.375 it got back. The tool is the real
//! finance-tools MCP server; the planner is the scripted model.
//!
//! - Without a stop, loop detection ends the task after 3 model calls (of
//!   `max_steps = 10`) with a `limit` error naming the repeated call; the
//!   tool ran once.
//! - With `stop_at_tools = ["finance_gross_margin"]` the task completes with
//!   the tool's result after one model call.

use std::sync::Arc;

use flotilla_protocol::TaskStatus;
use flotilla_tests::chat_endpoint::{Answer, ChatEndpoint, task_and_step, tool_call_reply};
use flotilla_tests::{EventLog, TestConfig};
use serde_json::json;

use crate::common::{Deployment, TIMEOUT};

/// A model that calls the margin tool on every turn, whatever it was told.
async fn looping_model() -> ChatEndpoint {
    let answer: Answer = Arc::new(|body| {
        let (_, step) = task_and_step(&body);
        let args = json!({"revenue": 120, "cost": 75});
        Box::pin(async move { tool_call_reply(&format!("call_{step}"), "finance_gross_margin", &args).into() })
    });
    ChatEndpoint::start(answer).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_looping_model_is_stopped_early_and_a_stop_at_tool_answers_at_once() {
    let model = looping_model().await;
    let url = model.url.clone();
    let d = Deployment::start(1, move |nats| {
        let mut c = TestConfig::demo(nats, 2, 0);
        let tools = "tools = [\"mcp:finance/gross_margin\"]\nmax_steps = 10\n";
        c.section(&format!(
            "[models.small]\nprovider = \"openai\"\nbase_url = \"{url}\"\nmodel = \"qwen2.5-0.5b-instruct\"\nmax_retries = 0\n\
             [subagents.looping]\ndescription = \"Loops.\"\nmodel = \"small\"\n{tools}\
             [subagents.stopping]\ndescription = \"Stops at the tool.\"\nmodel = \"small\"\n{tools}\
             stop_at_tools = [\"finance_gross_margin\"]\n"
        ));
        c.script(
            "planner.toml",
            r#"
[[turns]]
[[turns.calls]]
tool = "task"
args = '{"subagent_type": "looping", "description": "loop: revenue 120, cost 75"}'
[[turns.calls]]
tool = "task"
args = '{"subagent_type": "stopping", "description": "stop: revenue 120, cost 75"}'
[[turns]]
content = "{% for r in last %}{% if r.ok %}ok {{ r.value }}{% else %}{{ r.error.kind }}: {{ r.error.message }}{% endif %}\n{% endfor %}"
"#,
        );
        c
    })
    .await;
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let job = d.submit("x").await;
    assert_eq!(log.job_end(TIMEOUT).await["event"], "completed");
    let rec = d.status(job).await;
    let task = |ty: &str| rec.tasks.iter().find(|t| t.subagent_type.as_str() == ty).cloned().expect(ty);
    let calls_of = |word: &str| model.requests().iter().filter(|b| task_and_step(b).0.starts_with(word)).count();

    let looping = task("looping");
    assert_eq!(looping.status, Some(TaskStatus::Failed), "{looping:?}");
    let e = looping.error.expect("the loop error");
    assert!(
        e.message
            .contains(r#"loop detected: the model called finance_gross_margin({"cost":75,"revenue":120}) 3 times"#),
        "{e:?}"
    );
    assert_eq!(calls_of("loop:"), 3, "3 model calls of max_steps 10");
    assert_eq!(looping.usage.tool_calls, 1, "the tool ran once");

    let stopping = task("stopping");
    assert_eq!(stopping.status, Some(TaskStatus::Completed), "{stopping:?}");
    assert_eq!(calls_of("stop:"), 1, "one model call");
    let answer = rec.answer.expect("the planner's answer");
    assert!(answer.contains("ok 0.375"), "the tool's result is the task's answer: {answer}");
}
