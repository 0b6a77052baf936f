//! The orchestrator's HTTP endpoints, both off unless configured: Prometheus
//! metrics (`[metrics] orchestrator`) and the web dashboard (`[dashboard]
//! listen`). Both are observers: they read the bus and job records and never
//! change a job.

use std::sync::Arc;

use flotilla_shared::bus::Bus;
use flotilla_shared::config::Settings;
use flotilla_shared::ids::SubagentType;
use tokio_util::sync::CancellationToken;

use crate::jobs::JobStore;

/// Starts the configured endpoints; fails when an address cannot be bound.
pub async fn start(settings: &Settings, bus: &Bus, jobs: &JobStore, shutdown: CancellationToken) -> anyhow::Result<()> {
    if let Some(addr) = settings.metrics.orchestrator {
        let metrics = jobs.metrics().clone();
        let types: Arc<Vec<SubagentType>> = Arc::new(settings.subagents.keys().cloned().collect());
        let b = bus.clone();
        let refresh = move || {
            let (metrics, bus, types) = (metrics.clone(), b.clone(), types.clone());
            async move { metrics.refresh(&bus, &types).await }
        };
        let router = flotilla_shared::metrics::router(jobs.metrics().registry.clone(), refresh);
        flotilla_shared::metrics::serve("orchestrator metrics", addr, router, shutdown.clone().cancelled_owned())
            .await?;
    }
    if let Some(addr) = settings.dashboard.listen {
        let bound =
            crate::dashboard::serve(addr, &settings.dashboard, bus.clone(), jobs.clone(), shutdown.cancelled_owned())
                .await?;
        tracing::info!(url = %format!("http://{bound}/"), "dashboard");
    }
    Ok(())
}
