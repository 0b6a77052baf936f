//! MCP tools for agents, through rmcp.
//!
//! - [`config`]: `[mcp_servers.<name>]` (stdio or Streamable HTTP, timeouts,
//!   session mode, name prefix) and its validation.
//! - [`flotilla_config::Settings::import_mcp_config`]: the Claude Desktop /
//!   Cursor `mcpServers` JSON (`--mcp-config`).
//! - [`url_policy`]: which HTTP endpoints are allowed, and URL redaction.
//! - [`oauth`]: OAuth 2.1 for Streamable HTTP servers (rmcp's auth).
//! - [`session`]: opening one session (minimal child environment, stderr
//!   drained to tracing), requests with timeouts and `_meta`.
//! - [`manager`]: one server: shared persistent session with reconnect-once,
//!   per-call sessions, discovered tools, health.
//! - [`elicitation`]: a server's `elicitation/create` forwarded to an
//!   approval, and SEP-1034 schema defaults.
//! - [`content`]: `CallToolResult` -> tool result + `structuredContent` artifact.
//! - [`tool`]: an MCP tool as a [`flotilla_agent::tool::Tool`].
//! - [`app_context`]: resources and prompts a subagent type loads into its
//!   system prompt before a task starts (app-controlled, docs/MCP.md).
//! - [`hub`]: every server of a process; `mcp:<server>[/<tool>]` entries,
//!   background recovery, health for heartbeats.
//!
//! Failures this module avoids: stdio calls without timeouts, one dead server
//! dropping every tool, silent name overwrites (collisions are
//! [`flotilla_agent::tool::ToolSet`] errors naming both sources),
//! `structuredContent` lost on errors.

#![deny(missing_docs)]

pub mod app_context;
pub use flotilla_config::mcp as config;
pub mod content;
pub mod elicitation;
pub mod error;
pub mod hub;
pub mod manager;
pub mod oauth;
pub mod session;
pub mod tool;
pub mod url_policy;

pub use config::{McpServerSettings, McpTransport, RawMcpServer, SessionMode};
pub use error::McpError;
pub use hub::{McpHub, servers_in};
pub use manager::{HealthStatus, ServerHealth};
pub use tool::McpTool;
