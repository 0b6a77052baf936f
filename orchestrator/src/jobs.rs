//! The job store: job records in the jobs KV bucket (durable across restarts),
//! with one in-memory copy per job this orchestrator is running so concurrent
//! tool calls of one planner (parallel `task` calls, `write_todos`) update one
//! record under one lock and never overwrite each other's changes.

use std::sync::Arc;

use async_nats::jetstream::kv;
use dashmap::DashMap;
use flotilla_shared::bus::{Bus, BusError, retry};
use flotilla_shared::ids::{JobId, Tenant};
use flotilla_shared::protocol::{self, JobEvent, JobEventKind, JobRecord, JobStatus, JobSummary};
use futures::TryStreamExt;
use tokio::sync::Mutex;

use crate::metrics::OrchestratorMetrics;

/// How long a job-record write is retried before the caller sees the error.
const WRITE_BUDGET: std::time::Duration = std::time::Duration::from_secs(60);

/// Job records and job events.
#[derive(Clone)]
pub struct JobStore {
    bus: Bus,
    kv: kv::Store,
    live: Arc<DashMap<JobId, Arc<Mutex<JobRecord>>>>,
    metrics: Arc<OrchestratorMetrics>,
}

impl JobStore {
    /// Opens the jobs bucket.
    pub async fn open(bus: Bus) -> Result<Self, BusError> {
        let kv = bus.jobs().await?;
        Ok(Self { bus, kv, live: Arc::default(), metrics: Arc::new(OrchestratorMetrics::new()) })
    }

    /// Stores a new record and keeps it live.
    pub async fn insert(&self, rec: JobRecord) -> Result<(), BusError> {
        self.write(&rec).await?;
        self.live.insert(rec.id, Arc::new(Mutex::new(rec)));
        Ok(())
    }

    /// Reads a record: the live copy when running here, else the bucket.
    pub async fn get(&self, id: &JobId) -> Result<Option<JobRecord>, BusError> {
        if let Some(rec) = self.live.get(id).map(|r| r.clone()) {
            return Ok(Some(rec.lock().await.clone()));
        }
        let bytes = self.kv.get(id.to_string()).await.map_err(|e| BusError::new(format!("cannot read job {id}"), e))?;
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
        let guard = rec.lock().await;
        Ok(look(&guard))
    }

    async fn live_record(&self, id: &JobId) -> Result<Arc<Mutex<JobRecord>>, BusError> {
        if let Some(r) = self.live.get(id).map(|r| r.clone()) {
            return Ok(r);
        }
        let rec = self.get(id).await?.ok_or_else(|| BusError::new(format!("job {id}"), "not found"))?;
        Ok(self.live.entry(*id).or_insert_with(|| Arc::new(Mutex::new(rec))).clone())
    }

    /// Applies `change` to the live record of `id` and persists it.
    pub async fn update<R>(&self, id: &JobId, change: impl FnOnce(&mut JobRecord) -> R) -> Result<R, BusError> {
        let rec = self.live_record(id).await?;
        let mut guard = rec.lock().await;
        let out = change(&mut guard);
        guard.updated_at = protocol::now();
        self.write(&guard).await?;
        Ok(out)
    }

    /// Drops the in-memory copy of a finished job.
    pub fn release(&self, id: &JobId) {
        self.live.remove(id);
    }

    /// Persists `rec`, riding out a short NATS outage (restart, election).
    async fn write(&self, rec: &JobRecord) -> Result<(), BusError> {
        let payload = bytes::Bytes::from(protocol::encode(rec));
        retry("job record write", WRITE_BUDGET, || async {
            self.kv
                .put(rec.id.to_string(), payload.clone())
                .await
                .map_err(|e| BusError::new(format!("cannot store job {}", rec.id), e))
        })
        .await?;
        Ok(())
    }

    /// Every stored job id.
    async fn ids(&self) -> Result<Vec<JobId>, BusError> {
        let keys: Vec<String> = match self.kv.keys().await {
            Ok(k) => k.try_collect().await.map_err(|e| BusError::new("cannot list jobs", e))?,
            Err(e) => return Err(BusError::new("cannot list jobs", e)),
        };
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
        self.bus.publish_event(self.bus.subjects.job_event(&tenant, &job_id), &ev).await;
    }
}
