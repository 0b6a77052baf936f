//! Opening one MCP session: start the stdio child (or reach the HTTP
//! endpoint), agree on a protocol revision under a timeout, and send requests
//! with a timeout and `_meta` (rmcp itself waits forever by default).
//!
//! Revisions (docs/MCP.md, "Protocol revisions"): the session opens in
//! rmcp's `Auto` lifecycle, `server/discover` for 2026-07-28 (stateless:
//! every request then carries the protocol version, client info and
//! capabilities in `_meta`, and over HTTP the `MCP-Protocol-Version`,
//! `Mcp-Method` and `Mcp-Name` headers), falling back to the `initialize`
//! handshake at 2025-11-25 for a server that does not know `server/discover`,
//! from which the server negotiates down (2025-06-18, ...) as usual. rmcp
//! does the probing, the fallback and the headers; this module drives the
//! 2026-07-28 multi round-trip requests of a tool call (SEP-2322), whose
//! questions go to the same person as a 2025-11-25 server's
//! `elicitation/create` does.
//!
//! A stdio child runs with a cleared environment: `PATH`, the variables the
//! config declares, and nothing else, so worker secrets (NATS credentials,
//! model keys) never reach a third-party server. Its stderr is drained into
//! tracing line by line on its own task, so a chatty server never blocks and
//! never mixes logs with the protocol on stdout.

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use rmcp::RoleClient;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, CancelledNotificationParam, ClientCapabilities,
    ClientConfig, ClientRequest, ElicitationCapability, FormElicitationCapability, Implementation, InputRequest,
    InputRequests, InputResponses, JsonObject, ProtocolVersion, RequestMetaObject, ServerResult,
};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, PeerRequestOptions, RunningService, ServiceError};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use tokio::io::AsyncBufReadExt;

use super::config::{McpServerSettings, McpTransport};
use super::elicitation::{Calls, FlotillaClient, Responder};
use super::error::McpError;
use super::{oauth, url_policy};

/// Most same-origin redirects followed for one request (as rmcp's default client).
const MAX_REDIRECTS: usize = 10;

/// Longest stderr line logged; the rest is cut.
const STDERR_LINE_MAX: usize = 2000;

/// Most `input_required` answers one tool call may get (SEP-2322): a server
/// that keeps asking is refused rather than looped with forever.
const MAX_INPUT_ROUNDS: usize = 8;

/// One open session.
pub struct Session {
    service: RunningService<RoleClient, FlotillaClient>,
    /// Tool calls in flight, for the elicitations servers send during them.
    calls: Calls,
    /// The stdio child's pid, for health reports and operators.
    pub pid: Option<u32>,
    /// OAuth state of an HTTP server with `[oauth]`.
    auth: Option<oauth::SessionAuth>,
}

/// What Flotilla offers in `server/discover`, in every 2026-07-28 request's
/// `_meta`, and in `initialize` to older servers. It offers form-mode
/// elicitation: a person answers through approvals (docs/APPROVALS.md,
/// "Elicitation"), and the orchestrator validates the content against the
/// requested schema.
fn client_info() -> ClientConfig {
    let mut form = FormElicitationCapability::new();
    form.schema_validation = Some(true);
    let mut elicitation = ElicitationCapability::new();
    elicitation.form = Some(form);
    let mut capabilities = ClientCapabilities::default();
    capabilities.elicitation = Some(elicitation);
    ClientConfig::new(capabilities, Implementation::new("flotilla", env!("CARGO_PKG_VERSION")))
        .with_protocol_version(ProtocolVersion::LATEST)
}

/// Why a session did not open, and whether the server answered the
/// `server/discover` probe with older revisions only (rmcp's `Auto` mode
/// stops there instead of falling back to `initialize`).
struct OpenFailure {
    error: McpError,
    older_revisions_only: bool,
}

impl From<McpError> for OpenFailure {
    fn from(error: McpError) -> Self {
        Self { error, older_revisions_only: false }
    }
}

impl OpenFailure {
    /// `error`, reported for the failed handshake `e`.
    fn of_handshake(e: &rmcp::service::ClientInitializeError, error: McpError) -> Self {
        let older_revisions_only =
            matches!(e, rmcp::service::ClientInitializeError::NoCompatibleProtocolVersion { .. });
        Self { error, older_revisions_only }
    }
}

/// How a session agrees on a revision: `server/discover` offering 2026-07-28;
/// a server that answers it with an error (it predates the method) gets the
/// `initialize` handshake offering 2025-11-25, the newest revision that has
/// one. rmcp's `Auto` mode, which also falls back when a server leaves the
/// probe unanswered for 10 s; a server that answers the probe with older
/// revisions only is opened again offering 2025-11-25
/// ([`Session::open_with_resolver`]). A pinned `protocol_version` speaks that
/// revision only: `server/discover` without fallback for 2026-07-28,
/// `initialize` offering it for an older one.
fn lifecycle(settings: &McpServerSettings) -> ClientLifecycleMode {
    match settings.protocol_version.as_deref() {
        None => ClientLifecycleMode::Auto {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            legacy_version: Some(ProtocolVersion::LATEST_WITH_INITIALIZE),
        },
        Some(v) => {
            let version = serde_json::from_value::<ProtocolVersion>(serde_json::Value::String(v.to_string()))
                .unwrap_or(ProtocolVersion::LATEST_WITH_INITIALIZE);
            if version.has_initialize() {
                ClientLifecycleMode::Initialize
            } else {
                ClientLifecycleMode::Discover { preferred_versions: vec![version] }
            }
        }
    }
}

/// The handler a session with `settings`' server runs with; it offers the
/// pinned revision in `initialize`, else 2025-11-25 (the `Auto` fallback
/// sets that itself).
fn handler(settings: &McpServerSettings, calls: &Calls) -> FlotillaClient {
    let mut info = client_info();
    if let Some(v) = &settings.protocol_version
        && let Ok(version) = serde_json::from_value::<ProtocolVersion>(serde_json::Value::String(v.clone()))
    {
        info.protocol_version = version;
    }
    FlotillaClient::new(settings.name.clone(), info, calls.clone())
}

/// What an error says about `settings`' server, with URL paths redacted.
pub(crate) fn redacted(settings: &McpServerSettings, text: impl std::fmt::Display) -> String {
    let text = text.to_string();
    match &settings.transport {
        McpTransport::Http { url, .. } => url_policy::scrub(&text, url),
        McpTransport::Stdio { .. } => text,
    }
}

impl Session {
    /// Starts or reaches the server and completes `initialize`, all within
    /// `settings.init_timeout`.
    pub async fn open(settings: &McpServerSettings) -> Result<Self, McpError> {
        Self::open_with_resolver(settings, &url_policy::system_resolver()).await
    }

    /// [`Session::open`] with HTTP host names resolved by `resolver` (once,
    /// then pinned): tests replay a rebinding DNS server through it.
    pub async fn open_with_resolver(
        settings: &McpServerSettings,
        resolver: &url_policy::Resolver,
    ) -> Result<Self, McpError> {
        let server = settings.name.clone();
        let timeout = settings.init_timeout;
        let resolver = &url_policy::resolving_once(resolver);
        let open = async {
            match Self::open_inner(settings, resolver).await {
                // A server that knows `server/discover` but only revisions with
                // `initialize`: start over offering 2025-11-25.
                Err(f) if f.older_revisions_only && settings.protocol_version.is_none() => {
                    let mut older = settings.clone();
                    older.protocol_version = Some(ProtocolVersion::LATEST_WITH_INITIALIZE.as_str().to_string());
                    Self::open_inner(&older, resolver).await.map_err(|f| f.error)
                }
                r => r.map_err(|f| f.error),
            }
        };
        match tokio::time::timeout(timeout, open).await {
            Ok(r) => r,
            Err(_) => Err(McpError::Timeout { server, what: "start and initialize".into(), timeout }),
        }
    }

    async fn open_inner(settings: &McpServerSettings, resolver: &url_policy::Resolver) -> Result<Self, OpenFailure> {
        let server = settings.name.clone();
        let connect_err = |m: String| McpError::Connect { server: server.clone(), message: m };
        match &settings.transport {
            McpTransport::Stdio { command, args, env, env_passthrough, cwd } => {
                let mut cmd = tokio::process::Command::new(command);
                cmd.args(args).env_clear().kill_on_drop(true);
                if let Ok(path) = std::env::var("PATH") {
                    cmd.env("PATH", path);
                }
                for name in env_passthrough {
                    if let Ok(v) = std::env::var(name) {
                        cmd.env(name, v);
                    }
                }
                cmd.envs(env);
                if let Some(dir) = cwd {
                    cmd.current_dir(dir);
                }
                let (proc, stderr) = TokioChildProcess::builder(cmd)
                    .stderr(Stdio::piped())
                    .spawn()
                    .map_err(|e| connect_err(format!("cannot start {}: {e}", command.display())))?;
                let pid = proc.id();
                if let Some(stderr) = stderr {
                    tokio::spawn(drain_stderr(server.clone(), stderr));
                }
                let calls = Calls::default();
                let service =
                    handler(settings, &calls).serve_with_lifecycle(proc, lifecycle(settings)).await.map_err(|e| {
                        let message = format!("initialize failed: {e} (see the server's stderr in the log)");
                        OpenFailure::of_handshake(&e, connect_err(message))
                    })?;
                Ok(Session { service, calls, pid, auth: None })
            }
            McpTransport::Http { url, headers_from_env, bearer_token_env, allow_insecure_http, oauth } => {
                let config_err = |m: String| McpError::Config { server: server.clone(), message: m };
                let parsed = url_policy::check(url, *allow_insecure_http).map_err(|e| config_err(e.to_string()))?;
                let pinned = match url_policy::resolve_and_pin(&parsed, resolver).await {
                    Ok(p) => p,
                    // Worth a retry later: DNS may be down for a moment.
                    Err(e @ url_policy::UrlError::Resolve(..)) => return Err(connect_err(e.to_string()).into()),
                    Err(e) => return Err(config_err(e.to_string()).into()),
                };
                let config = http_config(settings, url, headers_from_env, bearer_token_env.as_deref())?;
                let client = http_client(pinned.as_ref())
                    .map_err(|e| config_err(format!("cannot build the HTTP client: {e}")))?;
                let calls = Calls::default();
                let init_err = |e: rmcp::service::ClientInitializeError| {
                    OpenFailure::of_handshake(&e, connect_err(redacted(settings, format!("initialize failed: {e}"))))
                };
                let Some(oauth) = oauth else {
                    let transport = StreamableHttpClientTransport::with_client(client, config);
                    let service = handler(settings, &calls)
                        .serve_with_lifecycle(transport, lifecycle(settings))
                        .await
                        .map_err(init_err)?;
                    return Ok(Session { service, calls, pid: None, auth: None });
                };
                // Reactive discovery (docs/MCP.md "OAuth"): the first
                // `initialize` goes without a token; a 401 says where to get one.
                let auth = oauth::SessionAuth::new(settings, oauth, url, client).await?;
                let transport = || StreamableHttpClientTransport::with_client(auth.client.clone(), config.clone());
                let service =
                    match handler(settings, &calls).serve_with_lifecycle(transport(), lifecycle(settings)).await {
                        Ok(service) => service,
                        Err(e) => match e.auth_challenge() {
                            Some(challenge) if auth.recover(settings, challenge).await? => handler(settings, &calls)
                                .serve_with_lifecycle(transport(), lifecycle(settings))
                                .await
                                .map_err(init_err)?,
                            _ => return Err(init_err(e)),
                        },
                    };
                Ok(Session { service, calls, pid: None, auth: Some(auth) })
            }
        }
    }

    /// The protocol revision agreed with the server (`2026-07-28`,
    /// `2025-11-25`, `2025-06-18`, ...).
    pub fn protocol_version(&self) -> Option<String> {
        self.service.peer().peer_info().map(|info| info.protocol_version.to_string())
    }

    /// The peer, for requests beyond tools (resources, prompts).
    pub fn peer(&self) -> &rmcp::service::Peer<RoleClient> {
        self.service.peer()
    }

    /// Whether the transport has closed (the child exited, the stream broke).
    pub fn is_closed(&self) -> bool {
        self.service.is_closed() || self.service.peer().is_transport_closed()
    }

    /// `tools/list`, every page, within `timeout`.
    pub async fn list_tools(
        &self,
        settings: &McpServerSettings,
        timeout: Duration,
    ) -> Result<Vec<rmcp::model::Tool>, McpError> {
        match tokio::time::timeout(timeout, self.service.peer().list_all_tools()).await {
            Ok(Err(e)) if self.reauthorized(settings, &e).await? => Box::pin(self.list_tools(settings, timeout)).await,
            Ok(r) => r.map_err(|e| classify(settings, e)),
            Err(_) => Err(McpError::Timeout { server: settings.name.clone(), what: "tools/list".into(), timeout }),
        }
    }

    /// One `tools/call` with a timeout and request `_meta`; elicitations the
    /// server sends during it go to `responder` (declined without one). A
    /// 2026-07-28 server asks its questions in `input_required` results
    /// instead (SEP-2322): they go to the same responder, and the call is
    /// sent again, under a new request id, with the answers and the
    /// server's `requestState` exactly as it was sent. The timeout covers
    /// every round but not the time a person takes to answer.
    pub async fn call_tool(
        &self,
        settings: &McpServerSettings,
        tool: &str,
        arguments: JsonObject,
        meta: RequestMetaObject,
        timeout: Duration,
        responder: Option<Arc<dyn Responder>>,
    ) -> Result<CallToolResult, McpError> {
        let retry = (arguments.clone(), meta.clone(), responder.clone());
        let mut params = CallToolRequestParams::new(tool.to_string()).with_arguments(arguments);
        let registered = self.calls.register(responder);
        // Our clock, not rmcp's: it stops while a person answers a question
        // of this call (shared/mcp/src/elicitation.rs).
        let clock = registered.timed_out(timeout);
        tokio::pin!(clock);
        let timed_out =
            || McpError::Timeout { server: settings.name.clone(), what: format!("tools/call {tool}"), timeout };
        for round in 0.. {
            let request = ClientRequest::CallToolRequest(CallToolRequest::new(params.clone()));
            let options = PeerRequestOptions::no_options().with_meta(meta.clone());
            let handle = self
                .service
                .peer()
                .send_request_with_option(request, options)
                .await
                .map_err(|e| classify(settings, e))?;
            let id = handle.id.clone();
            registered.sent_as(id.clone());
            let reply = tokio::select! {
                reply = handle.await_response() => reply,
                _ = &mut clock => {
                    // As rmcp does on its own timeouts: tell the server to stop.
                    let cancel = CancelledNotificationParam::new(Some(id), Some("request timeout".into()));
                    let _ = self.service.peer().notify_cancelled(cancel).await;
                    Err(ServiceError::Timeout { timeout })
                }
            };
            match reply {
                Ok(ServerResult::CallToolResult(r)) => return Ok(r),
                Ok(ServerResult::InputRequiredResult(asked)) => {
                    let has_requests = asked.input_requests.as_ref().is_some_and(|r| !r.is_empty());
                    if !has_requests && asked.request_state.is_none() {
                        return Err(McpError::Rpc {
                            server: settings.name.clone(),
                            code: -32603,
                            message: "input_required result with neither inputRequests nor requestState".into(),
                        });
                    }
                    if round + 1 >= MAX_INPUT_ROUNDS {
                        return Err(McpError::Rpc {
                            server: settings.name.clone(),
                            code: -32603,
                            message: format!("tools/call {tool} still asked for input after {MAX_INPUT_ROUNDS} rounds"),
                        });
                    }
                    let answers = tokio::select! {
                        answers = self.answer(settings, &registered, asked.input_requests.unwrap_or_default()) => answers?,
                        _ = &mut clock => return Err(timed_out()),
                    };
                    params.input_responses = (!answers.is_empty()).then_some(answers);
                    params.request_state = asked.request_state;
                }
                Ok(other) => {
                    return Err(McpError::Rpc {
                        server: settings.name.clone(),
                        code: -32603,
                        message: format!("unexpected reply to tools/call: {}", reply_kind(&other)),
                    });
                }
                Err(ServiceError::Timeout { .. }) => return Err(timed_out()),
                Err(e) if self.reauthorized(settings, &e).await? => {
                    let (arguments, meta, responder) = retry;
                    return Box::pin(self.call_tool(settings, tool, arguments, meta, timeout, responder)).await;
                }
                Err(e) => return Err(classify(settings, e)),
            }
        }
        unreachable!("the loop returns")
    }

    /// The answers to one `input_required` result's requests, keyed as
    /// asked. Form-mode elicitation is what Flotilla declares; a request
    /// for sampling or roots, which it does not declare, is refused.
    async fn answer(
        &self,
        settings: &McpServerSettings,
        call: &super::elicitation::Registered,
        requests: InputRequests,
    ) -> Result<InputResponses, McpError> {
        let mut answers = InputResponses::new();
        for (key, request) in requests {
            let asked = match request {
                InputRequest::Elicitation(e) => e.params,
                _ => {
                    return Err(McpError::Rpc {
                        server: settings.name.clone(),
                        code: -32602,
                        message: format!(
                            "the server asked for input {key:?} by sampling or roots; Flotilla offers only \
                             form-mode elicitation"
                        ),
                    });
                }
            };
            let answer = call.answer(&settings.name, asked).await.map_err(|e| McpError::Rpc {
                server: settings.name.clone(),
                code: e.code.0,
                message: e.message.to_string(),
            })?;
            let value = serde_json::to_value(answer).map_err(|e| McpError::Rpc {
                server: settings.name.clone(),
                code: -32603,
                message: format!("cannot encode the answer to {key:?}: {e}"),
            })?;
            answers.insert(key, value);
        }
        Ok(answers)
    }

    /// Whether `e` was a 401/403 that OAuth has now answered (new token or
    /// more scope), so the request is worth one more try.
    async fn reauthorized(&self, settings: &McpServerSettings, e: &ServiceError) -> Result<bool, McpError> {
        match (&self.auth, e.auth_challenge()) {
            (Some(auth), Some(challenge)) => auth.recover(settings, challenge).await,
            _ => Ok(false),
        }
    }

    /// Closes the session (for stdio: ends the child).
    pub async fn close(mut self) {
        let _ = self.service.close_with_timeout(Duration::from_secs(2)).await;
    }
}

/// The transport's config: URL and headers, secrets read from the
/// environment now.
fn http_config(
    settings: &McpServerSettings,
    url: &str,
    headers_from_env: &std::collections::BTreeMap<String, String>,
    bearer_token_env: Option<&str>,
) -> Result<StreamableHttpClientTransportConfig, McpError> {
    let config_err = |m: String| McpError::Config { server: settings.name.clone(), message: m };
    let env = |var: &str| std::env::var(var).map_err(|_| config_err(format!("environment variable {var} is not set")));
    let mut headers = std::collections::HashMap::new();
    for (name, var) in headers_from_env {
        let value = reqwest::header::HeaderValue::from_str(&env(var)?)
            .map_err(|_| config_err(format!("{var} does not hold a valid header value")))?;
        let name = reqwest::header::HeaderName::from_bytes(name.as_bytes()).map_err(|e| config_err(e.to_string()))?;
        headers.insert(name, value);
    }
    let mut config = StreamableHttpClientTransportConfig::with_uri(url).custom_headers(headers);
    if let Some(var) = bearer_token_env {
        config = config.auth_header(env(var)?);
    }
    Ok(config)
}

/// The session's HTTP client: rmcp's default settings (no idle pool, which
/// avoids delayed-ACK stalls; same-origin 307/308 redirects only, so the
/// JSON-RPC body and the session's headers never go to another host) plus
/// the pinned addresses, so the client never resolves the host name itself.
fn http_client(pinned: Option<&url_policy::Pinned>) -> reqwest::Result<reqwest::Client> {
    flotilla_config::tls::install_crypto_provider();
    let redirects = reqwest::redirect::Policy::custom(|attempt| {
        let keeps_body = matches!(
            attempt.status(),
            reqwest::StatusCode::TEMPORARY_REDIRECT | reqwest::StatusCode::PERMANENT_REDIRECT
        );
        let same_origin = attempt.previous().first().is_some_and(|first| first.origin() == attempt.url().origin());
        if !keeps_body || !same_origin {
            attempt.stop()
        } else if attempt.previous().len() > MAX_REDIRECTS {
            attempt.error(format!("more than {MAX_REDIRECTS} redirects"))
        } else {
            attempt.follow()
        }
    });
    let builder = reqwest::Client::builder().pool_max_idle_per_host(0).redirect(redirects);
    match pinned {
        Some(p) => p.apply(builder),
        None => builder,
    }
    .build()
}

fn reply_kind(r: &ServerResult) -> String {
    serde_json::to_value(r)
        .ok()
        .and_then(|v| v.as_object().map(|o| o.keys().cloned().collect::<Vec<_>>().join(",")))
        .unwrap_or_default()
}

/// Maps rmcp's error onto ours.
pub(crate) fn classify(settings: &McpServerSettings, e: ServiceError) -> McpError {
    let server = settings.name.clone();
    match e {
        ServiceError::McpError(data) => {
            McpError::Rpc { server, code: data.code.0, message: redacted(settings, data.message) }
        }
        ServiceError::Timeout { timeout } => McpError::Timeout { server, what: "request".into(), timeout },
        other => McpError::Session { server, message: redacted(settings, other) },
    }
}

fn cut(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

async fn drain_stderr(server: String, stderr: tokio::process::ChildStderr) {
    let mut lines = tokio::io::BufReader::new(stderr).lines();
    loop {
        match lines.next_line().await {
            Ok(Some(line)) => {
                let line = cut(&line, STDERR_LINE_MAX);
                tracing::info!(target: "flotilla::mcp::stderr", server = %server, "{line}");
            }
            Ok(None) => return,
            Err(e) => {
                // Not UTF-8 or a broken pipe: stop logging, keep nothing blocked.
                tracing::debug!(server = %server, error = %e, "stopped reading MCP server stderr");
                let mut rest = lines.into_inner();
                let _ = tokio::io::copy(&mut rest, &mut tokio::io::sink()).await;
                return;
            }
        }
    }
}
