//! The narrow bus operations the orchestrator's task logic needs, as traits,
//! so the `task` tool (planner/task_tool.rs), the report router (reports.rs)
//! and the job store (jobs.rs) run over in-memory fakes in unit tests
//! (fakes.rs) as well as over NATS (issue #11: the logic was bound to the
//! concrete `Bus` and had one unit test). The NATS implementations are the
//! typed bus stores of shared/bus/src (tasks.rs, reports.rs, workers.rs,
//! buckets.rs); each impl here is one delegation, so the traits add no logic.

use async_trait::async_trait;
use bytes::Bytes;
use flotilla_bus::{Bus, BusError};
use flotilla_protocol::ids::{JobId, SubagentType, TaskId, Tenant};
use flotilla_protocol::{TaskMessage, TaskReport};

/// The task work queue as the `task` tool uses it.
#[async_trait]
pub trait TaskDispatch: Send + Sync {
    /// Publishes `task` durably (idempotent by task id).
    async fn publish(&self, task: &TaskMessage) -> Result<(), BusError>;
    /// Removes `job`'s queued tasks (only those of `ty` when given).
    async fn purge_job(&self, job: &JobId, ty: Option<&SubagentType>) -> Result<u64, BusError>;
    /// Whether a live worker (by heartbeat) serves `ty`.
    async fn served(&self, ty: &SubagentType) -> Result<bool, BusError>;
}

#[async_trait]
impl TaskDispatch for Bus {
    async fn publish(&self, task: &TaskMessage) -> Result<(), BusError> {
        self.tasks().publish(task).await
    }

    async fn purge_job(&self, job: &JobId, ty: Option<&SubagentType>) -> Result<u64, BusError> {
        self.tasks().purge_job(job, ty).await
    }

    async fn served(&self, ty: &SubagentType) -> Result<bool, BusError> {
        Ok(self.live_workers().await?.iter().any(|w| w.serves(ty)))
    }
}

/// Reports already stored (the reports stream), looked up by task.
#[async_trait]
pub trait StoredReports: Send + Sync {
    /// The report stored for `task`, if any; `None` too when unreadable.
    async fn stored(&self, tenant: &Tenant, job: &JobId, task: &TaskId) -> Option<TaskReport>;
}

#[async_trait]
impl StoredReports for Bus {
    async fn stored(&self, tenant: &Tenant, job: &JobId, task: &TaskId) -> Option<TaskReport> {
        self.reports().stored(tenant, job, task).await
    }
}

/// Where job records are kept (the jobs KV bucket) and job events go.
#[async_trait]
pub trait JobBackend: Send + Sync {
    /// The stored record of `id`, encoded.
    async fn get(&self, id: &JobId) -> Result<Option<Bytes>, BusError>;
    /// Stores the encoded record of `id` (one attempt; the store retries).
    async fn put(&self, id: &JobId, record: Bytes) -> Result<(), BusError>;
    /// Every stored key.
    async fn keys(&self) -> Result<Vec<String>, BusError>;
    /// Publishes an event of `job` (fire and forget).
    async fn emit(&self, tenant: &Tenant, job: &JobId, event: &flotilla_protocol::JobEvent);
}
