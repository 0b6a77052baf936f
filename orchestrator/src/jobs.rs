//! The job store: job records in the jobs KV bucket (durable across restarts).
//! A job is a small header (key `<job>`: status, the input's head, answer,
//! usage, `tasks_total`, `task_counts`), its text (`<job>.input`, written
//! once), its todo list (`<job>.todos`, written when it changes), one key per
//! task (`<job>.t.<task>`) and one per dispatch key (`<job>.k.<key>` -> task
//! id), so every dispatch and report writes O(1) bytes in the job's size,
//! whatever the size of its input and todo list (key layout in
//! shared/bus/src/job_records.rs, docs/PROTOCOL.md). A [`JobRecord`] read
//! from the store has all of it but the tasks, which come a page at a time.
//!
//! The header of each job this orchestrator runs is kept in memory and
//! written as in jobs/live.rs (readers never wait; writes conditional on the
//! KV revision). Task entries are not kept in memory: each task write reads
//! the entry with its revision and updates it conditionally (jobs/tasks.rs).
//! Transient bus errors are retried for `WRITE_BUDGET`; permanent ones (too
//! large, permission) are returned at once, and a header too large to store
//! fires [`JobStore::oversized`] so the planner fails the job.
//!
//! Records of the old layout (one value with every task inline) are
//! still read: their inline tasks are served as they are.
//!
//! The bucket and the event stream sit behind [`JobBackend`]
//! (orchestrator/src/ports.rs): [`NatsJobs`] in production, an in-memory
//! fake in unit tests (orchestrator/src/fakes.rs).

mod index;
mod list_cache;
mod live;
mod retention;
mod task_views;
mod tasks;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use dashmap::DashMap;
use flotilla_bus::{Bus, BusError, BusErrorKind, Cas, Changes, JobIndex, JobRecords, job_keys, retry};
use flotilla_protocol::ids::{JobId, Tenant};
use flotilla_protocol::{self as protocol, JobEvent, JobEventKind, JobInput, JobRecord, JobSummary, JobTodos, Todo};
use tokio_util::sync::CancellationToken;

use crate::metrics::OrchestratorMetrics;
use crate::ports::JobBackend;
pub use index::ListQuery;
use live::{Doc, Live, Snapshot};
pub use retention::prune_request;

/// How long a job-record write is retried through transient errors before
/// the caller sees the error.
const WRITE_BUDGET: std::time::Duration = std::time::Duration::from_secs(60);

/// Pause between two rounds of [`JobStore::update_until_stored`] (each round
/// itself retries for `WRITE_BUDGET`).
const OUTCOME_RETRY: std::time::Duration = std::time::Duration::from_secs(5);

/// Bytes of the input the header keeps (for listings); the rest is in `<job>.input`.
const INPUT_HEAD_BYTES: usize = 160;

/// The header value of `rec`: no todos, the input's head only. Takes the
/// todos and the input out for the encoding (no copy) and puts them back.
fn encode_header(rec: &mut JobRecord) -> Bytes {
    let todos = std::mem::take(&mut rec.todos);
    let mut cut = INPUT_HEAD_BYTES.min(rec.input.len());
    while !rec.input.is_char_boundary(cut) {
        cut -= 1;
    }
    let tail = rec.input.split_off(cut);
    let payload = Bytes::from(protocol::encode(&*rec));
    rec.input.push_str(&tail);
    rec.todos = todos;
    payload
}

fn encode_todos(rec: &mut JobRecord) -> Bytes {
    let todos = JobTodos { v: protocol::SCHEMA_VERSION, todos: std::mem::take(&mut rec.todos) };
    let payload = Bytes::from(protocol::encode(&todos));
    rec.todos = todos.todos;
    payload
}

fn unreadable(key: &str) -> impl Fn(protocol::DecodeError) -> BusError + '_ {
    move |e| BusError::new(format!("job record {key} is unreadable"), e)
}

/// Job records and job events.
#[derive(Clone)]
pub struct JobStore {
    backend: Arc<dyn JobBackend>,
    live: Arc<DashMap<JobId, Arc<Live>>>,
    metrics: Arc<OrchestratorMetrics>,
    /// The job index (jobs/index.rs); `None` over the in-memory backend.
    index: Option<JobIndex>,
    /// The jobs bucket, for deleting a whole job (jobs/retention.rs); `None` over the in-memory backend.
    records: Option<JobRecords>,
    /// Job files, deleted with a job past retention (set by [`JobStore::retain`]).
    files: Arc<std::sync::OnceLock<flotilla_job_files::JobFiles>>,
    /// Scans behind the later pages of listings (jobs/list_cache.rs).
    list_cache: Arc<list_cache::ListCache>,
    /// The task ids behind the pages of big jobs (jobs/task_views.rs).
    task_views: Arc<task_views::TaskViews>,
}

impl JobStore {
    /// Opens the jobs bucket.
    pub async fn open(bus: Bus) -> Result<Self, BusError> {
        let records = bus.job_records().await?;
        let index = bus.job_index().await?;
        let nats = Arc::new(NatsJobs { bus, records: records.clone() });
        Ok(Self { index: Some(index), records: Some(records), ..Self::with_backend(nats) })
    }

    /// A store over `backend` (an in-memory one in unit tests).
    pub(crate) fn with_backend(backend: Arc<dyn JobBackend>) -> Self {
        Self {
            backend,
            live: Arc::default(),
            metrics: Arc::new(OrchestratorMetrics::new()),
            index: None,
            records: None,
            files: Arc::default(),
            list_cache: Arc::default(),
            task_views: Arc::default(),
        }
    }

    /// Stores a new job (its text, then its header) and keeps it live.
    pub async fn insert(&self, mut rec: JobRecord) -> Result<(), BusError> {
        let input_key = job_keys::input(&rec.id);
        let input = Bytes::from(protocol::encode(&JobInput { v: protocol::SCHEMA_VERSION, input: rec.input.clone() }));
        retry("job input write", WRITE_BUDGET, || self.backend.create(&input_key, input.clone())).await?;
        let key = job_keys::header(&rec.id);
        let payload = encode_header(&mut rec);
        let created = retry("job header write", WRITE_BUDGET, || self.backend.create(&key, payload.clone())).await?;
        let Cas::Stored(revision) = created else {
            return Err(BusError::new(format!("cannot store job {}", rec.id), "the job exists already"));
        };
        self.file_new(&rec).await;
        if self.live.insert(rec.id, Arc::new(Live::new(rec, revision, 0))).is_none() {
            self.metrics.jobs_in_memory(1);
        }
        Ok(())
    }

    /// Reads a job record without its tasks (`tasks_total`, `task_counts`
    /// say how many): the live copy when running here, else the bucket. A
    /// record of the old layout comes with its inline tasks.
    pub async fn get(&self, id: &JobId) -> Result<Option<JobRecord>, BusError> {
        if let Some(rec) = self.live.get(id).map(|r| r.clone()) {
            return Ok(Some(rec.look(Clone::clone)));
        }
        Ok(self.stored(id).await?.map(|(rec, _, _)| rec))
    }

    /// The stored header of `id` (the input's head only, no todos) and its revision.
    async fn stored_header(&self, id: &JobId) -> Result<Option<(JobRecord, u64)>, BusError> {
        let key = job_keys::header(id);
        let Some((bytes, revision)) = self.backend.entry(&key).await? else { return Ok(None) };
        let rec: JobRecord = protocol::decode(&bytes).map_err(unreadable(&key))?;
        Ok(Some((rec.normalized(), revision)))
    }

    /// The stored record of `id` with its whole input and todo list, and
    /// the revisions of its header and todos (a record of the old layout, tasks
    /// inline, holds both in the header).
    async fn stored(&self, id: &JobId) -> Result<Option<(JobRecord, u64, u64)>, BusError> {
        let Some((mut rec, revision)) = self.stored_header(id).await? else { return Ok(None) };
        let key = job_keys::input(id);
        if let Some((bytes, _)) = self.backend.entry(&key).await? {
            rec.input = protocol::decode::<JobInput>(&bytes).map_err(unreadable(&key))?.input;
        }
        let key = job_keys::todos(id);
        let mut todos_revision = 0;
        if let Some((bytes, rev)) = self.backend.entry(&key).await? {
            rec.todos = protocol::decode::<JobTodos>(&bytes).map_err(unreadable(&key))?.todos;
            todos_revision = rev;
        }
        Ok(Some((rec, revision, todos_revision)))
    }

    /// Reads the live header of `id` without copying it, or the stored one
    /// when the job is not running here. Reading never keeps a job in
    /// memory: an event or status read after a job ended must not bring it
    /// back (bounded memory).
    pub async fn read<R>(&self, id: &JobId, look: impl FnOnce(&JobRecord) -> R) -> Result<R, BusError> {
        if let Some(r) = self.live.get(id).map(|r| r.clone()) {
            return Ok(r.look(look));
        }
        let (rec, _, _) = self
            .stored(id)
            .await?
            .ok_or_else(|| BusError::with_kind(BusErrorKind::NotFound, format!("job {id}"), "not found"))?;
        Ok(look(&rec))
    }

    /// The live record of `id`, loaded into memory when needed; `true`
    /// when this call loaded it.
    async fn live_record(&self, id: &JobId) -> Result<(Arc<Live>, bool), BusError> {
        if let Some(r) = self.live.get(id).map(|r| r.clone()) {
            return Ok((r, false));
        }
        let (rec, header, todos) = self
            .stored(id)
            .await?
            .ok_or_else(|| BusError::with_kind(BusErrorKind::NotFound, format!("job {id}"), "not found"))?;
        let mut loaded = false;
        let live = self
            .live
            .entry(*id)
            .or_insert_with(|| {
                loaded = true;
                self.metrics.jobs_in_memory(1);
                Arc::new(Live::new(rec, header, todos))
            })
            .clone();
        Ok((live, loaded))
    }

    /// Applies `change` to the live record of `id` and persists its header
    /// (or a newer copy that includes the change). Readers never wait for
    /// the write. The todo list is changed with [`set_todos`](Self::set_todos).
    pub async fn update<R>(&self, id: &JobId, change: impl FnOnce(&mut JobRecord) -> R) -> Result<R, BusError> {
        self.change(id, Doc::Header, change).await
    }

    /// Applies `change` and persists it like [`update`](Self::update), but
    /// through an outage of any length: a job's outcome must not be lost, so
    /// transient failures are retried until the write is stored, until a
    /// permanent error (too large, permission), or until `stop` fires (the
    /// job then stays `running`, its checkpoint kept, for its next owner).
    pub async fn update_until_stored<R>(
        &self,
        id: &JobId,
        stop: &CancellationToken,
        change: impl Fn(&mut JobRecord) -> R,
    ) -> Result<R, BusError> {
        loop {
            let e = match self.update(id, &change).await {
                Ok(out) => return Ok(out),
                Err(e) => e,
            };
            if !e.is_transient() || stop.is_cancelled() {
                return Err(e);
            }
            tracing::warn!(job_id = %id, error = %e, "job outcome not stored yet; retrying until it is");
            tokio::select! {
                _ = tokio::time::sleep(OUTCOME_RETRY) => {}
                _ = stop.cancelled() => return Err(e),
            }
        }
    }

    /// Replaces the todo list of `id` and persists it (`<job>.todos`).
    pub async fn set_todos(&self, id: &JobId, todos: Vec<Todo>) -> Result<(), BusError> {
        self.change(id, Doc::Todos, |r| r.todos = todos).await
    }

    /// Applies `change` and persists `doc`. A value too large to store fires
    /// [`oversized`](Self::oversized).
    async fn change<R>(&self, id: &JobId, doc: Doc, change: impl FnOnce(&mut JobRecord) -> R) -> Result<R, BusError> {
        let (live, loaded) = self.live_record(id).await?;
        let ((out, moved), version) = live.apply(doc, |r| {
            let before = r.status;
            let out = change(r);
            r.updated_at = protocol::now();
            (out, r.status != before)
        });
        let (key, encode): (String, fn(&mut JobRecord) -> Bytes) = match doc {
            Doc::Header => (job_keys::header(id), encode_header),
            Doc::Todos => (job_keys::todos(id), encode_todos),
        };
        let write = |s: Snapshot| {
            let key = key.clone();
            async move {
                retry("job record write", WRITE_BUDGET, || async {
                    match s.revision {
                        0 => self.backend.create(&key, s.payload.clone()).await,
                        rev => self.backend.update(&key, s.payload.clone(), rev).await,
                    }
                })
                .await
            }
        };
        let revision = || async {
            let entry = retry("job record read", WRITE_BUDGET, || self.backend.entry(&key)).await?;
            Ok(entry.map(|(_, rev)| rev).unwrap_or(0))
        };
        match live.persist(doc, version, encode, write, revision).await {
            Ok(()) => {
                if moved {
                    self.refile(&live).await;
                }
                if loaded && live.look(|r| r.status.is_terminal()) {
                    // A late write to a job that ended (a report after the
                    // end, or one racing its release): stored, not kept in memory.
                    self.release(id);
                }
                Ok(out)
            }
            Err(e) => {
                if e.kind() == BusErrorKind::TooLarge {
                    tracing::error!(job_id = %id, error = %e, "job record too large to store");
                    *live.oversized_by.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(e.to_string());
                    live.oversized.cancel();
                }
                Err(e)
            }
        }
    }

    /// Fires when a value of `id` (running here) could not be stored
    /// because it is too large; a never-firing token for other jobs.
    pub fn oversized(&self, id: &JobId) -> CancellationToken {
        self.live.get(id).map(|l| l.oversized.clone()).unwrap_or_default()
    }

    /// The write error that fired [`oversized`](Self::oversized), if it fired.
    pub fn oversized_by(&self, id: &JobId) -> Option<String> {
        let live = self.live.get(id)?.clone();
        live.oversized_by.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// Drops the in-memory copy of a finished job.
    pub fn release(&self, id: &JobId) {
        if self.live.remove(id).is_some() {
            self.metrics.jobs_in_memory(-1);
        }
    }

    /// Metrics derived from the events this store emits.
    pub fn metrics(&self) -> &Arc<OrchestratorMetrics> {
        &self.metrics
    }

    /// Publishes a job event on `<prefix>.job.<tenant>.<id>.event`.
    pub async fn emit(&self, job_id: JobId, kind: JobEventKind) {
        self.metrics.observe(&kind);
        let tenant = match self.read(&job_id, |r| r.tenant.clone()).await {
            Ok(t) => t,
            Err(e) => return tracing::warn!(%job_id, error = %e, "job event not published: tenant unknown"),
        };
        let ev = JobEvent { v: protocol::SCHEMA_VERSION, job_id, at: protocol::now(), kind };
        self.backend.emit(&tenant, &job_id, &ev).await;
    }
}

/// The list line of `rec`.
fn summary_of(rec: &JobRecord) -> JobSummary {
    JobSummary {
        id: rec.id,
        tenant: rec.tenant.clone(),
        status: rec.status,
        input: rec.input.lines().next().unwrap_or_default().chars().take(80).collect(),
        tasks: rec.tasks_total as usize,
        task_counts: rec.task_counts,
        usage: rec.usage,
        created_at: rec.created_at,
        updated_at: rec.updated_at,
    }
}

/// The jobs KV bucket and the events stream.
struct NatsJobs {
    bus: Bus,
    records: JobRecords,
}

#[async_trait]
impl JobBackend for NatsJobs {
    async fn entry(&self, key: &str) -> Result<Option<(Bytes, u64)>, BusError> {
        self.records.entry(key).await
    }

    async fn create(&self, key: &str, value: Bytes) -> Result<Cas, BusError> {
        self.records.create(key, value).await
    }

    async fn update(&self, key: &str, value: Bytes, revision: u64) -> Result<Cas, BusError> {
        self.records.update(key, value, revision).await
    }

    async fn keys(&self, filter: &str) -> Result<Vec<String>, BusError> {
        self.records.keys(filter).await
    }

    async fn changes(&self, filter: &str, after: u64, headers_only: bool) -> Result<Changes, BusError> {
        self.records.changes(filter, after, headers_only).await
    }

    async fn emit(&self, tenant: &Tenant, job: &JobId, event: &JobEvent) {
        self.bus.publish_event(self.bus.subjects.job_event(tenant, job), event).await;
    }
}
