//! The HTTP side every model provider shares (this crate's `openai`,
//! `shared/models/src/anthropic.rs`): one reqwest client per model, the
//! retry loop, and how failures become [`ModelError`]s. A provider only
//! builds its body and reads its wire format.
//!
//! Why it looks like this:
//!
//! - Failures map to an [`ErrorKind`] the agent loop can act on: 429, 5xx
//!   (Anthropic's 529 "overloaded" included), 408, timeouts and connection
//!   errors are `transient` and are retried here, up to `max_retries` times,
//!   with the one [`Backoff`] of `shared/retry/src/lib.rs` (or the server's
//!   `Retry-After`, capped at 30 s); 401/403 are `permission`; other 4xx and
//!   malformed bodies are `validation`.
//! - Secrets stay out of errors and logs. The key is read once, at
//!   construction, from the environment variable named by `api_key_env`; it
//!   is sent as a sensitive header and scrubbed from any server text we
//!   quote. URLs are never quoted (a base URL may carry a query string).
//!   Without `api_key_env` no key header is sent, for local endpoints.
//! - Redirects are not followed: a redirected POST silently becomes a GET,
//!   and following one to another host would be a surprise; the error says
//!   to fix `base_url` instead.

use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::future::BoxFuture;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};
use reqwest::{Response, StatusCode, Url};
use serde_json::Value;

use crate::sse::{SseEvent, SseReader};
use flotilla_agent::model::{ModelError, ModelRequest, ModelResponse};
use flotilla_protocol::ErrorKind;
use flotilla_retry::Backoff;

/// How much server text an error quotes.
pub const MAX_QUOTED_CHARS: usize = 500;
/// The longest `Retry-After` we honour; a server asking for more gets this.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(30);
/// The first backoff delay (before jitter); it doubles on each retry.
const BACKOFF_BASE: Duration = Duration::from_millis(500);
/// The longest backoff delay (before jitter).
const BACKOFF_CAP: Duration = Duration::from_secs(20);
/// The longest time to wait for a TCP (and TLS) connection.
const MAX_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How every error about an unusable 2xx body starts.
pub const MALFORMED: &str = "malformed response from model endpoint";

/// What a provider tells [`HttpEndpoint::new`].
pub struct EndpointSpec<'a> {
    /// The configured name (`[models.<name>]`), for errors and logs.
    pub name: &'a str,
    /// The `base_url` setting as configured.
    pub base_url: &'a str,
    /// Path segments appended to `base_url` (`["chat", "completions"]`).
    pub path: &'a [&'a str],
    /// Name of the key's environment variable, when the endpoint needs one.
    pub api_key_env: Option<&'a str>,
    /// The header carrying the key and the text before it (`Bearer `).
    pub key_header: (HeaderName, &'static str),
    /// Headers every request carries (`anthropic-version`).
    pub headers: HeaderMap,
    /// Per-request timeout.
    pub timeout: Duration,
    /// Retries after the first attempt on transient failures.
    pub max_retries: u32,
}

/// One model endpoint: client, address, credentials and retry policy.
pub struct HttpEndpoint {
    /// The configured name, for errors and logs.
    name: String,
    /// Built once, so connections are reused across calls.
    client: reqwest::Client,
    /// `{base_url}/<path>`, with any query of `base_url` kept.
    url: Url,
    /// Headers of every request, the key's marked sensitive.
    headers: HeaderMap,
    /// The key itself, kept only to scrub it from server text we quote.
    key: Option<String>,
    /// Name of the key's environment variable, for hints in errors.
    api_key_env: Option<String>,
    /// The per-request timeout, for error messages.
    timeout: Duration,
    /// Retries after the first attempt on transient failures.
    max_retries: u32,
    /// The first backoff delay; tests shorten it.
    pub backoff_base: Duration,
}

impl std::fmt::Debug for HttpEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpEndpoint")
            .field("name", &self.name)
            .field("api_key_env", &self.api_key_env)
            .field("authenticated", &self.key.is_some())
            .field("timeout", &self.timeout)
            .field("max_retries", &self.max_retries)
            .finish_non_exhaustive()
    }
}

/// Why one attempt failed.
pub enum Failure {
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

impl From<ModelError> for Failure {
    fn from(e: ModelError) -> Self {
        Self::Final(e)
    }
}

impl HttpEndpoint {
    /// Checks the settings and builds the client. Reads the API key now, so
    /// a missing key fails at startup rather than on the first call. Errors
    /// are `validation` and name the setting or variable to fix.
    pub fn new(spec: EndpointSpec<'_>) -> Result<Self, ModelError> {
        let name = spec.name;
        let url = endpoint_url(spec.base_url, spec.path).ok_or_else(|| {
            model_error(
                name,
                ErrorKind::Validation,
                format!("models.{name}.base_url must be an absolute http:// or https:// URL"),
            )
        })?;
        if spec.timeout.is_zero() {
            return Err(model_error(name, ErrorKind::Validation, format!("models.{name}.timeout must be above zero")));
        }
        let mut headers = spec.headers;
        let key = spec.api_key_env.map(|var| read_key(name, var)).transpose()?;
        if let (Some(key), Some(var)) = (key.as_deref(), spec.api_key_env) {
            let (header, prefix) = spec.key_header;
            let mut value = HeaderValue::from_str(&format!("{prefix}{key}")).map_err(|_| {
                model_error(
                    name,
                    ErrorKind::Validation,
                    format!("environment variable {var} holds characters not allowed in an HTTP header"),
                )
            })?;
            value.set_sensitive(true);
            headers.insert(header, value);
        }
        flotilla_config::tls::install_crypto_provider();
        let client = reqwest::Client::builder()
            .timeout(spec.timeout)
            .connect_timeout(spec.timeout.min(MAX_CONNECT_TIMEOUT))
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("flotilla/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| model_error(name, ErrorKind::Bug, format!("cannot build the HTTP client: {}", describe(e))))?;
        Ok(Self {
            name: name.into(),
            client,
            url,
            headers,
            key,
            api_key_env: spec.api_key_env.map(str::to_owned),
            timeout: spec.timeout,
            max_retries: spec.max_retries,
            backoff_base: BACKOFF_BASE,
        })
    }

    /// The configured model name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// An error of this model.
    pub fn error(&self, kind: ErrorKind, message: impl Into<String>) -> ModelError {
        model_error(&self.name, kind, message)
    }

    /// A `validation` error about an unusable 2xx body.
    pub fn malformed(&self, why: impl std::fmt::Display) -> ModelError {
        self.error(ErrorKind::Validation, format!("{MALFORMED}: {}", self.sanitize(&why.to_string())))
    }

    /// Posts `body` until an attempt succeeds, fails for good, or the retries
    /// run out; `read` turns a 2xx response into the result (a failure of
    /// `read` is retried like a failed request when it is
    /// [`Failure::Retryable`]). `accept` is the `Accept` header.
    pub async fn post<'a, T>(
        &'a self,
        body: Bytes,
        accept: &'static str,
        read: impl Fn(Response) -> BoxFuture<'a, Result<T, Failure>> + Send + Sync,
    ) -> Result<T, ModelError> {
        let mut attempt = 0;
        let mut delays = Backoff::new(self.backoff_base, BACKOFF_CAP);
        loop {
            let outcome = match self.send(body.clone(), accept).await {
                Ok(response) => read(response).await,
                Err(failure) => Err(failure),
            };
            let message = match outcome {
                Ok(value) => return Ok(value),
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

    /// One HTTP round trip: the 2xx response, or why not.
    async fn send(&self, body: Bytes, accept: &'static str) -> Result<Response, Failure> {
        let request = self
            .client
            .post(self.url.clone())
            .headers(self.headers.clone())
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, accept)
            .body(body);
        let response = request.send().await.map_err(|e| self.transport_failure(e))?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let retry_after = retry_after(response.headers());
        // The body of an error only adds detail; losing it is not worth a retry.
        let body = response.bytes().await.unwrap_or_default();
        Err(self.status_failure(status, &self.server_message(&body), retry_after))
    }

    /// The whole body of a 2xx response.
    pub async fn body(&self, response: Response) -> Result<Bytes, Failure> {
        response.bytes().await.map_err(|e| self.transport_failure(e))
    }

    /// The events completed by the next piece of a streamed 2xx body (an
    /// event left without its closing blank line comes with the body's
    /// end); `None` once the body has ended. A broken stream is retryable:
    /// the whole request is sent again.
    pub async fn events(
        &self,
        response: &mut Response,
        reader: &mut SseReader,
    ) -> Result<Option<Vec<SseEvent>>, Failure> {
        match response.chunk().await.map_err(|e| self.transport_failure(e))? {
            Some(bytes) => Ok(Some(reader.push(&bytes))),
            None => Ok(reader.finish().map(|event| vec![event])),
        }
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

    /// The server's explanation in an error body: `{"error": {"message"}}`
    /// (OpenAI, Anthropic), `{"error": "..."}` or `{"message"}`, else the
    /// body text; sanitized.
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
    pub fn sanitize(&self, text: &str) -> String {
        let mut text = text.split_whitespace().collect::<Vec<_>>().join(" ");
        if let Some(key) = self.key.as_deref().filter(|k| !k.is_empty()) {
            text = text.replace(key, "[redacted]");
        }
        truncate(text, MAX_QUOTED_CHARS)
    }
}

/// What a provider knows of its wire format: [`complete`] does the rest.
#[async_trait]
pub trait WireFormat: Send + Sync {
    /// Its endpoint.
    fn http(&self) -> &HttpEndpoint;
    /// Whether it asks for server-sent events (`stream = true`).
    fn streams(&self) -> bool;
    /// A whole 2xx body as a response; `sent` (the request body) is counted
    /// only when the server reports no usage.
    fn parse(&self, body: &[u8], sent: &[u8]) -> Result<ModelResponse, ModelError>;
    /// A streamed 2xx answer as a response, text handed to the request's
    /// delta sink as it comes.
    async fn read_stream(
        &self,
        response: Response,
        request: ModelRequest<'_>,
        sent: &[u8],
    ) -> Result<ModelResponse, Failure>;
}

/// One model call of `provider`: `body` sent, with retries, and the answer
/// read whole or as a stream.
pub async fn complete<W: WireFormat>(
    provider: &W,
    body: &impl serde::Serialize,
    request: ModelRequest<'_>,
) -> Result<ModelResponse, ModelError> {
    let http = provider.http();
    let body =
        serde_json::to_vec(body).map_err(|e| http.error(ErrorKind::Bug, format!("cannot encode the request: {e}")))?;
    let body = Bytes::from(body);
    let sent = &body.clone();
    if provider.streams() {
        return http.post(body, "text/event-stream", |response| provider.read_stream(response, request, sent)).await;
    }
    http.post(body, "application/json", |response| {
        Box::pin(async move { Ok(provider.parse(&http.body(response).await?, sent)?) })
    })
    .await
}

fn model_error(name: &str, kind: ErrorKind, message: impl Into<String>) -> ModelError {
    ModelError { kind, model: name.into(), message: message.into() }
}

/// `{base_url}/<path>`, or `None` unless `base_url` is absolute http(s).
pub fn endpoint_url(base_url: &str, path: &[&str]) -> Option<Url> {
    let mut url = Url::parse(base_url.trim()).ok()?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none_or(str::is_empty) {
        return None;
    }
    url.path_segments_mut().ok()?.pop_if_empty().extend(path);
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
pub fn retry_after(headers: &HeaderMap) -> Option<Duration> {
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
