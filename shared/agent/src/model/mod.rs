//! Chat models. The agent loop talks to a [`ChatModel`]; providers translate
//! to a wire format. Three ship: `openai` (any OpenAI-compatible
//! `/chat/completions` endpoint with tool calling,
//! `shared/models/src/openai.rs`), `anthropic` (the Messages API,
//! `shared/models/src/anthropic.rs`) and [`scripted`] (deterministic
//! turns from a file, for the demo and tests, no key needed). The scripted
//! model is kept here, not with the other providers in `flotilla-models`,
//! because this crate's own tests of the loop and of compaction run on it;
//! `flotilla_models::build` builds all three.
//!
//! Messages are provider-neutral: tool-call arguments are parsed JSON here and
//! only become wire text inside a provider. A streaming provider hands text
//! to the request's [`DeltaSink`] as it arrives (docs/MODELS.md).

pub mod scripted;
pub mod wire;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::tool::ToolSpec;
use flotilla_protocol::{ErrorKind, Usage};
pub use wire::{count_request, request_within};

/// One message of a conversation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum ChatMessage {
    /// Instructions of the agent's configuration.
    System {
        /// Text.
        content: String,
    },
    /// The job text or task description.
    User {
        /// Text.
        content: String,
    },
    /// A model turn: text, tool calls, or both.
    Assistant {
        /// Text, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        content: Option<String>,
        /// Tool calls, if any.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
    },
    /// The result of one tool call.
    Tool {
        /// The call answered.
        tool_call_id: String,
        /// The tool's name.
        name: String,
        /// The result as the model reads it (JSON text).
        content: String,
        /// Whether it is an error result.
        #[serde(default)]
        is_error: bool,
    },
}

/// A tool call requested by a model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// Unique within the conversation.
    pub id: String,
    /// Which tool.
    pub name: String,
    /// Arguments; a JSON object when the model produced valid JSON, otherwise
    /// the raw text as a string (which then fails schema validation, and the
    /// model is told why).
    pub arguments: Value,
}

/// Where a streaming model hands the text it receives, as it arrives
/// (`[models.<name>] stream = true`, docs/MODELS.md). The agent loop passes
/// its [`AgentObserver::model_delta`](crate::agent::AgentObserver::model_delta);
/// a worker publishes the text as `model_delta` progress events.
#[async_trait]
pub trait DeltaSink: Send + Sync {
    /// The next piece of the answer's text.
    async fn delta(&self, text: &str);
}

/// What the agent loop sends.
#[derive(Clone, Copy)]
pub struct ModelRequest<'a> {
    /// The conversation so far.
    pub messages: &'a [ChatMessage],
    /// The tools the agent may call.
    pub tools: &'a [ToolSpec],
    /// What the call is for.
    pub purpose: Purpose,
    /// Model turns of this run that compaction replaced with a summary, so
    /// are no longer in `messages` (the scripted model counts turns with it).
    pub compacted_turns: u32,
    /// Receives the answer's text as it arrives, when the model streams.
    pub deltas: Option<&'a dyn DeltaSink>,
    /// The JSON Schema the final answer must match, when the agent has one
    /// (shared/agent/src/agent/output_schema.rs): a provider that can
    /// constrain its output to it may send it along.
    pub output_schema: Option<&'a serde_json::Value>,
}

impl<'a> ModelRequest<'a> {
    /// A step of a run that has never been compacted.
    pub fn new(messages: &'a [ChatMessage], tools: &'a [ToolSpec]) -> Self {
        Self { messages, tools, purpose: Purpose::Step, compacted_turns: 0, deltas: None, output_schema: None }
    }

    /// Hands `text` to the request's [`DeltaSink`], if it has one; empty
    /// text is not handed on.
    pub async fn delta(&self, text: &str) {
        if let Some(sink) = self.deltas.filter(|_| !text.is_empty()) {
            sink.delta(text).await;
        }
    }
}

impl std::fmt::Debug for ModelRequest<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelRequest")
            .field("messages", &self.messages)
            .field("tools", &self.tools)
            .field("purpose", &self.purpose)
            .field("compacted_turns", &self.compacted_turns)
            .field("streams_deltas", &self.deltas.is_some())
            .finish()
    }
}

/// Why the agent loop calls the model.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Purpose {
    /// The next turn of the run.
    #[default]
    Step,
    /// Summarising older turns to keep the context bounded
    /// (`shared/agent/src/agent/compaction.rs`): `messages` are the compaction
    /// prompt and a transcript, `tools` is empty.
    Compaction,
}

/// What a model answered.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelResponse {
    /// Text of the turn.
    pub content: Option<String>,
    /// Tool calls of the turn.
    pub tool_calls: Vec<ToolCall>,
    /// Token counts of this call (`model_calls` = 1).
    pub usage: Usage,
}

/// A model call that failed.
#[derive(Clone, Debug, thiserror::Error, PartialEq)]
#[error("{kind} error from model {model}: {message}")]
pub struct ModelError {
    /// Transient (429, 5xx, timeout) after retries, validation (bad request,
    /// malformed body), permission (401/403), limit (script exhausted), bug.
    pub kind: ErrorKind,
    /// The configured model name.
    pub model: String,
    /// Sanitized explanation: never the API key, never the full response body.
    pub message: String,
}

/// A chat model with tool calling.
#[async_trait]
pub trait ChatModel: Send + Sync {
    /// One round trip.
    async fn complete(&self, request: ModelRequest<'_>) -> Result<ModelResponse, ModelError>;

    /// Who answers, as traces and metrics name it: the OpenTelemetry
    /// `gen_ai.provider.name` (`openai`, `anthropic`, `flotilla.scripted`)
    /// and the model the requests ask for (`gen_ai.request.model`).
    fn identity(&self) -> ModelIdentity<'_> {
        ModelIdentity { provider: "unknown", model: "" }
    }
}

/// A model's provider and request model name ([`ChatModel::identity`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModelIdentity<'a> {
    /// `gen_ai.provider.name`.
    pub provider: &'a str,
    /// `gen_ai.request.model`.
    pub model: &'a str,
}

/// Tokens of a request body as sent, for a server that reports no usage:
/// the o200k count [`count_request`] makes before sending.
pub fn count_sent(body: &[u8]) -> u64 {
    crate::tokens::count(&String::from_utf8_lossy(body)) as u64
}

/// Tokens of a turn's output (its text, and its tool calls as JSON): what the
/// scripted model bills, and the count for a server that reports none.
pub fn count_output(content: Option<&str>, tool_calls: &[ToolCall]) -> u64 {
    let calls = if tool_calls.is_empty() {
        0
    } else {
        serde_json::to_string(tool_calls).map_or(0, |s| crate::tokens::count(&s))
    };
    (content.map_or(0, crate::tokens::count) + calls) as u64
}
