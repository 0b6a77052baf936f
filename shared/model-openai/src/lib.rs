//! The `openai` provider: any OpenAI-compatible `/chat/completions` endpoint
//! with tool calling (OpenAI itself, and the many servers that copy its wire
//! format: vLLM, llama.cpp, Ollama, LiteLLM, ...).
//!
//! Why it looks like this:
//!
//! - The conversation types in [`super`] are provider-neutral; only this file
//!   knows the wire shape. Tool-call arguments travel as JSON *strings*, tools
//!   as `{"type": "function", "function": {..}}`, and our internal `is_error`
//!   flag never leaves the process (the model reads the error in the content).
//! - Arguments a model wrote that are not valid JSON do not fail the call: they
//!   are kept as a [`Value::String`] so the tool set's schema validation tells
//!   the model what was wrong and it can try again. Sent back in a later turn,
//!   such a string goes out unchanged, as the model wrote it.
//! - Failures map to an [`ErrorKind`] the agent loop can act on: 429, 5xx,
//!   timeouts and connection errors are `transient` and are retried here, up to
//!   `max_retries` times, with capped exponential backoff and jitter (or the
//!   server's `Retry-After`, capped at 30 s); 401/403 are `permission`; other
//!   4xx and malformed bodies are `validation`.
//! - Secrets stay out of errors and logs. The key is read once, at
//!   construction, from the environment variable named by `api_key_env`; it is
//!   sent as a sensitive header and scrubbed from any server text we quote.
//!   URLs are never quoted (a base URL may carry a query string). Without
//!   `api_key_env` no `Authorization` header is sent, for local endpoints.
//! - Redirects are not followed: a redirected POST silently becomes a GET, and
//!   following one to another host would be a surprise; the error says to fix
//!   `base_url` instead.

use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue, RETRY_AFTER};
use reqwest::{StatusCode, Url};
use serde::Deserialize;
use serde_json::Value;

use flotilla_agent::model::wire::{WireRequest, arguments_text};
use flotilla_agent::model::{ChatModel, ModelError, ModelRequest, ModelResponse, ToolCall, estimate_tokens};
use flotilla_agent::retry::Backoff;
use flotilla_config::ModelSettings;
use flotilla_protocol::{ErrorKind, Usage};

#[cfg(test)]
mod tests;

/// How much server text an error quotes.
const MAX_QUOTED_CHARS: usize = 500;
/// The longest `Retry-After` we honour; a server asking for more gets this.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(30);
/// The first backoff delay (before jitter); it doubles on each retry.
const BACKOFF_BASE: Duration = Duration::from_millis(500);
/// The longest backoff delay (before jitter).
const BACKOFF_CAP: Duration = Duration::from_secs(20);
/// The longest time to wait for a TCP (and TLS) connection.
const MAX_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How every error about an unusable 2xx body starts.
const MALFORMED: &str = "malformed response from model endpoint";

/// A model behind an OpenAI-compatible endpoint.
pub struct OpenAiModel {
    /// The configured name (`[models.<name>]`), for errors and logs.
    name: String,
    /// Built once, so connections are reused across calls.
    client: reqwest::Client,
    /// `{base_url}/chat/completions`, with any query of `base_url` kept.
    endpoint: Url,
    /// The model name sent in each request.
    model: String,
    /// `Bearer <key>`, marked sensitive; `None` for endpoints without auth.
    auth: Option<HeaderValue>,
    /// The key itself, kept only to scrub it from server text we quote.
    key: Option<String>,
    /// Name of the key's environment variable, for hints in errors.
    api_key_env: Option<String>,
    /// The per-request timeout, for error messages.
    timeout: Duration,
    /// Retries after the first attempt on transient failures.
    max_retries: u32,
    /// Sampling temperature, sent only when set.
    temperature: Option<f32>,
    /// The first backoff delay; tests shorten it.
    backoff_base: Duration,
}

impl std::fmt::Debug for OpenAiModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiModel")
            .field("name", &self.name)
            .field("model", &self.model)
            .field("api_key_env", &self.api_key_env)
            .field("authenticated", &self.auth.is_some())
            .field("timeout", &self.timeout)
            .field("max_retries", &self.max_retries)
            .field("temperature", &self.temperature)
            .finish_non_exhaustive()
    }
}

impl OpenAiModel {
    /// Builds the client from `[models.<name>]`.
    ///
    /// Reads the API key from the environment variable named by `api_key_env`
    /// now, so a missing key fails at startup rather than on the first call.
    /// Errors are `validation` and name the setting or variable to fix.
    pub fn new(name: &str, settings: &ModelSettings) -> Result<Self, ModelError> {
        let ModelSettings::OpenAi { base_url, model, api_key_env, timeout, max_retries, temperature } = settings else {
            return Err(model_error(name, ErrorKind::Bug, "the openai provider was given another provider's settings"));
        };
        let endpoint = chat_completions_url(base_url).ok_or_else(|| {
            model_error(
                name,
                ErrorKind::Validation,
                format!("models.{name}.base_url must be an absolute http:// or https:// URL"),
            )
        })?;
        if timeout.is_zero() {
            return Err(model_error(name, ErrorKind::Validation, format!("models.{name}.timeout must be above zero")));
        }
        let key = api_key_env.as_deref().map(|var| read_key(name, var)).transpose()?;
        let auth = key
            .as_deref()
            .map(|key| {
                let mut value = HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| {
                    let var = api_key_env.as_deref().unwrap_or_default();
                    model_error(
                        name,
                        ErrorKind::Validation,
                        format!("environment variable {var} holds characters not allowed in an HTTP header"),
                    )
                })?;
                value.set_sensitive(true);
                Ok(value)
            })
            .transpose()?;
        flotilla_config::tls::install_crypto_provider();
        let client = reqwest::Client::builder()
            .timeout(*timeout)
            .connect_timeout((*timeout).min(MAX_CONNECT_TIMEOUT))
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("flotilla/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| model_error(name, ErrorKind::Bug, format!("cannot build the HTTP client: {}", describe(e))))?;
        Ok(Self {
            name: name.into(),
            client,
            endpoint,
            model: model.clone(),
            auth,
            key,
            api_key_env: api_key_env.clone(),
            timeout: *timeout,
            max_retries: *max_retries,
            temperature: *temperature,
            backoff_base: BACKOFF_BASE,
        })
    }

    fn error(&self, kind: ErrorKind, message: impl Into<String>) -> ModelError {
        model_error(&self.name, kind, message)
    }

    fn malformed(&self, why: impl std::fmt::Display) -> ModelError {
        self.error(ErrorKind::Validation, format!("{MALFORMED}: {}", self.sanitize(&why.to_string())))
    }

    /// One HTTP round trip: the 2xx body, or why not.
    async fn send(&self, body: Bytes) -> Result<Bytes, Failure> {
        let mut request = self
            .client
            .post(self.endpoint.clone())
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, "application/json")
            .body(body);
        if let Some(auth) = &self.auth {
            request = request.header(AUTHORIZATION, auth.clone());
        }
        let response = request.send().await.map_err(|e| self.transport_failure(e))?;
        let status = response.status();
        if status.is_success() {
            return response.bytes().await.map_err(|e| self.transport_failure(e));
        }
        let retry_after = retry_after(response.headers());
        // The body of an error only adds detail; losing it is not worth a retry.
        let body = response.bytes().await.unwrap_or_default();
        Err(self.status_failure(status, &self.server_message(&body), retry_after))
    }

    fn transport_failure(&self, e: reqwest::Error) -> Failure {
        let message = if e.is_timeout() {
            format!("request timed out after {}", humanize(self.timeout))
        } else if e.is_connect() {
            format!("cannot connect to the model endpoint: {}", describe(e))
        } else if e.is_builder() {
            return Failure::Final(self.error(ErrorKind::Bug, format!("cannot build the request: {}", describe(e))));
        } else {
            format!("request to the model endpoint failed: {}", describe(e))
        };
        Failure::Retryable { message, retry_after: None }
    }

    fn status_failure(&self, status: StatusCode, detail: &str, retry_after: Option<Duration>) -> Failure {
        let code = status.as_u16();
        let final_error = |kind, message: String| Failure::Final(self.error(kind, message));
        match status {
            StatusCode::TOO_MANY_REQUESTS => {
                Failure::Retryable { message: format!("rate limited (HTTP 429): {detail}"), retry_after }
            }
            StatusCode::REQUEST_TIMEOUT => {
                Failure::Retryable { message: format!("the endpoint timed out (HTTP 408): {detail}"), retry_after }
            }
            s if s.is_server_error() => {
                Failure::Retryable { message: format!("server error (HTTP {code}): {detail}"), retry_after }
            }
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
                let hint = match &self.api_key_env {
                    Some(var) => format!("check the API key in environment variable {var}"),
                    None => format!("the endpoint needs a key: set models.{}.api_key_env", self.name),
                };
                final_error(
                    ErrorKind::Permission,
                    format!("the endpoint refused the request (HTTP {code}): {detail}; {hint}"),
                )
            }
            s if s.is_redirection() => final_error(
                ErrorKind::Validation,
                format!(
                    "the endpoint redirected (HTTP {code}); set models.{}.base_url to the final address",
                    self.name
                ),
            ),
            s if s.is_client_error() => {
                final_error(ErrorKind::Validation, format!("the endpoint rejected the request (HTTP {code}): {detail}"))
            }
            _ => final_error(ErrorKind::Validation, format!("unexpected HTTP status {code} from the model endpoint")),
        }
    }

    /// The server's explanation in an error body: `{"error": {"message"}}`,
    /// `{"error": "..."}` or `{"message"}`, else the body text; sanitized.
    fn server_message(&self, body: &[u8]) -> String {
        let from_json = serde_json::from_slice::<Value>(body).ok().and_then(|v| {
            let text = match v.get("error") {
                Some(Value::String(s)) => Some(s.clone()),
                Some(e) => e.get("message").and_then(Value::as_str).map(str::to_owned),
                None => None,
            };
            text.or_else(|| v.get("message").and_then(Value::as_str).map(str::to_owned))
        });
        let text = from_json.unwrap_or_else(|| String::from_utf8_lossy(body).into_owned());
        let text = self.sanitize(&text);
        if text.is_empty() { "no error message".into() } else { text }
    }

    /// Server text made safe to quote: one line, no key, at most 500 characters.
    fn sanitize(&self, text: &str) -> String {
        let mut text = text.split_whitespace().collect::<Vec<_>>().join(" ");
        if let Some(key) = self.key.as_deref().filter(|k| !k.is_empty()) {
            text = text.replace(key, "[redacted]");
        }
        truncate(text, MAX_QUOTED_CHARS)
    }

    /// Turns a 2xx body into a response.
    fn parse(&self, body: &[u8], request_chars: usize) -> Result<ModelResponse, ModelError> {
        let wire: WireResponse = serde_json::from_slice(body).map_err(|e| self.malformed(e))?;
        let Some(choice) = wire.choices.into_iter().next() else {
            return Err(match wire.error {
                Some(e) => self.malformed(format_args!("no choices; the endpoint said: {}", error_text(&e))),
                None => self.malformed("no choices"),
            });
        };
        let message = choice.message;
        let mut output_chars = message.content.as_deref().map_or(0, str::len);
        let mut tool_calls = Vec::new();
        for call in message.tool_calls.unwrap_or_default() {
            let Some(function) = call.function else {
                return Err(self.malformed("a tool call has no function"));
            };
            if function.name.is_empty() {
                return Err(self.malformed("a tool call has no function name"));
            }
            let arguments = parse_arguments(function.arguments);
            output_chars += function.name.len() + arguments_text(&arguments).len();
            let id = match call.id {
                Some(id) if !id.is_empty() => id,
                // Some local servers omit ids; the conversation still needs them.
                _ => format!("call_{}", uuid::Uuid::now_v7().simple()),
            };
            tool_calls.push(ToolCall { id, name: function.name, arguments });
        }
        let usage = wire.usage.unwrap_or_default();
        Ok(ModelResponse {
            content: message.content,
            tool_calls,
            usage: Usage {
                input_tokens: usage.prompt_tokens.unwrap_or_else(|| estimate_tokens(request_chars)),
                output_tokens: usage.completion_tokens.unwrap_or_else(|| estimate_tokens(output_chars)),
                model_calls: 1,
                ..Usage::default()
            },
        })
    }
}

#[async_trait]
impl ChatModel for OpenAiModel {
    async fn complete(&self, request: ModelRequest<'_>) -> Result<ModelResponse, ModelError> {
        let wire = WireRequest::new(&self.model, request, self.temperature);
        let body = serde_json::to_vec(&wire)
            .map_err(|e| self.error(ErrorKind::Bug, format!("cannot encode the request: {e}")))?;
        let body = Bytes::from(body);
        let mut attempt = 0;
        let mut delays = Backoff::new(self.backoff_base, BACKOFF_CAP);
        loop {
            let message = match self.send(body.clone()).await {
                Ok(response) => return self.parse(&response, body.len()),
                Err(Failure::Final(e)) => return Err(e),
                Err(Failure::Retryable { message, retry_after }) if attempt < self.max_retries => {
                    let delay = retry_after.unwrap_or_else(|| delays.next_delay());
                    attempt += 1;
                    tracing::warn!(
                        model = %self.name,
                        retry = attempt,
                        max_retries = self.max_retries,
                        delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                        error = %message,
                        "model call failed, retrying"
                    );
                    tokio::time::sleep(delay).await;
                    continue;
                }
                Err(Failure::Retryable { message, .. }) => message,
            };
            let attempts = attempt + 1;
            let plural = if attempts == 1 { "" } else { "s" };
            return Err(
                self.error(ErrorKind::Transient, format!("{message} (gave up after {attempts} attempt{plural})"))
            );
        }
    }
}

/// Why one attempt failed.
enum Failure {
    /// Worth another attempt: 429, 5xx, timeout, connection trouble.
    Retryable {
        /// Sanitized explanation.
        message: String,
        /// How long the server asked us to wait.
        retry_after: Option<Duration>,
    },
    /// Retrying the same request cannot help.
    Final(ModelError),
}

fn model_error(name: &str, kind: ErrorKind, message: impl Into<String>) -> ModelError {
    ModelError { kind, model: name.into(), message: message.into() }
}

/// `{base_url}/chat/completions`, or `None` unless `base_url` is absolute http(s).
fn chat_completions_url(base_url: &str) -> Option<Url> {
    let mut url = Url::parse(base_url.trim()).ok()?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none_or(str::is_empty) {
        return None;
    }
    url.path_segments_mut().ok()?.pop_if_empty().extend(["chat", "completions"]);
    url.set_fragment(None);
    Some(url)
}

/// The API key from environment variable `var`, trimmed. Errors name the
/// variable, never a value.
fn read_key(name: &str, var: &str) -> Result<String, ModelError> {
    let problem = match std::env::var(var) {
        Ok(key) if !key.trim().is_empty() => return Ok(key.trim().to_owned()),
        Ok(_) => "is empty",
        Err(std::env::VarError::NotPresent) => "is not set",
        Err(std::env::VarError::NotUnicode(_)) => "is not valid UTF-8",
    };
    Err(model_error(
        name,
        ErrorKind::Validation,
        format!(
            "environment variable {var} (models.{name}.api_key_env) {problem}: set it to the API key, \
             or remove api_key_env for an endpoint without authentication"
        ),
    ))
}

/// A reqwest error and its causes on one line, without the URL.
fn describe(e: reqwest::Error) -> String {
    let e = e.without_url();
    let mut parts = vec![e.to_string()];
    let mut source = std::error::Error::source(&e);
    while let Some(cause) = source {
        let text = cause.to_string();
        if parts.last() != Some(&text) {
            parts.push(text);
        }
        source = cause.source();
    }
    truncate(parts.join(": "), MAX_QUOTED_CHARS)
}

/// `Retry-After` in seconds (the HTTP-date form is ignored), capped.
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let seconds: f64 = headers.get(RETRY_AFTER)?.to_str().ok()?.trim().parse().ok()?;
    (seconds.is_finite() && seconds >= 0.0).then(|| Duration::from_secs_f64(seconds.min(MAX_RETRY_AFTER.as_secs_f64())))
}

fn humanize(d: Duration) -> String {
    if d.subsec_millis() == 0 { format!("{} s", d.as_secs()) } else { format!("{} ms", d.as_millis()) }
}

/// At most `max` characters, marking the cut.
fn truncate(mut text: String, max: usize) -> String {
    if let Some((cut, _)) = text.char_indices().nth(max) {
        text.truncate(cut);
        text.push_str("...");
    }
    text
}

/// Wire arguments to our form: JSON text parsed when valid, kept as a string
/// when not; missing or blank means no arguments; an object some servers send
/// instead of a string is taken as is.
fn parse_arguments(raw: Option<Value>) -> Value {
    match raw {
        None | Some(Value::Null) => Value::Object(Default::default()),
        Some(Value::String(text)) if text.trim().is_empty() => Value::Object(Default::default()),
        Some(Value::String(text)) => serde_json::from_str(&text).unwrap_or(Value::String(text)),
        Some(other) => other,
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
}

/// Builds the provider configured as `name`: the binaries' one place that
/// knows every provider.
pub fn build(name: &str, settings: &ModelSettings) -> Result<std::sync::Arc<dyn ChatModel>, ModelError> {
    Ok(match settings {
        ModelSettings::OpenAi { .. } => std::sync::Arc::new(OpenAiModel::new(name, settings)?),
        ModelSettings::Scripted { script } => {
            std::sync::Arc::new(flotilla_agent::model::scripted::ScriptedModel::load(name, script)?)
        }
    })
}
