//! Subagents that finish on small real models. The subagents'
//! model is an OpenAI-compatible endpoint in this process
//! (tests/kit/src/chat_endpoint.rs) that behaves like the small local models
//! that loop: every turn it calls `finance_gross_margin` with the same
//! arguments, never trusting the 0.375 it got back. The tool is the real
//! finance-tools MCP server; the planner is the scripted model.
//!
//! - Without a stop, loop detection ends the task after 3 model calls (of
//!   `max_steps = 10`) with a `limit` error naming the repeated call; the
//!   tool ran once.
//! - With `stop_at_tools = ["finance_gross_margin"]` the task completes with
//!   the tool's result after one model call.
//! - A type with an `output_schema`: a valid answer (in a code fence) reaches
//!   the planner as a value (`r.value.margin`), a prose answer gets one
//!   repair turn that says what is wrong, and prose twice fails the task with
//!   a `validation` error; with `structured_outputs = true` every request
//!   carries the schema as `response_format`.

use std::sync::Arc;

use flotilla_protocol::TaskStatus;
use flotilla_testkit::chat_endpoint::{Answer, ChatEndpoint, task_and_step, text_reply, tool_call_reply};
use flotilla_testkit::proc::run_cli;
use flotilla_testkit::{EventLog, TestConfig};
use serde_json::json;

use flotilla_testkit::{Deployment, TIMEOUT};

/// A planner script: one turn of `calls` (TOML `[[turns.calls]]` tables),
/// then one answer line per result: `ok <value>` or `<kind>: <message>`,
/// or what `ok` renders instead.
fn planner(calls: &str, ok: &str) -> String {
    format!(
        "[[turns]]\n{calls}\n[[turns]]\ncontent = \"{{% for r in last %}}{{% if r.ok %}}{ok}{{% else %}}\
         {{{{ r.error.kind }}}}: {{{{ r.error.message }}}}{{% endif %}}\\n{{% endfor %}}\"\n"
    )
}

/// Submits a job, awaits its end (it must complete) and returns its record.
async fn completed_job(d: &Deployment) -> flotilla_protocol::JobRecord {
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let job = d.submit("x").await;
    assert_eq!(log.job_end(TIMEOUT).await["event"], "completed");
    d.status(job).await
}

/// How many requests of tasks whose description starts with `word` `model` got.
fn calls_of(model: &ChatEndpoint, word: &str) -> usize {
    model.requests().iter().filter(|b| task_and_step(b).0.starts_with(word)).count()
}

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
        let calls = r#"[[turns.calls]]
tool = "task"
args = '{"subagent_type": "looping", "description": "loop: revenue 120, cost 75"}'
[[turns.calls]]
tool = "task"
args = '{"subagent_type": "stopping", "description": "stop: revenue 120, cost 75"}'"#;
        c.script("planner.toml", &planner(calls, "ok {{ r.value }}"));
        c
    })
    .await;
    let rec = completed_job(&d).await;
    let task = |ty: &str| rec.tasks.iter().find(|t| t.subagent_type.as_str() == ty).cloned().expect(ty);

    let looping = task("looping");
    assert_eq!(looping.status, Some(TaskStatus::Failed), "{looping:?}");
    let e = looping.error.expect("the loop error");
    assert!(
        e.message
            .contains(r#"loop detected: the model called finance_gross_margin({"cost":75,"revenue":120}) 3 times"#),
        "{e:?}"
    );
    assert_eq!(calls_of(&model, "loop:"), 3, "3 model calls of max_steps 10");
    assert_eq!(looping.usage.tool_calls, 1, "the tool ran once");

    let stopping = task("stopping");
    assert_eq!(stopping.status, Some(TaskStatus::Completed), "{stopping:?}");
    assert_eq!(calls_of(&model, "stop:"), 1, "one model call");
    let answer = rec.answer.expect("the planner's answer");
    assert!(answer.contains("ok 0.375"), "the tool's result is the task's answer: {answer}");
}

/// A model answering in prose first: `valid:` tasks get JSON at once,
/// `repair:` tasks after the repair turn, `prose:` tasks never.
async fn prose_model() -> ChatEndpoint {
    let answer: Answer = Arc::new(|body| {
        let (task, step) = task_and_step(&body);
        let json = r#"{"region": "north", "margin": 0.375}"#;
        let content = match (task.split(':').next().unwrap_or(""), step) {
            ("valid", _) | ("repair", 1) => format!("```json\n{json}\n```"),
            _ => "The gross margin of north is 37.5%.".to_string(),
        };
        Box::pin(async move { text_reply(&content).into() })
    });
    ChatEndpoint::start(answer).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_must_match_the_output_schema_and_reach_the_planner_as_data() {
    let model = prose_model().await;
    let url = model.url.clone();
    let d = Deployment::start(1, move |nats| {
        let mut c = TestConfig::demo(nats, 3, 0);
        c.section(&format!(
            "[models.small]\nprovider = \"openai\"\nbase_url = \"{url}\"\nmodel = \"m\"\nmax_retries = 0\n\
             structured_outputs = true\n[subagents.margins]\ndescription = \"Margins as JSON.\"\nmodel = \"small\"\n\
             output_schema = {{ type = \"object\", required = [\"region\", \"margin\"], properties = {{ \
             region = {{ type = \"string\" }}, margin = {{ type = \"number\" }} }} }}\n"
        ));
        let calls = r#"[[turns.calls]]
tool = "task"
for_each = '["valid", "repair", "prose"]'
args = '{"subagent_type": "margins", "description": "{{ item }}: north, revenue 120, cost 75"}'"#;
        c.script("planner.toml", &planner(calls, "{{ r.value.region }}={{ r.value.margin }}"));
        c
    })
    .await;
    let rec = completed_job(&d).await;
    let answer = rec.answer.expect("the planner's answer");
    let lines: Vec<&str> = answer.lines().collect();
    assert_eq!(lines[..2], ["north=0.375", "north=0.375"], "valid at once and after the repair turn: {answer}");
    assert!(lines[2].starts_with("validation: ") && lines[2].contains("after one repair turn"), "{answer}");
    assert_eq!((calls_of(&model, "valid:"), calls_of(&model, "repair:"), calls_of(&model, "prose:")), (1, 2, 2));
    let repair = model
        .requests()
        .into_iter()
        .find(|b| task_and_step(b) == (String::from("repair: north, revenue 120, cost 75"), 1));
    let last = repair.expect("the repair request")["messages"].as_array().unwrap().last().cloned().unwrap();
    assert!(last["content"].as_str().unwrap().contains("does not match the required output schema"), "{last}");
    // `structured_outputs = true`: every request carried the schema as `response_format`.
    let formats: Vec<_> =
        model.requests().iter().map(|b| b["response_format"]["json_schema"]["schema"].clone()).collect();
    assert!(formats.iter().all(|s| s["required"] == json!(["region", "margin"])), "{formats:?}");
}

/// `flotilla models check`: a model whose tool call comes back well-formed
/// passes; one that answers with text is named with the likely fix; the exit
/// code says whether all passed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn models_check_tells_a_tool_calling_endpoint_from_one_that_answers_text() {
    let answer: Answer = Arc::new(|body| {
        let reply = if body["model"] == "caller" {
            tool_call_reply("call_0", "ping", &json!({"value": 42}))
        } else {
            text_reply("pong")
        };
        Box::pin(async move { reply.into() })
    });
    let endpoint = ChatEndpoint::start(answer).await;
    let mut c = TestConfig::new("nats://127.0.0.1:1");
    for name in ["caller", "talker"] {
        c.section(&format!(
            "[models.{name}]\nprovider = \"openai\"\nbase_url = \"{}\"\nmodel = \"{name}\"\nmax_retries = 0\n",
            endpoint.url
        ));
    }
    let cfg = c.write().display().to_string();

    let (code, out, err) = run_cli(&["--config", &cfg, "models", "check", "caller"], &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(r#"ping({"value":42}) came back well-formed"#), "{out}");

    let (code, out, err) = run_cli(&["--config", &cfg, "--json", "models", "check"], &[]);
    assert_eq!(code, 2, "one model fails: {out}{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("one JSON object");
    let by_name = |n: &str| v["models"].as_array().unwrap().iter().find(|m| m["model"] == n).cloned().unwrap();
    assert_eq!(by_name("caller")["ok"], true);
    assert_eq!(by_name("talker")["ok"], false);
    assert!(by_name("talker")["detail"].as_str().unwrap().contains("answered with text instead of a tool call"));
    // The request carried the tool, as a planner's or worker's would.
    let sent = endpoint.requests();
    assert!(sent.iter().all(|b| b["tools"][0]["function"]["name"] == "ping"), "{sent:?}");
}

/// `flotilla models check` over a config whose models are all scripted (the
/// demo's) skips them all and passes, so a CI step over it does not fail.
#[test]
fn models_check_passes_when_every_model_is_scripted() {
    let cfg = flotilla_testkit::nats_conf::deploy_dir().join("local/flotilla.toml").display().to_string();
    let (code, out, err) = run_cli(&["--config", &cfg, "models", "check"], &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("nothing to check: every [models.*] entry is scripted"), "{out}");
    let (code, out, err) = run_cli(&["--config", &cfg, "--json", "models", "check"], &[]);
    assert_eq!(code, 0, "{out}{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("one JSON object");
    assert_eq!(v["models"], json!([]), "{v}");
}
