//! The narrow bus operations the orchestrator's task logic needs, as traits,
//! so the `task` tool (planner/task_tool.rs), the report router (reports.rs)
//! and the job store (jobs.rs) run over in-memory fakes in unit tests
//! (fakes.rs) as well as over NATS (bound to the concrete `Bus`, the
//! logic could hardly be unit-tested). The NATS implementations are the
//! typed bus stores of shared/bus/src (tasks.rs, reports.rs, workers.rs,
//! buckets.rs); each impl here is one delegation, so the traits add no logic.

use async_trait::async_trait;
use bytes::Bytes;
use flotilla_bus::{Bus, BusError, Cas, Changes, FollowUps};
use flotilla_protocol::ids::{JobId, SubagentType, TaskId, Tenant};
use flotilla_protocol::{TaskMessage, TaskReport};

/// The task work queue as the `task` tool uses it.
#[async_trait]
pub trait TaskDispatch: Send + Sync {
    /// Publishes `task` durably (idempotent by task id); `follow_ups` says
    /// whether follow-up messages may come for it.
    async fn publish(&self, task: &TaskMessage, follow_ups: FollowUps) -> Result<(), BusError>;
    /// Withdraws one task: it is cancelled, so a worker that pulls it later
    /// reports it `cancelled` without running it. The job's other tasks,
    /// even queued ones of the same type, are left alone.
    async fn withdraw(&self, job: &JobId, task: &TaskId, reason: &str) -> Result<(), BusError>;
    /// Whether a live worker (by heartbeat) serves `ty`.
    async fn served(&self, ty: &SubagentType) -> Result<bool, BusError>;
}

#[async_trait]
impl TaskDispatch for Bus {
    async fn publish(&self, task: &TaskMessage, follow_ups: FollowUps) -> Result<(), BusError> {
        self.tasks().publish(task, follow_ups).await
    }

    async fn withdraw(&self, job: &JobId, task: &TaskId, reason: &str) -> Result<(), BusError> {
        self.cancellations().await?.record_task(job, task, reason).await
    }

    async fn served(&self, ty: &SubagentType) -> Result<bool, BusError> {
        Ok(self.live_workers().await?.iter().any(|w| w.serves(ty)))
    }
}

/// Reports already stored (the reports stream), looked up by task.
#[async_trait]
pub trait StoredReports: Send + Sync {
    /// The report stored for `task` of type `ty`, if any; `None` too when
    /// unreadable or from another type (shared/bus/src/reports.rs).
    async fn stored(&self, tenant: &Tenant, job: &JobId, ty: &SubagentType, task: &TaskId) -> Option<TaskReport>;
}

#[async_trait]
impl StoredReports for Bus {
    async fn stored(&self, tenant: &Tenant, job: &JobId, ty: &SubagentType, task: &TaskId) -> Option<TaskReport> {
        self.reports().stored(tenant, job, ty, task).await
    }
}

/// Where job records are kept (the jobs KV bucket: a header per job and a
/// key per task, shared/bus/src/job_records.rs) and job events go. Writes
/// are one attempt each and conditional: the job store retries them.
#[async_trait]
pub trait JobBackend: Send + Sync {
    /// The value of `key` and its revision.
    async fn entry(&self, key: &str) -> Result<Option<(Bytes, u64)>, BusError>;
    /// Stores `value` under `key` unless the key exists.
    async fn create(&self, key: &str, value: Bytes) -> Result<Cas, BusError>;
    /// Stores `value` under `key` if it is still at `revision`.
    async fn update(&self, key: &str, value: Bytes, revision: u64) -> Result<Cas, BusError>;
    /// The keys matching `filter` (`*` one token, as in NATS subjects), in any order.
    async fn keys(&self, filter: &str) -> Result<Vec<String>, BusError>;
    /// What was written under `filter` after revision `after` (`0`: every
    /// live key), in revision order, with the last revision read
    /// (shared/bus/src/job_records.rs, `changes`); values empty when `headers_only`.
    async fn changes(&self, filter: &str, after: u64, headers_only: bool) -> Result<Changes, BusError>;
    /// Publishes an event of `job` (fire and forget).
    async fn emit(&self, tenant: &Tenant, job: &JobId, event: &flotilla_protocol::JobEvent);
}
