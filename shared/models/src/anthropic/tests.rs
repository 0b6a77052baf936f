//! Tests against a real HTTP server on 127.0.0.1 speaking the Messages API
//! wire format (`crate::test_server`), recording what it
//! received.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::*;
use crate::build;
use crate::test_server::{Canned, Deltas, Server, set_key};
use flotilla_agent::model::{ChatMessage, ToolCall};
use flotilla_agent::tool::ToolSpec;

fn settings(base_url: &str, api_key_env: Option<&str>, max_retries: u32, stream: bool) -> ModelSettings {
    ModelSettings::Anthropic {
        base_url: base_url.into(),
        model: "claude-test".into(),
        api_key_env: api_key_env.map(Into::into),
        timeout: Duration::from_secs(10),
        max_retries,
        temperature: None,
        max_tokens: 512,
        stream,
    }
}

fn model(settings: &ModelSettings) -> AnthropicModel {
    let mut model = AnthropicModel::new("claude", settings).unwrap();
    model.http.backoff_base = Duration::from_millis(1);
    model
}

fn text_message(text: &str) -> Value {
    json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
           "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
           "usage": {"input_tokens": 12, "output_tokens": 3}})
}

async fn ask(model: &AnthropicModel) -> Result<ModelResponse, ModelError> {
    let messages = [ChatMessage::User { content: "hello".into() }];
    model.complete(ModelRequest::new(&messages, &[])).await
}

/// A conversation with a system prompt, a tool round (one result an error)
/// and two tools.
fn conversation() -> (Vec<ChatMessage>, Vec<ToolSpec>) {
    let messages = vec![
        ChatMessage::System { content: "You compute margins.".into() },
        ChatMessage::User { content: "margin of 120 and 75".into() },
        ChatMessage::Assistant {
            content: Some("Computing.".into()),
            tool_calls: vec![
                ToolCall {
                    id: "toolu_1".into(),
                    name: "margin".into(),
                    arguments: json!({"revenue": 120, "cost": 75}),
                },
                ToolCall { id: "toolu_2".into(), name: "lookup".into(), arguments: json!({}) },
            ],
        },
        ChatMessage::Tool {
            tool_call_id: "toolu_1".into(),
            name: "margin".into(),
            content: "0.375".into(),
            is_error: false,
        },
        ChatMessage::Tool {
            tool_call_id: "toolu_2".into(),
            name: "lookup".into(),
            content: "{\"error\":\"not found\"}".into(),
            is_error: true,
        },
    ];
    let tools = vec![
        ToolSpec {
            name: "margin".into(),
            description: "Gross margin.".into(),
            input_schema: json!({"type": "object"}),
        },
        ToolSpec { name: "lookup".into(), description: "Looks up.".into(), input_schema: json!({"type": "object"}) },
    ];
    (messages, tools)
}

#[tokio::test]
async fn a_tool_use_round_trip_has_the_wire_shape_and_usage_keeps_the_cache_counts() {
    let var = "FLOTILLA_TEST_ANTHROPIC_KEY_WIRE_5B1D";
    let key = "sk-ant-test-wire-0123456789";
    set_key(var, key);
    let reply = json!({"id": "msg_2", "type": "message", "role": "assistant", "content": [
        {"type": "thinking", "thinking": "hm", "signature": "x"},
        {"type": "text", "text": "Looking it up."},
        {"type": "tool_use", "id": "toolu_3", "name": "margin", "input": {"revenue": 10, "cost": 4}}
    ], "stop_reason": "tool_use", "usage": {"input_tokens": 21, "output_tokens": 17,
        "cache_creation_input_tokens": 400, "cache_read_input_tokens": 1200}});
    let (base_url, server) = Server::start("", vec![Canned::json(200, reply)]).await;
    let model = model(&settings(&base_url, Some(var), 0, false));
    let (messages, tools) = conversation();

    let response = model.complete(ModelRequest::new(&messages, &tools)).await.unwrap();

    assert_eq!(response.content.as_deref(), Some("Looking it up."));
    assert_eq!(
        response.tool_calls,
        vec![ToolCall { id: "toolu_3".into(), name: "margin".into(), arguments: json!({"revenue": 10, "cost": 4}) }]
    );
    let usage = response.usage;
    assert_eq!((usage.input_tokens, usage.output_tokens, usage.model_calls), (21 + 400 + 1200, 17, 1));
    assert_eq!((usage.cache_creation_input_tokens, usage.cache_read_input_tokens), (400, 1200));

    let seen = &server.seen()[0];
    assert_eq!(seen.path, "/v1/messages");
    assert_eq!(seen.header("x-api-key").as_deref(), Some(key));
    assert_eq!(seen.header("anthropic-version").as_deref(), Some("2023-06-01"));
    assert_eq!(seen.header("authorization"), None);
    let body = &seen.body;
    assert_eq!(body["model"], "claude-test");
    assert_eq!(body["max_tokens"], 512);
    assert!(body.get("stream").is_none() && body.get("temperature").is_none(), "{body}");
    assert_eq!(
        body["system"],
        json!([{"type": "text", "text": "You compute margins.", "cache_control": {"type": "ephemeral"}}])
    );
    assert_eq!(
        body["tools"],
        json!([
            {"name": "margin", "description": "Gross margin.", "input_schema": {"type": "object"}},
            {"name": "lookup", "description": "Looks up.", "input_schema": {"type": "object"},
             "cache_control": {"type": "ephemeral"}}
        ])
    );
    assert_eq!(
        body["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "margin of 120 and 75"}]},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Computing."},
                {"type": "tool_use", "id": "toolu_1", "name": "margin", "input": {"revenue": 120, "cost": 75}},
                {"type": "tool_use", "id": "toolu_2", "name": "lookup", "input": {}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "0.375"},
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": "{\"error\":\"not found\"}", "is_error": true}
            ]}
        ])
    );
}

#[tokio::test]
async fn a_429_then_a_529_are_retried_after_the_retry_after_the_server_asked_for() {
    let (base_url, server) = Server::start(
        "",
        vec![
            Canned::json(429, json!({"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}))
                .header("retry-after", "1"),
            Canned::json(529, json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}))
                .header("retry-after", "0"),
            Canned::json(200, text_message("done")),
        ],
    )
    .await;
    let model = model(&settings(&base_url, None, 3, false));
    let started = Instant::now();

    let response = ask(&model).await.unwrap();

    let waited = started.elapsed();
    assert_eq!(response.content.as_deref(), Some("done"));
    assert_eq!(server.seen().len(), 3);
    // The backoff alone waits ~1-2 ms here (backoff_base 1 ms): a second
    // means retry-after was honoured.
    assert!(waited >= Duration::from_secs(1), "waited {waited:?}");
    assert_eq!(server.seen()[0].body, server.seen()[2].body, "the retry resends the same request");
}

#[tokio::test]
async fn an_error_status_is_mapped_and_the_key_never_appears() {
    let var = "FLOTILLA_TEST_ANTHROPIC_KEY_401_77AC";
    let key = "sk-ant-secret-401-fedcba";
    set_key(var, key);
    let (base_url, server) = Server::start("", vec![Canned::json(
        401,
        json!({"type": "error", "error": {"type": "authentication_error", "message": format!("invalid x-api-key {key}")}}),
    )])
    .await;
    let model = model(&settings(&base_url, Some(var), 3, false));

    let err = ask(&model).await.unwrap_err();

    assert_eq!(err.kind, ErrorKind::Permission, "{err}");
    let shown = format!("{err} {err:?} {model:?}");
    assert!(!shown.contains(key), "{shown}");
    assert!(!shown.contains("127.0.0.1"), "no URL in errors: {shown}");
    assert!(err.message.contains("invalid x-api-key [redacted]") && err.message.contains(var), "{err}");
    assert_eq!(server.seen().len(), 1, "a 401 is not retried");

    let (base_url, server) = Server::start("", vec![Canned::json(
        400,
        json!({"type": "error", "error": {"type": "invalid_request_error", "message": "messages: roles must alternate"}}),
    )])
    .await;
    let err = ask(&model_with(&base_url)).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::Validation, "{err}");
    assert!(err.message.contains("HTTP 400") && err.message.contains("roles must alternate"), "{err}");
    assert_eq!(server.seen().len(), 1, "a 400 is not retried");
}

fn model_with(base_url: &str) -> AnthropicModel {
    model(&settings(base_url, None, 3, false))
}

#[tokio::test]
async fn a_malformed_body_is_a_validation_error_and_not_retried() {
    for body in
        ["this is { not json", "{\"type\": \"message\"}", "{\"content\": [{\"type\": \"tool_use\", \"id\": \"t\"}]}"]
    {
        let (base_url, server) = Server::start("", vec![Canned::raw(200, body)]).await;
        let err = ask(&model_with(&base_url)).await.unwrap_err();
        assert_eq!(err.kind, ErrorKind::Validation, "{body}: {err}");
        assert!(err.message.starts_with("malformed response from model endpoint: "), "{err}");
        assert_eq!(server.seen().len(), 1, "{body}");
    }
}

#[tokio::test]
async fn an_answer_cut_at_max_tokens_inside_a_tool_call_is_an_error_naming_the_setting() {
    let reply = json!({"content": [{"type": "tool_use", "id": "t1", "name": "margin", "input": {}}],
                       "stop_reason": "max_tokens", "usage": {"input_tokens": 5, "output_tokens": 512}});
    let (base_url, _server) = Server::start("", vec![Canned::json(200, reply)]).await;
    let err = ask(&model_with(&base_url)).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::Validation, "{err}");
    assert!(err.message.contains("models.claude.max_tokens") && err.message.contains("512"), "{err}");
}

fn event(name: &'static str, data: Value) -> (Option<&'static str>, String) {
    (Some(name), data.to_string())
}

fn streamed_tool_use() -> Vec<(Option<&'static str>, String)> {
    vec![
        event(
            "message_start",
            json!({"type": "message_start", "message": {"id": "msg_s", "type": "message",
            "role": "assistant", "content": [], "usage": {"input_tokens": 30, "output_tokens": 1,
            "cache_creation_input_tokens": 0, "cache_read_input_tokens": 900}}}),
        ),
        event(
            "content_block_start",
            json!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "text", "text": ""}}),
        ),
        event("ping", json!({"type": "ping"})),
        event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "text_delta", "text": "Let me "}}),
        ),
        event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "text_delta", "text": "compute."}}),
        ),
        event("content_block_stop", json!({"type": "content_block_stop", "index": 0})),
        event(
            "content_block_start",
            json!({"type": "content_block_start", "index": 1,
            "content_block": {"type": "tool_use", "id": "toolu_s", "name": "margin", "input": {}}}),
        ),
        event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": "{\"revenue\": 1"}}),
        ),
        event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": "20, \"cost\": 75}"}}),
        ),
        event("content_block_stop", json!({"type": "content_block_stop", "index": 1})),
        event(
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"},
            "usage": {"output_tokens": 42}}),
        ),
        event("message_stop", json!({"type": "message_stop"})),
    ]
}

#[tokio::test]
async fn a_streamed_answer_hands_out_its_text_and_assembles_the_tool_input_and_usage() {
    let (base_url, server) = Server::start("", vec![Canned::sse(&streamed_tool_use())]).await;
    let model = model(&settings(&base_url, None, 0, true));
    let sink = Deltas::default();
    let messages = [ChatMessage::User { content: "margin of 120 and 75".into() }];

    let response =
        model.complete(ModelRequest { deltas: Some(&sink), ..ModelRequest::new(&messages, &[]) }).await.unwrap();

    assert_eq!(sink.texts(), ["Let me ", "compute."]);
    assert_eq!(response.content.as_deref(), Some("Let me compute."));
    assert_eq!(
        response.tool_calls,
        vec![ToolCall { id: "toolu_s".into(), name: "margin".into(), arguments: json!({"revenue": 120, "cost": 75}) }]
    );
    let usage = response.usage;
    assert_eq!((usage.input_tokens, usage.output_tokens, usage.cache_read_input_tokens), (930, 42, 900));
    assert_eq!(server.seen()[0].body["stream"], true);
    assert_eq!(server.seen()[0].header("accept").as_deref(), Some("text/event-stream"));
}

#[tokio::test]
async fn an_overloaded_error_event_is_retried_and_another_is_final() {
    let overloaded = vec![
        event("message_start", json!({"type": "message_start", "message": {"usage": {"input_tokens": 3}}})),
        event("error", json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})),
    ];
    let (base_url, server) = Server::start("", vec![Canned::sse(&overloaded), Canned::sse(&streamed_tool_use())]).await;
    let response = ask(&model(&settings(&base_url, None, 1, true))).await.unwrap();
    assert_eq!(response.tool_calls.len(), 1);
    assert_eq!(server.seen().len(), 2);

    let invalid = vec![event(
        "error",
        json!({"type": "error", "error": {"type": "invalid_request_error", "message": "prompt is too long"}}),
    )];
    let (base_url, server) = Server::start("", vec![Canned::sse(&invalid)]).await;
    let err = ask(&model(&settings(&base_url, None, 3, true))).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::Validation, "{err}");
    assert!(err.message.contains("prompt is too long"), "{err}");
    assert_eq!(server.seen().len(), 1);
}

#[test]
fn config_defaults_and_the_factory_builds_every_provider() {
    let dir = std::env::temp_dir().join(format!("flotilla-anthropic-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("flotilla.toml");
    std::fs::write(
        &path,
        "[models.claude]\nprovider = \"anthropic\"\nmodel = \"claude-sonnet-4-5\"\n\
         [models.local]\nprovider = \"openai\"\nbase_url = \"http://127.0.0.1:8080/v1\"\nmodel = \"qwen\"\nstream = true\n",
    )
    .unwrap();
    let settings = flotilla_config::Settings::load_with_env(Some(&path), Vec::new()).unwrap();
    std::fs::write(&path, "[models.claude]\nprovider = \"anthropic\"\nmodel = \"c\"\nmax_tokens = 0\n").unwrap();
    let zero = flotilla_config::Settings::load_with_env(Some(&path), Vec::new()).unwrap_err().to_string();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(zero.contains("models.claude.max_tokens"), "{zero}");
    let claude = &settings.models["claude"];
    let ModelSettings::Anthropic { base_url, max_tokens, stream, api_key_env, .. } = claude else {
        panic!("{claude:?}")
    };
    assert_eq!((base_url.as_str(), *max_tokens, *stream), ("https://api.anthropic.com", 4096, false));
    assert_eq!(api_key_env, &None);
    assert!(matches!(settings.models["local"], ModelSettings::OpenAi { stream: true, .. }));
    for name in ["claude", "local"] {
        build(name, &settings.models[name]).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

/// A server that sends no usage (some proxies strip it): the counts are
/// o200k counts of the exact body it received and of the answer, the same
/// counts the scripted model and the context budget use.
#[tokio::test]
async fn counts_a_server_did_not_send_are_o200k_counts_of_the_exchange() {
    let reply = json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
                       "content": [{"type": "text", "text": "the margin is 0.375"}], "stop_reason": "end_turn"});
    let (base_url, server) = Server::start("", vec![Canned::json(200, reply)]).await;
    let response = ask(&model(&settings(&base_url, None, 0, false))).await.unwrap();
    let sent = server.seen().remove(0).raw;
    let sent = flotilla_agent::tokens::count(std::str::from_utf8(&sent).unwrap()) as u64;
    let answer = flotilla_agent::tokens::count("the margin is 0.375") as u64;
    assert_eq!((response.usage.input_tokens, response.usage.output_tokens), (sent, answer));
    assert!(sent > answer, "the request (model, max_tokens, message) is longer than the answer");
}
