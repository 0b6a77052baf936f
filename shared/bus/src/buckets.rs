//! The KV buckets, declared (or, without `[nats] manage_topology`, only
//! opened: a worker may not create or reconfigure a shared bucket,
//! docs/SECURITY.md) once per connection and then handed out as cheap clones: a
//! `kv::Store` is a handle, and declaring a bucket is a JetStream API round
//! trip that used to run on every read. [`Bus::ensure_topology`] opens them
//! all at start; a bucket first used before that is opened on first use. A
//! failed open is not remembered, so the next use tries again.

use std::future::Future;
use std::time::Duration;

use async_nats::jetstream::{kv, stream};
use tokio::sync::OnceCell;

use crate::approvals::APPROVAL_RETENTION;
use crate::denials::Denial;
use crate::{Backoff, Bus, BusError, TOPOLOGY_BUDGET};
use flotilla_protocol::MAX_MESSAGE_BYTES;

/// Backstop age of any worker entry, whatever its TTL (heartbeat intervals are capped below this).
const WORKER_MAX_AGE: Duration = Duration::from_secs(15 * 60);

/// How long the server keeps the delete marker of an expired worker entry.
const WORKER_MARKER_TTL: Duration = Duration::from_secs(60);

/// How long the server keeps a delete marker it writes in the job index.
const INDEX_MARKER_TTL: Duration = Duration::from_secs(60);

/// How long a cancellation is remembered.
const CANCEL_MAX_AGE: Duration = Duration::from_secs(24 * 3600);

/// The bucket handles of one connection, shared by its clones.
#[derive(Default)]
pub(crate) struct Buckets {
    jobs: OnceCell<kv::Store>,
    job_index: OnceCell<kv::Store>,
    cancelled: OnceCell<kv::Store>,
    checkpoints: OnceCell<kv::Store>,
    workers: OnceCell<kv::Store>,
    approvals: OnceCell<kv::Store>,
    mcp_tokens: OnceCell<kv::Store>,
}

impl Bus {
    /// Opens every bucket (at start, from [`ensure_topology`](Bus::ensure_topology)).
    pub(crate) async fn open_buckets(&self) -> Result<(), BusError> {
        self.jobs().await?;
        self.job_index_bucket().await?;
        self.cancelled().await?;
        self.workers_bucket().await?;
        self.approvals_bucket().await?;
        self.mcp_tokens_bucket().await?;
        Ok(())
    }

    /// The jobs KV bucket (job records by job id; orchestrator/src/jobs.rs).
    pub(crate) async fn jobs(&self) -> Result<kv::Store, BusError> {
        let bucket = self.subjects.jobs_bucket();
        once(&self.buckets.jobs, || self.declare_or_bind(bucket, Duration::ZERO)).await
    }

    /// The job index bucket (`<jobs bucket>_index`, job_index.rs): file-backed,
    /// allowing per-message TTL so a moved entry's purge marker expires.
    pub(crate) async fn job_index_bucket(&self) -> Result<kv::Store, BusError> {
        let bucket = format!("{}_index", self.subjects.jobs_bucket());
        once(&self.buckets.job_index, || async {
            if !self.config.manage_topology {
                return self.bind(bucket).await;
            }
            self.js
                .create_or_update_key_value(kv::Config {
                    bucket: bucket.clone(),
                    history: 1,
                    storage: stream::StorageType::File,
                    max_value_size: MAX_MESSAGE_BYTES as i32,
                    num_replicas: self.config.replicas,
                    limit_markers: Some(INDEX_MARKER_TTL),
                    ..Default::default()
                })
                .await
                .map_err(|e| BusError::new(format!("cannot open KV bucket {bucket}"), e))
        })
        .await
    }

    /// The cancelled-jobs bucket (key = job id, value = reason), behind
    /// [`cancellations`](Bus::cancellations).
    pub(crate) async fn cancelled(&self) -> Result<kv::Store, BusError> {
        let bucket = self.subjects.cancelled_bucket();
        once(&self.buckets.cancelled, || self.declare_or_bind(bucket, CANCEL_MAX_AGE)).await
    }

    /// The bucket of planner checkpoints (key = job id, value = conversation).
    pub(crate) async fn checkpoints(&self) -> Result<kv::Store, BusError> {
        let bucket = self.subjects.checkpoints_bucket();
        once(&self.buckets.checkpoints, || self.declare_or_bind(bucket, Duration::ZERO)).await
    }

    /// The live workers' bucket: in memory, entries expire by per-message TTL
    /// (see `workers.rs`), so it allows markers.
    pub(crate) async fn workers_bucket(&self) -> Result<kv::Store, BusError> {
        let bucket = self.subjects.workers_bucket();
        once(&self.buckets.workers, || async {
            if !self.config.manage_topology {
                return self.bind(bucket).await;
            }
            self.js
                .create_or_update_key_value(kv::Config {
                    bucket: bucket.clone(),
                    history: 1,
                    storage: stream::StorageType::Memory,
                    max_age: WORKER_MAX_AGE,
                    max_value_size: MAX_MESSAGE_BYTES as i32,
                    limit_markers: Some(WORKER_MARKER_TTL),
                    ..Default::default()
                })
                .await
                .map_err(|e| BusError::new(format!("cannot open KV bucket {bucket}"), e))
        })
        .await
    }

    /// The approvals bucket, declared when this process manages the topology,
    /// otherwise opened as declared by the orchestrator.
    pub(crate) async fn approvals_bucket(&self) -> Result<kv::Store, BusError> {
        let bucket = self.subjects.approvals_bucket();
        once(&self.buckets.approvals, || async { self.declare_or_bind(bucket, APPROVAL_RETENTION).await }).await
    }

    /// The bucket of OAuth credentials from `flotilla mcp login`, behind
    /// [`McpTokens`](crate::McpTokens); kept until replaced or removed.
    pub(crate) async fn mcp_tokens_bucket(&self) -> Result<kv::Store, BusError> {
        let bucket = self.subjects.mcp_tokens_bucket();
        once(&self.buckets.mcp_tokens, || self.declare_or_bind(bucket, Duration::ZERO)).await
    }

    /// [`declare`](Self::declare) when this process manages the topology,
    /// else [`bind`](Self::bind).
    async fn declare_or_bind(&self, bucket: String, max_age: Duration) -> Result<kv::Store, BusError> {
        if self.config.manage_topology { self.declare(bucket, max_age).await } else { self.bind(bucket).await }
    }

    /// Opens `bucket` as the orchestrator declared it, never creating or
    /// changing it: a process with `[nats] manage_topology = false` (a worker
    /// under the least-privilege role of deploy/nats/roles.conf) may not.
    /// Waits up to [`TOPOLOGY_BUDGET`] for the bucket to appear (an
    /// orchestrator starting alongside); a permission denial fails at once.
    async fn bind(&self, bucket: String) -> Result<kv::Store, BusError> {
        let stream = format!("KV_{bucket}");
        let deadline = tokio::time::Instant::now() + TOPOLOGY_BUDGET;
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
        let mut logged = false;
        loop {
            let open = self.js.get_key_value(&bucket);
            let what = format!("cannot open KV bucket {bucket}");
            let e = match self.guarded(what, open, |d| d.subject.starts_with("$JS.API.STREAM.INFO.")).await {
                Ok(store) => return Ok(store),
                Err(e) if e.source.is::<Denial>() => return Err(e),
                Err(e) => e,
            };
            let wait = backoff.next_delay();
            if tokio::time::Instant::now() + wait > deadline {
                return Err(BusError::new(
                    format!(
                        "KV bucket {bucket} (stream {stream}) is not there after {}s: the orchestrator declares it \
                         at start, and this process ([nats] manage_topology = false) may only open it; start \
                         the orchestrator on this prefix first",
                        TOPOLOGY_BUDGET.as_secs()
                    ),
                    e,
                ));
            }
            if !logged {
                tracing::info!(bucket, error = %e, "waiting for the orchestrator to declare the bucket");
                logged = true;
            }
            tokio::time::sleep(wait).await;
        }
    }

    /// A single-revision file-backed KV bucket, created when missing;
    /// `max_age` zero = forever.
    async fn declare(&self, bucket: String, max_age: Duration) -> Result<kv::Store, BusError> {
        self.js
            .create_or_update_key_value(kv::Config {
                bucket: bucket.clone(),
                history: 1,
                max_age,
                storage: stream::StorageType::File,
                max_value_size: MAX_MESSAGE_BYTES as i32,
                num_replicas: self.config.replicas,
                ..Default::default()
            })
            .await
            .map_err(|e| BusError::new(format!("cannot open KV bucket {bucket}"), e))
    }
}

/// The handle in `cell`, opened by `open` the first time.
async fn once<F, Fut>(cell: &OnceCell<kv::Store>, open: F) -> Result<kv::Store, BusError>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<kv::Store, BusError>>,
{
    cell.get_or_try_init(open).await.cloned()
}
