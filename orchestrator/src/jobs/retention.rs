//! Retention of finished jobs (docs/OPERATIONS.md, "What is kept
//! how long"): a sweeper in the orchestrator deletes every job that ended
//! (completed, failed, cancelled) and has not changed for `[jobs]
//! retention_days`: its job files, every key of its records in the jobs
//! bucket (by stream purge, leaving no delete markers) and, last, its index
//! entry, so a crash half-way leaves an entry whose job is gone, which
//! listings skip and the next sweep removes. `flotilla jobs prune --before`
//! runs the same deletion for one tenant on demand (API op `prune`).
//!
//! A sweeper rather than per-message TTLs: a job is many keys written at
//! different times (header, input, todos, tasks), and what must expire is
//! the whole job some time after its *last* change, which one TTL per key
//! cannot express; running jobs must never expire however long they run.
//! The candidates come from the index (terminal statuses, created before the
//! cutoff, read from the key alone), so a sweep reads only old jobs, and
//! their files go in batches, one listing of the files store per batch.

use std::collections::HashSet;
use std::time::Duration;

use flotilla_bus::BusError;
use flotilla_job_files::JobFiles;
use flotilla_protocol::ids::{JobId, Tenant};
use flotilla_protocol::{self as protocol, ApiReply, ErrorKind, JobStatus, PruneReply, PruneRequest};
use time::OffsetDateTime;

use super::JobStore;
use super::index::created_ms;

/// Longest pause between two sweeps.
const MAX_SWEEP_INTERVAL: Duration = Duration::from_secs(3600);

/// Expired jobs whose files one listing of the job-files store deletes (a
/// listing reads every object's metadata, so one per job would make a sweep
/// quadratic in the history).
const PURGE_BATCH: usize = 1024;

impl JobStore {
    /// Deletes, from now on, finished jobs unchanged for `keep`, with their
    /// `files`; sweeps every tenth of `keep` (between 1 s and an hour).
    pub fn retain(&self, keep: Duration, files: JobFiles) {
        let _ = self.files.set(files);
        let interval = (keep / 10).clamp(Duration::from_secs(1), MAX_SWEEP_INTERVAL);
        let store = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(interval).await;
                let before = protocol::now() - keep;
                match store.prune(None, before).await {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(jobs = n, "finished jobs past retention deleted"),
                    Err(e) => tracing::warn!(error = %e, "retention sweep failed; trying again next sweep"),
                }
            }
        });
    }

    /// Deletes the finished jobs of `tenant` (every tenant's when `None`)
    /// whose last change is before `before`; returns how many.
    pub async fn prune(&self, tenant: Option<&Tenant>, before: OffsetDateTime) -> Result<usize, BusError> {
        let (Some(index), Some(records)) = (&self.index, &self.records) else { return Ok(0) };
        let cutoff_ms = (before.unix_timestamp_nanos() / 1_000_000).max(0) as u64;
        let mut expired = Vec::new();
        for status in [JobStatus::Completed, JobStatus::Failed, JobStatus::Cancelled] {
            for e in index.entries(tenant, Some(status)).await? {
                // Created after the cutoff: changed after it too.
                if created_ms(&e.id) >= cutoff_ms || self.live.contains_key(&e.id) {
                    continue;
                }
                match self.stored_header(&e.id).await? {
                    Some((rec, _)) if !rec.status.is_terminal() || rec.updated_at >= before => {}
                    Some(_) => expired.push((e, true)),
                    // The job is gone (a sweep that stopped half-way): only its entry is left.
                    None => expired.push((e, false)),
                }
            }
        }
        let mut pruned = 0;
        for batch in expired.chunks(PURGE_BATCH) {
            // Files first, then records, the index entry last: a sweep that
            // stops half-way leaves entries the next one finds again.
            let gone: HashSet<JobId> = batch.iter().filter(|(_, stored)| *stored).map(|(e, _)| e.id).collect();
            self.delete_files(&gone).await?;
            for (e, stored) in batch {
                if *stored {
                    records.remove_job(&e.id).await?;
                    pruned += 1;
                }
                index.forget(&e.tenant, e.status, &e.id).await?;
            }
        }
        Ok(pruned)
    }

    async fn delete_files(&self, jobs: &HashSet<JobId>) -> Result<(), BusError> {
        let Some(files) = self.files.get() else { return Ok(()) };
        files
            .purge_jobs(jobs)
            .await
            .map_err(|err| BusError::new(format!("cannot delete the files of {} expired jobs", jobs.len()), err))?;
        Ok(())
    }
}

/// The `prune` API operation: deletes the tenant's finished jobs last changed before `before`.
pub async fn prune_request(jobs: &JobStore, tenant: &Tenant, req: PruneRequest) -> ApiReply<PruneReply> {
    match jobs.prune(Some(tenant), req.before).await {
        Ok(pruned) => ApiReply::ok(PruneReply { pruned }),
        Err(e) => ApiReply::error(ErrorKind::Transient, e.to_string()),
    }
}
