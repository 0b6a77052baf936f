//! The worker's Prometheus metrics, which also feed its heartbeats (one
//! source of truth for "in flight", "completed" and "failed"):
//!
//! | name | labels | what |
//! |---|---|---|
//! | `flotilla_worker_tasks_in_flight` | `subagent_type` | tasks running now |
//! | `flotilla_worker_tasks_total` | `subagent_type`, `status` | tasks ended: `completed`, `failed`, `rejected`, `cancelled`, `handed_back` |
//! | `flotilla_worker_task_duration_seconds` | `subagent_type` | wall time of reported tasks |
//! | `flotilla_task_redeliveries_total` | `subagent_type` | task attempts after the first started here |
//! | `flotilla_approvals_waiting` | `subagent_type` | tool calls waiting for a person's decision |
//! | `flotilla_model_*`, `flotilla_tool_*`, `gen_ai_client_*` | see [`AgentMetrics`] | model and tool calls of the subagents |
//!
//! With OTLP export on, the same counts also go out as OpenTelemetry
//! instruments: `flotilla.worker.tasks`, `flotilla.task.redeliveries`,
//! `flotilla.approvals.waiting` (the Prometheus name with dots, without
//! `_total`).

use std::sync::Arc;
use std::time::Duration;

use flotilla_protocol::ids::SubagentType;
use flotilla_telemetry::metrics::{AgentMetrics, latency_histogram};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// `{subagent_type}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TypeLabel {
    subagent_type: String,
}

/// `{subagent_type, status}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    subagent_type: String,
    status: String,
}

/// How a task attempt ended on this worker.
pub const HANDED_BACK: &str = "handed_back";

/// Metrics of one worker process.
pub struct WorkerMetrics {
    /// The registry served on `/metrics`.
    pub registry: Arc<Registry>,
    /// Model and tool calls of the subagents.
    pub agent: AgentMetrics,
    in_flight: Family<TypeLabel, Gauge>,
    ended: Family<OutcomeLabels, Counter>,
    duration: Family<TypeLabel, Histogram, fn() -> Histogram>,
    redeliveries: Family<TypeLabel, Counter>,
    approvals_waiting: Family<TypeLabel, Gauge>,
    /// Wall milliseconds of reported tasks, for heartbeats (the histogram
    /// keeps the same sum in seconds but does not hand it out).
    busy_ms: Family<TypeLabel, Counter>,
    otel_ended: opentelemetry::metrics::Counter<u64>,
    otel_redeliveries: opentelemetry::metrics::Counter<u64>,
    otel_approvals_waiting: opentelemetry::metrics::UpDownCounter<i64>,
}

impl Default for WorkerMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl WorkerMetrics {
    /// Registers every family.
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let agent = AgentMetrics::register(&mut registry);
        let in_flight = Family::<TypeLabel, Gauge>::default();
        let ended = Family::<OutcomeLabels, Counter>::default();
        let duration = Family::<TypeLabel, Histogram, fn() -> Histogram>::new_with_constructor(latency_histogram);
        registry.register("flotilla_worker_tasks_in_flight", "Tasks running now", in_flight.clone());
        registry.register("flotilla_worker_tasks", "Task attempts ended, by status", ended.clone());
        registry.register("flotilla_worker_task_duration_seconds", "Wall time of reported tasks", duration.clone());
        let redeliveries = Family::<TypeLabel, Counter>::default();
        let approvals_waiting = Family::<TypeLabel, Gauge>::default();
        registry.register(
            "flotilla_task_redeliveries",
            "Task attempts after the first started on this worker",
            redeliveries.clone(),
        );
        registry.register(
            "flotilla_approvals_waiting",
            "Tool calls waiting for a person's decision",
            approvals_waiting.clone(),
        );
        let meter = flotilla_telemetry::metrics::meter();
        Self {
            registry: Arc::new(registry),
            agent,
            in_flight,
            ended,
            duration,
            redeliveries,
            approvals_waiting,
            busy_ms: Family::default(),
            otel_ended: meter
                .u64_counter("flotilla.worker.tasks")
                .with_description("Task attempts ended, by status")
                .build(),
            otel_redeliveries: meter
                .u64_counter("flotilla.task.redeliveries")
                .with_description("Task attempts after the first started on this worker")
                .build(),
            otel_approvals_waiting: meter
                .i64_up_down_counter("flotilla.approvals.waiting")
                .with_description("Tool calls waiting for a person's decision")
                .build(),
        }
    }

    /// An attempt after the first of a task of `ty` started here.
    pub fn redelivered(&self, ty: &SubagentType) {
        self.redeliveries.get_or_create(&label(ty)).inc();
        self.otel_redeliveries.add(1, &[opentelemetry::KeyValue::new("subagent_type", ty.to_string())]);
    }

    /// A tool call of `ty` waits for a decision until the guard is dropped.
    pub fn approval_waiting(self: &Arc<Self>, ty: &SubagentType) -> ApprovalWaiting {
        self.approvals_waiting.get_or_create(&label(ty)).inc();
        self.otel_approvals_waiting.add(1, &[opentelemetry::KeyValue::new("subagent_type", ty.to_string())]);
        ApprovalWaiting { metrics: self.clone(), ty: ty.clone() }
    }

    /// Makes `ty` appear (at zero) before its first task.
    pub fn declare(&self, ty: &SubagentType) {
        let _ = self.in_flight.get_or_create(&label(ty));
    }

    /// A task of `ty` started; the guard counts it in flight until dropped.
    pub fn task_started(self: &Arc<Self>, ty: &SubagentType) -> InFlight {
        self.in_flight.get_or_create(&label(ty)).inc();
        InFlight { metrics: self.clone(), ty: ty.clone() }
    }

    /// A task of `ty` ended with `status` (a `TaskStatus` name or [`HANDED_BACK`]).
    pub fn task_ended(&self, ty: &SubagentType, status: &str, duration: Option<Duration>) {
        self.ended.get_or_create(&OutcomeLabels { subagent_type: ty.to_string(), status: status.into() }).inc();
        self.otel_ended.add(
            1,
            &[
                opentelemetry::KeyValue::new("subagent_type", ty.to_string()),
                opentelemetry::KeyValue::new("status", status.to_string()),
            ],
        );
        if let Some(d) = duration {
            self.duration.get_or_create(&label(ty)).observe(d.as_secs_f64());
            self.busy_ms.get_or_create(&label(ty)).inc_by(d.as_millis() as u64);
        }
    }

    /// The load of `ty` for heartbeats: in flight, reported, of the
    /// reported how many failed (or were rejected) and how many were
    /// cancelled, and their wall time added up.
    pub fn load(&self, ty: &SubagentType) -> Load {
        let in_flight = self.in_flight.get(&label(ty)).map(|g| g.get().max(0) as u32).unwrap_or(0);
        let count = |status: &str| {
            self.ended
                .get(&OutcomeLabels { subagent_type: ty.to_string(), status: status.into() })
                .map(|c| c.get())
                .unwrap_or(0)
        };
        let (failed, cancelled) = (count("failed") + count("rejected"), count("cancelled"));
        let busy_ms = self.busy_ms.get(&label(ty)).map(|c| c.get()).unwrap_or(0);
        Load { in_flight, completed: count("completed") + failed + cancelled, failed, cancelled, busy_ms }
    }
}

/// One type's load, as [`WorkerMetrics::load`] counts it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Load {
    /// Tasks running now.
    pub in_flight: u32,
    /// Tasks that ended with a report (whatever its status).
    pub completed: u64,
    /// Of those, failed or rejected.
    pub failed: u64,
    /// Of those, cancelled.
    pub cancelled: u64,
    /// Wall milliseconds of the reported tasks, added up.
    pub busy_ms: u64,
}

fn label(ty: &SubagentType) -> TypeLabel {
    TypeLabel { subagent_type: ty.to_string() }
}

/// Counts one task in flight while alive.
pub struct InFlight {
    metrics: Arc<WorkerMetrics>,
    ty: SubagentType,
}

/// Counts one tool call waiting for a decision while alive.
pub struct ApprovalWaiting {
    metrics: Arc<WorkerMetrics>,
    ty: SubagentType,
}

impl Drop for ApprovalWaiting {
    fn drop(&mut self) {
        self.metrics.approvals_waiting.get_or_create(&label(&self.ty)).dec();
        self.metrics
            .otel_approvals_waiting
            .add(-1, &[opentelemetry::KeyValue::new("subagent_type", self.ty.to_string())]);
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.metrics.in_flight.get_or_create(&label(&self.ty)).dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn load_follows_task_starts_and_ends() {
        let m = Arc::new(WorkerMetrics::new());
        let ty = SubagentType::new("finance").unwrap();
        m.declare(&ty);
        assert_eq!(m.load(&ty), Load::default());
        let a = m.task_started(&ty);
        let b = m.task_started(&ty);
        assert_eq!(m.load(&ty).in_flight, 2);
        m.task_ended(&ty, "completed", Some(Duration::from_millis(5)));
        drop(a);
        m.task_ended(&ty, "failed", Some(Duration::from_millis(5)));
        drop(b);
        m.task_ended(&ty, HANDED_BACK, None);
        // A handed-back attempt has no report: its time is not counted.
        assert_eq!(m.load(&ty), Load { in_flight: 0, completed: 2, failed: 1, cancelled: 0, busy_ms: 10 });
        // A cancelled task is reported, but it is not a failure of the worker.
        m.task_ended(&ty, "cancelled", Some(Duration::from_millis(1500)));
        assert_eq!(m.load(&ty), Load { in_flight: 0, completed: 3, failed: 1, cancelled: 1, busy_ms: 1510 });
        let text = flotilla_telemetry::metrics::render(&m.registry);
        assert!(
            text.contains("flotilla_worker_tasks_total{subagent_type=\"finance\",status=\"completed\"} 1"),
            "{text}"
        );
        assert!(text.contains("flotilla_worker_task_duration_seconds_count{subagent_type=\"finance\"} 3"), "{text}");
        assert!(text.contains("flotilla_worker_tasks_in_flight{subagent_type=\"finance\"} 0"), "{text}");
    }
}
