//! The `openai` provider: any OpenAI-compatible `/chat/completions` endpoint
//! with tool calling (OpenAI itself, and the many servers that copy its wire
//! format: vLLM, llama.cpp, Ollama, LiteLLM, ...; docs/MODELS.md).
//!
//! Why it looks like this:
//!
//! - The conversation types of `shared/agent/src/model/mod.rs` are
//!   provider-neutral; the request body is `shared/agent/src/model/wire.rs`
//!   (shared with token counting) and only this file reads the answer.
//!   Tool-call arguments travel as JSON *strings*, tools as
//!   `{"type": "function", "function": {..}}`, and our internal `is_error`
//!   flag never leaves the process (the model reads the error in the content).
//! - Arguments a model wrote that are not valid JSON do not fail the call: they
//!   are kept as a [`Value::String`] so the tool set's schema validation tells
//!   the model what was wrong and it can try again ([`crate::turn::parse_arguments`]).
//!   Sent back in a later turn, such a string goes out unchanged.
//! - With `stream = true` the answer comes as server-sent events
//!   ([`crate::sse`]): text deltas go to the request's delta sink as they arrive,
//!   tool calls are assembled from their pieces, and the token counts come
//!   from the last chunk (`stream_options.include_usage`).
//! - HTTP, retries, error mapping and secret hygiene are [`crate::http`],
//!   shared with the Anthropic provider (`shared/models/src/anthropic.rs`): keys
//!   never in errors or logs, URLs never quoted, no redirects, malformed
//!   bodies are `validation`.

use async_trait::async_trait;
use reqwest::Response;
use reqwest::header::{AUTHORIZATION, HeaderMap};
use serde::Deserialize;
use serde_json::Value;

use crate::http::{self, EndpointSpec, Failure, HttpEndpoint, WireFormat};
use crate::sse::SseReader;
use crate::turn::Turn;
use flotilla_agent::model::wire::WireRequest;
use flotilla_agent::model::{
    ChatModel, ModelError, ModelIdentity, ModelRequest, ModelResponse, count_output, count_sent,
};
use flotilla_config::ModelSettings;
use flotilla_protocol::{ErrorKind, Usage};

#[cfg(test)]
mod tests;

/// A model behind an OpenAI-compatible endpoint.
#[derive(Debug)]
pub struct OpenAiModel {
    /// Client, address, key and retries.
    http: HttpEndpoint,
    /// The model name sent in each request.
    model: String,
    /// Sampling temperature, sent only when set.
    temperature: Option<f32>,
    /// Whether answers are streamed.
    stream: bool,
    /// Whether an agent's output schema goes out as `response_format`.
    structured_outputs: bool,
}

impl OpenAiModel {
    /// Builds the client from `[models.<name>]`.
    ///
    /// Reads the API key from the environment variable named by `api_key_env`
    /// now, so a missing key fails at startup rather than on the first call.
    /// Errors are `validation` and name the setting or variable to fix.
    pub fn new(name: &str, settings: &ModelSettings) -> Result<Self, ModelError> {
        let ModelSettings::OpenAi {
            base_url,
            model,
            api_key_env,
            timeout,
            max_retries,
            temperature,
            stream,
            structured_outputs,
        } = settings
        else {
            return Err(ModelError {
                kind: ErrorKind::Bug,
                model: name.into(),
                message: "the openai provider was given another provider's settings".into(),
            });
        };
        let http = HttpEndpoint::new(EndpointSpec {
            name,
            base_url,
            path: &["chat", "completions"],
            api_key_env: api_key_env.as_deref(),
            key_header: (AUTHORIZATION, "Bearer "),
            headers: HeaderMap::new(),
            timeout: *timeout,
            max_retries: *max_retries,
        })?;
        Ok(Self {
            http,
            model: model.clone(),
            temperature: *temperature,
            stream: *stream,
            structured_outputs: *structured_outputs,
        })
    }

    fn no_choices(&self, error: Option<&Value>) -> ModelError {
        match error {
            Some(e) => self.http.malformed(format_args!("no choices; the endpoint said: {}", error_text(e))),
            None => self.http.malformed("no choices"),
        }
    }
}

/// What a streamed answer has delivered so far.
#[derive(Default)]
struct Streamed {
    turn: Turn,
    usage: Option<WireUsage>,
    chunks: usize,
}

impl Streamed {
    /// Applies one event's data; whether the stream is done (`[DONE]`).
    async fn apply(&mut self, model: &OpenAiModel, data: &str, request: &ModelRequest<'_>) -> Result<bool, Failure> {
        if data.trim() == "[DONE]" {
            return Ok(true);
        }
        let chunk: WireChunk = serde_json::from_str(data).map_err(|e| model.http.malformed(e))?;
        if let Some(error) = &chunk.error {
            return Err(model
                .http
                .malformed(format_args!("the stream ended in an error: {}", error_text(error)))
                .into());
        }
        self.chunks += 1;
        if chunk.usage.is_some() {
            self.usage = chunk.usage;
        }
        let Some(delta) = chunk.choices.into_iter().next().and_then(|c| c.delta) else { return Ok(false) };
        if let Some(text) = delta.content {
            request.delta(&text).await;
            self.turn.text.push_str(&text);
        }
        for (position, piece) in delta.tool_calls.unwrap_or_default().into_iter().enumerate() {
            let call = self.turn.call(piece.index.unwrap_or(position as u64));
            if let Some(id) = piece.id.filter(|id| !id.is_empty()) {
                call.id = Some(id);
            }
            let function = piece.function.unwrap_or_default();
            call.name.push_str(function.name.as_deref().unwrap_or_default());
            match function.arguments {
                Some(Value::String(text)) => call.arguments.push_str(&text),
                Some(Value::Null) | None => {}
                Some(value) => call.value = Some(value),
            }
        }
        Ok(false)
    }

    fn finish(self, model: &OpenAiModel, sent: &[u8]) -> Result<ModelResponse, ModelError> {
        if self.chunks == 0 {
            return Err(model.no_choices(None));
        }
        respond(self.turn, &model.http, self.usage, sent)
    }
}

/// The finished turn, with the server's token counts, or where it sent none
/// (some local servers, a stream cut before its usage chunk) our o200k
/// counts of what was sent and what came back.
fn respond(turn: Turn, http: &HttpEndpoint, wire: Option<WireUsage>, sent: &[u8]) -> Result<ModelResponse, ModelError> {
    let (content, tool_calls) = turn.finish(http)?;
    let wire = wire.unwrap_or_default();
    let usage = Usage {
        input_tokens: wire.prompt_tokens.unwrap_or_else(|| count_sent(sent)),
        output_tokens: wire.completion_tokens.unwrap_or_else(|| count_output(content.as_deref(), &tool_calls)),
        cache_read_input_tokens: wire.prompt_tokens_details.and_then(|d| d.cached_tokens).unwrap_or(0),
        model_calls: 1,
        ..Usage::default()
    };
    Ok(ModelResponse { content, tool_calls, usage })
}

#[async_trait]
impl ChatModel for OpenAiModel {
    async fn complete(&self, request: ModelRequest<'_>) -> Result<ModelResponse, ModelError> {
        let wire = WireRequest::new(&self.model, request, self.temperature);
        let wire = if self.stream { wire.streaming() } else { wire };
        let wire = match request.output_schema.filter(|_| self.structured_outputs) {
            Some(schema) => wire.constrained_to(schema),
            None => wire,
        };
        http::complete(self, &wire, request).await
    }

    fn identity(&self) -> ModelIdentity<'_> {
        ModelIdentity { provider: "openai", model: &self.model }
    }
}

#[async_trait]
impl WireFormat for OpenAiModel {
    fn http(&self) -> &HttpEndpoint {
        &self.http
    }

    fn streams(&self) -> bool {
        self.stream
    }

    /// Turns a 2xx body into a response.
    fn parse(&self, body: &[u8], sent: &[u8]) -> Result<ModelResponse, ModelError> {
        let wire: WireResponse = serde_json::from_slice(body).map_err(|e| self.http.malformed(e))?;
        let Some(choice) = wire.choices.into_iter().next() else {
            return Err(self.no_choices(wire.error.as_ref()));
        };
        let message = choice.message;
        let mut turn = Turn::default();
        turn.text = message.content.unwrap_or_default();
        for (index, call) in message.tool_calls.unwrap_or_default().into_iter().enumerate() {
            let Some(function) = call.function else {
                return Err(self.http.malformed("a tool call has no function"));
            };
            let part = turn.call(index as u64);
            part.id = call.id;
            part.name = function.name;
            part.value = Some(function.arguments.unwrap_or(Value::Null));
        }
        respond(turn, &self.http, wire.usage, sent)
    }

    /// Reads a streamed answer: text deltas go to the request's sink as
    /// they come; the turn is whole at `[DONE]` or the body's end.
    async fn read_stream(
        &self,
        mut response: Response,
        request: ModelRequest<'_>,
        sent: &[u8],
    ) -> Result<ModelResponse, Failure> {
        let mut reader = SseReader::default();
        let mut stream = Streamed::default();
        'body: while let Some(events) = self.http.events(&mut response, &mut reader).await? {
            for event in events {
                if stream.apply(self, &event.data, &request).await? {
                    break 'body;
                }
            }
        }
        Ok(stream.finish(self, sent)?)
    }
}

fn error_text(error: &Value) -> String {
    match error {
        Value::String(s) => s.clone(),
        other => other.get("message").and_then(Value::as_str).map_or_else(|| other.to_string(), str::to_owned),
    }
}

// ---- Response wire format (lenient: unknown fields are ignored) ----

#[derive(Deserialize)]
struct WireResponse {
    #[serde(default)]
    choices: Vec<WireChoice>,
    #[serde(default)]
    usage: Option<WireUsage>,
    /// Some servers answer 200 with an error object.
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct WireChoice {
    message: WireResponseMessage,
}

#[derive(Deserialize)]
struct WireResponseMessage {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<WireResponseToolCall>>,
}

#[derive(Deserialize)]
struct WireResponseToolCall {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<WireResponseFunction>,
}

#[derive(Deserialize)]
struct WireResponseFunction {
    #[serde(default)]
    name: String,
    #[serde(default)]
    arguments: Option<Value>,
}

#[derive(Default, Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
    /// Of `prompt_tokens`, those served from the prompt cache.
    #[serde(default)]
    prompt_tokens_details: Option<WirePromptDetails>,
}

#[derive(Clone, Copy, Debug, Default, Deserialize)]
struct WirePromptDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

/// One streamed chunk (`chat.completion.chunk`).
#[derive(Deserialize)]
struct WireChunk {
    #[serde(default)]
    choices: Vec<WireChunkChoice>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct WireChunkChoice {
    #[serde(default)]
    delta: Option<WireDelta>,
}

#[derive(Deserialize)]
struct WireDelta {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<WireDeltaToolCall>>,
}

#[derive(Deserialize)]
struct WireDeltaToolCall {
    #[serde(default)]
    index: Option<u64>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<WireDeltaFunction>,
}

#[derive(Default, Deserialize)]
struct WireDeltaFunction {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<Value>,
}
