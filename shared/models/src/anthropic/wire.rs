//! The Messages API request body (`POST /v1/messages`), built from the
//! provider-neutral conversation of `shared/agent/src/model/mod.rs`.
//!
//! The API's rules shape it: the system prompt is a field, not a message;
//! roles alternate user/assistant, so tool results (which are user content)
//! and a follow-up message after them share one user message; tool calls are
//! `tool_use` blocks whose `input` is an object; a failed tool's result is a
//! `tool_result` with `is_error: true`; text blocks may not be empty. The
//! system prompt and the tool list rarely change between the calls of a run,
//! so the last system block and the last tool carry
//! `cache_control: {"type": "ephemeral"}`: the prefix up to them is cached
//! (prompt caching, docs/MODELS.md).

use std::borrow::Cow;

use serde::Serialize;
use serde_json::{Value, json};

use flotilla_agent::model::{ChatMessage, ModelRequest};
use flotilla_agent::tool::ToolSpec;

/// One request body.
#[derive(Serialize)]
pub struct MessagesRequest<'a> {
    model: &'a str,
    max_tokens: u32,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    system: Vec<SystemBlock<'a>>,
    messages: Vec<Message<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<Tool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    stream: bool,
}

/// What the body takes from the model's settings.
pub struct Options<'a> {
    /// Model name.
    pub model: &'a str,
    /// The longest answer, in tokens.
    pub max_tokens: u32,
    /// Sampling temperature, sent when set.
    pub temperature: Option<f32>,
    /// Ask for server-sent events.
    pub stream: bool,
}

impl<'a> MessagesRequest<'a> {
    /// The body for `request` with `options`.
    pub fn new(options: Options<'a>, request: &ModelRequest<'a>) -> Self {
        let (system, messages) = split(request.messages);
        let mut system: Vec<SystemBlock<'a>> =
            system.into_iter().map(|text| SystemBlock { kind: "text", text, cache_control: None }).collect();
        if let Some(last) = system.last_mut() {
            last.cache_control = Some(EPHEMERAL);
        }
        let mut tools: Vec<Tool<'a>> = request.tools.iter().map(Tool::from).collect();
        if let Some(last) = tools.last_mut() {
            last.cache_control = Some(EPHEMERAL);
        }
        Self {
            model: options.model,
            max_tokens: options.max_tokens,
            system,
            messages,
            tools,
            temperature: options.temperature,
            stream: options.stream,
        }
    }
}

#[derive(Clone, Copy, Serialize)]
struct CacheControl {
    #[serde(rename = "type")]
    kind: &'static str,
}

const EPHEMERAL: CacheControl = CacheControl { kind: "ephemeral" };

#[derive(Serialize)]
struct SystemBlock<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    text: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_control: Option<CacheControl>,
}

#[derive(Serialize)]
struct Message<'a> {
    role: &'static str,
    content: Vec<Block<'a>>,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block<'a> {
    Text {
        text: Cow<'a, str>,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: Cow<'a, Value>,
    },
    ToolResult {
        tool_use_id: &'a str,
        content: &'a str,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        is_error: bool,
    },
}

#[derive(Serialize)]
struct Tool<'a> {
    name: &'a str,
    description: &'a str,
    input_schema: &'a Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_control: Option<CacheControl>,
}

impl<'a> From<&'a ToolSpec> for Tool<'a> {
    fn from(spec: &'a ToolSpec) -> Self {
        Self { name: &spec.name, description: &spec.description, input_schema: &spec.input_schema, cache_control: None }
    }
}

/// The leading system messages (the system prompt) and the rest as
/// alternating messages. A system message later in the conversation has no
/// place in the API: it goes as user text, marked.
fn split<'a>(messages: &'a [ChatMessage]) -> (Vec<&'a str>, Vec<Message<'a>>) {
    let lead = messages.iter().take_while(|m| matches!(m, ChatMessage::System { .. })).count();
    let system = messages[..lead]
        .iter()
        .filter_map(|m| match m {
            ChatMessage::System { content } if !content.trim().is_empty() => Some(content.as_str()),
            _ => None,
        })
        .collect();
    let mut out: Vec<Message<'a>> = Vec::new();
    for message in &messages[lead..] {
        let (role, blocks) = blocks(message);
        if blocks.is_empty() {
            continue;
        }
        match out.last_mut() {
            Some(last) if last.role == role => last.content.extend(blocks),
            _ => out.push(Message { role, content: blocks }),
        }
    }
    (system, out)
}

fn blocks(message: &ChatMessage) -> (&'static str, Vec<Block<'_>>) {
    match message {
        ChatMessage::System { content } => {
            ("user", vec![Block::Text { text: Cow::Owned(format!("[system]\n{content}")) }])
        }
        ChatMessage::User { content } => ("user", text(content).into_iter().collect()),
        ChatMessage::Assistant { content, tool_calls } => {
            let mut blocks: Vec<Block<'_>> = content.as_deref().and_then(text).into_iter().collect();
            blocks.extend(tool_calls.iter().map(|call| Block::ToolUse {
                id: &call.id,
                name: &call.name,
                input: input(&call.arguments),
            }));
            ("assistant", blocks)
        }
        ChatMessage::Tool { tool_call_id, content, is_error, .. } => {
            ("user", vec![Block::ToolResult { tool_use_id: tool_call_id, content, is_error: *is_error }])
        }
    }
}

/// A text block, unless the text is blank (the API refuses empty ones).
fn text(text: &str) -> Option<Block<'_>> {
    (!text.trim().is_empty()).then_some(Block::Text { text: Cow::Borrowed(text) })
}

/// A call's arguments as a `tool_use` input, which must be an object: raw
/// text a model once wrote (kept as a string, shared/models/src/turn.rs)
/// goes back wrapped.
fn input(arguments: &Value) -> Cow<'_, Value> {
    match arguments {
        Value::Object(_) => Cow::Borrowed(arguments),
        other => Cow::Owned(json!({ "arguments": other })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_agent::model::ToolCall;

    fn body(messages: &[ChatMessage]) -> Value {
        let options = Options { model: "m", max_tokens: 10, temperature: None, stream: false };
        serde_json::to_value(MessagesRequest::new(options, &ModelRequest::new(messages, &[]))).unwrap()
    }

    #[test]
    fn roles_alternate_blank_text_is_left_out_and_raw_arguments_go_back_as_an_object() {
        let messages = [
            ChatMessage::System { content: "first".into() },
            ChatMessage::System { content: "second".into() },
            ChatMessage::User { content: "task".into() },
            ChatMessage::Assistant {
                content: Some("  ".into()),
                tool_calls: vec![ToolCall { id: "t1".into(), name: "f".into(), arguments: json!("{not json") }],
            },
            ChatMessage::Tool { tool_call_id: "t1".into(), name: "f".into(), content: "bad".into(), is_error: true },
            // A follow-up message (message_task) joins the tool result's user turn.
            ChatMessage::User { content: "also this".into() },
            ChatMessage::System { content: "late note".into() },
            ChatMessage::Assistant { content: None, tool_calls: vec![] },
        ];
        let body = body(&messages);
        assert_eq!(
            body["system"],
            json!([{"type": "text", "text": "first"},
                   {"type": "text", "text": "second", "cache_control": {"type": "ephemeral"}}])
        );
        assert_eq!(
            body["messages"],
            json!([
                {"role": "user", "content": [{"type": "text", "text": "task"}]},
                {"role": "assistant", "content": [
                    {"type": "tool_use", "id": "t1", "name": "f", "input": {"arguments": "{not json"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "bad", "is_error": true},
                    {"type": "text", "text": "also this"},
                    {"type": "text", "text": "[system]\nlate note"}]}
            ])
        );
        assert!(body.get("tools").is_none(), "no tools, no key: {body}");
    }
}
