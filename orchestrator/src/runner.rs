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
//! Tenants take turns (docs/SECURITY.md "Tenant quotas and fairness"): a
//! tenant plans at most `[tenants] max_running_jobs` jobs here at once, and a
//! free slot goes to the waiting job of the tenant served least recently,
//! oldest job first, so one tenant's backlog of waiting jobs delays
//! another's next job by one job at most, not by the backlog.
//!
//! Cancels are followed from the cancellations bucket, so a cancel answered
//! by any orchestrator reaches the one planning the job.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use dashmap::DashMap;
use flotilla_bus::{Bus, BusError};
use flotilla_config::TenantsConfig;
use flotilla_protocol::ids::{JobId, Tenant};
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
    /// Jobs submitted here while no slot was free for them, per tenant, and
    /// whose turn it is. A freed slot starts the next of them without
    /// reading the store; only when none may start does it look in the job
    /// index (with a backlog of B jobs, reading the store at each job's end
    /// cost B reads a job).
    turns: std::sync::Mutex<Turns>,
    /// `[tenants]`: `max_running_jobs` of each tenant.
    tenants: TenantsConfig,
}

/// Who plans next: the jobs waiting here per tenant, the jobs each tenant
/// plans here, and when each tenant was last given a slot.
#[derive(Default)]
struct Turns {
    waiting: BTreeMap<Tenant, VecDeque<JobId>>,
    running: HashMap<Tenant, usize>,
    /// The value of `clock` when the tenant last started a job.
    served: HashMap<Tenant, u64>,
    clock: u64,
}

impl Turns {
    /// Files a job to start when a slot and its tenant's turn come, in its
    /// place by age (job ids are UUIDv7: a job put back stays ahead of newer ones).
    fn wait(&mut self, tenant: Tenant, id: JobId) {
        let queue = self.waiting.entry(tenant).or_default();
        if !queue.contains(&id) {
            let at = queue.partition_point(|q| *q < id);
            queue.insert(at, id);
        }
    }

    /// Whether `tenant` may start one more job under `cap`.
    fn has_room(&self, tenant: &Tenant, cap: usize) -> bool {
        self.running.get(tenant).copied().unwrap_or(0) < cap
    }

    /// A job of `tenant` starts here.
    fn started(&mut self, tenant: &Tenant) {
        self.clock += 1;
        *self.running.entry(tenant.clone()).or_default() += 1;
        self.served.insert(tenant.clone(), self.clock);
    }

    /// A job of `tenant` stopped here.
    fn ended(&mut self, tenant: &Tenant) {
        if let Some(n) = self.running.get_mut(tenant) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.running.remove(tenant);
            }
        }
    }

    /// The next job of `queues` to start: of the tenant below its cap that
    /// was served least recently (never served first; ties: the oldest
    /// job), taken out of its queue.
    fn pick(
        &self,
        queues: &mut BTreeMap<Tenant, VecDeque<JobId>>,
        cap: impl Fn(&Tenant) -> usize,
    ) -> Option<(Tenant, JobId)> {
        let tenant = queues
            .iter()
            .filter(|(t, q)| !q.is_empty() && self.has_room(t, cap(t)))
            .min_by_key(|(t, q)| (self.served.get(*t).copied().unwrap_or(0), q.front().copied()))
            .map(|(t, _)| t.clone())?;
        let queue = queues.get_mut(&tenant)?;
        let id = queue.pop_front()?;
        if queue.is_empty() {
            queues.remove(&tenant);
        }
        Some((tenant, id))
    }

    /// The next job waiting here that may start.
    fn next(&mut self, cap: impl Fn(&Tenant) -> usize) -> Option<(Tenant, JobId)> {
        let mut waiting = std::mem::take(&mut self.waiting);
        let next = self.pick(&mut waiting, cap);
        self.waiting = waiting;
        next
    }
}

impl JobRunner {
    pub(crate) fn new(
        bus: Bus,
        cancellations: flotilla_bus::Cancellations,
        jobs: JobStore,
        planner: Arc<Planner>,
        ownership: Ownership,
        concurrency: usize,
        tenants: TenantsConfig,
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
            turns: std::sync::Mutex::default(),
            tenants,
        }
    }

    /// Starts every unfinished job no other orchestrator owns, then follows
    /// ended leases and cancellations until shutdown.
    pub(crate) async fn resume(self: &Arc<Self>, bus: &Bus) -> Result<(), BusError> {
        let ended = bus.leases().await?.ended().await?;
        let cancels = bus.cancellations().await?.watch().await?;
        // At start, the slow look: it also re-files index entries that lag their job.
        match self.jobs.unfinished().await {
            Ok(jobs) => self.start_unowned(jobs.into_iter().map(|r| (r.tenant, r.id)).collect()).await,
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

    /// Starts jobs of `ids` (oldest first per tenant) no orchestrator owns,
    /// tenants taking turns, while slots are free.
    async fn start_unowned(self: &Arc<Self>, ids: Vec<(Tenant, JobId)>) {
        let mut queues: BTreeMap<Tenant, VecDeque<JobId>> = BTreeMap::new();
        for (tenant, id) in ids {
            if !self.running.contains_key(&id) {
                queues.entry(tenant).or_default().push_back(id);
            }
        }
        while self.slots.available_permits() > 0 && !self.shutdown.is_cancelled() {
            let Some((tenant, id)) = self.lock_turns().pick(&mut queues, |t| self.cap(t)) else { break };
            match self.ownership.owner_of(&id).await {
                Ok(None) => {
                    tracing::info!(job_id = %id, "starting a waiting job");
                    self.try_start(id, tenant, false);
                }
                Ok(Some(_)) => {}
                Err(e) => tracing::warn!(job_id = %id, error = %e, "cannot read a job's lease"),
            }
        }
    }

    /// A slot came free: the next job waiting here whose tenant's turn it
    /// is, else any waiting job the index lists.
    async fn next(self: &Arc<Self>) {
        if self.start_turns() {
            self.fill_slots().await;
        }
    }

    /// Starts jobs waiting here, in turn, while slots are free; true when a
    /// slot is still free and no job waiting here may take it.
    fn start_turns(self: &Arc<Self>) -> bool {
        while self.slots.available_permits() > 0 && !self.shutdown.is_cancelled() {
            let next = self.lock_turns().next(|t| self.cap(t));
            let Some((tenant, id)) = next else { return true };
            if !self.running.contains_key(&id) && !self.try_start(id, tenant, true) {
                return false;
            }
        }
        false
    }

    fn lock_turns(&self) -> std::sync::MutexGuard<'_, Turns> {
        self.turns.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `[tenants] max_running_jobs` of `tenant`.
    fn cap(&self, tenant: &Tenant) -> usize {
        self.tenants.limits(tenant.as_str()).max_running_jobs
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
                self.try_start(job, rec.tenant, false);
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(job_id = %job, error = %e, "cannot read a job whose lease ended"),
        }
    }

    /// Plans job `id` of `tenant` here if a slot is free and the tenant is
    /// below its `max_running_jobs`, unless it is already planned here or
    /// another orchestrator holds its lease. False when it cannot start now:
    /// the job waits for its turn here and for any orchestrator's free slot.
    pub(crate) fn start(self: &Arc<Self>, id: JobId, tenant: Tenant) -> bool {
        // Jobs waiting here go first, in turn: a new job starts at once only
        // when none of them may (a full tenant's jobs do not hold others back).
        let mut turns = self.lock_turns();
        if turns.waiting.is_empty() {
            drop(turns);
            return self.try_start(id, tenant, true);
        }
        turns.wait(tenant, id);
        drop(turns);
        self.start_turns();
        self.running.contains_key(&id)
    }

    /// Starts `id` when a slot is free and its tenant has room; otherwise,
    /// when `keep`, files it to wait here.
    fn try_start(self: &Arc<Self>, id: JobId, tenant: Tenant, keep: bool) -> bool {
        let mut turns = self.lock_turns();
        if self.running.contains_key(&id) {
            return true;
        }
        let slot = match self.slots.clone().try_acquire_owned() {
            Ok(slot) if turns.has_room(&tenant, self.cap(&tenant)) => slot,
            _ => {
                if keep {
                    turns.wait(tenant, id);
                }
                return false;
            }
        };
        // `stop` (shutdown, or this job's lease lost) is the parent of the
        // job's own token, so whenever the planner sees its token fire for
        // either reason, `stop` has already fired and the job stays `running`
        // for its next owner; a cancel fires only the job's token.
        let stop = self.shutdown.child_token();
        let token = stop.child_token();
        self.running.insert(id, token.clone());
        turns.started(&tenant);
        drop(turns);
        let me = self.clone();
        self.tracker.spawn(async move {
            me.own(id, token, stop).await;
            me.running.remove(&id);
            me.lock_turns().ended(&tenant);
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
        self.planner.release_tasks(&id);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant(name: &str) -> Tenant {
        Tenant::new(name).unwrap()
    }

    #[test]
    fn a_free_slot_goes_to_the_tenant_served_least_recently_not_to_the_oldest_backlog() {
        let (a, b) = (tenant("acme"), tenant("globex"));
        let mut turns = Turns::default();
        // acme started one job and filed five more, then globex filed one.
        turns.started(&a);
        let flood: Vec<JobId> = (0..5).map(|_| JobId::new()).collect();
        for id in &flood {
            turns.wait(a.clone(), *id);
        }
        let late = JobId::new();
        turns.wait(b.clone(), late);
        turns.ended(&a);
        let cap = |_: &Tenant| 4;
        assert_eq!(turns.next(cap), Some((b.clone(), late)), "globex's turn before acme's backlog");
        turns.started(&b);
        assert_eq!(turns.next(cap), Some((a.clone(), flood[0])), "then acme's, oldest first");
    }

    #[test]
    fn a_tenant_at_its_running_cap_waits_while_others_start() {
        let (a, b) = (tenant("acme"), tenant("globex"));
        let mut turns = Turns::default();
        turns.started(&a);
        let (a2, b1) = (JobId::new(), JobId::new());
        turns.wait(a.clone(), a2);
        turns.wait(b.clone(), b1);
        let cap = |_: &Tenant| 1;
        assert_eq!(turns.next(cap), Some((b.clone(), b1)));
        turns.started(&b);
        assert_eq!(turns.next(cap), None, "acme is at its cap");
        turns.ended(&a);
        assert_eq!(turns.next(cap), Some((a, a2)));
    }
}
