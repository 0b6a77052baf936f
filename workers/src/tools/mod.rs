//! The tools a worker can give a subagent, from the parsed entries of
//! `[subagents.<type>] tools` ([`ToolRef`], docs/CONFIG.md). A subagent gets
//! exactly the tools its config lists; a task message has no way to add one.
//! MCP entries resolve through the worker's [`McpHub`]; a name collision
//! between any two sources is a startup error naming both.
//!
//! The one native tool, `calculate_margin`, is the demo's; it is built only
//! with the `demo-tools` feature, and a worker without it refuses a type
//! listing it at start.

#[cfg(feature = "demo-tools")]
mod calculate_margin;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use flotilla_agent::tool::{Tool, ToolSet};
use flotilla_config::ToolRef;
use flotilla_mcp::McpHub;
use flotilla_tools::{self as builtin, FileToolEnv};

#[cfg(feature = "demo-tools")]
pub use calculate_margin::CalculateMargin;

/// The native tool `name`, one of `flotilla_config::tool_ref::NATIVE`, when
/// this build has it.
fn native(name: &str) -> Option<Arc<dyn Tool>> {
    match name {
        #[cfg(feature = "demo-tools")]
        "calculate_margin" => Some(Arc::new(CalculateMargin)),
        _ => None,
    }
}

/// Builds the tool set of subagent type `ty` from its configured entries:
/// built-in file tools (over `builtins`, with the type's permissions), native
/// tools, and MCP tools discovered by `mcp`. `execute` is left to the caller,
/// which owns the sandbox.
pub fn build(
    ty: &str,
    refs: &[ToolRef],
    timeout: Duration,
    builtins: &Arc<FileToolEnv>,
    mcp: &McpHub,
) -> anyhow::Result<ToolSet> {
    let mut set = ToolSet::new(timeout);
    let key = || format!("subagents.{ty}.tools");
    for r in refs {
        match r {
            ToolRef::Builtin(name) => {
                let tool = builtin::tool(name, builtins).with_context(|| format!("no built-in tool {name:?}"))?;
                set.add(tool, "builtin").with_context(key)?;
            }
            ToolRef::Native(name) => {
                let tool = native(name).with_context(|| format!("this worker build has no native tool {name:?}"))?;
                set.add(tool, "native").with_context(key)?;
            }
            ToolRef::Mcp { server, tool } => {
                let tools = mcp
                    .tools_for(server, tool.as_deref())
                    .map_err(|e| anyhow::anyhow!("invalid config key `subagents.{ty}.tools`: {e}"))?;
                for t in tools {
                    set.add(t, &r.to_string()).with_context(key)?;
                }
            }
            ToolRef::Execute => {}
        }
    }
    Ok(set)
}

/// Discovers the MCP servers the served types use. A server down now only
/// loses its own tools (and is retried in the background), unless its config
/// says `required = true`.
pub async fn discover_mcp(
    settings: &flotilla_config::Settings,
    types: &[flotilla_protocol::ids::SubagentType],
    mcp: &McpHub,
) -> anyhow::Result<std::collections::BTreeSet<String>> {
    let names =
        flotilla_mcp::servers_in(types.iter().filter_map(|ty| settings.subagents.get(ty)).flat_map(|c| c.tools.iter()));
    for (name, result) in mcp.discover(&names).await {
        if let Err(e) = result
            && settings.mcp_servers.get(&name).is_none_or(|s| s.required)
        {
            anyhow::bail!("{e}");
        }
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Config accepts exactly the native names a build with the demo tools implements.
    #[cfg(feature = "demo-tools")]
    #[test]
    fn every_native_name_config_accepts_is_implemented() {
        for name in flotilla_config::tool_ref::NATIVE {
            let tool = native(name).unwrap_or_else(|| panic!("{name} is accepted by config but not built"));
            assert_eq!(tool.spec().name, *name);
        }
        assert!(native("read_file").is_none());
    }

    /// Without the demo tools no native tool exists: a type listing one is
    /// refused at start instead of running without it.
    #[cfg(not(feature = "demo-tools"))]
    #[test]
    fn a_build_without_the_demo_tools_has_no_native_tool() {
        assert!(flotilla_config::tool_ref::NATIVE.iter().all(|name| native(name).is_none()));
    }
}
