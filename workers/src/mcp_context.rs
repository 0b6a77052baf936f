//! Loads a subagent type's app-controlled MCP context (resources and prompt,
//! `flotilla_mcp::app_context`) into the task's system prompt before
//! the subagent starts. Failures fail the task with an error naming the
//! server and the resource or prompt; every request has the server's
//! `call_timeout`, and a cancelled job stops the loading at once.

use std::sync::Arc;

use flotilla_config::SubagentConfig;
use flotilla_mcp::McpHub;
use flotilla_mcp::app_context::TaskContextSpec;
use flotilla_protocol::{ErrorInfo, ErrorKind, TaskMessage};
use tokio_util::sync::CancellationToken;

/// A type's validated MCP context and the hub that serves it.
pub struct McpContext {
    hub: Arc<McpHub>,
    spec: TaskContextSpec,
}

impl McpContext {
    /// Checks `config`'s `mcp_resources` / `mcp_prompt` at worker start;
    /// `None` when the type uses neither.
    pub fn build(ty: &str, config: &SubagentConfig, hub: &Arc<McpHub>) -> anyhow::Result<Option<Self>> {
        let spec = TaskContextSpec::from_config(
            ty,
            &config.system_prompt,
            &config.mcp_resources,
            config.mcp_prompt.as_ref(),
            hub,
        )?;
        Ok(spec.map(|spec| Self { hub: hub.clone(), spec }))
    }
}

/// The system prompt of `task`: the static one, or the MCP prompt's text,
/// plus the configured resources.
pub async fn system_prompt(
    context: Option<&McpContext>,
    config: &SubagentConfig,
    task: &TaskMessage,
    cancel: &CancellationToken,
) -> Result<String, ErrorInfo> {
    let Some(c) = context else { return Ok(config.system_prompt.clone()) };
    let load = c.spec.system_prompt(&c.hub, &config.system_prompt, &task.description, task.subagent_type.as_str());
    tokio::select! {
        r = load => r.map_err(|e| {
            tracing::warn!(error = %e, "MCP context not loaded; task fails");
            ErrorInfo::new(e.kind(), e.to_string())
        }),
        _ = cancel.cancelled() => Err(ErrorInfo::new(ErrorKind::Cancelled, "cancelled while loading MCP context")),
    }
}
