//! The tools a worker can give a subagent, by the names used in
//! `[subagents.<type>] tools`. A subagent gets exactly the tools its config
//! lists; a task message has no way to add one. `mcp:<server>` and
//! `mcp:<server>/<tool>` entries resolve through the worker's [`McpHub`]; a
//! name collision between any two sources is a startup error naming both.

mod calculate_margin;

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use flotilla_agent::tool::{Tool, ToolSet};
use flotilla_mcp::McpHub;
use flotilla_tools::{self as builtin, FileToolEnv};

pub use calculate_margin::CalculateMargin;

/// Native tool names this worker build knows.
pub const NATIVE: &[&str] = &["calculate_margin"];

fn native(name: &str) -> Option<Arc<dyn Tool>> {
    match name {
        "calculate_margin" => Some(Arc::new(CalculateMargin)),
        _ => None,
    }
}

/// Builds the tool set of subagent type `ty` from its configured names:
/// built-in file tools (over `builtins`, with the type's permissions) and
/// native tools, and MCP tools discovered by `mcp`.
pub fn build(
    ty: &str,
    names: &[String],
    timeout: Duration,
    builtins: &Arc<FileToolEnv>,
    mcp: &McpHub,
) -> anyhow::Result<ToolSet> {
    let mut set = ToolSet::new(timeout);
    for name in names {
        if name.starts_with(flotilla_mcp::hub::ENTRY_PREFIX) {
            let tools =
                mcp.tools_for(name).map_err(|e| anyhow::anyhow!("invalid config key `subagents.{ty}.tools`: {e}"))?;
            for tool in tools {
                set.add(tool, name).with_context(|| format!("subagents.{ty}.tools"))?;
            }
            continue;
        }
        if let Some(tool) = builtin::tool(name, builtins) {
            set.add(tool, "builtin").with_context(|| format!("subagents.{ty}.tools"))?;
            continue;
        }
        let Some(tool) = native(name) else {
            bail!(
                "invalid config key `subagents.{ty}.tools`: unknown tool {name:?} (this worker knows: {}, {}, and mcp:<server>[/<tool>] entries)",
                builtin::ALL.join(", "),
                NATIVE.join(", ")
            );
        };
        set.add(tool, "native").with_context(|| format!("subagents.{ty}.tools"))?;
    }
    Ok(set)
}
