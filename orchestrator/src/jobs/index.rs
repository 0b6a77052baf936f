//! Listing jobs through the job index: the store files every job
//! under `<tenant>.<status>.<job>` in the index bucket
//! (shared/bus/src/job_index.rs) when it is created and each time its
//! status changes, so `list` and `unfinished` read the keys under one
//! tenant/status filter, then the headers of the one page they return:
//! their cost follows what they return, not the jobs bucket's history.
//!
//! The index is derived data: the job header stays the truth. A listing
//! reads each returned job's header (or its live copy) and drops a job
//! whose status no longer matches the filter, and [`JobStore::unfinished`]
//! (at orchestrator start) re-files an entry that lags its header, e.g. after
//! a crash between the header write and the index move. The jobs stored
//! before the index existed are indexed by one scan of the headers at the
//! first start with an index (docs/OPERATIONS.md, "Job history").
//!
//! A first page (no cursor) reads only the tail of the index that holds the
//! newest jobs ([`JobStore::newest`]); later pages slice one scan of the
//! filter's keys (jobs/list_cache.rs). So `jobs --limit 20` and the
//! dashboard cost what recent jobs wrote, and paging through everything
//! costs one scan plus a page of headers per page.
//!
//! Without an index bucket (the in-memory backend of unit tests) listings
//! scan the headers as before.

use std::sync::Arc;

use bytes::Bytes;
use flotilla_bus::{BusError, JobIndex, job_keys, retry};
use flotilla_protocol::ids::{JobId, Tenant};
use flotilla_protocol::{JobRecord, JobStatus, JobSummary};
use futures::stream::{self, StreamExt, TryStreamExt};
use time::OffsetDateTime;

use super::list_cache::{CLOCK_SKEW_MS, Scan, older_than};
use super::{JobStore, Live, WRITE_BUDGET, summary_of};

/// Headers read at once for a listing page or the backfill.
const READ_CONCURRENCY: usize = 32;

/// Index writes a first page reads before widening (×4 each time).
const FIRST_WINDOW: u64 = 256;

/// The tail size past which a listing asks how many entries match at all.
const COUNT_AFTER: u64 = 4_096;

/// What a listing selects.
#[derive(Clone, Debug)]
pub struct ListQuery {
    /// Only this tenant's jobs (every tenant's when `None`, for the dashboard).
    pub tenant: Option<Tenant>,
    /// Only jobs with this status.
    pub status: Option<JobStatus>,
    /// Only jobs submitted at or after this time.
    pub since: Option<OffsetDateTime>,
    /// Only jobs older than this one (the cursor of the previous page).
    pub after: Option<JobId>,
    /// At most this many.
    pub limit: usize,
}

impl ListQuery {
    /// The newest `limit` jobs of `tenant`.
    pub fn new(tenant: Option<Tenant>, limit: usize) -> Self {
        Self { tenant, status: None, since: None, after: None, limit }
    }

    /// Whether the id alone admits `id` (time and cursor).
    fn admits(&self, id: &JobId) -> bool {
        let since = self.since.is_none_or(|s| created_ms(id) >= (s.unix_timestamp_nanos() / 1_000_000) as u64);
        since && self.after.is_none_or(|a| *id < a)
    }

    fn matches(&self, s: &JobSummary) -> bool {
        self.tenant.as_ref().is_none_or(|t| t == &s.tenant) && self.status.is_none_or(|st| st == s.status)
    }
}

/// One page of a listing.
#[derive(Clone, Debug, Default)]
pub struct ListPage {
    /// Matching jobs, newest first.
    pub jobs: Vec<JobSummary>,
    /// The cursor of the next page when more jobs match.
    pub next_after: Option<JobId>,
}

/// `ids` the query admits (time and cursor), newest first, each once (a job
/// is briefly under two statuses while it moves).
fn newest_first(ids: Vec<JobId>, q: &ListQuery) -> Vec<JobId> {
    let mut ids: Vec<JobId> = ids.into_iter().filter(|id| q.admits(id)).collect();
    ids.sort_unstable_by(|a, b| b.cmp(a)); // UUIDv7: newest first
    ids.dedup();
    ids
}

/// Milliseconds since the epoch at which a UUIDv7 id was made.
pub(super) fn created_ms(id: &JobId) -> u64 {
    id.0.as_bytes()[..6].iter().fold(0u64, |acc, b| (acc << 8) | u64::from(*b))
}

fn encode_summary(s: &JobSummary) -> Bytes {
    Bytes::from(serde_json::to_vec(s).expect("a job summary serializes"))
}

impl JobStore {
    /// One page of stored jobs, newest first.
    pub async fn list(&self, q: &ListQuery) -> Result<ListPage, BusError> {
        let (ids, more) = self.candidates(q).await?;
        let mut rest = ids.into_iter();
        let mut jobs = Vec::new();
        while jobs.len() < q.limit {
            let chunk: Vec<JobId> = rest.by_ref().take(q.limit - jobs.len()).collect();
            if chunk.is_empty() {
                break;
            }
            let found: Vec<Option<JobSummary>> =
                stream::iter(chunk).map(|id| self.summary(id)).buffered(READ_CONCURRENCY).try_collect().await?;
            jobs.extend(found.into_iter().flatten().filter(|s| q.matches(s)));
        }
        let next_after = if rest.len() > 0 || more { jobs.last().map(|j| j.id) } else { None };
        Ok(ListPage { jobs, next_after })
    }

    /// The ids a page is read from, newest first, and whether older
    /// matching jobs may follow them. A first page reads a tail of the index
    /// ([`newest`](Self::newest)); a later one slices the scan of its
    /// listing (jobs/list_cache.rs).
    async fn candidates(&self, q: &ListQuery) -> Result<(Vec<JobId>, bool), BusError> {
        let Some(index) = &self.index else {
            return Ok((newest_first(self.ids().await?, q), false));
        };
        let Some(after) = q.after else { return self.newest(index, q).await };
        let scan = Scan { tenant: q.tenant.clone(), status: q.status, since: q.since };
        let ids = match self.list_cache.get(&scan, created_ms(&after)) {
            Some(ids) => ids,
            None => {
                let entries = index.entries(q.tenant.as_ref(), q.status).await?;
                let ids = Arc::new(newest_first(entries.into_iter().map(|e| e.id).collect(), q));
                self.list_cache.put(scan, ids.clone());
                ids
            }
        };
        // Twice a page: a job that moved since the scan is dropped when read.
        Ok(older_than(&ids, &after, q.limit * 2 + 16))
    }

    /// The newest matching ids from the tail of the index, widening the
    /// tail until it holds `limit` jobs created after its first write (each
    /// move rewrites a job's entry, so every job created after that write
    /// is in the tail and the newest `limit` are exact), the listing's
    /// `since`, or the whole index. Its cost follows the recent writes, not
    /// the history (docs/OPERATIONS.md, "Job history").
    async fn newest(&self, index: &JobIndex, q: &ListQuery) -> Result<(Vec<JobId>, bool), BusError> {
        if !index.any(q.tenant.as_ref(), q.status).await? {
            return Ok((Vec::new(), false)); // e.g. `--status failed` in a healthy fleet
        }
        let mut window = (q.limit as u64 * 4).max(FIRST_WINDOW);
        let mut counted = false;
        loop {
            let tail = index.recent(q.tenant.as_ref(), q.status, window).await?;
            let ids = newest_first(tail.entries.into_iter().map(|e| e.id).collect(), q);
            // Every job created after the tail's first write is in the tail; job
            // ids carry orchestrators' clocks, writes the server's: a margin.
            let covered = tail.since_ms.map(|t| t + CLOCK_SKEW_MS);
            let since_ms = q.since.map(|s| (s.unix_timestamp_nanos() / 1_000_000) as u64);
            if tail.whole || covered.zip(since_ms).is_some_and(|(c, s)| c <= s) {
                return Ok((ids, false));
            }
            let exact = covered.map_or(0, |c| ids.iter().take_while(|id| created_ms(id) > c).count());
            tracing::debug!(window, read = ids.len(), exact, whole = tail.whole, "job index tail read");
            if exact >= q.limit {
                let mut ids = ids;
                ids.truncate(exact);
                return Ok((ids, true));
            }
            window = window.saturating_mul(4);
            // Two tails short: maybe few entries match at all (a status few jobs
            // have). The server counts them (a cost that follows the matches, so
            // not asked first: a wide filter matches the whole history).
            if !counted && window >= COUNT_AFTER {
                counted = true;
                if index.matching(q.tenant.as_ref(), q.status).await? <= window {
                    let ids = index.entries(q.tenant.as_ref(), q.status).await?.into_iter().map(|e| e.id).collect();
                    return Ok((newest_first(ids, q), false));
                }
            }
        }
    }

    /// The list line of `id`: its live copy here, else its stored header.
    async fn summary(&self, id: JobId) -> Result<Option<JobSummary>, BusError> {
        if let Some(live) = self.live.get(&id).map(|r| r.clone()) {
            return Ok(Some(live.look(summary_of)));
        }
        Ok(self.stored_header(&id).await?.map(|(rec, _)| summary_of(&rec)))
    }

    /// Every stored job id (a scan of the headers).
    pub(super) async fn ids(&self) -> Result<Vec<JobId>, BusError> {
        let keys = self.backend.keys(job_keys::HEADERS).await?;
        Ok(keys.iter().filter_map(|k| k.parse().ok()).collect())
    }

    /// Jobs that were submitted or running when the orchestrator stopped:
    /// the submitted and running index entries (after indexing, once, the
    /// jobs stored before the index existed).
    pub async fn unfinished(&self) -> Result<Vec<JobRecord>, BusError> {
        let Some(index) = &self.index else {
            let mut out = Vec::new();
            for id in self.ids().await? {
                out.extend(self.get(&id).await?.filter(|r| !r.status.is_terminal()));
            }
            out.sort_by_key(|r| r.id);
            return Ok(out);
        };
        self.backfill(index).await?;
        let mut entries = index.entries(None, Some(JobStatus::Submitted)).await?;
        entries.extend(index.entries(None, Some(JobStatus::Running)).await?);
        let mut out: Vec<JobRecord> = Vec::new();
        for e in entries {
            let Some(rec) = self.get(&e.id).await? else {
                index.remove(&e.tenant, e.status, &e.id).await?;
                continue;
            };
            if rec.status != e.status {
                // The header moved on without its index entry (a crash between the two writes).
                index.put(&rec.tenant, rec.status, &rec.id, encode_summary(&summary_of(&rec))).await?;
                index.remove(&e.tenant, e.status, &e.id).await?;
            }
            if !rec.status.is_terminal() && !out.iter().any(|r| r.id == rec.id) {
                out.push(rec);
            }
        }
        out.sort_by_key(|r| r.id);
        Ok(out)
    }

    /// Jobs the index files as submitted, then those filed as running, each
    /// oldest first: the runner's candidates for a free slot. The index
    /// alone is read (no header per job): the runner re-reads a job under
    /// its lease before planning it (orchestrator/src/runner.rs).
    pub async fn waiting(&self) -> Result<Vec<(Tenant, JobId)>, BusError> {
        let Some(index) = &self.index else {
            return Ok(self.unfinished().await?.into_iter().map(|r| (r.tenant, r.id)).collect());
        };
        let (mut out, mut seen) = (Vec::new(), std::collections::HashSet::new());
        for status in [JobStatus::Submitted, JobStatus::Running] {
            let mut ids: Vec<(Tenant, JobId)> =
                index.entries(None, Some(status)).await?.into_iter().map(|e| (e.tenant, e.id)).collect();
            ids.sort_unstable_by_key(|(_, id)| *id);
            out.extend(ids.into_iter().filter(|(_, id)| seen.insert(*id))); // a job moving is briefly under both
        }
        Ok(out)
    }

    /// How many jobs of `tenant` the index files as submitted or running
    /// (`[tenants] max_queued_jobs`): one key listing per status, of that
    /// tenant's entries only.
    pub async fn unfinished_of(&self, tenant: &Tenant) -> Result<usize, BusError> {
        let Some(index) = &self.index else {
            return Ok(self.unfinished().await?.iter().filter(|r| &r.tenant == tenant).count());
        };
        let mut ids = std::collections::HashSet::new();
        for status in [JobStatus::Submitted, JobStatus::Running] {
            ids.extend(index.entries(Some(tenant), Some(status)).await?.into_iter().map(|e| e.id));
        }
        Ok(ids.len())
    }

    /// Files every stored job in the index, once per bucket: the jobs
    /// written before the index existed.
    async fn backfill(&self, index: &JobIndex) -> Result<(), BusError> {
        if index.backfilled().await? {
            return Ok(());
        }
        let ids = self.ids().await?;
        let count = ids.len();
        stream::iter(ids)
            .map(|id| async move {
                let Some((rec, _)) = self.stored_header(&id).await? else { return Ok(()) };
                index.put(&rec.tenant, rec.status, &id, encode_summary(&summary_of(&rec))).await
            })
            .buffer_unordered(READ_CONCURRENCY)
            .try_collect::<()>()
            .await?;
        index.mark_backfilled().await?;
        tracing::info!(jobs = count, "job index built from the jobs bucket");
        Ok(())
    }

    /// Files a new job (status submitted) in the index.
    pub(super) async fn file_new(&self, rec: &JobRecord) {
        let Some(index) = &self.index else { return };
        let payload = encode_summary(&summary_of(rec));
        let put =
            retry("job index write", WRITE_BUDGET, || index.put(&rec.tenant, rec.status, &rec.id, payload.clone()));
        if let Err(e) = put.await {
            tracing::warn!(job_id = %rec.id, error = %e, "job not indexed; it is listed once its status changes");
        }
    }

    /// Moves the index entry of `live` to its current status, if it changed.
    /// Moves of one job are serialized, so the last one files the newest status.
    pub(super) async fn refile(&self, live: &Live) {
        let Some(index) = &self.index else { return };
        let mut indexed = live.indexed.lock().await;
        let (summary, tenant, status) = live.look(|r| (summary_of(r), r.tenant.clone(), r.status));
        if status == *indexed {
            return;
        }
        let (id, payload) = (summary.id, encode_summary(&summary));
        let put = retry("job index write", WRITE_BUDGET, || index.put(&tenant, status, &id, payload.clone())).await;
        if let Err(e) = put {
            return tracing::warn!(job_id = %id, error = %e, "job index not updated; repaired at the next start");
        }
        let old = *indexed;
        *indexed = status;
        if let Err(e) = retry("job index write", WRITE_BUDGET, || index.remove(&tenant, old, &id)).await {
            tracing::warn!(job_id = %id, error = %e, "stale job index entry left; listings skip it");
        }
    }
}
