//! The `anthropic` provider: Anthropic's Messages API (`POST
//! {base_url}/v1/messages`, docs/MODELS.md).
//!
//! Why it looks like this:
//!
//! - Anthropic's API is not OpenAI-compatible: the body is [`wire`], the
//!   answer is content blocks (`text`, `tool_use`) with a `stop_reason`, and
//!   a streamed answer is named events ([`stream`]). Everything else is
//!   shared with the `openai` provider:
//!   the HTTP client, the retry loop (429, 529 "overloaded" and other 5xx
//!   are retried honouring `retry-after`), the error mapping and the secret
//!   hygiene of `shared/models/src/http.rs` (the key goes out only as
//!   the sensitive `x-api-key` header and is scrubbed from quoted text; URLs
//!   are never quoted; redirects are not followed; malformed bodies are
//!   `validation`), and turn assembly (`shared/models/src/turn.rs`).
//! - Usage keeps the cache counts: Anthropic's `input_tokens` excludes the
//!   tokens written to or read from the prompt cache, so ours is the sum of
//!   all three, the same meaning as OpenAI's `prompt_tokens`, with the two
//!   cache counts beside it (`shared/protocol/src/usage.rs`).
//! - An answer cut at `max_tokens` inside a tool call cannot be run: that is
//!   a `validation` error naming `models.<name>.max_tokens`. Text cut there
//!   is returned as it is, with a warning in the log.

pub mod stream;
pub mod wire;

#[cfg(test)]
mod tests;

use async_trait::async_trait;
use reqwest::Response;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde::Deserialize;
use serde_json::Value;

use crate::http::{self, EndpointSpec, Failure, HttpEndpoint, WireFormat};
use crate::turn::Turn;
use flotilla_agent::model::{
    ChatModel, ModelError, ModelIdentity, ModelRequest, ModelResponse, ToolCall, count_output, count_sent,
};
use flotilla_config::ModelSettings;
use flotilla_protocol::{ErrorKind, Usage};
use wire::{MessagesRequest, Options};

/// The API version every request names (`anthropic-version`).
pub const API_VERSION: &str = "2023-06-01";

/// A model behind the Messages API.
#[derive(Debug)]
pub struct AnthropicModel {
    /// Client, address, key and retries.
    http: HttpEndpoint,
    /// The model name sent in each request.
    model: String,
    /// The longest answer, in tokens.
    max_tokens: u32,
    /// Sampling temperature, sent only when set.
    temperature: Option<f32>,
    /// Whether answers are streamed.
    stream: bool,
}

impl AnthropicModel {
    /// Builds the client from `[models.<name>]`; reads the API key now.
    /// Errors are `validation` and name the setting or variable to fix.
    pub fn new(name: &str, settings: &ModelSettings) -> Result<Self, ModelError> {
        let ModelSettings::Anthropic {
            base_url,
            model,
            api_key_env,
            timeout,
            max_retries,
            temperature,
            max_tokens,
            stream,
        } = settings
        else {
            return Err(ModelError {
                kind: ErrorKind::Bug,
                model: name.into(),
                message: "the anthropic provider was given another provider's settings".into(),
            });
        };
        let mut headers = HeaderMap::new();
        headers.insert(HeaderName::from_static("anthropic-version"), HeaderValue::from_static(API_VERSION));
        let http = HttpEndpoint::new(EndpointSpec {
            name,
            base_url,
            path: &["v1", "messages"],
            api_key_env: api_key_env.as_deref(),
            key_header: (HeaderName::from_static("x-api-key"), ""),
            headers,
            timeout: *timeout,
            max_retries: *max_retries,
        })?;
        Ok(Self { http, model: model.clone(), max_tokens: *max_tokens, temperature: *temperature, stream: *stream })
    }

    /// The response of a finished turn, checked against its `stop_reason`.
    fn respond(
        &self,
        turn: Turn,
        stop_reason: Option<&str>,
        usage: WireUsage,
        sent: &[u8],
    ) -> Result<ModelResponse, ModelError> {
        if stop_reason == Some("max_tokens") {
            if turn.has_calls() {
                return Err(self.http.error(
                    ErrorKind::Validation,
                    format!(
                        "the answer reached max_tokens ({}) inside a tool call; raise models.{}.max_tokens",
                        self.max_tokens,
                        self.http.name()
                    ),
                ));
            }
            tracing::warn!(model = %self.http.name(), max_tokens = self.max_tokens, "answer cut at max_tokens");
        }
        let (content, tool_calls) = turn.finish(&self.http)?;
        let usage = usage.into_usage(sent, content.as_deref(), &tool_calls);
        Ok(ModelResponse { content, tool_calls, usage })
    }
}

#[async_trait]
impl ChatModel for AnthropicModel {
    async fn complete(&self, request: ModelRequest<'_>) -> Result<ModelResponse, ModelError> {
        let options = Options {
            model: &self.model,
            max_tokens: self.max_tokens,
            temperature: self.temperature,
            stream: self.stream,
        };
        http::complete(self, &MessagesRequest::new(options, &request), request).await
    }

    fn identity(&self) -> ModelIdentity<'_> {
        ModelIdentity { provider: "anthropic", model: &self.model }
    }
}

#[async_trait]
impl WireFormat for AnthropicModel {
    fn http(&self) -> &HttpEndpoint {
        &self.http
    }

    fn streams(&self) -> bool {
        self.stream
    }

    /// Turns a 2xx body into a response.
    fn parse(&self, body: &[u8], sent: &[u8]) -> Result<ModelResponse, ModelError> {
        let wire: WireMessage = serde_json::from_slice(body).map_err(|e| self.http.malformed(e))?;
        if let Some(error) = wire.error {
            return Err(self.http.malformed(format_args!("the endpoint said: {}", error_text(&error))));
        }
        let Some(content) = wire.content else {
            return Err(self.http.malformed("no content"));
        };
        let mut turn = Turn::default();
        for (index, block) in content.into_iter().enumerate() {
            match block {
                WireBlock::Text { text } => turn.text.push_str(&text),
                WireBlock::ToolUse { id, name, input } => {
                    let call = turn.call(index as u64);
                    call.id = Some(id);
                    call.name = name;
                    call.value = Some(input);
                }
                WireBlock::Other => {}
            }
        }
        self.respond(turn, wire.stop_reason.as_deref(), wire.usage.unwrap_or_default(), sent)
    }

    async fn read_stream(
        &self,
        response: Response,
        request: ModelRequest<'_>,
        sent: &[u8],
    ) -> Result<ModelResponse, Failure> {
        stream::read(self, response, request, sent).await
    }
}

fn error_text(error: &Value) -> String {
    let kind = error.get("type").and_then(Value::as_str).unwrap_or("error");
    match error.get("message").and_then(Value::as_str) {
        Some(message) => format!("{kind}: {message}"),
        None => error.to_string(),
    }
}

// ---- Response wire format (lenient: unknown fields are ignored) ----

#[derive(Deserialize)]
struct WireMessage {
    #[serde(default)]
    content: Option<Vec<WireBlock>>,
    #[serde(default)]
    stop_reason: Option<String>,
    #[serde(default)]
    usage: Option<WireUsage>,
    /// `{"type": "error", "error": {..}}`, should a server send it with 200.
    #[serde(default)]
    error: Option<Value>,
}

/// A content block (of an answer, or starting in a stream); kinds we do
/// not use (`thinking`, ...) are skipped.
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireBlock {
    Text {
        #[serde(default)]
        text: String,
    },
    ToolUse {
        #[serde(default)]
        id: String,
        #[serde(default)]
        name: String,
        #[serde(default)]
        input: Value,
    },
    #[serde(other)]
    Other,
}

/// Token counts as the API reports them; a stream reports them in two
/// parts (`message_start`, then `message_delta`), hence every field optional.
#[derive(Clone, Copy, Default, Deserialize)]
struct WireUsage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
}

impl WireUsage {
    /// Later counts replace earlier ones (a stream's `message_delta` has the
    /// final output count).
    fn update(&mut self, later: WireUsage) {
        self.input_tokens = later.input_tokens.or(self.input_tokens);
        self.output_tokens = later.output_tokens.or(self.output_tokens);
        self.cache_creation_input_tokens = later.cache_creation_input_tokens.or(self.cache_creation_input_tokens);
        self.cache_read_input_tokens = later.cache_read_input_tokens.or(self.cache_read_input_tokens);
    }

    /// Ours: `input_tokens` counts every prompt token, cached or not;
    /// counts the server did not send are our o200k counts of the request
    /// body `sent` and of the answer.
    fn into_usage(self, sent: &[u8], content: Option<&str>, tool_calls: &[ToolCall]) -> Usage {
        let created = self.cache_creation_input_tokens.unwrap_or(0);
        let read = self.cache_read_input_tokens.unwrap_or(0);
        let uncached = self.input_tokens.unwrap_or_else(|| count_sent(sent).saturating_sub(created + read));
        Usage {
            input_tokens: uncached + created + read,
            output_tokens: self.output_tokens.unwrap_or_else(|| count_output(content, tool_calls)),
            model_calls: 1,
            cache_creation_input_tokens: created,
            cache_read_input_tokens: read,
            ..Usage::default()
        }
    }
}
