//! Job records in the `<prefix>_jobs` KV bucket: per job a small header and
//! one key per task, so every write is O(1) in the job's size:
//!
//! | key | value |
//! |---|---|
//! | `<job>` | the job header (an encoded `JobRecord` without tasks, todos, and with the input's head only) |
//! | `<job>.input` | the job text (`JobInput`), written once |
//! | `<job>.todos` | the todo list (`JobTodos`), written when it changes |
//! | `<job>.t.<task>` | one encoded `TaskEntry` |
//! | `<job>.k.<dispatch key>` | the id of the task dispatched under that key (a tool call id, a map item) |
//!
//! Job ids and task ids hold no `.`, so `*` lists the headers and
//! `<job>.t.*` one job's tasks. Writes are optimistic: [`create`](JobRecords::create)
//! and [`update`](JobRecords::update) (with the revision read) report a
//! conflict instead of overwriting a concurrent change. The orchestrator's
//! job store (orchestrator/src/jobs.rs) decides what to write and retries;
//! this is only the bucket.

use async_nats::jetstream::consumer::{DeliverPolicy, ReplayPolicy, push};
use async_nats::jetstream::kv;
use bytes::Bytes;
use flotilla_protocol::ids::{JobId, TaskId};
use futures::StreamExt;

use crate::{Bus, BusError};

/// The jobs bucket.
#[derive(Clone)]
pub struct JobRecords {
    kv: kv::Store,
    /// For the inbox of a key listing's consumer.
    client: async_nats::Client,
}

/// The outcome of a conditional write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cas {
    /// Stored at this revision.
    Stored(u64),
    /// Not stored: the key exists (create) or moved past the revision given (update).
    Conflict,
}

/// The keys of one job's records.
pub mod keys {
    use super::{JobId, TaskId};

    /// The job header.
    pub fn header(job: &JobId) -> String {
        job.to_string()
    }

    /// The job text.
    pub fn input(job: &JobId) -> String {
        format!("{job}.input")
    }

    /// The todo list.
    pub fn todos(job: &JobId) -> String {
        format!("{job}.todos")
    }

    /// One task entry.
    pub fn task(job: &JobId, task: &TaskId) -> String {
        format!("{job}.t.{task}")
    }

    /// Filter matching every task entry of `job`.
    pub fn tasks(job: &JobId) -> String {
        format!("{job}.t.*")
    }

    /// Filter matching every job header.
    pub const HEADERS: &str = "*";

    /// The index entry of dispatch key `key`: characters a KV key cannot
    /// hold (and `=`) are escaped as `=XX`; a long key is replaced by its SHA-256.
    pub fn index(job: &JobId, key: &str) -> String {
        let mut out = String::with_capacity(key.len());
        for b in key.bytes() {
            match b {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' => out.push(b as char),
                _ => out.push_str(&format!("={b:02X}")),
            }
        }
        if out.len() > 160 {
            out = format!("sha256={}", flotilla_protocol::digest::sha256_hex(key.as_bytes()));
        }
        format!("{job}.k.{out}")
    }

    /// The task id of a task entry key, if `key` is one of `job`'s.
    pub fn task_of(job: &JobId, key: &str) -> Option<TaskId> {
        key.strip_prefix(&format!("{job}.t.")).and_then(|t| t.parse().ok())
    }
}

impl Bus {
    /// The job records bucket (opened once per connection).
    pub async fn job_records(&self) -> Result<JobRecords, BusError> {
        Ok(JobRecords { kv: self.jobs().await?, client: self.client.clone() })
    }
}

impl JobRecords {
    /// The value of `key` and its revision, if stored.
    pub async fn entry(&self, key: &str) -> Result<Option<(Bytes, u64)>, BusError> {
        let entry = self.kv.entry(key).await.map_err(|e| BusError::new(format!("cannot read {key}"), e))?;
        Ok(entry.filter(|e| e.operation == kv::Operation::Put).map(|e| (e.value, e.revision)))
    }

    /// Stores `value` under `key` unless the key exists (one attempt).
    pub async fn create(&self, key: &str, value: Bytes) -> Result<Cas, BusError> {
        match self.kv.create(key, value).await {
            Ok(rev) => Ok(Cas::Stored(rev)),
            Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => Ok(Cas::Conflict),
            Err(e) => Err(BusError::new(format!("cannot store {key}"), e)),
        }
    }

    /// Stores `value` under `key` if its revision is still `revision` (one attempt).
    pub async fn update(&self, key: &str, value: Bytes, revision: u64) -> Result<Cas, BusError> {
        match self.kv.update(key, value, revision).await {
            Ok(rev) => Ok(Cas::Stored(rev)),
            Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => Ok(Cas::Conflict),
            Err(e) => Err(BusError::new(format!("cannot store {key}"), e)),
        }
    }

    /// Removes every record of `job` (header, input, todos, tasks, dispatch
    /// keys) with two stream purges by subject, which leave no delete markers
    /// behind (retention, orchestrator/src/jobs/retention.rs).
    pub async fn remove_job(&self, job: &JobId) -> Result<(), BusError> {
        let prefix = &self.kv.prefix;
        for subject in [format!("{prefix}{job}"), format!("{prefix}{job}.>")] {
            purge_subject(&self.kv, subject).await?;
        }
        Ok(())
    }

    /// The keys matching `filter` (a KV key with `*` / `>` wildcards, see
    /// [`keys`]), in no particular order: one headers-only pass over the last
    /// revision of each matching key, so listing one job's tasks does not
    /// read every other job's.
    pub async fn keys(&self, filter: &str) -> Result<Vec<String>, BusError> {
        list_keys(&self.kv, &self.client, filter).await
    }

    /// What changed under `filter` after revision `after` (`0`: every live
    /// key, as a first read), in revision order, and the last revision read:
    /// the next call passes it to read only what was written since. A
    /// revision is the stream sequence of the write, so this follows every
    /// orchestrator's writes, not only this one's. Values are left empty
    /// when `headers_only`.
    pub async fn changes(&self, filter: &str, after: u64, headers_only: bool) -> Result<Changes, BusError> {
        let from = if after == 0 {
            DeliverPolicy::LastPerSubject
        } else {
            DeliverPolicy::ByStartSequence { start_sequence: after + 1 }
        };
        read_subjects(&self.kv, &self.client, filter, from, headers_only, after).await
    }
}

/// The writes a [`JobRecords::changes`] call read.
#[derive(Debug, Default)]
pub struct Changes {
    /// Each key written with its value then; `None` for a deleted or purged key.
    pub entries: Vec<(String, Option<Bytes>)>,
    /// The revision to read on from: the last one read, or the one given.
    pub last: u64,
}

/// Purges every message of `subject` (a `$KV.<bucket>.` subject, wildcards
/// allowed) from `kv`'s stream: keys gone with no delete marker left.
pub(crate) async fn purge_subject(kv: &kv::Store, subject: String) -> Result<(), BusError> {
    kv.stream
        .purge()
        .filter(subject.clone())
        .await
        .map_err(|e| BusError::new(format!("cannot remove {subject}"), e))?;
    Ok(())
}

/// How long a key listing waits for the next key before it takes the
/// listing as complete.
pub(crate) const LIST_IDLE: std::time::Duration = std::time::Duration::from_secs(2);

/// The live keys of `kv` matching `filter`: a headers-only ordered consumer
/// over the last revision of each matching key, so the cost is the number
/// of matching subjects, not the bucket's size. Shared with the job index
/// (job_index.rs).
pub(crate) async fn list_keys(
    kv: &kv::Store,
    client: &async_nats::Client,
    filter: &str,
) -> Result<Vec<String>, BusError> {
    let read = read_subjects(kv, client, filter, DeliverPolicy::LastPerSubject, true, 0).await?;
    Ok(read.entries.into_iter().filter_map(|(k, v)| v.map(|_| k)).collect())
}

/// The messages of `kv`'s stream under `filter` from `from` on, as keys
/// with their values (`None`: deleted), through one ordered consumer.
async fn read_subjects(
    kv: &kv::Store,
    client: &async_nats::Client,
    filter: &str,
    from: DeliverPolicy,
    headers_only: bool,
    after: u64,
) -> Result<Changes, BusError> {
    let fail = |e: Box<dyn std::error::Error + Send + Sync>| BusError::new(format!("cannot list {filter}"), e);
    let prefix = kv.prefix.clone();
    let consumer = kv
        .stream
        .create_consumer(push::OrderedConfig {
            deliver_subject: client.new_inbox(),
            filter_subject: format!("{prefix}{filter}"),
            headers_only,
            replay_policy: ReplayPolicy::Instant,
            deliver_policy: from,
            ..Default::default()
        })
        .await
        .map_err(|e| fail(e.into()))?;
    let mut out = Changes { entries: Vec::new(), last: after };
    if consumer.cached_info().num_pending == 0 {
        return Ok(out);
    }
    let mut messages = consumer.messages().await.map_err(|e| fail(e.into()))?;
    // The count the consumer started with can shrink while it reads (a
    // moved index entry's purge marker expires after a second, a key is
    // purged): when nothing more comes, the listing is complete.
    while let Ok(Some(m)) = tokio::time::timeout(LIST_IDLE, messages.next()).await {
        let m = m.map_err(|e| fail(e.into()))?;
        let info = m.info().map_err(fail)?;
        let (pending, sequence) = (info.pending, info.stream_sequence);
        let deleted = m.headers.as_ref().and_then(|h| h.get("KV-Operation")).is_some();
        if let Some(key) = m.subject.strip_prefix(prefix.as_str()) {
            out.entries.push((key.to_string(), (!deleted).then(|| m.payload.clone())));
        }
        out.last = out.last.max(sequence);
        if pending == 0 {
            break;
        }
    }
    Ok(out)
}
