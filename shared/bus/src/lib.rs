//! The bus: one NATS connection with JetStream, and the streams, consumers and
//! buckets every Flotilla process agrees on. Each process declares what it
//! needs idempotently at start (`create_or_update`, [`Bus::ensure_topology`]),
//! so the order in which orchestrator and workers start does not matter.
//!
//! The connection is private: every process (and every test that is not
//! acting as a plain NATS client) goes through the typed stores below, so each
//! operation on a stream or bucket is written once, here.
//!
//! | name (prefix `flotilla`)   | kind                 | holds                                  | typed store (file) |
//! |----------------------------|----------------------|----------------------------------------|--------------------|
//! | `FLOTILLA_TASKS`           | stream, work queue   | `flotilla.task.>`                      | [`TaskQueue`]: publish (dedup id, traceparent), purge a job's tasks, consumer, depth, given-up tasks (`tasks.rs`); per-type stats: pending, in flight, redelivered, oldest waiting, dead letters ([`TaskQueue::stats`], `queue_stats.rs`) |
//! | `flotilla-task-<type>`     | durable pull consumer| `flotilla.task.<type>.*`               | [`TaskQueue::consumer`] (`tasks.rs`) yields [`TaskDelivery`]s: progress, hand back, dead-letter, ack (`task_delivery.rs`) |
//! | `FLOTILLA_REPORTS`         | stream, limits 7 d   | `flotilla.job.*.*.report.*`            | [`ReportStream`]: publish, stored report of a task, follow (`reports.rs`) |
//! | `FLOTILLA_EVENTS`          | stream, limits 24 h  | `flotilla.job.*.*.event`, `.progress.*`| [`Bus::publish_event`]; [`EventStream`]: follow a filter with its stored count (`events.rs`) |
//! | `FLOTILLA_MESSAGES`        | stream, limits 7 d   | `flotilla.job.*.*.message.*`           | [`TaskMessages`]: publish, follow a type's, look up and replay one task's (`task_messages.rs`) |
//! | `FLOTILLA_JOURNAL`         | stream, limits 7 d, direct get, republishes steps headers-only to progress | `flotilla.journal.<type>.<tenant>.<job>.<task>[.quiet\|.snapshot]` | [`Journal`]: append (with the step's progress event in a header), read (last snapshot + entries after it), purge a job's (`journal.rs`) |
//! | `FLOTILLA_DEADLETTER`      | stream, limits 30 d  | `flotilla.deadletter.>` + reason header; tasks on `.deadletter.task.<type>` | [`Bus::dead_letter`], [`Bus::dead_letter_task`] (`dead_letters.rs`) |
//! | `FLOTILLA_AUDIT`           | stream               | `flotilla.audit.<tenant>.<job>`        | [`audit::BusAuditSink`], [`audit::read`] (`audit.rs`) |
//! | `flotilla_jobs`            | KV bucket            | job headers and one key per task       | [`JobRecords`]: entry, create, update (by revision), keys by filter (`job_records.rs`); the orchestrator's job store writes them |
//! | `flotilla_jobs_index`      | KV bucket, msg TTL   | `<tenant>.<status>.<job>` -> summary   | [`JobIndex`]: put, remove (purge, marker TTL 1 s), entries by tenant/status (`job_index.rs`) |
//! | `flotilla_cancelled`       | KV bucket, 24 h      | `<job>` or `<job>.<task>` -> reason    | [`Cancellations`]: record, reason, watch (`cancellations.rs`) |
//! | `flotilla_checkpoints`     | KV bucket            | planner conversation by job id         | [`Checkpoints`]: save, load, remove (`checkpoints.rs`) |
//! | `flotilla_leases`          | KV bucket, per-key TTL | job id -> owning orchestrator        | [`Leases`]: acquire, renew (CAS), release, owner (`leases.rs`) |
//! | `flotilla_files`           | Object Store bucket  | job files, `[files] max_age` retention | [`Bus::job_files`] (`files.rs`) |
//! | `flotilla_workers`         | KV bucket, memory    | latest heartbeat per live worker (TTL) | [`Bus::publish_heartbeat`], [`Bus::live_workers`], [`Bus::remove_worker`] (`workers.rs`) |
//! | `flotilla_approvals`       | KV bucket, 7 d       | `req.<type>.<job>.<task>.<call>`, `dec.…<round>` | [`ApprovalStore`] (`approvals.rs`) |
//! | `flotilla.api.<tenant>.<op>` | request/reply      | the job API                            | [`Bus::request`], [`Bus::api_requests`], [`Bus::reply`] (`api.rs`) |
//! | `$SRV.PING\|INFO\|STATS[.<name>[.<id>]]` | NATS service API | one instance per worker, metadata: worker id, host, types | [`Bus::announce_service`] (`service.rs`) |
//!
//! The KV handles are opened once per connection and shared by its clones
//! (`buckets.rs`); auth and TLS are applied at connect (`auth.rs`), and a
//! permission the server refuses surfaces at once (`denials.rs`).

#![deny(missing_docs)]

mod api;
mod approvals;
pub mod audit;
pub mod auth;
mod buckets;
mod cancellations;
mod checkpoints;
mod dead_letters;
pub mod denials;
mod error_kinds;
mod events;
mod files;
mod history_seed;
mod job_index;
mod job_records;
mod journal;
mod leases;
mod mcp_tokens;
pub mod probe;
mod queue_stats;
mod reports;
mod service;
mod task_delivery;
mod task_messages;
mod tasks;
mod workers;

pub use api::{ApiRequest, ApiRequests};
pub use approvals::{APPROVAL_RETENTION, ApprovalStore, Versioned, Write};
pub use cancellations::{Cancellations, Cancelled};
pub use checkpoints::Checkpoints;
pub use events::{EventStream, RawEvent, event_body};
pub use history_seed::seed_finished_jobs;
pub use job_index::{Indexed, JobIndex, RecentEntries, index_filter, index_key};
pub use job_records::{Cas, Changes, JobRecords, keys as job_keys};
pub use journal::{Appended, Journal, JournalKey, JournalRead, PROGRESS_HEADER, Stored};
pub use leases::{Lease, Leases};
pub use mcp_tokens::McpTokens;
pub use reports::ReportStream;
pub use service::Announcement;
pub use task_delivery::{TaskConsumer, TaskDelivery};
pub use task_messages::{MESSAGE_FOLLOWER_PREFIX, TaskMessages};
pub use tasks::{FollowUps, GivenUp, QueueDepth, StoredTask, TaskQueue};
pub use workers::TTL_INTERVALS;

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, object_store, stream};
use bytes::Bytes;

use denials::{Denial, DenialKind, Denials};
use flotilla_config::NatsConfig;
use flotilla_protocol::ids::Tenant;
use flotilla_protocol::subjects::Subjects;
use flotilla_protocol::{self as protocol, MAX_MESSAGE_BYTES, Message, ProgressEvent};

pub use flotilla_retry::{Backoff, Retryable, retry};

/// A bus operation failed.
///
/// Its message is the whole story on one line, `<context>: <cause>`, and it
/// reports no separate [`source`](std::error::Error::source): async-nats
/// errors already print their own causes in their message, so a chain
/// printer (anyhow's `{:#}`) walking a kept source would repeat every cause
/// ("no responders: no responders"). The original error stays in the
/// `source` field, and [`BusError::kind`] is decided from its type when the
/// error is made (`error_kinds.rs`).
#[derive(Debug)]
pub struct BusError {
    /// What was being done.
    pub context: String,
    /// The underlying error.
    pub source: Box<dyn std::error::Error + Send + Sync>,
    kind: BusErrorKind,
}

impl std::fmt::Display for BusError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.context, self.source)
    }
}

impl std::error::Error for BusError {}

/// What kind of failure a [`BusError`] is: whether trying again can help.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum BusErrorKind {
    /// An outage, a timeout, a leader election: worth retrying.
    Transient,
    /// The message or value exceeds what the server or bucket accepts.
    TooLarge,
    /// The credential may not do this.
    Permission,
    /// The stream, bucket or key does not exist.
    NotFound,
    /// Nobody serves the subject: no orchestrator answers the job API.
    /// Transient too: one may be starting (`flotilla demo` waits for it).
    NoResponders,
}

impl BusError {
    /// Wraps `source` with what was being done; the kind comes from the
    /// source's type (an async-nats error's kind, a JetStream API error
    /// code, a [`Denial`]). Any other source is transient.
    pub fn new(context: impl Into<String>, source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        let source = source.into();
        let kind = error_kinds::classify(source.as_ref());
        Self { context: context.into(), source, kind }
    }

    /// Wraps `source` of a kind the caller established itself (a key found
    /// missing, a value measured too large), not from an async-nats error.
    pub fn with_kind(
        kind: BusErrorKind,
        context: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        Self { context: context.into(), source: source.into(), kind }
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> BusErrorKind {
        self.kind
    }

    /// Whether trying again may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(self.kind(), BusErrorKind::Transient | BusErrorKind::NoResponders)
    }
}

impl flotilla_retry::Retryable for BusError {
    fn is_transient(&self) -> bool {
        BusError::is_transient(self)
    }
}

/// How long a starting process waits for the bus's streams and buckets.
pub const TOPOLOGY_BUDGET: Duration = Duration::from_secs(60);

/// Header carrying why a message was dead-lettered.
pub const REASON: &str = "Flotilla-Reason";

/// Header carrying the W3C trace context.
pub const TRACEPARENT: &str = "traceparent";

/// Header of a task message that no follow-up message can come for
/// ([`FollowUps::None`]; docs/PROTOCOL.md, "FollowUp: messages to a
/// running task").
pub const FOLLOW_UPS: &str = "Flotilla-Follow-Ups";

/// The headers of a durable publish: `Nats-Msg-Id` (JetStream's duplicate
/// window) and `traceparent`, each when given.
pub(crate) fn durable_headers(msg_id: Option<&str>, traceparent: Option<&str>) -> async_nats::HeaderMap {
    let mut headers = async_nats::HeaderMap::new();
    if let Some(id) = msg_id {
        headers.insert(async_nats::header::NATS_MESSAGE_ID, id);
    }
    if let Some(tp) = traceparent {
        headers.insert(TRACEPARENT, tp);
    }
    headers
}

/// A connected process's view of the bus. The connection itself is private:
/// callers use the typed stores (see the table above), so each operation on a
/// stream or bucket is written once. `subjects` and `config` stay public:
/// they are plain values (names and settings), reading them does no I/O.
#[derive(Clone)]
pub struct Bus {
    /// Core NATS client (cheap to clone).
    client: async_nats::Client,
    /// JetStream context.
    js: jetstream::Context,
    /// Names under the configured prefix.
    pub subjects: Subjects,
    /// The `[nats]` settings.
    pub config: NatsConfig,
    /// Permission denials the server reported on this connection.
    denials: Denials,
    /// The KV bucket handles, opened once (`buckets.rs`).
    buckets: Arc<buckets::Buckets>,
}

impl Bus {
    /// The core NATS connection, for a crate that speaks another protocol
    /// on the same connection (the Synadia Agent Protocol,
    /// orchestrator/agent-protocol): it shares the credentials, TLS and
    /// inbox prefix Flotilla was configured with. Flotilla's own streams
    /// and buckets are reached through the typed stores, never through it.
    pub fn nats(&self) -> &async_nats::Client {
        &self.client
    }

    /// Connects as `name` (shown in `nats-server` connection lists), retrying
    /// for up to `wait` so processes may start before the server.
    pub async fn connect(config: &NatsConfig, name: &str, wait: Duration) -> Result<Self, BusError> {
        let deadline = tokio::time::Instant::now() + wait;
        let denials = Denials::default();
        // `url` may list several servers (a cluster); async-nats wants them one by one.
        let servers = config
            .url
            .split(',')
            .map(|u| u.trim().parse::<async_nats::ServerAddr>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| BusError::new(format!("invalid [nats] url {}", redact_url(&config.url)), e))?;
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
        let mut next_warning = tokio::time::Instant::now();
        let client = loop {
            let seen = denials.clone();
            let opts = async_nats::ConnectOptions::new()
                .name(name)
                .connection_timeout(Duration::from_secs(2))
                .max_reconnects(None)
                .custom_inbox_prefix(&config.inbox_prefix)
                .event_callback(move |event| {
                    let seen = seen.clone();
                    async move {
                        match event {
                            async_nats::Event::ServerError(async_nats::ServerError::Other(e)) if seen.observe(&e) => {}
                            other => tracing::debug!(event = %other, "NATS connection event"),
                        }
                    }
                });
            let opts = auth::apply(config, opts)
                .await
                .map_err(|e| BusError::new(format!("cannot load NATS credentials ({})", auth::method(config)), e))?;
            match opts.connect(servers.clone()).await {
                Ok(c) => break c,
                // Retrying cannot fix refused credentials or a TLS mismatch: say so at once.
                Err(e) if is_auth_error(&e) || is_tls_error(&e) => {
                    let what = if is_tls_error(&e) {
                        "TLS handshake with NATS failed (check [nats.tls] ca_file, cert_file and the server's tls block)"
                    } else {
                        "NATS refused the credentials (check [nats.auth] and the server's users)"
                    };
                    return Err(BusError::new(
                        format!("{what}; server {}, auth method {}", redact_url(&config.url), auth::method(config)),
                        e,
                    ));
                }
                Err(e) if tokio::time::Instant::now() < deadline => {
                    // An operator starting services before NATS sees why they wait.
                    if tokio::time::Instant::now() >= next_warning {
                        tracing::warn!(url = %redact_url(&config.url), error = %e, "waiting for NATS");
                        next_warning = tokio::time::Instant::now() + Duration::from_secs(10);
                    } else {
                        tracing::debug!(error = %e, "NATS not reachable yet, retrying");
                    }
                    tokio::time::sleep(backoff.next_delay().min(deadline - tokio::time::Instant::now())).await;
                }
                Err(e) => {
                    return Err(BusError::new(
                        format!(
                            "cannot reach NATS at {} (is nats-server running? set [nats] url or FLOTILLA_NATS__URL)",
                            redact_url(&config.url)
                        ),
                        e,
                    ));
                }
            }
        };
        let js = jetstream::new(client.clone());
        Ok(Self {
            client,
            js,
            subjects: Subjects::new(&config.prefix),
            config: config.clone(),
            denials,
            buckets: Arc::default(),
        })
    }

    /// Runs `op`, turning a permission denial the server reports for a subject
    /// `concerns` accepts into an immediate error instead of a timeout.
    pub async fn guarded<T, E>(
        &self,
        context: impl Into<String>,
        op: impl std::future::Future<Output = Result<T, E>>,
        concerns: impl Fn(&Denial) -> bool,
    ) -> Result<T, BusError>
    where
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        self.denials.guarded(context, op, concerns).await
    }

    /// Declares the streams and buckets (idempotent). With
    /// `[nats] manage_topology = false` it only waits for them to exist.
    /// A process starting while NATS restarts or elects a leader retries
    /// transient failures for up to [`TOPOLOGY_BUDGET`]; a permission error
    /// ends it at once.
    pub async fn ensure_topology(&self) -> Result<(), BusError> {
        if !self.config.manage_topology {
            return self.await_topology().await;
        }
        retry("JetStream topology declaration", TOPOLOGY_BUDGET, || self.declare_topology()).await
    }

    async fn declare_topology(&self) -> Result<(), BusError> {
        let s = &self.subjects;
        let streams = [
            stream::Config {
                name: s.tasks_stream(),
                subjects: vec![s.all_tasks()],
                retention: stream::RetentionPolicy::WorkQueue,
                storage: stream::StorageType::File,
                duplicate_window: Duration::from_secs(120),
                max_message_size: MAX_MESSAGE_BYTES as i32,
                ..Default::default()
            },
            stream::Config {
                name: s.reports_stream(),
                subjects: vec![s.all_reports()],
                storage: stream::StorageType::File,
                max_age: Duration::from_secs(7 * 24 * 3600),
                duplicate_window: Duration::from_secs(120),
                max_message_size: MAX_MESSAGE_BYTES as i32,
                ..Default::default()
            },
            stream::Config {
                name: s.events_stream(),
                subjects: s.all_events(),
                storage: stream::StorageType::File,
                max_age: Duration::from_secs(24 * 3600),
                max_message_size: MAX_MESSAGE_BYTES as i32,
                ..self.client_consumer_limits()
            },
            task_messages::stream_config(s),
            journal::stream_config(s),
            stream::Config {
                name: s.dead_letter_stream(),
                subjects: vec![s.all_dead_letters()],
                storage: stream::StorageType::File,
                max_age: Duration::from_secs(30 * 24 * 3600),
                ..Default::default()
            },
            stream::Config {
                name: s.audit_stream(),
                subjects: vec![s.all_audit()],
                storage: stream::StorageType::File,
                max_age: Duration::from_secs(self.config.audit_retention_days * 24 * 3600),
                max_message_size: MAX_MESSAGE_BYTES as i32,
                ..self.client_consumer_limits()
            },
        ];
        for mut config in streams {
            let name = config.name.clone();
            config.num_replicas = self.config.replicas;
            self.guarded(format!("cannot declare stream {name}"), self.js.create_or_update_stream(config), |d| {
                d.subject.starts_with("$JS.API.STREAM.")
            })
            .await?;
        }
        self.open_buckets().await
    }

    /// The consumer limits of the streams a client credential may create
    /// consumers on (events, audit: deploy/nats/roles.conf), from
    /// `[nats.consumers]`: at most `max_per_stream` consumers, and every
    /// consumer, even a durable one a client declared with a raw NATS
    /// client, is deleted once nobody read it for `inactive_secs` (the
    /// server gives the stream's threshold to a consumer that sets none and
    /// refuses one asking for longer).
    fn client_consumer_limits(&self) -> stream::Config {
        stream::Config {
            max_consumers: self.config.consumers.max_per_stream,
            consumer_limits: Some(stream::ConsumerLimits {
                inactive_threshold: self.config.consumers.inactive(),
                max_ack_pending: 0,
            }),
            ..Default::default()
        }
    }

    /// The inactive threshold of a consumer this process creates on a
    /// client-reachable stream: `wanted`, within the streams' limit.
    pub(crate) fn client_consumer_inactive(&self, wanted: Duration) -> Duration {
        wanted.min(self.config.consumers.inactive())
    }

    /// Waits (up to a minute) until the streams a worker needs exist, declared
    /// by a process allowed to manage them, normally the orchestrator.
    async fn await_topology(&self) -> Result<(), BusError> {
        let deadline = tokio::time::Instant::now() + TOPOLOGY_BUDGET;
        let files = format!("OBJ_{}", self.subjects.files_bucket());
        let s = &self.subjects;
        for name in [s.tasks_stream(), s.reports_stream(), s.audit_stream(), s.journal_stream(), files] {
            let mut logged = false;
            let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
            loop {
                let r = self
                    .guarded(format!("stream {name} is not available"), self.js.get_stream(&name), |d| {
                        d.subject.starts_with("$JS.API.STREAM.INFO.")
                    })
                    .await;
                match r {
                    Ok(_) => break,
                    Err(e) if e.source.is::<Denial>() || tokio::time::Instant::now() >= deadline => {
                        return Err(e);
                    }
                    Err(e) => {
                        if !logged {
                            tracing::info!(stream = %name, error = %e, "waiting for the orchestrator to declare the stream");
                            logged = true;
                        }
                        tokio::time::sleep(backoff.next_delay()).await;
                    }
                }
            }
        }
        Ok(())
    }

    /// The job files bucket (docs/TOOLS.md), created when missing. An existing
    /// bucket takes `max_age` when it differs: keep `[files] max_age` equal
    /// across processes. With `manage_topology = false` it is only opened.
    pub async fn files(&self, max_age: Duration) -> Result<object_store::ObjectStore, BusError> {
        let bucket = self.subjects.files_bucket();
        let open = |e: Box<dyn std::error::Error + Send + Sync>| {
            BusError::new(format!("cannot open Object Store bucket {bucket}"), e)
        };
        if !self.config.manage_topology {
            return self.js.get_object_store(&bucket).await.map_err(|e| open(e.into()));
        }
        let config = object_store::Config {
            bucket: bucket.clone(),
            description: Some("Flotilla job files".into()),
            max_age,
            storage: stream::StorageType::File,
            num_replicas: self.config.replicas,
            ..Default::default()
        };
        if let Ok(store) = self.js.create_object_store(config).await {
            return Ok(store);
        }
        // It exists with another configuration: adopt our retention, keep the rest.
        let name = format!("OBJ_{bucket}");
        let mut stream = self.js.get_stream(&name).await.map_err(|e| open(e.into()))?;
        let mut cfg = stream.info().await.map_err(|e| open(e.into()))?.config.clone();
        if cfg.max_age != max_age {
            cfg.max_age = max_age;
            self.js.update_stream(cfg).await.map_err(|e| open(e.into()))?;
        }
        self.js.get_object_store(&bucket).await.map_err(|e| open(e.into()))
    }

    /// Publishes `msg` through JetStream and waits for the stream's ack.
    /// `msg_id` becomes `Nats-Msg-Id` (deduplication within the window).
    pub async fn publish_durable<T: Message>(
        &self,
        subject: String,
        msg: &T,
        msg_id: Option<&str>,
        traceparent: Option<&str>,
    ) -> Result<(), BusError> {
        self.publish_durable_bytes(subject, protocol::encode(msg), T::NAME, msg_id, traceparent).await
    }

    /// [`Self::publish_durable`] of a body already encoded, `what` naming
    /// it in errors: for messages whose body depends on their subject
    /// (progress events, task reports; docs/PROTOCOL.md).
    pub async fn publish_durable_bytes(
        &self,
        subject: String,
        payload: Vec<u8>,
        what: &str,
        msg_id: Option<&str>,
        traceparent: Option<&str>,
    ) -> Result<(), BusError> {
        self.publish_durable_with_headers(subject, payload, what, durable_headers(msg_id, traceparent)).await
    }

    /// [`Self::publish_durable_bytes`] with the headers given.
    pub(crate) async fn publish_durable_with_headers(
        &self,
        subject: String,
        payload: Vec<u8>,
        what: &str,
        headers: async_nats::HeaderMap,
    ) -> Result<(), BusError> {
        let payload = checked(payload.into(), what)?;
        let publish = async {
            self.js
                .publish_with_headers(subject.clone(), headers, payload)
                .await
                .map_err(|e| BusError::new(format!("cannot publish to {subject}"), e))?
                .await
                .map_err(|e| BusError::new(format!("no JetStream ack for {subject}"), e))
        };
        self.guarded(format!("cannot publish to {subject}"), publish, |d| {
            d.kind == DenialKind::Publish && d.subject == subject
        })
        .await?;
        Ok(())
    }

    /// Removes the messages of `stream` under `filter`; returns how many.
    pub(crate) async fn purge_filtered(&self, stream: &str, filter: String) -> Result<u64, BusError> {
        let handle =
            self.js.get_stream_no_info(stream).await.map_err(|e| BusError::new(format!("no stream {stream}"), e))?;
        let purged = handle
            .purge()
            .filter(filter.clone())
            .await
            .map_err(|e| BusError::new(format!("cannot purge {filter}"), e))?;
        Ok(purged.purged)
    }

    /// Publishes an observation (progress, job event) without waiting for an
    /// ack: the events stream stores it, and losing one changes no result.
    pub async fn publish_event<T: Message>(&self, subject: String, msg: &T) {
        self.publish_observation(subject, protocol::encode(msg), T::NAME).await
    }

    /// Publishes a task's progress event on its subject, the way
    /// [`Self::publish_event`] does; the body leaves out the ids the
    /// subject carries ([`ProgressEvent::encode`]).
    pub async fn publish_progress(&self, tenant: &Tenant, ev: &ProgressEvent) {
        self.publish_observation(self.subjects.progress(tenant, &ev.job_id, &ev.task_id), ev.encode(), "progress event")
            .await
    }

    async fn publish_observation(&self, subject: String, payload: Vec<u8>, what: &str) {
        match checked(payload.into(), what) {
            Ok(payload) => {
                if let Err(e) = self.client.publish(subject.clone(), payload).await {
                    tracing::warn!(%subject, error = %e, "event not published");
                }
            }
            Err(e) => tracing::warn!(%subject, error = %e, "event not published"),
        }
    }
}

fn is_auth_error(e: &async_nats::ConnectError) -> bool {
    matches!(
        e.kind(),
        async_nats::ConnectErrorKind::AuthorizationViolation | async_nats::ConnectErrorKind::Authentication
    )
}

/// TLS failures surface as `Tls` or, from the handshake, as `Io` errors
/// carrying the TLS library's own error.
fn is_tls_error(e: &async_nats::ConnectError) -> bool {
    use std::error::Error as _;
    let from_handshake = || {
        e.source()
            .and_then(|s| s.downcast_ref::<std::io::Error>())
            .and_then(|io| io.get_ref())
            .is_some_and(|inner| inner.is::<async_nats::rustls::Error>())
    };
    matches!(e.kind(), async_nats::ConnectErrorKind::Tls)
        || (matches!(e.kind(), async_nats::ConnectErrorKind::Io) && from_handshake())
}

fn checked(payload: Bytes, what: &str) -> Result<Bytes, BusError> {
    if payload.len() > MAX_MESSAGE_BYTES {
        return Err(BusError::with_kind(
            BusErrorKind::TooLarge,
            format!("{what} not sent"),
            format!("{} bytes exceeds the {} byte message limit", payload.len(), MAX_MESSAGE_BYTES),
        ));
    }
    Ok(payload)
}

pub use flotilla_config::redact_url;

#[cfg(test)]
mod tests {
    use crate::{BusError, BusErrorKind};

    /// An async-nats error: its message names its cause, and it also keeps
    /// that cause as its source.
    #[derive(Debug)]
    struct Layered(std::io::Error);

    impl std::fmt::Display for Layered {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "no responders: {}", self.0)
        }
    }

    impl std::error::Error for Layered {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    /// Every message of a chain joined by ": ", as anyhow's `{:#}` prints it.
    fn chain(e: &(dyn std::error::Error + 'static)) -> String {
        let mut parts = vec![e.to_string()];
        let mut next = e.source();
        while let Some(cause) = next {
            parts.push(cause.to_string());
            next = cause.source();
        }
        parts.join(": ")
    }

    #[test]
    fn a_printed_chain_names_each_cause_once() {
        let inner = std::io::Error::other("connection refused");
        let e = BusError::new("no orchestrator is listening (flotilla.api.default.status)", Layered(inner));
        assert_eq!(
            chain(&e),
            "no orchestrator is listening (flotilla.api.default.status): no responders: connection refused"
        );
        assert_eq!(e.kind(), BusErrorKind::Transient);
    }

    /// A handshake failure is an I/O error carrying the TLS library's error;
    /// any other I/O error, whatever it says, is not a TLS failure.
    #[test]
    fn tls_failures_are_told_by_the_tls_error_they_carry() {
        use async_nats::{ConnectError, ConnectErrorKind};
        let io = |e: Box<dyn std::error::Error + Send + Sync>| std::io::Error::new(std::io::ErrorKind::InvalidData, e);
        let refused =
            async_nats::rustls::Error::InvalidCertificate(async_nats::rustls::CertificateError::UnknownIssuer);
        let handshake = ConnectError::with_source(ConnectErrorKind::Io, io(Box::new(refused)));
        assert!(super::is_tls_error(&handshake));
        let other = ConnectError::with_source(ConnectErrorKind::Io, io("tls handshake certificate".into()));
        assert!(!super::is_tls_error(&other), "text decides nothing");
        assert!(super::is_tls_error(&ConnectError::new(ConnectErrorKind::Tls)));
    }

    #[test]
    fn urls_lose_their_credentials() {
        assert_eq!(super::redact_url("nats://u:secret@h:4222"), "nats://***@h:4222");
        assert_eq!(super::redact_url("nats://h:4222,tls://t0k@x"), "nats://h:4222,tls://***@x");
    }
}
