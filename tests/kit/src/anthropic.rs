//! Answers in Anthropic's Messages API format for the endpoint of
//! tests/kit/src/chat_endpoint.rs (an `anthropic` model's `base_url` is its
//! `root`): reading a request's task and tool results, and writing
//! `tool_use` and text turns, whole or as the API's server-sent events.

use serde_json::{Value, json};

use crate::chat_endpoint::{Reply, pieces};

/// The token counts every answer reports: what a test expects in usage.
pub const INPUT_TOKENS: u64 = 50;
/// Output tokens of every answer.
pub const OUTPUT_TOKENS: u64 = 7;
/// Prompt tokens written to the cache, every answer.
pub const CACHE_CREATION_TOKENS: u64 = 100;
/// Prompt tokens read from the cache, every answer.
pub const CACHE_READ_TOKENS: u64 = 200;

fn usage() -> Value {
    json!({"input_tokens": INPUT_TOKENS, "output_tokens": OUTPUT_TOKENS,
           "cache_creation_input_tokens": CACHE_CREATION_TOKENS, "cache_read_input_tokens": CACHE_READ_TOKENS})
}

/// The request's first user text (the task) and its tool results' contents, in order.
pub fn task_and_results(body: &Value) -> (String, Vec<String>) {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let blocks: Vec<Value> = messages
        .iter()
        .filter(|m| m["role"] == "user")
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .collect();
    let task = blocks.iter().find(|b| b["type"] == "text").and_then(|b| b["text"].as_str()).unwrap_or("");
    let results = blocks
        .iter()
        .filter(|b| b["type"] == "tool_result")
        .map(|b| b["content"].as_str().unwrap_or_default().to_string())
        .collect();
    (task.to_string(), results)
}

/// Whether the request asks for server-sent events.
pub fn streams(body: &Value) -> bool {
    body["stream"] == true
}

/// A turn calling `name` with `input`, after `text` (empty: none).
pub fn tool_use(text: &str, id: &str, name: &str, input: &Value) -> Value {
    let mut content = Vec::new();
    if !text.is_empty() {
        content.push(json!({"type": "text", "text": text}));
    }
    content.push(json!({"type": "tool_use", "id": id, "name": name, "input": input}));
    json!({"id": "msg_test", "type": "message", "role": "assistant", "model": "claude-test",
           "content": content, "stop_reason": "tool_use", "usage": usage()})
}

/// A final text turn.
pub fn text(text: &str) -> Value {
    json!({"id": "msg_test", "type": "message", "role": "assistant", "model": "claude-test",
           "content": [{"type": "text", "text": text}], "stop_reason": "end_turn", "usage": usage()})
}

/// `message` (made by [`tool_use`] or [`text`]) as the event stream the API
/// sends for it, each text cut into `n` deltas and each tool input sent as
/// two JSON fragments.
pub fn stream(message: &Value, n: usize) -> Reply {
    let mut start = message.clone();
    start["content"] = json!([]);
    start["usage"] = json!({"input_tokens": INPUT_TOKENS, "output_tokens": 1,
        "cache_creation_input_tokens": CACHE_CREATION_TOKENS, "cache_read_input_tokens": CACHE_READ_TOKENS});
    let mut events = vec![event("message_start", json!({"message": start}))];
    for (index, block) in message["content"].as_array().cloned().unwrap_or_default().iter().enumerate() {
        events.extend(block_events(index, block, n));
    }
    let stop = json!({"delta": {"stop_reason": message["stop_reason"]}, "usage": {"output_tokens": OUTPUT_TOKENS}});
    events.push(event("message_delta", stop));
    events.push(event("message_stop", json!({})));
    Reply::sse(&events)
}

/// An event named `name` whose data is `data` with `"type": name`.
fn event(name: &'static str, mut data: Value) -> (Option<&'static str>, String) {
    data["type"] = json!(name);
    (Some(name), data.to_string())
}

fn block_events(index: usize, block: &Value, n: usize) -> Vec<(Option<&'static str>, String)> {
    let delta = |delta: Value| event("content_block_delta", json!({"index": index, "delta": delta}));
    let mut start = block.clone();
    let parts: Vec<Value> = if block["type"] == "text" {
        start["text"] = json!("");
        pieces(block["text"].as_str().unwrap_or_default(), n)
            .into_iter()
            .map(|text| json!({"type": "text_delta", "text": text}))
            .collect()
    } else {
        start["input"] = json!({});
        pieces(&block["input"].to_string(), 2)
            .into_iter()
            .map(|part| json!({"type": "input_json_delta", "partial_json": part}))
            .collect()
    };
    let mut events = vec![event("content_block_start", json!({"index": index, "content_block": start}))];
    events.extend(parts.into_iter().map(delta));
    events.push(event("content_block_stop", json!({"index": index})));
    events
}
