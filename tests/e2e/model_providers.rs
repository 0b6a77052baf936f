//! Subagents on `provider = "anthropic"`, whole and
//! streamed. The model is an endpoint in this process speaking the Messages
//! API (tests/kit/src/chat_endpoint.rs answering with
//! tests/kit/src/anthropic.rs); the tool is the real finance-tools MCP
//! server; the planner is the scripted model; the workers are real
//! processes using the real provider code.
//!
//! Each subagent calls `finance_gross_margin` through a `tool_use` block and
//! answers with the `tool_result` it got back. The task's usage is the sum
//! of the endpoint's counts, cache tokens included. With `stream = true`
//! the text arrives as `model_delta` progress events, all before the task's
//! report, and together they are exactly the text the model wrote. The same
//! holds for a streaming `openai` model (chunks from the same endpoint in
//! the OpenAI format), whose usage comes from the stream's last chunk.

use std::sync::Arc;

use flotilla_protocol::TaskStatus;
use flotilla_testkit::anthropic::{
    CACHE_CREATION_TOKENS, CACHE_READ_TOKENS, INPUT_TOKENS, OUTPUT_TOKENS, stream, streams, task_and_results, text,
    tool_use,
};
use flotilla_testkit::chat_endpoint::{Answer, ChatEndpoint, Reply, stream_reply, text_reply, tool_call_reply};
use flotilla_testkit::planner_script::delegate_all;
use flotilla_testkit::{EventLog, TestConfig};
use serde_json::{Value, json};

use flotilla_testkit::{Deployment, TIMEOUT};

const THINKING: &str = "Let me compute the margin.";

/// A model that calls the margin tool once, then answers with its result.
async fn margin_model() -> ChatEndpoint {
    let answer: Answer = Arc::new(|body| {
        let (_, results) = task_and_results(&body);
        let message = match results.first() {
            None => tool_use(THINKING, "toolu_1", "finance_gross_margin", &json!({"revenue": 120, "cost": 75})),
            Some(result) => text(&format!("The gross margin is {result}.")),
        };
        let streamed = streams(&body);
        Box::pin(async move { if streamed { stream(&message, 4) } else { message.into() } })
    });
    ChatEndpoint::start(answer).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anthropic_subagent_answers_through_tool_use_and_streams_its_text_as_model_delta_events() {
    let model = margin_model().await;
    let root = model.root.clone();
    let d = Deployment::start(1, move |nats| {
        let mut c = TestConfig::demo(nats, 2, 0);
        let model = |name: &str, stream: bool| {
            format!(
                "[models.{name}]\nprovider = \"anthropic\"\nbase_url = \"{root}\"\nmodel = \"claude-test\"\n\
                 max_retries = 0\nmax_tokens = 1024\nstream = {stream}\n"
            )
        };
        let tools = "tools = [\"mcp:finance/gross_margin\"]\n";
        c.section(&format!(
            "{}{}[subagents.whole]\ndescription = \"Anthropic.\"\nmodel = \"claude\"\n{tools}\
             [subagents.streamed]\ndescription = \"Anthropic, streamed.\"\nmodel = \"claude_stream\"\n{tools}",
            model("claude", false),
            model("claude_stream", true),
        ));
        c.script(
            "planner.toml",
            &delegate_all(&[("whole", "whole: revenue 120, cost 75"), ("streamed", "streamed: revenue 120, cost 75")]),
        );
        c
    })
    .await;
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let job = d.submit("x").await;
    assert_eq!(log.job_end(TIMEOUT).await["event"], "completed");
    log.drain();
    let rec = d.status(job).await;
    let task = |ty: &str| rec.tasks.iter().find(|t| t.subagent_type.as_str() == ty).cloned().expect(ty);

    // The tool's result reached the model as a tool_result and is the answer.
    let requests = model.requests();
    assert_eq!(requests.len(), 4, "two model calls a task");
    let result_of = |word: &str| -> Vec<String> {
        let second = requests.iter().map(task_and_results).find(|(t, r)| t.starts_with(word) && !r.is_empty());
        second.expect("a request with the tool's result").1
    };
    for ty in ["whole", "streamed"] {
        let entry = task(ty);
        assert_eq!(entry.status, Some(TaskStatus::Completed), "{entry:?}");
        let result = result_of(ty);
        assert_eq!(result.len(), 1, "{result:?}");
        assert!(result[0].contains("0.375"), "the MCP tool's margin: {result:?}");
        assert_eq!(entry.summary, format!("The gross margin is {}.", result[0]), "{ty}");
        // The report's usage is the endpoint's counts, summed over two calls.
        let u = entry.usage;
        assert_eq!(u.model_calls, 2, "{ty}: {u:?}");
        assert_eq!(u.tool_calls, 1, "{ty}: {u:?}");
        assert_eq!(u.input_tokens, 2 * (INPUT_TOKENS + CACHE_CREATION_TOKENS + CACHE_READ_TOKENS), "{ty}: {u:?}");
        assert_eq!(u.output_tokens, 2 * OUTPUT_TOKENS, "{ty}: {u:?}");
        assert_eq!((u.cache_creation_input_tokens, u.cache_read_input_tokens), (200, 400), "{ty}: {u:?}");
    }
    let first: &Value = &requests[0];
    assert_eq!(first["tools"][0]["name"], "finance_gross_margin");
    assert!(first["tools"][0]["input_schema"].is_object(), "{first}");
    assert_eq!(first["tools"].as_array().unwrap().last().unwrap()["cache_control"], json!({"type": "ephemeral"}));
    assert_eq!(first["max_tokens"], 1024);

    // Streaming: the deltas carry exactly the text written, step by step,
    // and all of them come before the task's report.
    let streamed = task("streamed").task_id.to_string();
    let whole = task("whole").task_id.to_string();
    let deltas = |id: &str| -> Vec<(usize, u64, String)> {
        log.seen
            .iter()
            .enumerate()
            .filter(|(_, (s, v))| s.ends_with(&format!(".progress.{id}")) && v["event"] == "model_delta")
            .map(|(i, (_, v))| (i, v["step"].as_u64().unwrap(), v["text"].as_str().unwrap().to_string()))
            .collect()
    };
    assert!(deltas(&whole).is_empty(), "no deltas without stream = true");
    let got = deltas(&streamed);
    let text_of = |step: u64| got.iter().filter(|(_, s, _)| *s == step).map(|(_, _, t)| t.as_str()).collect::<String>();
    assert_eq!(text_of(1), THINKING, "{got:?}");
    assert_eq!(text_of(2), task("streamed").summary, "{got:?}");
    let report = log
        .seen
        .iter()
        .position(|(s, _)| s.contains(".report.") && s.ends_with(&format!(".{streamed}")))
        .expect("its report");
    assert!(got.iter().all(|(i, _, _)| *i < report), "deltas before the report: {got:?}, report at {report}");
    let answer = rec.answer.expect("the planner's answer");
    assert_eq!(answer.matches("ok The gross margin is").count(), 2, "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_openai_subagent_with_stream_true_sends_model_delta_events_and_its_usage_comes_from_the_last_chunk() {
    let answer: Answer = Arc::new(|body| {
        let result = body["messages"].as_array().unwrap().iter().find(|m| m["role"] == "tool").cloned();
        let mut completion = match &result {
            None => tool_call_reply("call_1", "finance_gross_margin", &json!({"revenue": 120, "cost": 75})),
            Some(tool) => text_reply(&format!("The gross margin is {}.", tool["content"].as_str().unwrap())),
        };
        if result.is_none() {
            completion["choices"][0]["message"]["content"] = json!(THINKING);
        }
        let streamed = body["stream"] == true && body["stream_options"]["include_usage"] == true;
        Box::pin(async move { if streamed { stream_reply(&completion, 5) } else { Reply::from(json!({})) } })
    });
    let model = ChatEndpoint::start(answer).await;
    let url = model.url.clone();
    let d = Deployment::start(1, move |nats| {
        let mut c = TestConfig::demo(nats, 2, 0);
        c.section(&format!(
            "[models.local]\nprovider = \"openai\"\nbase_url = \"{url}\"\nmodel = \"qwen\"\nmax_retries = 0\nstream = true\n\
             [subagents.streamed]\ndescription = \"Streams.\"\nmodel = \"local\"\ntools = [\"mcp:finance/gross_margin\"]\n"
        ));
        c.script("planner.toml", &delegate_all(&[("streamed", "streamed: revenue 120, cost 75")]));
        c
    })
    .await;
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let job = d.submit("x").await;
    assert_eq!(log.job_end(TIMEOUT).await["event"], "completed");
    log.drain();
    let entry = d.status(job).await.tasks.into_iter().next().expect("the task");
    assert_eq!(entry.status, Some(TaskStatus::Completed), "{entry:?}");
    assert!(entry.summary.starts_with("The gross margin is 0.375"), "{}", entry.summary);
    // text_reply and tool_call_reply count 10 prompt and 5 completion tokens.
    let u = entry.usage;
    assert_eq!((u.input_tokens, u.output_tokens, u.model_calls, u.tool_calls), (20, 10, 2, 1), "{u:?}");

    let id = entry.task_id.to_string();
    let deltas: Vec<(u64, String)> = log
        .seen
        .iter()
        .filter(|(s, v)| s.ends_with(&format!(".progress.{id}")) && v["event"] == "model_delta")
        .map(|(_, v)| (v["step"].as_u64().unwrap(), v["text"].as_str().unwrap().to_string()))
        .collect();
    let text_of = |step: u64| deltas.iter().filter(|(s, _)| *s == step).map(|(_, t)| t.as_str()).collect::<String>();
    assert_eq!(text_of(1), THINKING, "{deltas:?}");
    assert_eq!(text_of(2), entry.summary, "{deltas:?}");
}
