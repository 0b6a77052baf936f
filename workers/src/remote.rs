//! Subagent types backed by an agent that runs elsewhere (docs/PROTOCOLS.md,
//! "Remote subagent types"): the one place that maps a type's `agent` or
//! `a2a` key to the protocol crate that speaks it. The task run
//! (`task.rs`) treats every [`RemoteAgent`] the same.

use std::sync::Arc;

use flotilla_agent::remote::RemoteAgent;
use flotilla_bus::Bus;
use flotilla_config::SubagentConfig;
use flotilla_protocol::ids::SubagentType;

/// The remote agent of type `ty`, or `None` when the type runs a model loop here.
pub fn build(ty: &SubagentType, config: &SubagentConfig, bus: &Bus) -> anyhow::Result<Option<Arc<dyn RemoteAgent>>> {
    let _ = bus;
    if config.agent.is_some() {
        anyhow::bail!("subagent type {ty}: `agent` (Synadia Agent Protocol) is not supported by this worker build yet");
    }
    if let Some(a2a) = &config.a2a {
        return Ok(Some(Arc::new(flotilla_a2a::client::A2aAgent::new(ty.as_str(), a2a)?)));
    }
    Ok(None)
}
