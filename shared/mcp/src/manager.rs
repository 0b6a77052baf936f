//! One configured server as the process sees it: its session (shared by every
//! concurrent task when persistent), its discovered tools, and its health.
//!
//! Failure handling (docs/MCP.md): a call on a dead
//! persistent session reconnects once and retries once; if that fails too,
//! the call fails with a `transient` error, the server is reported down, and
//! nothing else is affected. A timeout is not retried: the server may have
//! acted, and the request carries an idempotency key for servers that dedupe.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::{CallToolResult, JsonObject, RequestMetaObject};
use serde::{Deserialize, Serialize};

use super::config::{McpServerSettings, SessionMode};
use super::elicitation::Responder;
use super::error::McpError;
use super::session::Session;

/// `_meta` key carrying the tool call's idempotency key (stable across
/// redeliveries of the same task and call).
pub const IDEMPOTENCY_META_KEY: &str = "flotilla/idempotency_key";

/// A server's state as reported to operators and in worker heartbeats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HealthStatus {
    /// Not tried yet.
    Pending,
    /// Last contact succeeded.
    Up,
    /// Last contact failed; discovery or the next call retries.
    Down,
}

/// Health of one MCP server.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ServerHealth {
    /// Server name.
    pub server: String,
    /// `stdio` or `http`.
    pub transport: String,
    /// Command file name or redacted URL.
    pub endpoint: String,
    /// State.
    pub status: HealthStatus,
    /// Whether tools/list has succeeded (its tools are offered).
    pub discovered: bool,
    /// Tools discovered.
    pub tools: usize,
    /// Failures since the last success.
    pub consecutive_failures: u32,
    /// Sessions opened so far (more than one means reconnects).
    pub sessions_opened: u64,
    /// The current stdio child's pid.
    pub pid: Option<u32>,
    /// The last error, sanitized (`flotilla_agent::sanitize::sanitize`).
    pub last_error: Option<String>,
}

#[derive(Default)]
struct State {
    status: Option<bool>,
    failures: u32,
    opened: u64,
    last_error: Option<String>,
    tools: Option<Vec<rmcp::model::Tool>>,
    pid: Option<u32>,
    next_retry: Option<Instant>,
}

/// One configured server.
pub struct ServerConn {
    /// Its config.
    pub settings: McpServerSettings,
    session: tokio::sync::Mutex<Option<Arc<Session>>>,
    state: Mutex<State>,
}

impl ServerConn {
    /// A server not contacted yet.
    pub fn new(settings: McpServerSettings) -> Self {
        Self { settings, session: tokio::sync::Mutex::new(None), state: Mutex::new(State::default()) }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn record(&self, r: Result<(), &McpError>) {
        let mut s = self.state();
        match r {
            Ok(()) => {
                s.status = Some(true);
                s.failures = 0;
                s.next_retry = None;
            }
            Err(e) => {
                s.status = Some(false);
                s.failures += 1;
                // Health travels in heartbeats to `flotilla workers` and other
                // tenants' views, so it gets the egress sanitizer (no secret,
                // host path or internal address, docs/SECURITY.md); the worker
                // log keeps the secret-redacted original.
                s.last_error = Some(flotilla_agent::sanitize::sanitize_logged(
                    &e.to_string(),
                    &format!("MCP server {} error", self.settings.name),
                    None,
                ));
                let wait = flotilla_retry::Backoff::nth(Duration::from_secs(1), Duration::from_secs(60), s.failures);
                s.next_retry = Some(Instant::now() + wait);
            }
        }
    }

    async fn open(&self) -> Result<Session, McpError> {
        let r = Session::open(&self.settings).await;
        if let Ok(s) = &r {
            let mut st = self.state();
            st.opened += 1;
            st.pid = s.pid;
        }
        r
    }

    /// The live persistent session, opening one when there is none or the
    /// current one has closed. Concurrent callers share one open attempt.
    async fn session(&self) -> Result<Arc<Session>, McpError> {
        let mut slot = self.session.lock().await;
        if let Some(s) = slot.as_ref()
            && !s.is_closed()
        {
            return Ok(s.clone());
        }
        if slot.take().is_some() {
            tracing::warn!(server = %self.settings.name, "MCP session closed; reconnecting");
        }
        let s = Arc::new(self.open().await?);
        *slot = Some(s.clone());
        Ok(s)
    }

    /// Drops `dead` if it is still the current session.
    async fn discard(&self, dead: &Arc<Session>) {
        let mut slot = self.session.lock().await;
        if slot.as_ref().is_some_and(|s| Arc::ptr_eq(s, dead)) {
            *slot = None;
        }
    }

    /// Connects and lists tools; remembers them for [`ServerConn::tools`].
    pub async fn discover(&self) -> Result<usize, McpError> {
        let r = self.discover_inner().await;
        self.record(r.as_ref().map(|_| ()));
        r
    }

    async fn discover_inner(&self) -> Result<usize, McpError> {
        let timeout = self.settings.init_timeout;
        let tools = match self.settings.session {
            SessionMode::Persistent => {
                let s = self.session().await?;
                match s.list_tools(&self.settings, timeout).await {
                    Err(e) => {
                        self.discard(&s).await;
                        return Err(e);
                    }
                    Ok(t) => t,
                }
            }
            SessionMode::PerCall => {
                let s = self.open().await?;
                let r = s.list_tools(&self.settings, timeout).await;
                s.close().await;
                r?
            }
        };
        let n = tools.len();
        for missing in self.settings.read_only_tools.iter().filter(|name| !tools.iter().any(|t| t.name == **name)) {
            tracing::warn!(
                server = %self.settings.name,
                tool = %missing,
                offered = %tools.iter().map(|t| t.name.as_ref()).collect::<Vec<_>>().join(", "),
                "read_only_tools names a tool this server does not offer"
            );
        }
        self.state().tools = Some(tools);
        Ok(n)
    }

    /// Tools from the last successful discovery, `None` before one.
    pub fn tools(&self) -> Option<Vec<rmcp::model::Tool>> {
        self.state().tools.clone()
    }

    /// Whether the background loop should try this server now.
    pub fn due_for_retry(&self) -> bool {
        let s = self.state();
        s.status == Some(false) && s.next_retry.is_none_or(|t| Instant::now() >= t)
    }

    /// Calls `tool` (its name on the server) with the request `_meta`;
    /// elicitations during the call are declined.
    pub async fn call(
        &self,
        tool: &str,
        arguments: JsonObject,
        meta: RequestMetaObject,
    ) -> Result<CallToolResult, McpError> {
        self.call_with(tool, arguments, meta, None).await
    }

    /// [`ServerConn::call`] with elicitations during the call going to
    /// `responder` (declined without one).
    pub async fn call_with(
        &self,
        tool: &str,
        arguments: JsonObject,
        meta: RequestMetaObject,
        responder: Option<Arc<dyn Responder>>,
    ) -> Result<CallToolResult, McpError> {
        let timeout = self.settings.call_timeout;
        self.on_session(tool, |s| {
            let (arguments, meta, responder) = (arguments.clone(), meta.clone(), responder.clone());
            async move { s.call_tool(&self.settings, tool, arguments, meta, timeout, responder).await }
        })
        .await
    }

    /// Runs one request made by `op` on the server's peer within
    /// `call_timeout`: on the shared session (reconnecting once when it has
    /// died) or, with `per_call`, on a fresh one. Used for the app-controlled
    /// reads (resources, prompts; see [`super::app_context`]).
    pub async fn request<T, F, Fut>(&self, what: &str, op: F) -> Result<T, McpError>
    where
        F: Fn(rmcp::service::Peer<rmcp::RoleClient>) -> Fut,
        Fut: std::future::Future<Output = Result<T, rmcp::service::ServiceError>>,
    {
        let timeout = self.settings.call_timeout;
        self.on_session(what, |s| {
            let fut = op(s.peer().clone());
            async move {
                match tokio::time::timeout(timeout, fut).await {
                    Ok(r) => r.map_err(|e| super::session::classify(&self.settings, e)),
                    Err(_) => Err(McpError::Timeout { server: self.settings.name.clone(), what: what.into(), timeout }),
                }
            }
        })
        .await
    }

    /// Runs `op` on a session: a fresh one with `per_call`, otherwise the
    /// shared one, reconnecting once when it has died (a timeout is not a dead
    /// session: the server may have acted, so it is never retried). The
    /// outcome updates the server's health: a refusal or a timeout still
    /// proves the server lives.
    async fn on_session<T, F, Fut>(&self, what: &str, op: F) -> Result<T, McpError>
    where
        F: Fn(Arc<Session>) -> Fut,
        Fut: std::future::Future<Output = Result<T, McpError>>,
    {
        let r = match self.settings.session {
            SessionMode::PerCall => match self.open().await {
                Ok(s) => {
                    let s = Arc::new(s);
                    let r = op(s.clone()).await;
                    if let Ok(s) = Arc::try_unwrap(s) {
                        s.close().await;
                    }
                    r
                }
                Err(e) => Err(e),
            },
            SessionMode::Persistent => {
                let mut retried = false;
                loop {
                    let s = match self.session().await {
                        Ok(s) => s,
                        Err(e) if !retried && e.is_session_failure() => {
                            retried = true;
                            continue;
                        }
                        Err(e) => break Err(e),
                    };
                    match op(s.clone()).await {
                        Err(e) if e.is_session_failure() => {
                            self.discard(&s).await;
                            if retried {
                                break Err(e);
                            }
                            tracing::warn!(server = %self.settings.name, what, error = %e, "MCP session failed; reconnecting once");
                            retried = true;
                        }
                        r => break r,
                    }
                }
            }
        };
        self.record(match &r {
            Err(e) if e.is_session_failure() => Err(e),
            _ => Ok(()),
        });
        r
    }

    /// Health for reports.
    pub fn health(&self) -> ServerHealth {
        let s = self.state();
        ServerHealth {
            server: self.settings.name.clone(),
            transport: self.settings.transport_name().into(),
            endpoint: self.settings.endpoint(),
            status: match s.status {
                None => HealthStatus::Pending,
                Some(true) => HealthStatus::Up,
                Some(false) => HealthStatus::Down,
            },
            discovered: s.tools.is_some(),
            tools: s.tools.as_ref().map_or(0, Vec::len),
            consecutive_failures: s.failures,
            sessions_opened: s.opened,
            pid: if self.settings.session == SessionMode::Persistent { s.pid } else { None },
            last_error: s.last_error.clone(),
        }
    }

    /// Closes the persistent session, if any.
    pub async fn shutdown(&self) {
        let s = self.session.lock().await.take();
        if let Some(s) = s.and_then(|s| Arc::try_unwrap(s).ok()) {
            s.close().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::{RawMcpServer, config::validate};

    fn conn(command: &str) -> ServerConn {
        let raw = RawMcpServer { command: Some(command.into()), ..Default::default() };
        ServerConn::new(validate("finance", raw, Path::new("/")).expect("valid stdio server"))
    }

    /// A server whose failure text carries a secret and internal addresses:
    /// the health a heartbeat reports has none of them.
    #[test]
    fn last_error_in_health_is_sanitized() {
        let c = conn("finance-tools");
        let e = McpError::Connect {
            server: "finance".into(),
            message: "initialize failed: 401 from 10.0.3.7:8443 with token=tk-9f8e7d6c5b4a, see /etc/finance.toml"
                .into(),
        };
        c.record(Err(&e));
        let h = c.health();
        assert_eq!(h.status, HealthStatus::Down);
        let text = h.last_error.expect("a last error");
        for leak in ["tk-9f8e7d6c5b4a", "10.0.3.7", "/etc/finance.toml"] {
            assert!(!text.contains(leak), "{leak:?} in health text {text:?}");
        }
        assert!(text.contains("MCP server `finance` is unavailable: initialize failed: 401"), "{text}");
    }

    /// A real spawn failure names the command's host path; health hides it.
    #[tokio::test]
    async fn spawn_failure_hides_the_host_path() {
        let c = conn("/opt/flotilla-tools/no-such-mcp-server");
        let err = c.discover().await.expect_err("the command does not exist");
        assert!(
            err.to_string().contains("/opt/flotilla-tools/no-such-mcp-server"),
            "the raw error keeps the detail: {err}"
        );
        let text = c.health().last_error.expect("a last error");
        assert!(!text.contains("/opt") && !text.contains("no-such-mcp"), "{text}");
        assert!(text.contains("cannot start [path]"), "{text}");
    }
}
