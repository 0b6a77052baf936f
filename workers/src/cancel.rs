//! Cancellation on the worker side, of whole jobs and of single tasks. The
//! orchestrator records a cancelled job (key `<job>`) or task (key
//! `<job>.<task>`, the planner's `cancel_task`) in the `<prefix>_cancelled`
//! KV bucket (shared/bus/src/cancellations.rs); every worker watches it (from
//! the current entries on, so a worker started later also knows), aborts the
//! matching running subagents at once and refuses the matching tasks still
//! in flight on the bus. Aborted subagents report `cancelled`.

use std::sync::Arc;

use dashmap::DashMap;
use flotilla_bus::{Bus, Cancelled, TOPOLOGY_BUDGET, retry};
use flotilla_protocol::ids::{JobId, TaskId};
use futures::StreamExt;
use tokio_util::sync::CancellationToken;

/// Cancelled jobs and tasks, and the running tasks to abort.
#[derive(Default)]
pub struct CancelWatch {
    /// Cancelled jobs, with their reasons.
    jobs: DashMap<JobId, String>,
    /// Cancelled single tasks, with their reasons.
    tasks: DashMap<TaskId, String>,
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
    /// A bus outage while the worker starts (NATS restarting) is waited out
    /// like the topology is, up to [`TOPOLOGY_BUDGET`]; a permission error is not.
    pub async fn start(bus: &Bus) -> anyhow::Result<Arc<Self>> {
        let watch = || async { bus.cancellations().await?.watch().await };
        let mut cancels = Box::pin(retry("watching job cancellations", TOPOLOGY_BUDGET, watch).await?);
        let watch = Arc::new(Self::default());
        let w = watch.clone();
        tokio::spawn(async move {
            while let Some(c) = cancels.next().await {
                w.cancel(c);
            }
            tracing::error!("cancel watch ended");
        });
        Ok(watch)
    }

    fn cancel(&self, c: Cancelled) {
        match c.task {
            Some(task) => {
                if self.tasks.insert(task, c.reason.clone()).is_none() {
                    let running = self.running.get(&task).filter(|r| r.value().0 == c.job);
                    let aborted = running.map(|r| r.value().1.cancel()).is_some();
                    tracing::info!(job_id = %c.job, task_id = %task, aborted, reason = c.reason, "task cancelled");
                }
            }
            None => {
                if self.jobs.insert(c.job, c.reason.clone()).is_none() {
                    let mut aborted = 0;
                    for r in self.running.iter().filter(|r| r.value().0 == c.job) {
                        r.value().1.cancel();
                        aborted += 1;
                    }
                    tracing::info!(job_id = %c.job, aborted, reason = c.reason, "job cancelled");
                }
            }
        }
    }

    /// Why `task` of `job` is cancelled: its own cancel first, then its
    /// job's; `None` when neither is.
    pub fn reason(&self, job: &JobId, task: &TaskId) -> Option<String> {
        let own = self.tasks.get(task).map(|r| format!("the task was cancelled: {}", r.value()));
        own.or_else(|| self.jobs.get(job).map(|r| format!("the job was cancelled: {}", r.value())))
    }

    /// Registers a running task; its token fires if its job or the task
    /// itself is (or gets) cancelled.
    pub fn register(self: &Arc<Self>, job: JobId, task: TaskId, token: CancellationToken) -> Registration {
        self.running.insert(task, (job, token.clone()));
        if self.reason(&job, &task).is_some() {
            token.cancel();
        }
        Registration { watch: self.clone(), task }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job_cancel(job: JobId) -> Cancelled {
        Cancelled { job, task: None, reason: "test".into() }
    }

    #[test]
    fn cancelling_a_job_aborts_only_its_tasks() {
        let w = Arc::new(CancelWatch::default());
        let (a, b) = (JobId::new(), JobId::new());
        let (ta, tb) = (CancellationToken::new(), CancellationToken::new());
        let _ra = w.register(a, TaskId::new(), ta.clone());
        let rb = w.register(b, TaskId::new(), tb.clone());
        w.cancel(job_cancel(a));
        assert!(ta.is_cancelled());
        assert!(!tb.is_cancelled());
        drop(rb);
        assert_eq!(w.running.len(), 1);
        let late = CancellationToken::new();
        let _r = w.register(a, TaskId::new(), late.clone());
        assert!(late.is_cancelled(), "a task of an already cancelled job is aborted at once");
    }

    #[test]
    fn cancelling_a_task_aborts_it_alone_and_refuses_it_when_it_arrives_later() {
        let w = Arc::new(CancelWatch::default());
        let job = JobId::new();
        let (one, other, queued) = (TaskId::new(), TaskId::new(), TaskId::new());
        let (t1, t2) = (CancellationToken::new(), CancellationToken::new());
        let _r1 = w.register(job, one, t1.clone());
        let _r2 = w.register(job, other, t2.clone());

        w.cancel(Cancelled { job, task: Some(one), reason: "not needed".into() });
        w.cancel(Cancelled { job, task: Some(queued), reason: "changed plan".into() });

        assert!(t1.is_cancelled());
        assert!(!t2.is_cancelled(), "the job and its other tasks go on");
        assert_eq!(w.reason(&job, &one).as_deref(), Some("the task was cancelled: not needed"));
        assert_eq!(w.reason(&job, &other), None);
        let late = CancellationToken::new();
        let _r3 = w.register(job, queued, late.clone());
        assert!(late.is_cancelled(), "a cancelled task pulled later is refused at once");
        w.cancel(job_cancel(job));
        assert!(t2.is_cancelled());
        assert_eq!(w.reason(&job, &other).as_deref(), Some("the job was cancelled: test"));
    }
}
