//! Job cancellation on the worker side. The orchestrator records a cancelled
//! job in the `<prefix>_cancelled` KV bucket; every worker watches it (from
//! the current entries on, so a worker started later also knows), aborts the
//! job's running subagents at once and refuses its tasks still in flight on
//! the bus. Aborted subagents report `cancelled`.

use std::sync::Arc;

use dashmap::{DashMap, DashSet};
use flotilla_bus::Bus;
use flotilla_protocol::ids::{JobId, TaskId};
use futures::StreamExt;
use tokio_util::sync::CancellationToken;

/// Cancelled jobs and the running tasks to abort.
#[derive(Default)]
pub struct CancelWatch {
    cancelled: DashSet<JobId>,
    running: DashMap<TaskId, (JobId, CancellationToken)>,
}

/// Removes a task from the watch when it ends.
pub struct Registration {
    watch: Arc<CancelWatch>,
    task: TaskId,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.watch.running.remove(&self.task);
    }
}

impl CancelWatch {
    /// Starts watching the bucket; returns once current entries are loaded.
    pub async fn start(bus: &Bus) -> anyhow::Result<Arc<Self>> {
        let mut cancels = Box::pin(bus.cancellations().await?.watch().await?);
        let watch = Arc::new(Self::default());
        let w = watch.clone();
        tokio::spawn(async move {
            while let Some(c) = cancels.next().await {
                w.cancel(c.job, &c.reason);
            }
            tracing::error!("cancel watch ended");
        });
        Ok(watch)
    }

    fn cancel(&self, job: JobId, reason: &str) {
        if self.cancelled.insert(job) {
            let mut aborted = 0;
            for r in self.running.iter().filter(|r| r.value().0 == job) {
                r.value().1.cancel();
                aborted += 1;
            }
            tracing::info!(job_id = %job, aborted, reason, "job cancelled");
        }
    }

    /// Registers a running task; its token fires if its job is (or gets) cancelled.
    pub fn register(self: &Arc<Self>, job: JobId, task: TaskId, token: CancellationToken) -> Registration {
        self.running.insert(task, (job, token.clone()));
        if self.cancelled.contains(&job) {
            token.cancel();
        }
        Registration { watch: self.clone(), task }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cancelling_a_job_aborts_only_its_tasks() {
        let w = Arc::new(CancelWatch::default());
        let (a, b) = (JobId::new(), JobId::new());
        let (ta, tb) = (CancellationToken::new(), CancellationToken::new());
        let _ra = w.register(a, TaskId::new(), ta.clone());
        let rb = w.register(b, TaskId::new(), tb.clone());
        w.cancel(a, "test");
        assert!(ta.is_cancelled());
        assert!(!tb.is_cancelled());
        drop(rb);
        assert_eq!(w.running.len(), 1);
        let late = CancellationToken::new();
        let _r = w.register(a, TaskId::new(), late.clone());
        assert!(late.is_cancelled(), "a task of an already cancelled job is aborted at once");
    }
}
