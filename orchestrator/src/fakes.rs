//! In-memory implementations of the bus ports (orchestrator/src/ports.rs) for
//! unit tests of the orchestrator's logic without NATS. Each fake records
//! what the logic did (published tasks, purges, stored records, events) so a
//! test can assert it, and lets the test stage what the bus would hold
//! (stored reports, live workers).

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use bytes::Bytes;
use flotilla_bus::BusError;
use flotilla_protocol::ids::{JobId, SubagentType, TaskId, Tenant};
use flotilla_protocol::{JobEvent, TaskMessage, TaskReport};
use tokio::sync::watch;

use crate::ports::{JobBackend, StoredReports, TaskDispatch};

/// The task queue: records publishes and purges; workers are live unless
/// [`set_served`](Self::set_served) says otherwise.
pub struct FakeQueue {
    published: watch::Sender<Vec<TaskMessage>>,
    purged: Mutex<Vec<(JobId, Option<SubagentType>)>>,
    served: AtomicBool,
}

impl Default for FakeQueue {
    fn default() -> Self {
        Self { published: watch::Sender::new(Vec::new()), purged: Mutex::default(), served: AtomicBool::new(true) }
    }
}

impl FakeQueue {
    /// Every task published so far.
    pub fn published(&self) -> Vec<TaskMessage> {
        self.published.borrow().clone()
    }

    /// Waits until `n` tasks were published; returns the `n`th.
    pub async fn nth_published(&self, n: usize) -> TaskMessage {
        let mut rx = self.published.subscribe();
        let all = rx.wait_for(|v| v.len() >= n).await.expect("the fake queue lives as long as the test");
        all[n - 1].clone()
    }

    /// Every purge asked for: the job and the type (`None`: every type).
    pub fn purged(&self) -> Vec<(JobId, Option<SubagentType>)> {
        self.purged.lock().unwrap().clone()
    }

    /// Whether a live worker serves every type from now on.
    pub fn set_served(&self, served: bool) {
        self.served.store(served, Ordering::SeqCst);
    }
}

#[async_trait]
impl TaskDispatch for FakeQueue {
    async fn publish(&self, task: &TaskMessage) -> Result<(), BusError> {
        self.published.send_modify(|v| v.push(task.clone()));
        Ok(())
    }

    async fn purge_job(&self, job: &JobId, ty: Option<&SubagentType>) -> Result<u64, BusError> {
        self.purged.lock().unwrap().push((*job, ty.cloned()));
        Ok(1)
    }

    async fn served(&self, _ty: &SubagentType) -> Result<bool, BusError> {
        Ok(self.served.load(Ordering::SeqCst))
    }
}

/// The reports stream's stored reports, by task.
#[derive(Default)]
pub struct FakeReports {
    stored: Mutex<HashMap<TaskId, TaskReport>>,
}

impl FakeReports {
    /// Stores `report` as if a worker had published it while nobody waited.
    pub fn store(&self, report: TaskReport) {
        self.stored.lock().unwrap().insert(report.task_id, report);
    }
}

#[async_trait]
impl StoredReports for FakeReports {
    async fn stored(&self, _tenant: &Tenant, _job: &JobId, task: &TaskId) -> Option<TaskReport> {
        self.stored.lock().unwrap().get(task).cloned()
    }
}

/// The jobs bucket and the job events published.
#[derive(Default)]
pub struct FakeJobs {
    records: Mutex<HashMap<JobId, Bytes>>,
    events: Mutex<Vec<JobEvent>>,
}

impl FakeJobs {
    /// The record of `id` as stored (not the store's live copy).
    pub fn stored(&self, id: &JobId) -> Option<flotilla_protocol::JobRecord> {
        let bytes = self.records.lock().unwrap().get(id).cloned()?;
        Some(flotilla_protocol::decode(&bytes).expect("the store writes decodable records"))
    }

    /// Every job event published so far.
    pub fn events(&self) -> Vec<JobEvent> {
        self.events.lock().unwrap().clone()
    }
}

#[async_trait]
impl JobBackend for FakeJobs {
    async fn get(&self, id: &JobId) -> Result<Option<Bytes>, BusError> {
        Ok(self.records.lock().unwrap().get(id).cloned())
    }

    async fn put(&self, id: &JobId, record: Bytes) -> Result<(), BusError> {
        self.records.lock().unwrap().insert(*id, record);
        Ok(())
    }

    async fn keys(&self) -> Result<Vec<String>, BusError> {
        Ok(self.records.lock().unwrap().keys().map(ToString::to_string).collect())
    }

    async fn emit(&self, _tenant: &Tenant, _job: &JobId, event: &JobEvent) {
        self.events.lock().unwrap().push(event.clone());
    }
}
