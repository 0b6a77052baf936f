//! `flotilla orchestrator`: the service process. The library
//! ([`flotilla_orchestrator::service`]) does the work; this file adds what a
//! process needs around it: its HTTP endpoints and its signals.

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
    endpoints::start(&settings, &orchestrator, stop).await?;
    orchestrator.run(crate::shutdown_signal()).await?;
    Ok(0)
}
