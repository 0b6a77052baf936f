//! Tests against a real HTTP server on 127.0.0.1 that speaks the OpenAI wire
//! format and records what it received.

use std::time::Duration;

use reqwest::header::{HeaderMap, RETRY_AFTER};
use serde_json::{Value, json};

use super::*;
use crate::http::{MAX_RETRY_AFTER, endpoint_url, retry_after};
use crate::test_server::{Canned, Deltas, Server, set_key};
use flotilla_agent::model::{ChatMessage, ToolCall};
use flotilla_agent::tool::ToolSpec;

fn settings(base_url: &str, api_key_env: Option<&str>, max_retries: u32) -> ModelSettings {
    ModelSettings::OpenAi {
        base_url: base_url.into(),
        model: "test-model".into(),
        api_key_env: api_key_env.map(Into::into),
        timeout: Duration::from_secs(10),
        max_retries,
        temperature: None,
        stream: false,
        structured_outputs: false,
    }
}

fn model(settings: &ModelSettings) -> OpenAiModel {
    let mut model = OpenAiModel::new("test", settings).unwrap();
    model.http.backoff_base = Duration::from_millis(1);
    model
}

fn text_reply(content: &str) -> Value {
    json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}]})
}

fn one_call_reply(arguments: &str) -> Value {
    json!({"choices": [{"message": {"role": "assistant", "content": null, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": arguments}}
    ]}}]})
}

async fn ask(model: &OpenAiModel) -> Result<ModelResponse, ModelError> {
    let messages = [ChatMessage::User { content: "hello".into() }];
    model.complete(ModelRequest::new(&messages, &[])).await
}

#[tokio::test]
async fn two_tool_calls_and_usage_are_parsed_and_the_request_has_the_wire_shape() {
    let var = "FLOTILLA_TEST_OPENAI_KEY_WIRE_SHAPE_7F3A";
    let key = "sk-test-wire-shape-0123456789";
    set_key(var, key);
    let reply = json!({
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant",
            "content": "Looking both up.",
            "tool_calls": [
                {"id": "call_a", "type": "function", "function": {"name": "lookup", "arguments": "{\"city\":\"Paris\"}"}},
                {"id": "call_b", "type": "function", "function": {"name": "add", "arguments": "{\"a\": 1, \"b\": 2}"}}
            ]
        }}],
        "usage": {"prompt_tokens": 123, "completion_tokens": 45, "total_tokens": 168,
                  "prompt_tokens_details": {"cached_tokens": 100}}
    });
    let (base_url, server) = Server::start("/v1", vec![Canned::json(200, reply)]).await;
    let mut settings = settings(&base_url, Some(var), 0);
    if let ModelSettings::OpenAi { temperature, .. } = &mut settings {
        *temperature = Some(0.25);
    }
    let model = model(&settings);

    let messages = [
        ChatMessage::System { content: "be brief".into() },
        ChatMessage::User { content: "weather and sum".into() },
        ChatMessage::Assistant {
            content: None,
            tool_calls: vec![
                ToolCall { id: "c1".into(), name: "lookup".into(), arguments: json!({"city": "Oslo"}) },
                ToolCall { id: "c2".into(), name: "add".into(), arguments: Value::String("{not json".into()) },
            ],
        },
        ChatMessage::Tool {
            tool_call_id: "c1".into(),
            name: "lookup".into(),
            content: "{\"temp\":3}".into(),
            is_error: false,
        },
        ChatMessage::Tool {
            tool_call_id: "c2".into(),
            name: "add".into(),
            content: "{\"error\":\"bad arguments\"}".into(),
            is_error: true,
        },
    ];
    let schema = json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]});
    let tools = [
        ToolSpec { name: "lookup".into(), description: "Weather of a city.".into(), input_schema: schema.clone() },
        ToolSpec { name: "add".into(), description: "Adds.".into(), input_schema: json!({"type": "object"}) },
    ];

    let response = model.complete(ModelRequest::new(&messages, &tools)).await.unwrap();

    assert_eq!(response.content.as_deref(), Some("Looking both up."));
    assert_eq!(
        response.tool_calls,
        vec![
            ToolCall { id: "call_a".into(), name: "lookup".into(), arguments: json!({"city": "Paris"}) },
            ToolCall { id: "call_b".into(), name: "add".into(), arguments: json!({"a": 1, "b": 2}) },
        ]
    );
    // `prompt_tokens` already counts the cached ones, as Flotilla's input_tokens does.
    let usage = Usage {
        input_tokens: 123,
        output_tokens: 45,
        model_calls: 1,
        cache_read_input_tokens: 100,
        ..Usage::default()
    };
    assert_eq!(response.usage, usage);

    let seen = server.seen();
    assert_eq!(seen.len(), 1);
    let seen = &seen[0];
    assert_eq!(seen.path, "/v1/chat/completions");
    assert_eq!(seen.header("authorization"), Some(format!("Bearer {key}")));
    let body = &seen.body;
    assert_eq!(body["model"], "test-model");
    assert_eq!(body["temperature"], json!(0.25));
    assert_eq!(
        body["tools"],
        json!([
            {"type": "function", "function": {"name": "lookup", "description": "Weather of a city.", "parameters": schema}},
            {"type": "function", "function": {"name": "add", "description": "Adds.", "parameters": {"type": "object"}}}
        ])
    );
    let sent = body["messages"].as_array().unwrap();
    assert_eq!(sent.len(), 5);
    assert_eq!(sent[0], json!({"role": "system", "content": "be brief"}));
    assert_eq!(sent[1], json!({"role": "user", "content": "weather and sum"}));
    // Assistant turn: arguments go out as JSON strings; a kept raw string unchanged.
    assert_eq!(sent[2]["role"], "assistant");
    assert_eq!(sent[2]["content"], Value::Null);
    let calls = sent[2]["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0]["id"], "c1");
    assert_eq!(calls[0]["type"], "function");
    assert_eq!(calls[0]["function"]["name"], "lookup");
    let args = calls[0]["function"]["arguments"].as_str().expect("arguments must be a string");
    assert_eq!(serde_json::from_str::<Value>(args).unwrap(), json!({"city": "Oslo"}));
    assert_eq!(calls[1]["function"]["arguments"], "{not json");
    // Tool results: tool_call_id and content only; no internal is_error.
    assert_eq!(sent[3], json!({"role": "tool", "tool_call_id": "c1", "content": "{\"temp\":3}"}));
    assert_eq!(sent[4], json!({"role": "tool", "tool_call_id": "c2", "content": "{\"error\":\"bad arguments\"}"}));
}

#[tokio::test]
async fn a_429_is_retried_once_then_succeeds() {
    let (base_url, server) = Server::start(
        "/v1",
        vec![
            Canned::json(429, json!({"error": {"message": "slow down"}})).header("retry-after", "0"),
            Canned::json(200, text_reply("done")),
        ],
    )
    .await;
    let model = model(&settings(&base_url, None, 3));

    let response = ask(&model).await.unwrap();

    assert_eq!(response.content.as_deref(), Some("done"));
    assert!(response.tool_calls.is_empty());
    // No usage from the server: counted with o200k over the exact body that
    // reached it and the answer's text, and still one model call.
    let seen = server.seen();
    assert_eq!(seen.len(), 2);
    let o200k = tiktoken_rs::o200k_base().unwrap();
    let sent = o200k.encode_ordinary(std::str::from_utf8(&seen[1].raw).unwrap()).len() as u64;
    let answer = o200k.encode_ordinary("done").len() as u64;
    assert_eq!(response.usage, Usage { input_tokens: sent, output_tokens: answer, model_calls: 1, ..Usage::default() });
    assert_eq!(seen[0].body, seen[1].body, "the retry resends the same request");
    // No api_key_env: no Authorization header at all.
    assert!(seen.iter().all(|s| s.header("authorization").is_none()));
    // No tools: no `tools` key (some servers reject an empty list).
    assert!(seen[0].body.get("tools").is_none());
    assert!(seen[0].body.get("temperature").is_none());
}

#[tokio::test]
async fn a_malformed_body_is_a_validation_error_and_not_retried() {
    let (base_url, server) = Server::start("/v1", vec![Canned::raw(200, "this is { not json")]).await;
    let model = model(&settings(&base_url, None, 3));

    let err = ask(&model).await.unwrap_err();

    assert_eq!(err.kind, ErrorKind::Validation, "{err}");
    assert!(err.message.starts_with("malformed response from model endpoint: "), "{err}");
    assert_eq!(server.seen().len(), 1);

    let (base_url, _server) = Server::start("/v1", vec![Canned::json(200, json!({"choices": []}))]).await;
    let err = ask(&model_for(&base_url)).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::Validation, "{err}");
    assert!(err.message.contains("malformed") && err.message.contains("no choices"), "{err}");
}

fn model_for(base_url: &str) -> OpenAiModel {
    model(&settings(base_url, None, 0))
}

#[tokio::test]
async fn a_500_forever_gives_up_after_max_retries_as_transient() {
    let (base_url, server) =
        Server::start("/v1", vec![Canned::json(500, json!({"error": {"message": "upstream exploded"}}))]).await;
    let model = model(&settings(&base_url, None, 2));

    let err = ask(&model).await.unwrap_err();

    assert_eq!(err.kind, ErrorKind::Transient, "{err}");
    assert!(err.message.contains("HTTP 500") && err.message.contains("upstream exploded"), "{err}");
    assert!(err.message.contains("3 attempts"), "{err}");
    assert_eq!(server.seen().len(), 3);
}

#[tokio::test]
async fn a_401_is_a_permission_error_that_never_quotes_the_key() {
    let var = "FLOTILLA_TEST_OPENAI_KEY_401_9C2E";
    let key = "sk-test-secret-401-abcdef";
    set_key(var, key);
    let (base_url, server) = Server::start("/v1", vec![Canned::json(
        401,
        json!({"error": {"message": format!("Incorrect API key provided: {key}."), "type": "invalid_request_error"}}),
    )])
    .await;
    let model = model(&settings(&base_url, Some(var), 3));

    let err = ask(&model).await.unwrap_err();

    assert_eq!(err.kind, ErrorKind::Permission, "{err}");
    let shown = format!("{err} {err:?} {model:?}");
    assert!(!shown.contains(key), "{shown}");
    assert!(!shown.contains("127.0.0.1"), "no URL in errors: {shown}");
    assert!(err.message.contains("Incorrect API key provided") && err.message.contains(var), "{err}");
    assert_eq!(server.seen().len(), 1, "a 401 is not retried");
}

#[tokio::test]
async fn invalid_json_arguments_are_kept_as_a_string() {
    let (base_url, _server) = Server::start("/v1", vec![Canned::json(200, one_call_reply("{\"city\": Paris"))]).await;

    let response = ask(&model_for(&base_url)).await.unwrap();

    assert_eq!(response.content, None);
    assert_eq!(response.tool_calls.len(), 1);
    assert_eq!(response.tool_calls[0].name, "lookup");
    assert_eq!(response.tool_calls[0].arguments, Value::String("{\"city\": Paris".into()));
}

#[tokio::test]
async fn blank_arguments_mean_no_arguments() {
    let (base_url, _server) = Server::start("/v1", vec![Canned::json(200, one_call_reply(""))]).await;

    let response = ask(&model_for(&base_url)).await.unwrap();

    assert_eq!(response.tool_calls[0].arguments, json!({}));
}

#[tokio::test]
async fn another_4xx_is_a_validation_error_quoting_the_server_briefly() {
    let long = "x".repeat(2000);
    let (base_url, server) = Server::start(
        "/v1",
        vec![Canned::json(400, json!({"error": {"message": format!("Invalid schema for function 'lookup': {long}")}}))],
    )
    .await;
    let model = model(&settings(&base_url, None, 3));

    let err = ask(&model).await.unwrap_err();

    assert_eq!(err.kind, ErrorKind::Validation, "{err}");
    assert!(err.message.contains("HTTP 400") && err.message.contains("Invalid schema for function"), "{err}");
    assert!(err.message.len() < 700, "quoted text is truncated: {} chars", err.message.len());
    assert_eq!(server.seen().len(), 1, "a 400 is not retried");
}

#[tokio::test]
async fn a_timeout_is_transient_and_retried() {
    let (base_url, server) =
        Server::start("/v1", vec![Canned::json(200, text_reply("late")).delay(Duration::from_secs(5))]).await;
    let mut settings = settings(&base_url, None, 1);
    if let ModelSettings::OpenAi { timeout, .. } = &mut settings {
        *timeout = Duration::from_millis(200);
    }

    let err = ask(&model(&settings)).await.unwrap_err();

    assert_eq!(err.kind, ErrorKind::Transient, "{err}");
    assert!(err.message.contains("timed out"), "{err}");
    assert_eq!(server.seen().len(), 2);
}

#[tokio::test]
async fn a_refused_connection_is_transient() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);

    let err = ask(&model_for(&format!("http://{addr}/v1"))).await.unwrap_err();

    assert_eq!(err.kind, ErrorKind::Transient, "{err}");
    assert!(err.message.contains("cannot connect"), "{err}");
    assert!(!err.message.contains(&addr.to_string()), "no URL in errors: {err}");
}

#[test]
fn a_missing_key_variable_is_a_validation_error_naming_it() {
    let var = "FLOTILLA_TEST_OPENAI_KEY_NEVER_SET_41D0";
    let err = OpenAiModel::new("gpt", &settings("http://127.0.0.1:9/v1", Some(var), 0)).unwrap_err();
    assert_eq!(err.kind, ErrorKind::Validation);
    assert!(err.message.contains(var) && err.message.contains("models.gpt.api_key_env"), "{err}");
}

#[test]
fn a_bad_base_url_is_a_validation_error() {
    for bad in ["", "api.openai.com/v1", "ftp://example.com/v1", "http://"] {
        let err = OpenAiModel::new("gpt", &settings(bad, None, 0)).unwrap_err();
        assert_eq!(err.kind, ErrorKind::Validation, "{bad:?}");
        assert!(err.message.contains("models.gpt.base_url"), "{err}");
    }
}

#[test]
fn the_endpoint_is_appended_to_the_base_url() {
    let url = |base: &str| endpoint_url(base, &["chat", "completions"]).unwrap().to_string();
    assert_eq!(url("https://api.openai.com/v1"), "https://api.openai.com/v1/chat/completions");
    assert_eq!(url("https://api.openai.com/v1/"), "https://api.openai.com/v1/chat/completions");
    assert_eq!(url("http://localhost:11434"), "http://localhost:11434/chat/completions");
    assert_eq!(url("https://h/openai/v1?api-version=1"), "https://h/openai/v1/chat/completions?api-version=1");
}

#[test]
fn retry_after_is_read_in_seconds_and_capped() {
    let headers = |v: &str| {
        let mut h = HeaderMap::new();
        h.insert(RETRY_AFTER, v.parse().unwrap());
        h
    };
    assert_eq!(retry_after(&headers("0")), Some(Duration::ZERO));
    assert_eq!(retry_after(&headers("2")), Some(Duration::from_secs(2)));
    assert_eq!(retry_after(&headers("3600")), Some(MAX_RETRY_AFTER));
    assert_eq!(retry_after(&headers("Wed, 21 Oct 2015 07:28:00 GMT")), None);
    assert_eq!(retry_after(&headers("-1")), None);
    assert_eq!(retry_after(&HeaderMap::new()), None);
}

fn chunk(delta: Value) -> (Option<&'static str>, String) {
    (None, json!({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}]}).to_string())
}

#[tokio::test]
async fn a_streamed_answer_hands_out_its_text_and_assembles_tool_calls_and_usage() {
    let events = vec![
        chunk(json!({"role": "assistant", "content": "Looking "})),
        chunk(json!({"content": "it up."})),
        chunk(json!({"tool_calls": [{"index": 0, "id": "call_s", "type": "function",
                                     "function": {"name": "lookup", "arguments": ""}}]})),
        chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"city\":"}}]})),
        chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": " \"Paris\"}"}}]})),
        (None, json!({"choices": [], "usage": {"prompt_tokens": 31, "completion_tokens": 9}}).to_string()),
        (None, "[DONE]".to_string()),
    ];
    let (base_url, server) = Server::start("/v1", vec![Canned::sse(&events)]).await;
    let mut settings = settings(&base_url, None, 0);
    if let ModelSettings::OpenAi { stream, .. } = &mut settings {
        *stream = true;
    }
    let model = model(&settings);
    let sink = Deltas::default();
    let messages = [ChatMessage::User { content: "weather in Paris".into() }];

    let response =
        model.complete(ModelRequest { deltas: Some(&sink), ..ModelRequest::new(&messages, &[]) }).await.unwrap();

    assert_eq!(sink.texts(), ["Looking ", "it up."], "text deltas in order, as they came");
    assert_eq!(response.content.as_deref(), Some("Looking it up."));
    assert_eq!(
        response.tool_calls,
        vec![ToolCall { id: "call_s".into(), name: "lookup".into(), arguments: json!({"city": "Paris"}) }]
    );
    assert_eq!(response.usage, Usage { input_tokens: 31, output_tokens: 9, model_calls: 1, ..Usage::default() });
    let body = &server.seen()[0].body;
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"], json!({"include_usage": true}));
    assert_eq!(server.seen()[0].header("accept").as_deref(), Some("text/event-stream"));
}

#[tokio::test]
async fn a_stream_cut_short_still_yields_its_text_and_a_stream_error_is_reported() {
    // No usage chunk and no [DONE]: what came is the turn; tokens counted
    // with o200k over what was sent and what came.
    let events = vec![chunk(json!({"content": "partial"}))];
    let (base_url, server) = Server::start("/v1", vec![Canned::sse(&events)]).await;
    let mut streaming = settings(&base_url, None, 0);
    if let ModelSettings::OpenAi { stream, .. } = &mut streaming {
        *stream = true;
    }
    let response = ask(&model(&streaming)).await.unwrap();
    assert_eq!(response.content.as_deref(), Some("partial"));
    let o200k = tiktoken_rs::o200k_base().unwrap();
    let sent = server.seen().remove(0).raw;
    assert_eq!(response.usage.input_tokens, o200k.encode_ordinary(std::str::from_utf8(&sent).unwrap()).len() as u64);
    assert_eq!(response.usage.output_tokens, o200k.encode_ordinary("partial").len() as u64);

    let events = vec![(None, json!({"error": {"message": "context length exceeded"}}).to_string())];
    let (base_url, _server) = Server::start("/v1", vec![Canned::sse(&events)]).await;
    if let ModelSettings::OpenAi { base_url: url, .. } = &mut streaming {
        *url = base_url;
    }
    let err = ask(&model(&streaming)).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::Validation, "{err}");
    assert!(err.message.contains("context length exceeded"), "{err}");
}

/// With `structured_outputs`, an agent's output schema goes
/// out as `response_format` (`json_schema`); without it, nothing is added.
#[tokio::test]
async fn an_output_schema_is_sent_as_response_format_only_when_enabled() {
    let schema = json!({"type": "object", "required": ["margin"], "properties": {"margin": {"type": "number"}}});
    let messages = [ChatMessage::User { content: "margin?".into() }];
    let request = ModelRequest { output_schema: Some(&schema), ..ModelRequest::new(&messages, &[]) };
    let mut bodies = Vec::new();
    for enabled in [true, false] {
        let (base_url, server) =
            Server::start("/v1", vec![Canned::json(200, text_reply(r#"{"margin": 0.375}"#))]).await;
        let mut settings = settings(&base_url, None, 0);
        if let ModelSettings::OpenAi { structured_outputs, .. } = &mut settings {
            *structured_outputs = enabled;
        }
        model(&settings).complete(request).await.unwrap();
        bodies.push(server.seen().remove(0).body);
    }
    assert_eq!(
        bodies[0]["response_format"],
        json!({"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}})
    );
    assert!(bodies[1].get("response_format").is_none(), "{}", bodies[1]);
}

/// The token counts budgets and the bench use
/// (`count_request`, and the scripted model's usage, which reports it) are
/// an o200k_base count of the exact body the provider sends: counted here
/// independently, with the tokenizer called directly on the bytes the
/// server received.
#[tokio::test]
async fn token_counts_are_an_o200k_count_of_the_exact_body_sent() {
    let messages = [
        ChatMessage::System { content: "You are the planner. Delegate with task(description, subagent_type).".into() },
        ChatMessage::User { content: "north: revenue 120, cost 75; south: revenue 0, cost 30".into() },
    ];
    let tools = [ToolSpec {
        name: "task".into(),
        description: "Delegate a self-contained task to an isolated subagent; returns its report.".into(),
        input_schema: json!({"type": "object", "properties": {"description": {"type": "string"}},
                             "required": ["description"], "additionalProperties": false}),
    }];
    let (base_url, server) = Server::start("/v1", vec![Canned::json(200, text_reply("ok"))]).await;
    let mut settings = settings(&base_url, None, 0);
    if let ModelSettings::OpenAi { model, .. } = &mut settings {
        model.clear(); // as `count_request` serialises it: the name is the deployment's, not the prompt's
    }
    model(&settings).complete(ModelRequest::new(&messages, &tools)).await.unwrap();
    let sent = server.seen().remove(0).raw;
    let independent = tiktoken_rs::o200k_base().unwrap().encode_ordinary(std::str::from_utf8(&sent).unwrap()).len();
    assert_eq!(flotilla_agent::model::count_request(&messages, &tools), independent);

    let scripted =
        flotilla_agent::model::scripted::ScriptedModel::from_str("s", "[[turns]]\ncontent = \"ok\"\n").unwrap();
    let usage = scripted.complete(ModelRequest::new(&messages, &tools)).await.unwrap().usage;
    assert_eq!(usage.input_tokens as usize, independent, "the scripted model bills what the endpoint would");
}
