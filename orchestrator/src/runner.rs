//! Which jobs this orchestrator plans, and when: any number of orchestrators
//! share one prefix, and each job is planned by exactly one of them, the
//! holder of its lease (src/leases.rs, docs/RELIABILITY.md "Job leases").
//!
//! A job goes to whichever orchestrator has a free planning slot (one of
//! `[planner] concurrency`): the one it was submitted to when that one has
//! a slot free; otherwise it waits in the store, unowned (and in the local
//! queue of the orchestrator it was submitted to, which starts it first
//! when a slot frees), and the first orchestrator with a free slot takes
//! it: when one of its planners ends, on
//! its periodic look for waiting jobs (every `lease_ttl`), when it starts, or
//! when a job's lease ends (given back by an orchestrator that stopped, or
//! expired after one died). Starting takes a slot, then the lease; if
//! another orchestrator holds the lease, the slot is given back. Nothing is
//! held for a waiting job, so no waiting job is lost with any orchestrator.
//!
//! Cancels are followed from the cancellations bucket, so a cancel answered
//! by any orchestrator reaches the one planning the job.

use std::collections::VecDeque;
use std::sync::Arc;

use dashmap::DashMap;
use flotilla_bus::{Bus, BusError};
use flotilla_protocol::ids::JobId;
use futures::StreamExt;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::jobs::JobStore;
use crate::leases::Ownership;
use crate::planner::Planner;

/// Starts, tracks and stops the planners of the jobs this orchestrator owns.
pub(crate) struct JobRunner {
    bus: Bus,
    cancellations: flotilla_bus::Cancellations,
    jobs: JobStore,
    planner: Arc<Planner>,
    ownership: Ownership,
    /// `[planner] concurrency` permits; a job's planner holds one while it runs.
    slots: Arc<Semaphore>,
    /// Every planner task, so shutdown waits for them to checkpoint and stop.
    tracker: TaskTracker,
    /// Fires on orchestrator shutdown: planners stop, their jobs stay
    /// `running` and their leases are given back, for another orchestrator.
    shutdown: CancellationToken,
    /// Cancellation token of each job owned here (fires on `cancel`).
    running: DashMap<JobId, CancellationToken>,
    /// Jobs submitted here while every slot was busy, oldest first. A freed
    /// slot starts the next of them without reading the store; only when
    /// none is left does it look in the job index (with a backlog of B jobs,
    /// reading the store at each job's end cost B reads a job).
    waiting: std::sync::Mutex<VecDeque<JobId>>,
}

impl JobRunner {
    pub(crate) fn new(
        bus: Bus,
        cancellations: flotilla_bus::Cancellations,
        jobs: JobStore,
        planner: Arc<Planner>,
        ownership: Ownership,
        concurrency: usize,
    ) -> Self {
        Self {
            bus,
            cancellations,
            jobs,
            planner,
            ownership,
            slots: Arc::new(Semaphore::new(concurrency.max(1))),
            tracker: TaskTracker::new(),
            shutdown: CancellationToken::new(),
            running: DashMap::new(),
            waiting: std::sync::Mutex::default(),
        }
    }

    /// Starts every unfinished job no other orchestrator owns, then follows
    /// ended leases and cancellations until shutdown.
    pub(crate) async fn resume(self: &Arc<Self>, bus: &Bus) -> Result<(), BusError> {
        let ended = bus.leases().await?.ended().await?;
        let cancels = bus.cancellations().await?.watch().await?;
        // At start, the slow look: it also re-files index entries that lag their job.
        match self.jobs.unfinished().await {
            Ok(jobs) => self.start_unowned(jobs.into_iter().map(|r| r.id).collect()).await,
            Err(e) => tracing::warn!(error = %e, "cannot look for unfinished jobs; the next look retries"),
        }
        let me = self.clone();
        tokio::spawn(async move {
            let every = me.ownership.ttl();
            let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            loop {
                tokio::select! {
                    _ = tick.tick() => me.fill_slots().await,
                    _ = me.shutdown.cancelled() => return,
                }
            }
        });
        let me = self.clone();
        tokio::spawn(async move {
            let mut ended = std::pin::pin!(ended.take_until(me.shutdown.clone().cancelled_owned()));
            while let Some(job) = ended.next().await {
                me.adopt(job).await;
            }
        });
        let me = self.clone();
        tokio::spawn(async move {
            let mut cancels = std::pin::pin!(cancels.take_until(me.shutdown.clone().cancelled_owned()));
            while let Some(c) = cancels.next().await {
                if c.task.is_none()
                    && let Some(token) = me.running.get(&c.job)
                {
                    tracing::info!(job_id = %c.job, reason = %c.reason, "job cancelled");
                    token.cancel();
                }
            }
        });
        Ok(())
    }

    /// Starts waiting jobs that no orchestrator owns while this one has free
    /// slots: those the job index files as submitted, then as running
    /// (their owner may have died), oldest first.
    async fn fill_slots(self: &Arc<Self>) {
        if self.slots.available_permits() == 0 || self.shutdown.is_cancelled() {
            return;
        }
        match self.jobs.waiting().await {
            Ok(ids) => self.start_unowned(ids).await,
            Err(e) => tracing::warn!(error = %e, "cannot look for waiting jobs"),
        }
    }

    async fn start_unowned(self: &Arc<Self>, ids: Vec<JobId>) {
        for id in ids {
            if self.slots.available_permits() == 0 || self.shutdown.is_cancelled() {
                break;
            }
            if self.running.contains_key(&id) {
                continue;
            }
            match self.ownership.owner_of(&id).await {
                Ok(None) => {
                    tracing::info!(job_id = %id, "starting a waiting job");
                    self.start(id);
                }
                Ok(Some(_)) => {}
                Err(e) => tracing::warn!(job_id = %id, error = %e, "cannot read a job's lease"),
            }
        }
    }

    /// A slot came free: the oldest job waiting here, else any waiting job
    /// the index lists.
    async fn next(self: &Arc<Self>) {
        while self.slots.available_permits() > 0 && !self.shutdown.is_cancelled() {
            let next = self.waiting.lock().unwrap_or_else(std::sync::PoisonError::into_inner).pop_front();
            let Some(id) = next else { return self.fill_slots().await };
            if !self.running.contains_key(&id) {
                self.start(id);
            }
        }
    }

    /// A job whose lease ended: start it here if it is still unfinished and
    /// a slot is free.
    async fn adopt(self: &Arc<Self>, job: JobId) {
        if self.running.contains_key(&job) || self.shutdown.is_cancelled() || self.slots.available_permits() == 0 {
            return;
        }
        match self.jobs.get(&job).await {
            Ok(Some(rec)) if !rec.status.is_terminal() => {
                tracing::info!(job_id = %job, "job lease ended; taking the job over");
                self.start(job);
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(job_id = %job, error = %e, "cannot read a job whose lease ended"),
        }
    }

    /// Plans job `id` here if a slot is free, unless it is already planned
    /// here or another orchestrator holds its lease. False when no slot is
    /// free: the job waits for any orchestrator's free slot.
    pub(crate) fn start(self: &Arc<Self>, id: JobId) -> bool {
        let Ok(slot) = self.slots.clone().try_acquire_owned() else {
            self.waiting.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push_back(id);
            return false;
        };
        // `stop` (shutdown, or this job's lease lost) is the parent of the
        // job's own token, so whenever the planner sees its token fire for
        // either reason, `stop` has already fired and the job stays `running`
        // for its next owner; a cancel fires only the job's token.
        let stop = self.shutdown.child_token();
        let token = stop.child_token();
        match self.running.entry(id) {
            dashmap::Entry::Occupied(_) => return true,
            dashmap::Entry::Vacant(v) => v.insert(token.clone()),
        };
        let me = self.clone();
        self.tracker.spawn(async move {
            me.own(id, token, stop).await;
            me.running.remove(&id);
            drop(slot);
            // A slot is free again: a waiting job may take it.
            me.next().await;
        });
        true
    }

    async fn own(&self, id: JobId, cancel: CancellationToken, stop: CancellationToken) {
        let held = match self.ownership.take(id).await {
            Ok(Some(held)) => held,
            Ok(None) => return tracing::debug!(job_id = %id, "job owned by another orchestrator"),
            Err(e) => return tracing::warn!(job_id = %id, error = %e, "job lease not taken; another orchestrator will"),
        };
        // The lease makes the read below current: a job's owner stores its
        // outcome before it gives the lease back. A job seen as waiting a
        // moment ago (fill_slots lists, then starts) may have ended since;
        // planning it again would re-run a finished job.
        match self.jobs.get(&id).await {
            Ok(Some(rec)) if !rec.status.is_terminal() => {}
            Ok(found) => {
                tracing::debug!(job_id = %id, status = ?found.map(|r| r.status), "job ended before its lease was taken");
                return held.release().await;
            }
            Err(e) => {
                tracing::warn!(job_id = %id, error = %e, "cannot read the job whose lease was taken; left for later");
                return held.release().await;
            }
        }
        tracing::info!(job_id = %id, owner = %self.ownership.owner, "job lease taken");
        // The planner stops (the job stays `running`) on shutdown or once
        // fenced; a cancel of the job alone ends it `cancelled`.
        let (fenced, linked) = (held.fenced(), stop.clone());
        let link = tokio::spawn(async move {
            fenced.cancelled().await;
            linked.cancel();
        });
        // A job cancelled while it waited ends at once, `cancelled`, in `run`.
        if let Ok(Some(reason)) = self.cancellations.reason(&id).await {
            tracing::info!(job_id = %id, %reason, "the waiting job was cancelled");
            cancel.cancel();
        }
        self.planner.run(id, cancel, stop.clone()).await;
        link.abort();
        if !stop.is_cancelled() {
            self.end_tasks_of_failed(id).await;
        }
        held.release().await;
    }

    /// A job that failed (an error, its timeout, a limit) leaves nothing
    /// behind: its queued tasks are purged and its running subagents
    /// cancelled, as an explicit cancel does (docs/RELIABILITY.md).
    async fn end_tasks_of_failed(&self, id: JobId) {
        let error = match self.jobs.get(&id).await {
            Ok(Some(rec)) if rec.status == flotilla_protocol::JobStatus::Failed => rec.error,
            Ok(_) => return,
            Err(e) => return tracing::warn!(job_id = %id, error = %e, "cannot read the ended job"),
        };
        let reason = format!("the job failed: {}", error.map(|e| e.message).unwrap_or_else(|| "unknown error".into()));
        match self.bus.cancellations().await {
            Ok(c) => {
                if let Err(e) = c.record(&id, &reason).await {
                    tracing::warn!(job_id = %id, error = %e, "running tasks of a failed job not cancelled");
                }
            }
            Err(e) => tracing::warn!(job_id = %id, error = %e, "running tasks of a failed job not cancelled"),
        }
        match self.bus.tasks().purge_job(&id, None).await {
            Ok(n) => tracing::info!(job_id = %id, purged_tasks = n, "failed job's queued tasks purged"),
            Err(e) => tracing::warn!(job_id = %id, error = %e, "failed job's queued tasks not purged"),
        }
    }

    /// Cancels the planner of `id` if it runs here; false when it does not.
    pub(crate) fn cancel(&self, id: &JobId) -> bool {
        self.running.get(id).map(|t| t.cancel()).is_some()
    }

    /// Stops every planner (their jobs stay `running`), gives their leases
    /// back and waits for them.
    pub(crate) async fn stop(&self) {
        self.shutdown.cancel();
        self.tracker.close();
        self.tracker.wait().await;
    }
}
