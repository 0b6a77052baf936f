//! The job index, KV bucket `<prefix>_jobs_index`: one key per
//! job, `<tenant>.<status>.<job id>` -> its `JobSummary` when last moved, so
//! a listing by tenant and status reads only the keys under that filter
//! instead of every key of the jobs bucket (which holds a header, the input,
//! the todo list and one key per task and dispatch key of every job ever).
//! Job ids are UUIDv7, so sorting the ids of a listing puts the newest first
//! and gives each job's creation time without reading its value.
//!
//! When a job's status changes the orchestrator's job store
//! (orchestrator/src/jobs/index.rs) creates the new key, then purges the old
//! one with a one-second marker TTL, so neither the key nor its purge marker
//! stays behind: a filter costs the entries it matches, not the history of
//! moves. The bucket allows per-message TTL for that (server 2.11+).
//!
//! `meta.backfilled` (two tokens, so no listing filter matches it) records
//! that the jobs written before the index existed have been indexed.

use std::time::Duration;

use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, ReplayPolicy, pull, push};
use async_nats::jetstream::kv;
use bytes::Bytes;
use flotilla_protocol::JobStatus;
use flotilla_protocol::ids::{JobId, Tenant};
use futures::StreamExt;

use crate::job_records::{LIST_IDLE, list_keys, purge_subject};
use crate::{Bus, BusError};

/// How long the purge marker of a moved index entry is kept (the minimum TTL).
const MOVED_MARKER_TTL: Duration = Duration::from_secs(1);

/// The key recording that the pre-index jobs were indexed.
const BACKFILLED: &str = "meta.backfilled";

/// The job index bucket.
#[derive(Clone)]
pub struct JobIndex {
    kv: kv::Store,
    client: async_nats::Client,
}

/// The entries written to the index in its newest `window` writes
/// ([`JobIndex::recent`]).
#[derive(Clone, Debug, Default)]
pub struct RecentEntries {
    /// Live entries matching the filter, in write order.
    pub entries: Vec<Indexed>,
    /// When the first of them was written (server time, ms since the
    /// epoch): every job created after it has its entry among them, since
    /// each move writes the entry anew. `None` when none matched.
    pub since_ms: Option<u64>,
    /// Whether the window reached the oldest write: then every matching
    /// entry is among them.
    pub whole: bool,
}

/// One index entry, parsed from its key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Indexed {
    /// The job's tenant.
    pub tenant: Tenant,
    /// The job's status when indexed.
    pub status: JobStatus,
    /// The job.
    pub id: JobId,
}

/// The index key of `id`.
pub fn index_key(tenant: &Tenant, status: JobStatus, id: &JobId) -> String {
    format!("{tenant}.{}.{id}", status.as_str())
}

/// The listing filter of `tenant` (every tenant when `None`) and `status` (every status when `None`).
pub fn index_filter(tenant: Option<&Tenant>, status: Option<JobStatus>) -> String {
    let tenant = tenant.map_or("*".to_string(), Tenant::to_string);
    format!("{tenant}.{}.*", status.map_or("*", |s| s.as_str()))
}

fn parse(key: &str) -> Option<Indexed> {
    let mut parts = key.split('.');
    let (tenant, status, id) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    Some(Indexed { tenant: Tenant::new(tenant).ok()?, status: status.parse().ok()?, id: id.parse().ok()? })
}

impl Bus {
    /// The job index bucket (opened once per connection).
    pub async fn job_index(&self) -> Result<JobIndex, BusError> {
        Ok(JobIndex { kv: self.job_index_bucket().await?, client: self.client.clone() })
    }
}

impl JobIndex {
    /// Stores the entry of `id` under `status` (overwriting it).
    pub async fn put(&self, tenant: &Tenant, status: JobStatus, id: &JobId, summary: Bytes) -> Result<(), BusError> {
        let key = index_key(tenant, status, id);
        self.kv.put(&key, summary).await.map_err(|e| BusError::new(format!("cannot store index entry {key}"), e))?;
        Ok(())
    }

    /// Removes the entry of `id` under `status`; its purge marker expires after a second.
    pub async fn remove(&self, tenant: &Tenant, status: JobStatus, id: &JobId) -> Result<(), BusError> {
        let key = index_key(tenant, status, id);
        self.kv
            .purge_with_ttl(&key, MOVED_MARKER_TTL)
            .await
            .map_err(|e| BusError::new(format!("cannot remove index entry {key}"), e))
    }

    /// Removes the entry of `id` under `status` leaving no marker (a
    /// pruned job, orchestrator/src/jobs/retention.rs).
    pub async fn forget(&self, tenant: &Tenant, status: JobStatus, id: &JobId) -> Result<(), BusError> {
        purge_subject(&self.kv, format!("{}{}", self.kv.prefix, index_key(tenant, status, id))).await
    }

    /// The entries matching `tenant` and `status` (`None` = any), in no particular order.
    pub async fn entries(&self, tenant: Option<&Tenant>, status: Option<JobStatus>) -> Result<Vec<Indexed>, BusError> {
        let keys = list_keys(&self.kv, &self.client, &index_filter(tenant, status)).await?;
        Ok(keys.iter().filter_map(|k| parse(k)).collect())
    }

    /// The live entries matching `tenant` and `status` among the index's
    /// newest `window` writes: a newest-first listing reads a tail of the
    /// index instead of every key (orchestrator/src/jobs/index.rs).
    pub async fn recent(
        &self,
        tenant: Option<&Tenant>,
        status: Option<JobStatus>,
        window: u64,
    ) -> Result<RecentEntries, BusError> {
        let filter = index_filter(tenant, status);
        let fail = |e: Box<dyn std::error::Error + Send + Sync>| {
            BusError::new(format!("cannot read the index tail of {filter}"), e)
        };
        let mut stream = self.kv.stream.clone();
        let state = stream.info().await.map_err(|e| fail(e.into()))?.state.clone();
        let start = state.last_sequence.saturating_sub(window).max(state.first_sequence).max(1);
        let mut out = RecentEntries { whole: start <= state.first_sequence, ..RecentEntries::default() };
        if state.messages == 0 {
            out.whole = true;
            return Ok(out);
        }
        let prefix = self.kv.prefix.clone();
        let consumer = stream
            .create_consumer(push::OrderedConfig {
                deliver_subject: self.client.new_inbox(),
                filter_subject: format!("{prefix}{filter}"),
                headers_only: true,
                replay_policy: ReplayPolicy::Instant,
                deliver_policy: DeliverPolicy::ByStartSequence { start_sequence: start },
                ..Default::default()
            })
            .await
            .map_err(|e| fail(e.into()))?;
        if consumer.cached_info().num_pending == 0 {
            return Ok(out);
        }
        let mut messages = consumer.messages().await.map_err(|e| fail(e.into()))?;
        // The count the consumer started with can shrink while it reads (a
        // moved entry's purge marker expires after a second): stop at the
        // last sequence seen at the start, or when nothing more comes.
        let last = state.last_sequence;
        while let Ok(Some(m)) = tokio::time::timeout(LIST_IDLE, messages.next()).await {
            let m = m.map_err(|e| fail(e.into()))?;
            let info = m.info().map_err(fail)?;
            let (pending, published, seq) = (info.pending, info.published, info.stream_sequence);
            out.since_ms.get_or_insert((published.unix_timestamp_nanos() / 1_000_000) as u64);
            let deleted = m.headers.as_ref().and_then(|h| h.get("KV-Operation")).is_some();
            if let Some(e) = m.subject.strip_prefix(prefix.as_str()).and_then(parse) {
                if deleted {
                    out.entries.retain(|x| x != &e); // purged after its put, both in the window
                } else {
                    out.entries.push(e);
                }
            }
            if pending == 0 || seq >= last {
                break;
            }
        }
        Ok(out)
    }

    /// Whether any key (or a just-moved entry's purge marker) matches
    /// `tenant` and `status`: one direct get of the first match, answered
    /// from the server's subject index, whatever the history.
    pub async fn any(&self, tenant: Option<&Tenant>, status: Option<JobStatus>) -> Result<bool, BusError> {
        let subject = format!("{}{}", self.kv.prefix, index_filter(tenant, status));
        match self.kv.stream.direct_get_first_for_subject(subject.clone()).await {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == async_nats::jetstream::stream::DirectGetErrorKind::NotFound => Ok(false),
            Err(e) => Err(BusError::new(format!("cannot read {subject}"), e)),
        }
    }

    /// How many keys match `tenant` and `status` (purge markers of just-moved entries
    /// included), counted by the server: a consumer of the filter's last
    /// values reports how many it would deliver, and is deleted unread.
    pub async fn matching(&self, tenant: Option<&Tenant>, status: Option<JobStatus>) -> Result<u64, BusError> {
        let filter = index_filter(tenant, status);
        let fail = |e: Box<dyn std::error::Error + Send + Sync>| BusError::new(format!("cannot count {filter}"), e);
        let name = format!("index-count-{}", uuid::Uuid::now_v7().simple());
        let consumer = self
            .kv
            .stream
            .create_consumer(pull::Config {
                name: Some(name.clone()),
                filter_subject: format!("{}{filter}", self.kv.prefix),
                deliver_policy: DeliverPolicy::LastPerSubject,
                ack_policy: AckPolicy::None,
                headers_only: true,
                inactive_threshold: Duration::from_secs(10),
                ..Default::default()
            })
            .await
            .map_err(|e| fail(e.into()))?;
        let count = consumer.cached_info().num_pending;
        if let Err(e) = self.kv.stream.delete_consumer(&name).await {
            tracing::debug!(error = %e, "index count consumer not deleted; it expires by itself");
        }
        Ok(count)
    }

    /// Whether the jobs stored before the index existed have been indexed.
    pub async fn backfilled(&self) -> Result<bool, BusError> {
        let entry = self.kv.entry(BACKFILLED).await.map_err(|e| BusError::new("cannot read the index marker", e))?;
        Ok(entry.is_some_and(|e| e.operation == kv::Operation::Put))
    }

    /// Records that the jobs stored before the index existed have been indexed.
    pub async fn mark_backfilled(&self) -> Result<(), BusError> {
        let at = flotilla_protocol::now().unix_timestamp().to_string();
        self.kv.put(BACKFILLED, at.into()).await.map_err(|e| BusError::new("cannot store the index marker", e))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_and_filters_select_tenant_and_status() {
        let tenant = Tenant::new("acme").unwrap();
        let id = JobId::new();
        let key = index_key(&tenant, JobStatus::Running, &id);
        assert_eq!(parse(&key), Some(Indexed { tenant: tenant.clone(), status: JobStatus::Running, id }));
        assert_eq!(parse(BACKFILLED), None, "the marker is no entry");
        assert_eq!(index_filter(Some(&tenant), Some(JobStatus::Failed)), "acme.failed.*");
        assert_eq!(index_filter(None, None), "*.*.*");
    }
}
