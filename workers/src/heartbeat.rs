//! Worker heartbeats: one when the worker is ready, one every `[worker]
//! heartbeat` seconds, state `draining` from the moment it is told to stop
//! (it still beats while its running tasks finish), one `stopping` beat when
//! its tasks are done, and then the worker's entry removed from the workers
//! bucket. Each beat goes out, once per served type, on
//! `<prefix>.worker.heartbeat.<type>.<worker>` and into
//! the `<prefix>_workers` KV bucket with a TTL of three intervals (see
//! `flotilla_bus::Bus::publish_heartbeat`), so a SIGKILLed worker
//! leaves the live set by itself.
//!
//! Load figures (in flight, completed, failed, busy time) come from the
//! worker's metrics, so `flotilla workers` and `/metrics` never disagree;
//! the resident memory is read afresh for every beat.

use std::sync::Arc;
use std::time::Duration;

use flotilla_bus::Bus;
use flotilla_protocol::ids::SubagentType;
use flotilla_protocol::{self as protocol, McpServerHealth, TypeLoad, WorkerHeartbeat, WorkerState};
use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;

use crate::metrics::WorkerMetrics;

/// Reports the health of the worker's MCP servers for each heartbeat
/// (plugged in by the MCP hub; empty when the worker uses none).
pub type McpHealth = Arc<dyn Fn() -> Vec<McpServerHealth> + Send + Sync>;

/// What every heartbeat of this worker says.
#[derive(Clone)]
pub struct Identity {
    /// The worker id.
    pub worker_id: String,
    /// Served types with their per-worker concurrency.
    pub types: Vec<(SubagentType, u32)>,
    /// Time between beats.
    pub interval: Duration,
    /// URL of the worker's `/metrics`, when served.
    pub metrics_url: Option<String>,
}

/// A running heartbeat publisher.
pub struct Heartbeats {
    bus: Bus,
    worker_id: String,
    types: Vec<SubagentType>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Heartbeats {
    /// Publishes the first heartbeat now (so the worker is visible once this
    /// returns), then keeps beating: `running` until `draining` fires, then
    /// `draining` (the first such beat at once) until [`finish`](Self::finish).
    pub async fn start(
        bus: Bus,
        id: Identity,
        metrics: Arc<WorkerMetrics>,
        mcp: Option<McpHealth>,
        draining: CancellationToken,
    ) -> Self {
        let beat = Beat { id, metrics, mcp, started_at: protocol::now() };
        send(&bus, &beat.make(WorkerState::Running)).await;
        let (b, worker_id, stop) = (bus.clone(), beat.id.worker_id.clone(), CancellationToken::new());
        let types = beat.id.types.iter().map(|(ty, _)| ty.clone()).collect();
        let stopped = stop.clone();
        let task = tokio::spawn(async move {
            let every = beat.id.interval;
            let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut announced = false;
            loop {
                let state = if draining.is_cancelled() { WorkerState::Draining } else { WorkerState::Running };
                tokio::select! {
                    _ = tick.tick() => send(&b, &beat.make(state)).await,
                    _ = draining.cancelled(), if !announced => {
                        announced = true;
                        send(&b, &beat.make(WorkerState::Draining)).await;
                    }
                    _ = stopped.cancelled() => break,
                }
            }
            send(&b, &beat.make(WorkerState::Stopping)).await;
        });
        Self { bus, worker_id, types, stop, task }
    }

    /// Sends the `stopping` beat, then removes the worker from the live set.
    pub async fn finish(self) {
        self.stop.cancel();
        let _ = self.task.await;
        if let Err(e) = self.bus.remove_worker(&self.worker_id, &self.types).await {
            tracing::warn!(error = %e, "worker entry not removed; it expires by itself");
        }
    }
}

struct Beat {
    id: Identity,
    metrics: Arc<WorkerMetrics>,
    mcp: Option<McpHealth>,
    started_at: OffsetDateTime,
}

impl Beat {
    fn make(&self, state: WorkerState) -> WorkerHeartbeat {
        let types = self
            .id
            .types
            .iter()
            .map(|(ty, capacity)| {
                let load = self.metrics.load(ty);
                TypeLoad {
                    subagent_type: ty.clone(),
                    capacity: *capacity,
                    in_flight: load.in_flight,
                    completed: load.completed,
                    failed: load.failed,
                    cancelled: load.cancelled,
                    busy_ms: load.busy_ms,
                }
            })
            .collect();
        WorkerHeartbeat {
            v: protocol::SCHEMA_VERSION,
            worker_id: self.id.worker_id.clone(),
            host: host_name(),
            pid: std::process::id(),
            version: env!("CARGO_PKG_VERSION").into(),
            state,
            types,
            mcp_servers: self.mcp.as_ref().map(|f| f()).unwrap_or_default(),
            metrics_url: self.id.metrics_url.clone(),
            rss_bytes: flotilla_telemetry::process::resident_bytes(),
            started_at: self.started_at,
            at: protocol::now(),
            interval_ms: self.id.interval.as_millis() as u64,
        }
    }
}

async fn send(bus: &Bus, hb: &WorkerHeartbeat) {
    if let Err(e) = bus.publish_heartbeat(hb).await {
        tracing::warn!(error = %e, "heartbeat not stored");
    }
}

/// The host name (`flotilla_telemetry::host::host_name`, the one lookup of
/// the workspace), owned. The worker's heartbeats' `host`, its default id
/// ([`default_id`], `<host>-<pid>`) and the host of its metrics URL all
/// use it, so they always name the same machine.
pub fn host_name() -> String {
    flotilla_telemetry::host::host_name().to_string()
}

/// One MCP server's health as a heartbeat reports it.
pub fn mcp_health_entry(h: flotilla_mcp::ServerHealth) -> flotilla_protocol::McpServerHealth {
    use flotilla_mcp::HealthStatus;
    let ok = h.status == HealthStatus::Up;
    let detail = match h.status {
        HealthStatus::Up => format!("{} {}: {} tools", h.transport, h.endpoint, h.tools),
        HealthStatus::Pending => format!("{} {}: not contacted yet", h.transport, h.endpoint),
        HealthStatus::Down => format!(
            "{} {}: down ({} failures): {}",
            h.transport,
            h.endpoint,
            h.consecutive_failures,
            h.last_error.as_deref().unwrap_or("unknown error")
        ),
    };
    flotilla_protocol::McpServerHealth { name: h.server, ok, detail: Some(detail) }
}

/// `<host>-<pid>`, with the host name the heartbeats carry.
pub fn default_id() -> String {
    format!("{}-{}", host_name(), std::process::id())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_default_worker_id_names_the_host_its_heartbeats_carry() {
        let host = super::host_name();
        assert_eq!(super::default_id(), format!("{host}-{}", std::process::id()));
    }
}
