//! Routes task reports to the planner calls waiting for them.
//!
//! Reports are stored in the reports stream, so nothing is lost while a waiter
//! is not yet registered or the orchestrator is down: a waiter first registers
//! (so a live report cannot slip past), then looks for an already stored
//! report by subject, then waits for the live one. The first report for a
//! task wins; later ones (a redelivered attempt) find no waiter and are
//! dropped, which is what makes consolidation exactly-once.
//!
//! The stored-report lookup goes through [`StoredReports`]
//! (orchestrator/src/ports.rs) so unit tests route reports without NATS.

use std::sync::Arc;

use dashmap::DashMap;
use flotilla_bus::{Bus, BusError};
use flotilla_protocol::TaskReport;
use flotilla_protocol::ids::{JobId, TaskId, Tenant};
use futures::StreamExt;
use tokio::sync::oneshot;

use crate::ports::StoredReports;

/// Hands each report to the one call awaiting it.
#[derive(Clone)]
pub struct ReportRouter {
    stored: Arc<dyn StoredReports>,
    waiters: Arc<DashMap<TaskId, oneshot::Sender<TaskReport>>>,
}

impl ReportRouter {
    /// Starts following new reports.
    pub async fn start(bus: Bus) -> Result<Self, BusError> {
        let mut reports = Box::pin(bus.reports().follow().await?);
        let router = Self::new(Arc::new(bus));
        let r = router.clone();
        tokio::spawn(async move {
            while let Some(report) = reports.next().await {
                r.route(report);
            }
            tracing::error!("report stream ended");
        });
        Ok(router)
    }

    /// A router looking stored reports up in `stored`; live reports come
    /// through [`route`](Self::route).
    pub(crate) fn new(stored: Arc<dyn StoredReports>) -> Self {
        Self { stored, waiters: Arc::default() }
    }

    /// Hands `report` to its waiter, if any (the first report of a task wins).
    pub(crate) fn route(&self, report: TaskReport) {
        if let Some((_, tx)) = self.waiters.remove(&report.task_id) {
            let _ = tx.send(report);
        } else {
            tracing::debug!(task_id = %report.task_id, attempt = report.attempt, "report with no waiter (duplicate or not ours)");
        }
    }
    /// Registers interest in `task`'s report. Call before publishing the task.
    pub fn expect(&self, task: TaskId) -> oneshot::Receiver<TaskReport> {
        let (tx, rx) = oneshot::channel();
        self.waiters.insert(task, tx);
        rx
    }

    /// A report already stored for `task` (one that arrived while nobody
    /// waited, e.g. during an orchestrator restart).
    pub async fn stored(&self, tenant: &Tenant, job: &JobId, task: &TaskId) -> Option<TaskReport> {
        self.stored.stored(tenant, job, task).await
    }

    /// Stops waiting for `task`.
    pub fn forget(&self, task: &TaskId) {
        self.waiters.remove(task);
    }

    /// How many calls wait for a report.
    #[cfg(test)]
    pub(crate) fn waiting(&self) -> usize {
        self.waiters.len()
    }
}
