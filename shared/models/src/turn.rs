//! A model turn put together from a provider's answer: text and tool calls
//! in the provider-neutral form of `shared/agent/src/model/mod.rs`. Both
//! providers build one, whole from a JSON body or piece by piece from
//! streamed deltas, and finish it the same way: every tool call named,
//! given an id if the server sent none, its arguments parsed.

use std::collections::BTreeMap;

use serde_json::Value;

use flotilla_agent::model::{ModelError, ToolCall};

use crate::http::HttpEndpoint;

/// Text and tool calls received so far.
#[derive(Default)]
pub struct Turn {
    /// The text of the turn, in order.
    pub text: String,
    /// Tool calls by the provider's index (the order they are returned in).
    calls: BTreeMap<u64, PartialCall>,
}

/// A tool call as received: its arguments are still wire text (or a value a
/// server sent whole).
#[derive(Default)]
pub struct PartialCall {
    /// The provider's id, when sent.
    pub id: Option<String>,
    /// The tool.
    pub name: String,
    /// Argument text received so far.
    pub arguments: String,
    /// Arguments sent as a JSON value rather than text.
    pub value: Option<Value>,
}

impl Turn {
    /// The call at `index`, created empty on first use.
    pub fn call(&mut self, index: u64) -> &mut PartialCall {
        self.calls.entry(index).or_default()
    }

    /// Whether the turn has tool calls.
    pub fn has_calls(&self) -> bool {
        !self.calls.is_empty()
    }

    /// The text (`None` when empty) and the finished tool calls.
    pub fn finish(self, http: &HttpEndpoint) -> Result<(Option<String>, Vec<ToolCall>), ModelError> {
        let mut tool_calls = Vec::with_capacity(self.calls.len());
        for call in self.calls.into_values() {
            if call.name.is_empty() {
                return Err(http.malformed("a tool call has no function name"));
            }
            let arguments = match call.value {
                Some(value) if call.arguments.trim().is_empty() => parse_arguments(Some(value)),
                _ => parse_arguments(Some(Value::String(call.arguments))),
            };
            let id = match call.id {
                Some(id) if !id.is_empty() => id,
                // Some local servers omit ids; the conversation still needs them.
                _ => format!("call_{}", uuid::Uuid::now_v7().simple()),
            };
            tool_calls.push(ToolCall { id, name: call.name, arguments });
        }
        let text = (!self.text.is_empty()).then_some(self.text);
        Ok((text, tool_calls))
    }
}

/// Wire arguments to our form: JSON text parsed when valid, kept as a string
/// when not (the tool set's schema validation then tells the model what was
/// wrong); missing or blank means no arguments; an object some servers send
/// instead of a string is taken as is.
pub fn parse_arguments(raw: Option<Value>) -> Value {
    match raw {
        None | Some(Value::Null) => Value::Object(Default::default()),
        Some(Value::String(text)) if text.trim().is_empty() => Value::Object(Default::default()),
        Some(Value::String(text)) => serde_json::from_str(&text).unwrap_or(Value::String(text)),
        Some(other) => other,
    }
}
