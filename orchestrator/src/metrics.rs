//! The orchestrator's Prometheus metrics. Job and task counters are derived
//! from the job events the orchestrator publishes (one choke point:
//! `JobStore::emit`); queue depths and the worker fleet are read when
//! scraped, from JetStream consumer info and the workers bucket.
//!
//! | name | labels | what |
//! |---|---|---|
//! | `flotilla_jobs_running` | | jobs whose planner is running here |
//! | `flotilla_jobs_total` | `status` | jobs ended: `completed`, `failed`, `cancelled` |
//! | `flotilla_tasks_dispatched_total` | `subagent_type` | task messages published |
//! | `flotilla_task_reports_total` | `status` | reports consolidated |
//! | `flotilla_task_queue_pending` | `subagent_type` | tasks waiting for a worker (consumer `num_pending`) |
//! | `flotilla_task_queue_unacked` | `subagent_type` | tasks delivered and running (consumer `num_ack_pending`) |
//! | `flotilla_workers_live` | | workers with a live heartbeat |
//! | `flotilla_worker_slots` | `subagent_type` | live capacity for the type |
//! | `flotilla_worker_slots_busy` | `subagent_type` | of which in use |
//! | `flotilla_model_*`, `gen_ai_client_*` | `agent="planner"` | see `flotilla_telemetry::metrics::AgentMetrics` |
//!
//! With OTLP export on, the job, task and queue counts also go out as
//! OpenTelemetry instruments (`flotilla.jobs`, `flotilla.tasks.dispatched`,
//! `flotilla.task.reports`, `flotilla.task.queue.pending`,
//! `flotilla.task.queue.unacked`, `flotilla.workers.live`), the queue
//! depths read every export interval ([`OrchestratorMetrics::refresh`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use flotilla_bus::Bus;
use flotilla_protocol::ids::SubagentType;
use flotilla_protocol::{JobEventKind, WorkerState};
use flotilla_telemetry::metrics::AgentMetrics;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabel {
    status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TypeLabel {
    subagent_type: String,
}

/// Metrics of one orchestrator process.
pub struct OrchestratorMetrics {
    /// Every family below, encoded on each scrape of `/metrics`.
    registry: Arc<Registry>,
    agent: AgentMetrics,
    jobs_running: Gauge,
    jobs_in_memory: Gauge,
    jobs_ended: Family<StatusLabel, Counter>,
    dispatched: Family<TypeLabel, Counter>,
    reports: Family<StatusLabel, Counter>,
    queue_pending: Family<TypeLabel, Gauge>,
    queue_unacked: Family<TypeLabel, Gauge>,
    workers_live: Gauge,
    slots: Family<TypeLabel, Gauge>,
    slots_busy: Family<TypeLabel, Gauge>,
    otel: OtelInstruments,
}

/// The same counts as OpenTelemetry instruments, exported over OTLP when
/// the process exports (`flotilla_telemetry::otel`); no-ops otherwise.
/// Names: the Prometheus name with dots, without `_total`.
struct OtelInstruments {
    jobs: opentelemetry::metrics::Counter<u64>,
    dispatched: opentelemetry::metrics::Counter<u64>,
    reports: opentelemetry::metrics::Counter<u64>,
    queue_pending: opentelemetry::metrics::Gauge<i64>,
    queue_unacked: opentelemetry::metrics::Gauge<i64>,
    workers_live: opentelemetry::metrics::Gauge<i64>,
}

impl OtelInstruments {
    fn new() -> Self {
        let meter = flotilla_telemetry::metrics::meter();
        Self {
            jobs: meter.u64_counter("flotilla.jobs").with_description("Jobs ended, by status").build(),
            dispatched: meter
                .u64_counter("flotilla.tasks.dispatched")
                .with_description("Task messages published")
                .build(),
            reports: meter
                .u64_counter("flotilla.task.reports")
                .with_description("Task reports consolidated, by status")
                .build(),
            queue_pending: meter
                .i64_gauge("flotilla.task.queue.pending")
                .with_description("Tasks waiting for a worker")
                .build(),
            queue_unacked: meter
                .i64_gauge("flotilla.task.queue.unacked")
                .with_description("Tasks delivered to a worker, not yet acked")
                .build(),
            workers_live: meter
                .i64_gauge("flotilla.workers.live")
                .with_description("Workers with a live heartbeat")
                .build(),
        }
    }
}

fn kv(key: &'static str, value: &str) -> [opentelemetry::KeyValue; 1] {
    [opentelemetry::KeyValue::new(key, value.to_string())]
}

impl OrchestratorMetrics {
    /// Registers every family.
    pub fn new() -> Self {
        let mut r = Registry::default();
        let m = Self {
            agent: AgentMetrics::register(&mut r),
            jobs_running: Gauge::default(),
            jobs_in_memory: Gauge::default(),
            jobs_ended: Family::default(),
            dispatched: Family::default(),
            reports: Family::default(),
            queue_pending: Family::default(),
            queue_unacked: Family::default(),
            workers_live: Gauge::default(),
            slots: Family::default(),
            slots_busy: Family::default(),
            otel: OtelInstruments::new(),
            registry: Arc::new(Registry::default()),
        };
        r.register("flotilla_jobs_running", "Jobs whose planner runs in this orchestrator", m.jobs_running.clone());
        r.register("flotilla_jobs", "Jobs ended, by status", m.jobs_ended.clone());
        r.register(
            "flotilla_jobs_in_memory",
            "Job records held in memory by this orchestrator's job store (its running jobs; a finished job leaves)",
            m.jobs_in_memory.clone(),
        );
        r.register("flotilla_tasks_dispatched", "Task messages published", m.dispatched.clone());
        r.register("flotilla_task_reports", "Task reports consolidated, by status", m.reports.clone());
        r.register("flotilla_task_queue_pending", "Tasks waiting for a worker", m.queue_pending.clone());
        r.register(
            "flotilla_task_queue_unacked",
            "Tasks delivered to a worker, not yet acked",
            m.queue_unacked.clone(),
        );
        r.register("flotilla_workers_live", "Workers with a live heartbeat", m.workers_live.clone());
        r.register("flotilla_worker_slots", "Task slots of live workers", m.slots.clone());
        r.register("flotilla_worker_slots_busy", "Task slots of live workers in use", m.slots_busy.clone());
        Self { registry: Arc::new(r), ..m }
    }

    /// The registry a `/metrics` endpoint encodes.
    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// One more (`+1`) or one fewer (`-1`) job record held in memory by the
    /// job store (orchestrator/src/jobs.rs): counted where the map changes,
    /// so concurrent changes cannot leave a stale count.
    pub fn jobs_in_memory(&self, delta: i64) {
        self.jobs_in_memory.inc_by(delta);
    }

    /// Counts what a job event says.
    pub fn observe(&self, kind: &JobEventKind) {
        match kind {
            JobEventKind::Running => {
                self.jobs_running.inc();
            }
            JobEventKind::PlannerStep { usage, latency_ms, .. } => {
                self.agent.model_call("planner", usage, Duration::from_millis(*latency_ms));
            }
            JobEventKind::PlannerStepFailed { error_kind, usage, latency_ms, .. } => {
                self.agent.model_failed("planner", *error_kind, usage, Duration::from_millis(*latency_ms));
            }
            JobEventKind::TaskDispatched { subagent_type, .. } => {
                self.dispatched.get_or_create(&TypeLabel { subagent_type: subagent_type.to_string() }).inc();
                self.otel.dispatched.add(1, &kv("subagent_type", subagent_type.as_str()));
            }
            JobEventKind::TaskReported { status, .. } => {
                self.reports.get_or_create(&StatusLabel { status: status.as_str().into() }).inc();
                self.otel.reports.add(1, &kv("status", status.as_str()));
            }
            JobEventKind::Completed { .. } => self.ended("completed"),
            JobEventKind::Failed { .. } => self.ended("failed"),
            JobEventKind::Cancelled { .. } => self.ended("cancelled"),
            _ => {}
        }
    }

    fn ended(&self, status: &str) {
        self.jobs_running.dec();
        self.jobs_ended.get_or_create(&StatusLabel { status: status.into() }).inc();
        self.otel.jobs.add(1, &kv("status", status));
    }

    /// Names the planner's model provider and model for the GenAI metrics.
    pub fn set_planner_model(&self, provider: &str, model: &str) {
        self.agent.set_model("planner", provider, model);
    }

    /// Reads queue depths of `types` and the live worker set (on each scrape).
    pub async fn refresh(&self, bus: &Bus, types: &[SubagentType]) {
        let queue = bus.tasks();
        for ty in types {
            let label = TypeLabel { subagent_type: ty.to_string() };
            match queue.depth(ty).await {
                Ok(depth) => {
                    self.queue_pending.get_or_create(&label).set(depth.pending as i64);
                    self.queue_unacked.get_or_create(&label).set(depth.unacked as i64);
                    self.otel.queue_pending.record(depth.pending as i64, &kv("subagent_type", ty.as_str()));
                    self.otel.queue_unacked.record(depth.unacked as i64, &kv("subagent_type", ty.as_str()));
                }
                // No worker of this type ever started: nothing to report yet.
                Err(e) => tracing::debug!(subagent_type = %ty, error = %e, "no queue depth"),
            }
        }
        match bus.live_workers().await {
            Ok(workers) => {
                self.workers_live.set(workers.len() as i64);
                self.otel.workers_live.record(workers.len() as i64, &[]);
                let mut per_type: BTreeMap<String, (i64, i64)> =
                    types.iter().map(|t| (t.to_string(), (0, 0))).collect();
                for w in workers.iter().filter(|w| w.state == WorkerState::Running) {
                    for t in &w.types {
                        let e = per_type.entry(t.subagent_type.to_string()).or_default();
                        e.0 += t.capacity as i64;
                        e.1 += t.in_flight as i64;
                    }
                }
                for (ty, (cap, busy)) in per_type {
                    self.slots.get_or_create(&TypeLabel { subagent_type: ty.clone() }).set(cap);
                    self.slots_busy.get_or_create(&TypeLabel { subagent_type: ty }).set(busy);
                }
            }
            Err(e) => tracing::warn!(error = %e, "workers bucket not readable for metrics"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_protocol::{ErrorKind, Usage};

    #[test]
    fn a_failed_planner_call_is_a_duration_sample_with_its_error_type() {
        let m = OrchestratorMetrics::new();
        m.set_planner_model("openai", "gpt-4o-mini");
        m.observe(&JobEventKind::PlannerStepFailed {
            step: 2,
            error_kind: ErrorKind::Timeout,
            latency_ms: 1500,
            usage: Usage::default(),
        });
        let text = flotilla_telemetry::metrics::render(m.registry());
        assert!(
            text.contains(
                "gen_ai_client_operation_duration_seconds_count{gen_ai_operation_name=\"chat\",gen_ai_provider_name=\"openai\",gen_ai_request_model=\"gpt-4o-mini\",flotilla_agent=\"planner\",error_type=\"timeout\"} 1"
            ),
            "{text}"
        );
        assert!(!text.contains("flotilla_model_call_duration_seconds_count{agent=\"planner\"}"), "{text}");
    }
}
