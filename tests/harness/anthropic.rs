//! Answers in Anthropic's Messages API format for the endpoint of
//! tests/harness/chat_endpoint.rs (an `anthropic` model's `base_url` is its
//! `root`): reading a request's task and tool results, and writing
//! `tool_use` and text turns, whole or as the API's server-sent events.

use serde_json::{Value, json};

use crate::chat_endpoint::Reply;

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
/// sends for it, each text cut into `pieces` deltas and each tool input
/// sent as two JSON fragments.
pub fn stream(message: &Value, pieces: usize) -> Reply {
    let mut start = message.clone();
    start["content"] = json!([]);
    start["usage"] = json!({"input_tokens": INPUT_TOKENS, "output_tokens": 1,
        "cache_creation_input_tokens": CACHE_CREATION_TOKENS, "cache_read_input_tokens": CACHE_READ_TOKENS});
    let mut events = vec![(Some("message_start"), json!({"type": "message_start", "message": start}))];
    for (index, block) in message["content"].as_array().cloned().unwrap_or_default().iter().enumerate() {
        events.extend(block_events(index, block, pieces));
    }
    events.push((
        Some("message_delta"),
        json!({"type": "message_delta",
        "delta": {"stop_reason": message["stop_reason"]}, "usage": {"output_tokens": OUTPUT_TOKENS}}),
    ));
    events.push((Some("message_stop"), json!({"type": "message_stop"})));
    Reply::sse(&events)
}

fn block_events(index: usize, block: &Value, pieces: usize) -> Vec<(Option<&'static str>, Value)> {
    let delta = |delta: Value| {
        (Some("content_block_delta"), json!({"type": "content_block_delta", "index": index, "delta": delta}))
    };
    let mut events = Vec::new();
    if block["type"] == "text" {
        events.push((
            Some("content_block_start"),
            json!({"type": "content_block_start", "index": index,
            "content_block": {"type": "text", "text": ""}}),
        ));
        let chars: Vec<char> = block["text"].as_str().unwrap_or_default().chars().collect();
        for piece in chars.chunks(chars.len().div_ceil(pieces.max(1)).max(1)) {
            events.push(delta(json!({"type": "text_delta", "text": piece.iter().collect::<String>()})));
        }
    } else {
        let mut start = block.clone();
        start["input"] = json!({});
        events.push((
            Some("content_block_start"),
            json!({"type": "content_block_start", "index": index, "content_block": start}),
        ));
        let input = block["input"].to_string();
        let (a, b) = input.split_at(input.len() / 2);
        for part in [a, b] {
            events.push(delta(json!({"type": "input_json_delta", "partial_json": part})));
        }
    }
    events.push((Some("content_block_stop"), json!({"type": "content_block_stop", "index": index})));
    events
}
