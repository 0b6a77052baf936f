//! [`McpHub`]: every MCP server of one process, shared by all its subagent
//! types and concurrent tasks.
//!
//! Discovery runs at start with each server's `init_timeout`. A server that is
//! down then degrades only itself: its tools are left out (tools/list needs
//! the server, and an invented schema would mislead the model), it is
//! reported `down`, and a background loop retries with exponential backoff
//! (1 s doubling to 60 s). When it comes up the hub's [`McpHub::generation`]
//! moves, and holders of tool sets rebuild them. A server that dies after
//! discovery keeps its tools listed; calls reconnect once, then fail with a
//! `transient` error naming the server, and the loop keeps retrying.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::config::McpServerSettings;
use super::error::McpError;
use super::manager::{ServerConn, ServerHealth};
use super::tool::McpTool;
use flotilla_agent::tool::Tool;
use flotilla_config::ToolRef;

/// The servers that `entries` (a parsed `tools` list) refer to.
pub fn servers_in<'a>(entries: impl IntoIterator<Item = &'a ToolRef>) -> BTreeSet<String> {
    entries.into_iter().filter_map(ToolRef::mcp_server).map(str::to_string).collect()
}

/// Tool names every model provider accepts.
fn valid_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len()) && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// All MCP servers of a process.
pub struct McpHub {
    servers: BTreeMap<String, Arc<ServerConn>>,
    generation: AtomicU64,
}

impl McpHub {
    /// A hub over the configured servers; nothing is contacted yet.
    pub fn new(settings: &BTreeMap<String, McpServerSettings>) -> Self {
        let servers = settings.iter().map(|(k, v)| (k.clone(), Arc::new(ServerConn::new(v.clone())))).collect();
        Self { servers, generation: AtomicU64::new(0) }
    }

    /// The server `name`.
    pub fn server(&self, name: &str) -> Result<&Arc<ServerConn>, McpError> {
        self.servers.get(name).ok_or_else(|| McpError::UnknownServer {
            server: name.to_string(),
            known: if self.servers.is_empty() {
                "none: add [mcp_servers.<name>] to the config or pass --mcp-config".into()
            } else {
                self.servers.keys().cloned().collect::<Vec<_>>().join(", ")
            },
        })
    }

    /// Discovers the tools of `names` concurrently, each within its
    /// `init_timeout`; returns each server's outcome (tool count or error).
    pub async fn discover(&self, names: &BTreeSet<String>) -> Vec<(String, Result<usize, McpError>)> {
        let runs = names.iter().map(|name| async move {
            let r = match self.server(name) {
                Ok(conn) => conn.discover().await,
                Err(e) => Err(e),
            };
            match &r {
                Ok(n) => tracing::info!(server = %name, tools = n, "MCP server discovered"),
                Err(e) => {
                    tracing::warn!(server = %name, error = %e, "MCP server unavailable; its tools are left out for now")
                }
            }
            (name.clone(), r)
        });
        let out = futures::future::join_all(runs).await;
        if out.iter().any(|(_, r)| r.is_ok()) {
            self.generation.fetch_add(1, Ordering::SeqCst);
        }
        out
    }

    /// Retries servers in `names` that are down, with backoff, until `cancel`.
    /// Bumps [`McpHub::generation`] when a server's tool list changes.
    pub fn spawn_recovery(self: &Arc<Self>, names: BTreeSet<String>, cancel: CancellationToken) {
        let hub = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(250));
            loop {
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tick.tick() => {}
                }
                for name in &names {
                    let Ok(conn) = hub.server(name) else { continue };
                    if !conn.due_for_retry() {
                        continue;
                    }
                    let before: Option<Vec<String>> =
                        conn.tools().map(|t| t.iter().map(|t| t.name.to_string()).collect());
                    match conn.discover().await {
                        Ok(n) => {
                            let after: Option<Vec<String>> =
                                conn.tools().map(|t| t.iter().map(|t| t.name.to_string()).collect());
                            tracing::info!(server = %name, tools = n, "MCP server is back");
                            if before != after {
                                hub.generation.fetch_add(1, Ordering::SeqCst);
                            }
                        }
                        Err(e) => tracing::debug!(server = %name, error = %e, "MCP server still unavailable"),
                    }
                }
            }
        });
    }

    /// Moves whenever the set of discovered tools changes.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// The tools of a `tools` entry [`ToolRef::Mcp`]: every tool of `server`,
    /// or only `tool` (its name on the server). Empty while the server is
    /// undiscovered; an error for an unknown server or, once discovered, an
    /// unknown tool.
    pub fn tools_for(&self, server: &str, tool: Option<&str>) -> Result<Vec<Arc<dyn Tool>>, McpError> {
        let conn = self.server(server)?;
        let Some(tools) = conn.tools() else { return Ok(Vec::new()) };
        let wanted: Vec<&rmcp::model::Tool> = match tool {
            None => tools.iter().collect(),
            Some(tool) => match tools.iter().find(|t| t.name == tool) {
                Some(t) => vec![t],
                None => {
                    return Err(McpError::UnknownTool {
                        server: server.to_string(),
                        tool: tool.to_string(),
                        known: tools.iter().map(|t| t.name.to_string()).collect::<Vec<_>>().join(", "),
                    });
                }
            },
        };
        let mut out: Vec<Arc<dyn Tool>> = Vec::new();
        for t in wanted {
            let tool = McpTool::new(conn.clone(), t);
            let name = tool.spec().name;
            if !valid_tool_name(&name) {
                tracing::warn!(server = %server, tool = %name, "MCP tool left out: names must be 1-64 of a-z, A-Z, 0-9, '_', '-'");
                continue;
            }
            out.push(Arc::new(tool));
        }
        Ok(out)
    }

    /// Health of every configured server, in name order.
    pub fn health(&self) -> Vec<ServerHealth> {
        self.servers.values().map(|c| c.health()).collect()
    }

    /// Closes every persistent session (stdio children exit).
    pub async fn shutdown(&self) {
        for c in self.servers.values() {
            c.shutdown().await;
        }
    }
}
