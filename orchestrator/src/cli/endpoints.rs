//! The orchestrator's HTTP endpoints, both off unless configured: Prometheus
//! metrics (`[metrics] orchestrator`) and the web dashboard (`[dashboard]
//! listen`). Both are observers: they read the bus and job records and never
//! change a job.
//!
//! The library builds the metrics route ([`Orchestrator::metrics_router`]) and
//! hands out a read-only [`Orchestrator::jobs_reader`]; the dashboard's routes
//! (src/cli/dashboard/), binding and serving sockets are the binary's
//! business, so the library opens no port of its own.

use flotilla_config::Settings;
use flotilla_orchestrator::service::Orchestrator;
use tokio_util::sync::CancellationToken;

/// Binds and serves the configured endpoints until `shutdown` fires; fails
/// when an address cannot be bound or the dashboard's access rules cannot be met.
pub async fn start(
    settings: &Settings,
    orchestrator: &Orchestrator,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    if let Some(addr) = settings.metrics.orchestrator {
        let router = orchestrator.metrics_router();
        flotilla_telemetry::metrics::serve("orchestrator metrics", addr, router, shutdown.clone().cancelled_owned())
            .await?;
    }
    if let Some(addr) = settings.dashboard.listen {
        let router = super::dashboard::router(addr, &settings.dashboard, orchestrator.jobs_reader())?;
        let bound = flotilla_telemetry::metrics::serve("dashboard", addr, router, shutdown.cancelled_owned()).await?;
        tracing::info!(url = %format!("http://{bound}/"), "dashboard");
    }
    Ok(())
}
