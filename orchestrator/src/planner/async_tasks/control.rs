//! The bus operations the asynchronous tools need beyond the dispatcher's,
//! as one narrow trait (like orchestrator/src/ports.rs), so their logic runs
//! over an in-memory fake in unit tests: record a per-task cancel
//! (shared/bus/src/cancellations.rs), store a follow-up message
//! (shared/bus/src/task_messages.rs), and store a `cancelled` report for a
//! task no worker is running (shared/bus/src/reports.rs).

use async_trait::async_trait;
use flotilla_bus::{Bus, BusError, Cancellations};
use flotilla_protocol::ids::{JobId, TaskId, Tenant};
use flotilla_protocol::{FollowUp, TaskReport};

/// Per-task control over the bus.
#[async_trait]
pub(crate) trait TaskControl: Send + Sync {
    /// Records `task` of `job` as cancelled: workers abort it, or refuse it
    /// when they pull it.
    async fn cancel(&self, job: &JobId, task: &TaskId, reason: &str) -> Result<(), BusError>;
    /// Stores a follow-up message for its task.
    async fn message(&self, tenant: &Tenant, msg: &FollowUp) -> Result<(), BusError>;
    /// Stores a report on a task's behalf (idempotent per task: `Nats-Msg-Id`).
    async fn report(&self, tenant: &Tenant, report: &TaskReport) -> Result<(), BusError>;
}

/// [`TaskControl`] over NATS.
pub(crate) struct BusControl {
    /// The bus.
    pub bus: Bus,
    /// The cancellations bucket.
    pub cancellations: Cancellations,
}

#[async_trait]
impl TaskControl for BusControl {
    async fn cancel(&self, job: &JobId, task: &TaskId, reason: &str) -> Result<(), BusError> {
        self.cancellations.record_task(job, task, reason).await
    }

    async fn message(&self, tenant: &Tenant, msg: &FollowUp) -> Result<(), BusError> {
        self.bus.task_messages().publish(tenant, msg).await
    }

    async fn report(&self, tenant: &Tenant, report: &TaskReport) -> Result<(), BusError> {
        self.bus.reports().publish(tenant, report, None).await
    }
}
