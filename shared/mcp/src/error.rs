//! MCP client failures, classified so a caller knows what to do: a session
//! failure is worth one reconnect, a timeout is not retried (the server may
//! have acted), a refused config is the operator's to fix.

use std::time::Duration;

use flotilla_protocol::ErrorKind;

/// A failed MCP operation. Messages never contain a URL path (see
/// [`super::url_policy::redact`]).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum McpError {
    /// No `[mcp_servers.<name>]` with this name.
    #[error("no MCP server named `{server}` (configured: {known})")]
    UnknownServer {
        /// The name asked for.
        server: String,
        /// The configured ones.
        known: String,
    },
    /// The server has no tool of this name.
    #[error("MCP server `{server}` has no tool `{tool}` (it offers: {known})")]
    UnknownTool {
        /// Server.
        server: String,
        /// The name asked for.
        tool: String,
        /// What it offers.
        known: String,
    },
    /// The server's config cannot be used right now (a missing environment
    /// variable, a refused address).
    #[error("MCP server `{server}`: {message}")]
    Config {
        /// Server.
        server: String,
        /// Why.
        message: String,
    },
    /// The server could not be started, reached or initialized.
    #[error("MCP server `{server}` is unavailable: {message}")]
    Connect {
        /// Server.
        server: String,
        /// Why (redacted).
        message: String,
    },
    /// The session broke during a request.
    #[error("MCP server `{server}` session failed: {message}")]
    Session {
        /// Server.
        server: String,
        /// Why (redacted).
        message: String,
    },
    /// No answer in time.
    #[error("MCP server `{server}`: {what} timed out after {}s", timeout.as_secs_f32())]
    Timeout {
        /// Server.
        server: String,
        /// `initialize`, `tools/list`, `tools/call <name>`.
        what: String,
        /// The bound.
        timeout: Duration,
    },
    /// The server answered with a JSON-RPC error.
    #[error("MCP server `{server}` refused the request ({code}): {message}")]
    Rpc {
        /// Server.
        server: String,
        /// JSON-RPC error code.
        code: i32,
        /// The server's message.
        message: String,
    },
}

impl McpError {
    /// The tool error kind the model reads.
    pub fn kind(&self) -> ErrorKind {
        match self {
            McpError::UnknownServer { .. } | McpError::UnknownTool { .. } => ErrorKind::NotFound,
            McpError::Config { .. } => ErrorKind::Permission,
            McpError::Connect { .. } | McpError::Session { .. } => ErrorKind::Transient,
            McpError::Timeout { .. } => ErrorKind::Timeout,
            McpError::Rpc { code, .. } => match *code {
                -32602 => ErrorKind::Validation,
                -32601 | -32002 => ErrorKind::NotFound,
                _ => ErrorKind::Transient,
            },
        }
    }

    /// Whether a fresh session may succeed where this one failed.
    pub fn is_session_failure(&self) -> bool {
        matches!(self, McpError::Session { .. } | McpError::Connect { .. })
    }
}
