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
use flotilla_bus::{BusError, BusErrorKind, Cas, Changes, FollowUps, job_keys};
use flotilla_protocol::ids::{JobId, SubagentType, TaskId, Tenant};
use flotilla_protocol::{JobEvent, JobInput, JobRecord, JobTodos, TaskEntry, TaskMessage, TaskReport};
use tokio::sync::watch;

use crate::ports::{JobBackend, StoredReports, TaskDispatch};

/// The task queue: records publishes and withdrawals; workers are live unless
/// [`set_served`](Self::set_served) says otherwise.
pub struct FakeQueue {
    published: watch::Sender<Vec<TaskMessage>>,
    follow_ups: Mutex<Vec<FollowUps>>,
    withdrawn: Mutex<Vec<(JobId, TaskId)>>,
    served: AtomicBool,
}

impl Default for FakeQueue {
    fn default() -> Self {
        Self {
            published: watch::Sender::new(Vec::new()),
            follow_ups: Mutex::default(),
            withdrawn: Mutex::default(),
            served: AtomicBool::new(true),
        }
    }
}

impl FakeQueue {
    /// Every task published so far.
    pub fn published(&self) -> Vec<TaskMessage> {
        self.published.borrow().clone()
    }

    /// Whether follow-ups may come, of every task published so far, in order.
    pub fn follow_ups(&self) -> Vec<FollowUps> {
        self.follow_ups.lock().unwrap().clone()
    }

    /// Waits until `n` tasks were published; returns the `n`th.
    pub async fn nth_published(&self, n: usize) -> TaskMessage {
        let mut rx = self.published.subscribe();
        let all = rx.wait_for(|v| v.len() >= n).await.expect("the fake queue lives as long as the test");
        all[n - 1].clone()
    }

    /// Every task withdrawn so far.
    pub fn withdrawn(&self) -> Vec<(JobId, TaskId)> {
        self.withdrawn.lock().unwrap().clone()
    }

    /// Whether a live worker serves every type from now on.
    pub fn set_served(&self, served: bool) {
        self.served.store(served, Ordering::SeqCst);
    }
}

#[async_trait]
impl TaskDispatch for FakeQueue {
    async fn publish(&self, task: &TaskMessage, follow_ups: FollowUps) -> Result<(), BusError> {
        self.follow_ups.lock().unwrap().push(follow_ups);
        self.published.send_modify(|v| v.push(task.clone()));
        Ok(())
    }

    async fn withdraw(&self, job: &JobId, task: &TaskId, _reason: &str) -> Result<(), BusError> {
        self.withdrawn.lock().unwrap().push((*job, *task));
        Ok(())
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
    async fn stored(&self, _tenant: &Tenant, _job: &JobId, ty: &SubagentType, task: &TaskId) -> Option<TaskReport> {
        self.stored.lock().unwrap().get(task).filter(|r| &r.subagent_type == ty).cloned()
    }
}

/// The jobs bucket (revisioned keys, as NATS KV) and the job events published.
#[derive(Default)]
pub struct FakeJobs {
    kv: Mutex<FakeKv>,
    events: Mutex<Vec<JobEvent>>,
}

#[derive(Default)]
struct FakeKv {
    values: HashMap<String, (Bytes, u64)>,
    revision: u64,
    /// Bytes of every value stored, as a stream's bytes grow.
    written: u64,
    /// Values larger than this are refused as NATS refuses a payload over max_payload.
    max_value: Option<usize>,
    /// Writes still to fail with a timeout, as during a NATS outage.
    outage: usize,
    /// Values read by key listings and change reads (`keys`, `changes`).
    scanned: u64,
}

impl FakeKv {
    fn store(&mut self, key: &str, value: Bytes) -> Result<Cas, BusError> {
        if self.outage > 0 {
            self.outage -= 1;
            return Err(BusError::with_kind(
                BusErrorKind::Transient,
                format!("cannot store {key}"),
                "timed out: didn't receive ack in time",
            ));
        }
        if self.max_value.is_some_and(|max| value.len() > max) {
            return Err(BusError::with_kind(
                BusErrorKind::TooLarge,
                format!("cannot store {key}"),
                "maximum payload exceeded",
            ));
        }
        self.revision += 1;
        self.written += value.len() as u64;
        self.values.insert(key.to_string(), (value, self.revision));
        Ok(Cas::Stored(self.revision))
    }
}

/// Whether `key` matches a NATS-style `filter` (`*` one token, `>` the rest).
fn matches(filter: &str, key: &str) -> bool {
    let (mut f, mut k) = (filter.split('.'), key.split('.'));
    loop {
        match (f.next(), k.next()) {
            (Some(">"), Some(_)) => return true,
            (Some("*"), Some(_)) => {}
            (Some(a), Some(b)) if a == b => {}
            (None, None) => return true,
            _ => return false,
        }
    }
}

impl FakeJobs {
    /// The record of `id` as stored: its header, input and todos with every
    /// stored task entry in `tasks`, in dispatch order (not the store's live copy).
    pub fn stored(&self, id: &JobId) -> Option<JobRecord> {
        let kv = self.kv.lock().unwrap();
        let (header, _) = kv.values.get(&job_keys::header(id))?;
        let mut rec: JobRecord = flotilla_protocol::decode(header).expect("the store writes decodable headers");
        if let Some((b, _)) = kv.values.get(&job_keys::input(id)) {
            rec.input = flotilla_protocol::decode::<JobInput>(b).expect("decodable input").input;
        }
        if let Some((b, _)) = kv.values.get(&job_keys::todos(id)) {
            rec.todos = flotilla_protocol::decode::<JobTodos>(b).expect("decodable todos").todos;
        }
        let mut tasks: Vec<TaskEntry> = kv
            .values
            .iter()
            .filter(|(k, _)| matches(&job_keys::tasks(id), k))
            .map(|(_, (b, _))| flotilla_protocol::decode(b).expect("the store writes decodable entries"))
            .collect();
        tasks.sort_by_key(|t| t.task_id);
        rec.tasks.extend(tasks);
        Some(rec)
    }

    /// Fails the next `writes` writes with a timeout (a NATS outage).
    pub fn fail_next_writes(&self, writes: usize) {
        self.kv.lock().unwrap().outage = writes;
    }

    /// Stores `value` under `key` as an older orchestrator would have.
    pub fn put_raw(&self, key: &str, value: Bytes) {
        self.kv.lock().unwrap().store(key, value).unwrap();
    }

    /// Values read by key listings and change reads so far.
    pub fn scanned(&self) -> u64 {
        self.kv.lock().unwrap().scanned
    }

    /// Bytes of every value stored so far.
    pub fn bytes_written(&self) -> u64 {
        self.kv.lock().unwrap().written
    }

    /// Refuses values over `max` bytes from now on, as a too-large payload.
    pub fn set_max_value(&self, max: usize) {
        self.kv.lock().unwrap().max_value = Some(max);
    }

    /// Every job event published so far.
    pub fn events(&self) -> Vec<JobEvent> {
        self.events.lock().unwrap().clone()
    }
}

#[async_trait]
impl JobBackend for FakeJobs {
    async fn entry(&self, key: &str) -> Result<Option<(Bytes, u64)>, BusError> {
        Ok(self.kv.lock().unwrap().values.get(key).cloned())
    }

    async fn create(&self, key: &str, value: Bytes) -> Result<Cas, BusError> {
        let mut kv = self.kv.lock().unwrap();
        if kv.values.contains_key(key) {
            return Ok(Cas::Conflict);
        }
        kv.store(key, value)
    }

    async fn update(&self, key: &str, value: Bytes, revision: u64) -> Result<Cas, BusError> {
        let mut kv = self.kv.lock().unwrap();
        if kv.values.get(key).map(|(_, r)| *r).unwrap_or(0) != revision {
            return Ok(Cas::Conflict);
        }
        kv.store(key, value)
    }

    async fn keys(&self, filter: &str) -> Result<Vec<String>, BusError> {
        let mut kv = self.kv.lock().unwrap();
        let keys: Vec<String> = kv.values.keys().filter(|k| matches(filter, k)).cloned().collect();
        kv.scanned += keys.len() as u64;
        Ok(keys)
    }

    async fn changes(&self, filter: &str, after: u64, headers_only: bool) -> Result<Changes, BusError> {
        let mut kv = self.kv.lock().unwrap();
        // Only each key's last write is kept here: a stream would also hand
        // out the writes in between, which a reader applies in order to the same end.
        let mut written: Vec<(u64, String, Bytes)> = kv
            .values
            .iter()
            .filter(|(k, (_, rev))| *rev > after && matches(filter, k))
            .map(|(k, (v, rev))| (*rev, k.clone(), if headers_only { Bytes::new() } else { v.clone() }))
            .collect();
        written.sort_by_key(|(rev, ..)| *rev);
        kv.scanned += written.len() as u64;
        let last = written.last().map_or(after, |(rev, ..)| *rev);
        Ok(Changes { entries: written.into_iter().map(|(_, k, v)| (k, Some(v))).collect(), last })
    }

    async fn emit(&self, _tenant: &Tenant, _job: &JobId, event: &JobEvent) {
        self.events.lock().unwrap().push(event.clone());
    }
}
