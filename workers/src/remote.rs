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
    if let Some(agent) = &config.agent {
        let caller = flotilla_agent_protocol::caller::ProtocolAgent::new(bus.nats().clone(), agent)
            .map_err(|e| anyhow::anyhow!("subagent type {ty}: [subagents.{ty}] agent: {e}"))?;
        return Ok(Some(Arc::new(caller)));
    }
    if let Some(a2a) = &config.a2a {
        return Ok(Some(Arc::new(flotilla_a2a::client::A2aAgent::new(ty.as_str(), a2a)?)));
    }
    Ok(None)
}
