//! The OpenAI `/chat/completions` request body, shared by the provider that
//! sends it (`shared/models/src/openai.rs`) and [`count_request`], which
//! measures it with the tokenizer of [`crate::tokens`]: one serialisation, so
//! what is counted is byte for byte what a model endpoint receives, JSON
//! punctuation and tool schemas included (an upper bound on the prompt tokens
//! a provider bills, which skip the JSON syntax).
//!
//! Pure serde, no HTTP; the response side stays in the provider.

use serde::Serialize;
use serde_json::Value;

use super::{ChatMessage, ModelRequest};
use crate::tokens;
use crate::tool::ToolSpec;

/// Tokens of the request a model would get for `messages` and `tools`: the
/// provider's wire body (docs/ARCHITECTURE.md, the agent loop), model name
/// left empty.
pub fn count_request(messages: &[ChatMessage], tools: &[ToolSpec]) -> usize {
    let wire = WireRequest::new("", ModelRequest::new(messages, tools), None);
    match serde_json::to_string(&wire) {
        Ok(body) => tokens::count(&body),
        // Serialising plain strings and JSON values cannot fail; count the
        // parts rather than report zero if it ever does.
        Err(_) => messages.iter().map(|m| tokens::count(&format!("{m:?}"))).sum(),
    }
}

/// Whether the request [`count_request`] counts is at most `max_tokens`,
/// tokenizing only when its byte length does not already say so
/// ([`tokens::within`]).
pub fn request_within(messages: &[ChatMessage], tools: &[ToolSpec], max_tokens: usize) -> bool {
    let wire = WireRequest::new("", ModelRequest::new(messages, tools), None);
    match serde_json::to_string(&wire) {
        Ok(body) => tokens::within(&body, max_tokens),
        Err(_) => count_request(messages, tools) <= max_tokens,
    }
}

/// One `/chat/completions` request body.
#[derive(Serialize)]
pub struct WireRequest<'a> {
    model: &'a str,
    messages: Vec<WireMessage<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_format: Option<serde_json::Value>,
}

/// `stream_options` of a streamed request: ask for the usage chunk.
#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

impl<'a> WireRequest<'a> {
    /// The body for `model` with `request`'s messages and tools.
    pub fn new(model: &'a str, request: ModelRequest<'a>, temperature: Option<f32>) -> Self {
        Self {
            model,
            messages: request.messages.iter().map(WireMessage::from).collect(),
            tools: request.tools.iter().map(WireTool::from).collect(),
            temperature,
            stream: false,
            stream_options: None,
            response_format: None,
        }
    }

    /// The body asking the endpoint to constrain the answer to `schema`
    /// (`response_format` of type `json_schema`).
    pub fn constrained_to(mut self, schema: &serde_json::Value) -> Self {
        self.response_format = Some(serde_json::json!({
            "type": "json_schema",
            "json_schema": {"name": "answer", "schema": schema},
        }));
        self
    }

    /// The same body asking for server-sent events, with the token counts
    /// in a last chunk (`stream_options.include_usage`).
    pub fn streaming(mut self) -> Self {
        self.stream = true;
        self.stream_options = Some(StreamOptions { include_usage: true });
        self
    }
}

/// Our arguments to wire text: a kept raw string goes back as the model wrote it.
pub fn arguments_text(arguments: &Value) -> String {
    match arguments {
        Value::String(raw) => raw.clone(),
        other => other.to_string(),
    }
}

#[derive(Serialize)]
#[serde(tag = "role", rename_all = "snake_case")]
enum WireMessage<'a> {
    System {
        content: &'a str,
    },
    User {
        content: &'a str,
    },
    Assistant {
        /// `null` only beside tool calls: a bare assistant turn needs content.
        content: Option<&'a str>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<WireToolCall<'a>>,
    },
    Tool {
        tool_call_id: &'a str,
        content: &'a str,
    },
}

impl<'a> From<&'a ChatMessage> for WireMessage<'a> {
    fn from(message: &'a ChatMessage) -> Self {
        match message {
            ChatMessage::System { content } => Self::System { content },
            ChatMessage::User { content } => Self::User { content },
            ChatMessage::Assistant { content, tool_calls } => Self::Assistant {
                content: match content.as_deref() {
                    None if tool_calls.is_empty() => Some(""),
                    other => other,
                },
                tool_calls: tool_calls
                    .iter()
                    .map(|call| WireToolCall {
                        id: &call.id,
                        kind: "function",
                        function: WireFunctionCall { name: &call.name, arguments: arguments_text(&call.arguments) },
                    })
                    .collect(),
            },
            // `name` and `is_error` stay home: the wire has no place for them.
            ChatMessage::Tool { tool_call_id, content, .. } => Self::Tool { tool_call_id, content },
        }
    }
}

#[derive(Serialize)]
struct WireToolCall<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunctionCall<'a>,
}

#[derive(Serialize)]
struct WireFunctionCall<'a> {
    name: &'a str,
    arguments: String,
}

#[derive(Serialize)]
struct WireTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunction<'a>,
}

#[derive(Serialize)]
struct WireFunction<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a Value,
}

impl<'a> From<&'a ToolSpec> for WireTool<'a> {
    fn from(spec: &'a ToolSpec) -> Self {
        Self {
            kind: "function",
            function: WireFunction { name: &spec.name, description: &spec.description, parameters: &spec.input_schema },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_request_counts_its_messages_and_tool_schemas() {
        let messages = vec![
            ChatMessage::System { content: "You plan.".into() },
            ChatMessage::User { content: "Compute the margins.".into() },
        ];
        let bare = count_request(&messages, &[]);
        assert!(bare > tokens::count("You plan.") + tokens::count("Compute the margins."));
        let tool = ToolSpec {
            name: "task".into(),
            description: "Delegate one self-contained task.".into(),
            input_schema: json!({"type": "object", "properties": {"description": {"type": "string"}}}),
        };
        let with_tool = count_request(&messages, std::slice::from_ref(&tool));
        assert!(with_tool > bare + tokens::count("Delegate one self-contained task."));
        let mut longer = messages.clone();
        longer.push(ChatMessage::Tool {
            tool_call_id: "c1".into(),
            name: "task".into(),
            content: "x ".repeat(500),
            is_error: false,
        });
        assert!(count_request(&longer, &[]) >= bare + 500);
    }
}
