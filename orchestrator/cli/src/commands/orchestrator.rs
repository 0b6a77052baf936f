//! `flotilla orchestrator`: the service process. The library
//! ([`flotilla_orchestrator::service`]) does the work; this file adds what a
//! process needs around it: its HTTP endpoints, the agent-protocol host
//! (`[agent_protocol]`) and its signals.

use flotilla_config::Settings;
use flotilla_orchestrator::service::Orchestrator;
use tokio_util::sync::CancellationToken;

use super::endpoints;

/// Runs the orchestrator with its endpoints until Ctrl-C or SIGTERM.
pub async fn run(settings: Settings) -> anyhow::Result<i32> {
    let orchestrator = Orchestrator::connect(&settings).await?;
    // Fires when this function returns, on success or error, so the
    // endpoints stop with the service.
    let stop = CancellationToken::new();
    let _stop_endpoints = stop.clone().drop_guard();
    if let Some(every) = flotilla_telemetry::otel::metrics_interval() {
        orchestrator.refresh_metrics_every(every, stop.clone());
    }
    endpoints::start(&settings, &orchestrator, stop.clone()).await?;
    // The Synadia Agent Protocol host (docs/PROTOCOLS.md): one more client
    // of the job API, on connections of its own.
    if settings.agent_protocol.enabled {
        let descriptions = settings.subagents.iter().map(|(t, c)| (t.clone(), c.description.clone())).collect();
        flotilla_agent_protocol::host::start(&settings.agent_protocol, &settings.nats, &descriptions, stop).await?;
    }
    orchestrator.run(crate::shutdown_signal()).await?;
    Ok(0)
}
