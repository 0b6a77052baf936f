//! The job store: job records in the jobs KV bucket (durable across restarts),
//! with one in-memory copy per job this orchestrator is running so concurrent
//! tool calls of one planner (parallel `task` calls, `write_todos`) update one
//! record under one lock and never overwrite each other's changes.
//!
//! The lock guards the in-memory change only, never the write: a write may
//! retry for a minute through a NATS outage (`WRITE_BUDGET`), and readers
//! (status requests, job events) must not wait for it. Each change gets a
//! version; the writes of one job run one at a time, each storing the newest
//! snapshot, and a write whose version an earlier-finished write already
//! covered is skipped, so an older snapshot never overwrites a newer one.
//!
//! The bucket and the event stream sit behind [`JobBackend`]
//! (orchestrator/src/ports.rs): [`NatsJobs`] in production, an in-memory
//! fake in unit tests (orchestrator/src/fakes.rs).

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use dashmap::DashMap;
use flotilla_bus::{Bus, BusError, JobRecords, retry};
use flotilla_protocol::ids::{JobId, TaskId, Tenant};
use flotilla_protocol::{self as protocol, JobEvent, JobEventKind, JobRecord, JobStatus, JobSummary, TaskEntry};

use crate::metrics::OrchestratorMetrics;
use crate::ports::JobBackend;

/// How long a job-record write is retried before the caller sees the error.
const WRITE_BUDGET: std::time::Duration = std::time::Duration::from_secs(60);

/// Job records and job events.
#[derive(Clone)]
pub struct JobStore {
    backend: Arc<dyn JobBackend>,
    live: Arc<DashMap<JobId, Arc<Live>>>,
    metrics: Arc<OrchestratorMetrics>,
}

impl JobStore {
    /// Opens the jobs bucket.
    pub async fn open(bus: Bus) -> Result<Self, BusError> {
        let records = bus.job_records().await?;
        Ok(Self::with_backend(Arc::new(NatsJobs { bus, records })))
    }

    /// A store over `backend` (an in-memory one in unit tests).
    pub(crate) fn with_backend(backend: Arc<dyn JobBackend>) -> Self {
        Self { backend, live: Arc::default(), metrics: Arc::new(OrchestratorMetrics::new()) }
    }

    /// Stores a new record and keeps it live.
    pub async fn insert(&self, rec: JobRecord) -> Result<(), BusError> {
        self.write(&rec).await?;
        self.live.insert(rec.id, Arc::new(Live::new(rec, 1)));
        Ok(())
    }

    /// Reads a record: the live copy when running here, else the bucket.
    pub async fn get(&self, id: &JobId) -> Result<Option<JobRecord>, BusError> {
        if let Some(rec) = self.live.get(id).map(|r| r.clone()) {
            return Ok(Some(rec.snapshot().0));
        }
        let bytes = self.backend.get(id).await?;
        match bytes {
            None => Ok(None),
            Some(b) => {
                protocol::decode(&b).map(Some).map_err(|e| BusError::new(format!("job record {id} is unreadable"), e))
            }
        }
    }

    /// Reads the live record of `id` (loading it when needed) without copying it.
    pub async fn read<R>(&self, id: &JobId, look: impl FnOnce(&JobRecord) -> R) -> Result<R, BusError> {
        let rec = self.live_record(id).await?;
        Ok(rec.look(look))
    }

    async fn live_record(&self, id: &JobId) -> Result<Arc<Live>, BusError> {
        if let Some(r) = self.live.get(id).map(|r| r.clone()) {
            return Ok(r);
        }
        let rec = self.get(id).await?.ok_or_else(|| BusError::new(format!("job {id}"), "not found"))?;
        // Loaded from the bucket: version 0 is stored already.
        Ok(self.live.entry(*id).or_insert_with(|| Arc::new(Live::new(rec, 0))).clone())
    }

    /// Applies `change` to the live record of `id` and persists it (or a
    /// newer snapshot that includes it). Readers never wait for the write.
    pub async fn update<R>(&self, id: &JobId, change: impl FnOnce(&mut JobRecord) -> R) -> Result<R, BusError> {
        let rec = self.live_record(id).await?;
        let (out, version) = rec.apply(|r| {
            let out = change(r);
            r.updated_at = protocol::now();
            out
        });
        rec.persist(version, |snapshot| async move { self.write(&snapshot).await }).await?;
        Ok(out)
    }

    /// The task `job` dispatched under `key` (a tool call id, a map item key), if any.
    pub async fn task_by_key(&self, job: &JobId, key: &str) -> Result<Option<TaskEntry>, BusError> {
        self.read(job, |rec| rec.tasks.iter().find(|t| t.call_id.as_deref() == Some(key)).cloned()).await
    }

    /// The entry of `task` in `job`, if dispatched.
    pub async fn task(&self, job: &JobId, task: &TaskId) -> Result<Option<TaskEntry>, BusError> {
        self.read(job, |rec| rec.tasks.iter().find(|t| &t.task_id == task).cloned()).await
    }

    /// Records a new task entry under its dispatch key (`entry.call_id`);
    /// returns the stored entry, which is an earlier one when that key was
    /// already used.
    pub async fn add_task(&self, job: &JobId, entry: TaskEntry) -> Result<TaskEntry, BusError> {
        self.update(job, |rec| {
            if let Some(t) = rec.tasks.iter().find(|t| t.call_id.is_some() && t.call_id == entry.call_id) {
                return t.clone();
            }
            rec.tasks.push(entry.clone());
            entry
        })
        .await
    }

    /// Applies `change` to the entry of `task` and stores it when `change`
    /// says it changed something; returns the stored entry then, `None` when
    /// nothing changed (or there is no such task).
    pub async fn update_task(
        &self,
        job: &JobId,
        task: &TaskId,
        mut change: impl FnMut(&mut TaskEntry) -> bool + Send,
    ) -> Result<Option<TaskEntry>, BusError> {
        self.update(job, |rec| {
            let entry = rec.task_mut(task)?;
            change(entry).then(|| entry.clone())
        })
        .await
    }

    /// Drops the in-memory copy of a finished job.
    pub fn release(&self, id: &JobId) {
        self.live.remove(id);
    }

    /// Persists `rec`, riding out a short NATS outage (restart, election).
    async fn write(&self, rec: &JobRecord) -> Result<(), BusError> {
        let payload = Bytes::from(protocol::encode(rec));
        retry("job record write", WRITE_BUDGET, || self.backend.put(&rec.id, payload.clone())).await?;
        Ok(())
    }

    /// Every stored job id.
    async fn ids(&self) -> Result<Vec<JobId>, BusError> {
        let keys = self.backend.keys().await?;
        Ok(keys.iter().filter_map(|k| k.parse().ok()).collect())
    }

    /// Jobs that were submitted or running when the orchestrator stopped.
    pub async fn unfinished(&self) -> Result<Vec<JobRecord>, BusError> {
        let mut out = Vec::new();
        for id in self.ids().await? {
            if let Some(rec) = self.get(&id).await?
                && !rec.status.is_terminal()
            {
                out.push(rec);
            }
        }
        out.sort_by_key(|r| r.id);
        Ok(out)
    }

    /// Stored jobs of `tenant` (every tenant's when `None`, for the dashboard), newest first.
    pub async fn list(
        &self,
        tenant: Option<&Tenant>,
        status: Option<JobStatus>,
        limit: usize,
    ) -> Result<Vec<JobSummary>, BusError> {
        let mut ids = self.ids().await?;
        ids.sort_unstable_by(|a, b| b.cmp(a)); // UUIDv7: newest first
        let mut out = Vec::new();
        for id in ids {
            if out.len() >= limit {
                break;
            }
            let Some(rec) = self.get(&id).await? else { continue };
            if tenant.is_some_and(|t| t != &rec.tenant) || status.is_some_and(|s| s != rec.status) {
                continue;
            }
            out.push(JobSummary {
                id: rec.id,
                tenant: rec.tenant.clone(),
                status: rec.status,
                input: rec.input.lines().next().unwrap_or_default().chars().take(80).collect(),
                tasks: rec.tasks.len(),
                usage: rec.usage,
                created_at: rec.created_at,
                updated_at: rec.updated_at,
            });
        }
        Ok(out)
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

/// The jobs KV bucket and the events stream.
struct NatsJobs {
    bus: Bus,
    records: JobRecords,
}

#[async_trait]
impl JobBackend for NatsJobs {
    async fn get(&self, id: &JobId) -> Result<Option<Bytes>, BusError> {
        self.records.get(id).await
    }

    async fn put(&self, id: &JobId, record: Bytes) -> Result<(), BusError> {
        self.records.put(id, record).await
    }

    async fn keys(&self) -> Result<Vec<String>, BusError> {
        self.records.keys().await
    }

    async fn emit(&self, tenant: &Tenant, job: &JobId, event: &JobEvent) {
        self.bus.publish_event(self.bus.subjects.job_event(tenant, job), event).await;
    }
}

/// The in-memory copy of one running job and the order of its writes.
struct Live {
    /// The record and its version (one more per change). A plain mutex: it is
    /// never held across an await.
    rec: std::sync::Mutex<(JobRecord, u64)>,
    /// The newest version stored; held by the one write of this job in flight.
    written: tokio::sync::Mutex<u64>,
}

impl Live {
    /// `rec` at `version`; `stored` says whether that version is in the bucket.
    fn new(rec: JobRecord, stored: u64) -> Self {
        Self { rec: std::sync::Mutex::new((rec, stored)), written: tokio::sync::Mutex::new(stored) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (JobRecord, u64)> {
        // A panic inside a change leaves a record that is still well-formed.
        self.rec.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn look<R>(&self, look: impl FnOnce(&JobRecord) -> R) -> R {
        look(&self.lock().0)
    }

    fn snapshot(&self) -> (JobRecord, u64) {
        self.lock().clone()
    }

    /// Applies `change`; returns its result and the new version.
    fn apply<R>(&self, change: impl FnOnce(&mut JobRecord) -> R) -> (R, u64) {
        let mut guard = self.lock();
        let out = change(&mut guard.0);
        guard.1 += 1;
        (out, guard.1)
    }

    /// Makes sure a snapshot at least as new as `version` is stored: waits
    /// for the write in flight, then writes the newest snapshot unless that
    /// write already covered `version`.
    async fn persist<F, Fut>(&self, version: u64, write: F) -> Result<(), BusError>
    where
        F: FnOnce(JobRecord) -> Fut,
        Fut: std::future::Future<Output = Result<(), BusError>>,
    {
        let mut written = self.written.lock().await;
        if *written >= version {
            return Ok(());
        }
        let (snapshot, newest) = self.snapshot();
        write(snapshot).await?;
        *written = newest;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use flotilla_protocol::ids::{JobId, Tenant};
    use tokio::sync::oneshot;

    use super::*;

    type Stored = Arc<Mutex<Vec<String>>>;

    /// Persists `version` of `live`, recording each stored snapshot's input.
    fn persist(
        live: &Arc<Live>,
        version: u64,
        stored: &Stored,
        gate: Option<(oneshot::Sender<()>, oneshot::Receiver<()>)>,
    ) -> tokio::task::JoinHandle<Result<(), BusError>> {
        let (live, stored) = (live.clone(), stored.clone());
        tokio::spawn(async move {
            live.persist(version, |snapshot| async move {
                if let Some((started, release)) = gate {
                    started.send(()).unwrap();
                    release.await.unwrap();
                }
                stored.lock().unwrap().push(snapshot.input);
                Ok(())
            })
            .await
        })
    }

    #[tokio::test]
    async fn a_slow_write_blocks_no_reader_and_the_newest_snapshot_is_stored_last() {
        let live = Arc::new(Live::new(JobRecord::new(JobId::new(), Tenant::default(), "submitted".into()), 1));
        let stored = Stored::default();
        let set = |to: &'static str| move |r: &mut JobRecord| r.input = to.into();

        // A write that hangs (a NATS outage) until the test releases it.
        let ((), a) = live.apply(set("a"));
        let (started, on_start) = oneshot::channel();
        let (release, on_release) = oneshot::channel();
        let slow = persist(&live, a, &stored, Some((started, on_release)));
        on_start.await.unwrap();

        // Meanwhile readers answer at once and changes apply (the record's
        // lock used to be held across the write, so these waited for it).
        assert_eq!(live.look(|r| r.input.clone()), "a");
        let ((), b) = live.apply(set("b"));
        let ((), c) = live.apply(set("c"));
        assert_eq!(live.look(|r| r.input.clone()), "c");
        let later = [persist(&live, b, &stored, None), persist(&live, c, &stored, None)];

        release.send(()).unwrap();
        slow.await.unwrap().unwrap();
        for w in later {
            w.await.unwrap().unwrap();
        }
        // "b" was covered by the write of the newest snapshot: one write fewer,
        // and nothing older lands after "c".
        assert_eq!(*stored.lock().unwrap(), ["a", "c"]);
        assert_eq!(*live.written.lock().await, c);
    }
}
