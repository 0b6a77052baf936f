//! The tools a worker can give a subagent, by the names used in
//! `[subagents.<type>] tools`. A subagent gets exactly the tools its config
//! lists; a task message has no way to add one.

mod calculate_margin;

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use flotilla_shared::tool::{Tool, ToolSet};

pub use calculate_margin::CalculateMargin;

/// Native tool names this worker build knows.
pub const NATIVE: &[&str] = &["calculate_margin"];

fn native(name: &str) -> Option<Arc<dyn Tool>> {
    match name {
        "calculate_margin" => Some(Arc::new(CalculateMargin)),
        _ => None,
    }
}

/// Builds the tool set of subagent type `ty` from its configured names.
pub fn build(ty: &str, names: &[String], timeout: Duration) -> anyhow::Result<ToolSet> {
    let mut set = ToolSet::new(timeout);
    for name in names {
        let Some(tool) = native(name) else {
            bail!(
                "invalid config key `subagents.{ty}.tools`: unknown tool {name:?} (this worker knows: {})",
                NATIVE.join(", ")
            );
        };
        set.add(tool, "native").with_context(|| format!("subagents.{ty}.tools"))?;
    }
    Ok(set)
}
