//! The step journal stream (`<prefix>_JOURNAL`, limits 7 d): what a
//! subagent task has completed so far, so a later attempt on any worker
//! resumes after it (docs/RELIABILITY.md, "Step journal"). One message per
//! completed step on `<prefix>.journal.<type>.<tenant>.<job>.<task>`, and the
//! latest compaction snapshot on the same subject plus `.snapshot`; the
//! entries themselves are the worker's (workers/src/journal.rs).
//!
//! A step and its progress event are one message (docs/PROTOCOL.md,
//! "Progress events carried by the journal"): the entry is the body, the
//! event (version 2 body) rides in the [`PROGRESS_HEADER`] header, and the
//! stream republishes the headers alone of every message on a task's
//! steps subject to the task's progress subject, where the events stream
//! stores it like any event. One write per step serves the journal and the
//! watchers; the body, with the tool arguments and results, never leaves
//! this stream. An entry that carries no event (a marker, the follow-ups
//! taken, a note, a turn whose event goes out on its own) goes to the
//! task's quiet subject, `<steps>.quiet`, which is not republished: a
//! progress subscriber never gets an empty message. A reader reads both
//! subjects, in stream order.
//!
//! Writes are appends, O(1) in the task's length. Reading is rare (an attempt
//! after the first): the last snapshot by a direct get, then the entries
//! stored after it through an ordered consumer. Only the task's own type may
//! write or read its journal (the type is in the subject,
//! deploy/nats/roles.conf); tenants have no access at all, since entries hold
//! tool arguments and results that progress events only hash. The
//! orchestrator purges a job's journals when the job ends; the stream's age
//! limit removes whatever is left.

use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream::consumer::{DeliverPolicy, pull};
use async_nats::jetstream::context::PublishAckFuture;
use async_nats::jetstream::stream::{self, DirectGetErrorKind};
use bytes::Bytes;
use futures::StreamExt;

use crate::{Bus, BusError, checked};
use flotilla_protocol::ids::{JobId, SubagentType, TaskId, Tenant};
use flotilla_protocol::subjects::Subjects;
use flotilla_protocol::{self as protocol, MAX_MESSAGE_BYTES, Message};

/// How long journals are kept at most: as long as reports.
const RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);

/// How long reading a journal may take before the attempt gives up on it.
const READ_BUDGET: Duration = Duration::from_secs(10);

/// The header of a journal message that carries the progress event of its
/// step; the stream republishes it (headers only) to the task's progress
/// subject.
pub const PROGRESS_HEADER: &str = "Flotilla-Progress";

/// The stream's configuration, declared with the rest of the topology.
pub(crate) fn stream_config(s: &Subjects) -> stream::Config {
    stream::Config {
        name: s.journal_stream(),
        subjects: vec![s.all_journals()],
        storage: stream::StorageType::File,
        max_age: RETENTION,
        max_message_size: MAX_MESSAGE_BYTES as i32,
        allow_direct: true,
        republish: Some(progress_republish(s)),
        ..Default::default()
    }
}

/// Steps messages (`<p>.journal.<type>.<tenant>.<job>.<task>`: not the
/// quiet ones, not snapshots) go on, headers only, to
/// `<p>.job.<tenant>.<job>.progress.<task>`.
fn progress_republish(s: &Subjects) -> stream::Republish {
    let p = s.prefix();
    stream::Republish {
        source: format!("{p}.journal.*.*.*.*"),
        destination: format!("{p}.job.{{{{wildcard(2)}}}}.{{{{wildcard(3)}}}}.progress.{{{{wildcard(4)}}}}"),
        headers_only: true,
    }
}

/// Where one task's journal lives.
#[derive(Clone, Debug)]
pub struct JournalKey {
    /// Its entries that carry a progress event (republished).
    pub steps: String,
    /// Its entries that carry none (`<steps>.quiet`, not republished).
    pub quiet: String,
    /// Its latest snapshot.
    pub snapshot: String,
}

/// One stored journal message.
#[derive(Clone, Debug)]
pub struct Stored<T> {
    /// Its stream sequence.
    pub seq: u64,
    /// The message.
    pub entry: T,
}

/// What a journal holds: the latest snapshot, if any, and every entry
/// stored after it, oldest first.
#[derive(Debug)]
pub struct JournalRead<T> {
    /// The latest snapshot.
    pub snapshot: Option<Stored<T>>,
    /// The entries after it.
    pub entries: Vec<Stored<T>>,
}

/// The step journal stream.
#[derive(Clone)]
pub struct Journal {
    bus: Bus,
}

impl Bus {
    /// The step journal stream.
    pub fn journal(&self) -> Journal {
        Journal { bus: self.clone() }
    }
}

/// A pending append: await it to know the entry is stored.
pub struct Appended {
    subject: String,
    ack: PublishAckFuture,
}

impl Appended {
    /// Waits for the stream's ack; returns the entry's sequence.
    pub async fn stored(self) -> Result<u64, BusError> {
        self.ack
            .await
            .map(|a| a.sequence)
            .map_err(|e| BusError::new(format!("no JetStream ack for {}", self.subject), e))
    }
}

impl Journal {
    /// The subjects of `task`'s journal.
    pub fn key(&self, ty: &SubagentType, tenant: &Tenant, job: &JobId, task: &TaskId) -> JournalKey {
        let steps = self.bus.subjects.journal(ty, tenant, job, task);
        JournalKey { snapshot: format!("{steps}.snapshot"), quiet: format!("{steps}.quiet"), steps }
    }

    /// Sends `entry` to the journal: with `progress` (an encoded progress
    /// event of the step) in [`PROGRESS_HEADER`] on the steps subject, which
    /// the stream republishes; without, on the quiet subject; a snapshot on
    /// the snapshot subject. The entry is stored once [`Appended::stored`]
    /// returns.
    pub async fn append<T: Message>(
        &self,
        key: &JournalKey,
        entry: &T,
        snapshot: bool,
        progress: Option<&str>,
    ) -> Result<Appended, BusError> {
        let progress = progress.filter(|_| !snapshot);
        let subject = match (snapshot, progress) {
            (true, _) => key.snapshot.clone(),
            (false, Some(_)) => key.steps.clone(),
            (false, None) => key.quiet.clone(),
        };
        let payload = checked(protocol::encode(entry).into(), T::NAME)?;
        let publish = match progress {
            Some(event) => {
                let mut headers = HeaderMap::new();
                headers.insert(PROGRESS_HEADER, event);
                self.bus.js.publish_with_headers(subject.clone(), headers, payload).await
            }
            None => self.bus.js.publish(subject.clone(), payload).await,
        };
        let ack = publish.map_err(|e| BusError::new(format!("cannot publish to {subject}"), e))?;
        Ok(Appended { subject, ack })
    }

    /// Whether the stream republishes the progress events its steps carry
    /// (a stream declared by a Flotilla without it does not: the worker then
    /// publishes each event on its own). Workers read it at start and every
    /// few seconds after (workers/src/journal.rs).
    pub async fn carries_progress(&self) -> Result<bool, BusError> {
        let name = self.bus.subjects.journal_stream();
        let stream = self.bus.js.get_stream(&name).await.map_err(|e| BusError::new("no journal stream", e))?;
        let info = stream.cached_info();
        let wanted = progress_republish(&self.bus.subjects);
        Ok(info
            .config
            .republish
            .as_ref()
            .is_some_and(|r| r.source == wanted.source && r.destination == wanted.destination && r.headers_only))
    }

    /// Reads the journal: its latest snapshot and the entries after it.
    /// Entries that do not decode are skipped with a warning.
    pub async fn read<T: Message>(&self, key: &JournalKey) -> Result<JournalRead<T>, BusError> {
        tokio::time::timeout(READ_BUDGET, self.read_inner(key))
            .await
            .map_err(|_| BusError::new("cannot read the step journal", "timed out"))?
    }

    async fn read_inner<T: Message>(&self, key: &JournalKey) -> Result<JournalRead<T>, BusError> {
        let name = self.bus.subjects.journal_stream();
        let stream = self.bus.js.get_stream_no_info(&name).await.map_err(|e| BusError::new("no journal stream", e))?;
        let snapshot = match stream.direct_get_last_for_subject(key.snapshot.clone()).await {
            Ok(m) => decoded(m.sequence, &m.payload),
            Err(e) if e.kind() == DirectGetErrorKind::NotFound => None,
            Err(e) => return Err(BusError::new(format!("cannot read {}", key.snapshot), e)),
        };
        // Entries stored after the snapshot; a snapshot's sequence is after
        // every step it covers (the steps subjects share the stream). One
        // read per subject (a consumer filtered on each, as the roles
        // grant), merged in stream order.
        let start = snapshot.as_ref().map(|s| s.seq + 1);
        let mut entries = self.entries(&name, &key.steps, start).await?;
        entries.extend(self.entries(&name, &key.quiet, start).await?);
        entries.sort_by_key(|e| e.seq);
        Ok(JournalRead { snapshot, entries })
    }

    /// The entries on `subject` from stream sequence `start` (all without).
    async fn entries<T: Message>(
        &self,
        name: &str,
        subject: &str,
        start: Option<u64>,
    ) -> Result<Vec<Stored<T>>, BusError> {
        let deliver_policy = match start {
            Some(start_sequence) => DeliverPolicy::ByStartSequence { start_sequence },
            None => DeliverPolicy::All,
        };
        let consumer_name = format!("journal-{}", uuid::Uuid::now_v7().simple());
        let api = format!("$JS.API.CONSUMER.CREATE.{name}.{consumer_name}");
        let config = pull::OrderedConfig {
            name: Some(consumer_name),
            filter_subject: subject.to_string(),
            deliver_policy,
            ..Default::default()
        };
        let create = self.bus.js.create_consumer_on_stream(config, name);
        let consumer =
            self.bus.guarded("cannot read the step journal", create, |d| d.subject.starts_with(&api)).await?;
        let mut left = consumer.cached_info().num_pending;
        let mut entries = Vec::with_capacity(left as usize);
        if left > 0 {
            let mut messages =
                consumer.messages().await.map_err(|e| BusError::new("cannot read the step journal", e))?;
            while left > 0 {
                let Some(m) = messages.next().await else { break };
                let m = m.map_err(|e| BusError::new("step journal read failed", e))?;
                left -= 1;
                let seq = m.info().map(|i| i.stream_sequence).unwrap_or_default();
                entries.extend(decoded(seq, &m.payload));
            }
        }
        Ok(entries)
    }

    /// Messages and bytes the journal stream holds now (`flotilla bench`).
    pub async fn usage(&self) -> Result<(u64, u64), BusError> {
        let name = self.bus.subjects.journal_stream();
        let mut stream = self.bus.js.get_stream(&name).await.map_err(|e| BusError::new("no journal stream", e))?;
        let info = stream.info().await.map_err(|e| BusError::new("cannot read the journal stream", e))?;
        Ok((info.state.messages, info.state.bytes))
    }

    /// Removes the journals of every task of `job`.
    pub async fn purge_job(&self, tenant: &Tenant, job: &JobId) -> Result<u64, BusError> {
        let s = &self.bus.subjects;
        self.bus.purge_filtered(&s.journal_stream(), s.journals_of_job(tenant, job)).await
    }
}

fn decoded<T: Message>(seq: u64, payload: &Bytes) -> Option<Stored<T>> {
    match protocol::decode::<T>(payload) {
        Ok(entry) => Some(Stored { seq, entry }),
        Err(e) => {
            tracing::warn!(seq, error = %e, "journal entry skipped");
            None
        }
    }
}
