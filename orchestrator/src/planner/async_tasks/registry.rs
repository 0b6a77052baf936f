//! What one job's planner knows about its asynchronous tasks: which it
//! started, which ended and how, and which outcomes it has already been
//! shown (by `check_tasks`, `wait_tasks`, `cancel_task` or a wake-up note),
//! with a change counter the waiting tools and the wake-up loop await.

use std::collections::BTreeMap;
use std::sync::Mutex;

use flotilla_protocol::ids::{JobId, TaskId, Tenant};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::planner::dispatch::TaskOutcome;

/// One job's asynchronous tasks.
pub(crate) struct JobTasks {
    /// The job.
    pub job: JobId,
    /// Its tenant.
    pub tenant: Tenant,
    /// Its trace context.
    pub traceparent: Option<String>,
    /// Fires when the job's planner run ends (or the job is cancelled, or
    /// the orchestrator stops): the followers stop waiting, the tasks go on.
    pub stop: CancellationToken,
    slots: Mutex<BTreeMap<TaskId, Slot>>,
    changed: watch::Sender<u64>,
}

#[derive(Default)]
struct Slot {
    outcome: Option<TaskOutcome>,
    seen: bool,
}

impl JobTasks {
    pub fn new(job: JobId, tenant: Tenant, traceparent: Option<String>, stop: CancellationToken) -> Self {
        Self { job, tenant, traceparent, stop, slots: Mutex::default(), changed: watch::Sender::new(0) }
    }

    /// Starts tracking `task`; false when it already was.
    pub fn track(&self, task: TaskId) -> bool {
        let mut slots = self.slots.lock().unwrap();
        if slots.contains_key(&task) {
            return false;
        }
        slots.insert(task, Slot::default());
        drop(slots);
        self.bump();
        true
    }

    /// Records how `task` ended (the first outcome wins).
    pub fn ended(&self, outcome: TaskOutcome, seen: bool) {
        let mut slots = self.slots.lock().unwrap();
        let slot = slots.entry(outcome.task_id).or_default();
        if slot.outcome.is_none() {
            slot.outcome = Some(outcome);
            slot.seen = seen;
        }
        drop(slots);
        self.bump();
    }

    fn bump(&self) {
        self.changed.send_modify(|n| *n += 1);
    }

    /// Whether `task` is tracked, and its outcome once it ended.
    pub fn state(&self, task: &TaskId) -> Option<Option<TaskOutcome>> {
        self.slots.lock().unwrap().get(task).map(|s| s.outcome.clone())
    }

    /// Every tracked task, oldest first (task ids are UUIDv7).
    pub fn ids(&self) -> Vec<TaskId> {
        self.slots.lock().unwrap().keys().copied().collect()
    }

    /// Tasks that have not ended.
    pub fn running(&self) -> Vec<TaskId> {
        self.slots.lock().unwrap().iter().filter(|(_, s)| s.outcome.is_none()).map(|(t, _)| *t).collect()
    }

    /// Ended tasks whose outcome the planner has not been shown yet.
    pub fn unseen(&self) -> Vec<TaskId> {
        let slots = self.slots.lock().unwrap();
        slots.iter().filter(|(_, s)| s.outcome.is_some() && !s.seen).map(|(t, _)| *t).collect()
    }

    /// The tools' view of `ids`: each outcome, or `running`; the ended ones
    /// count as shown to the planner from now on.
    pub fn show(&self, ids: &[TaskId]) -> Vec<Value> {
        let mut slots = self.slots.lock().unwrap();
        ids.iter()
            .map(|id| match slots.get_mut(id) {
                Some(Slot { outcome: Some(o), seen }) => {
                    *seen = true;
                    serde_json::to_value(o).unwrap_or_else(|_| json!({"task_id": id}))
                }
                _ => json!({"task_id": id, "status": "running"}),
            })
            .collect()
    }

    /// Waits until `done` holds (checked now and after every change) or
    /// `stop` fires; returns whether `done` holds.
    pub async fn until(&self, stop: &CancellationToken, done: impl Fn(&Self) -> bool) -> bool {
        let mut rx = self.changed.subscribe();
        loop {
            if done(self) {
                return true;
            }
            tokio::select! {
                r = rx.changed() => if r.is_err() { return done(self) },
                _ = stop.cancelled() => return done(self),
            }
        }
    }
}
