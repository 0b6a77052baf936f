//! Job leases: which orchestrator plans which job, in the `<prefix>_leases`
//! KV bucket (key = job id, value = the owner's id).
//!
//! A lease is a KV entry written with a per-message TTL (`Nats-TTL`, NATS >=
//! 2.11): taken with create-if-absent, renewed with a compare-and-set on its
//! revision that also restarts the TTL, given back with a delete on that
//! revision. Expiry is decided by the server's clock, so no two hosts'
//! clocks are ever compared: an owner that stops renewing loses the entry
//! `ttl` after its last renewal, and the first other orchestrator to create
//! it then is the new owner. An owner whose renewal fails on the revision
//! has been fenced: it must stop before its next write
//! (orchestrator/src/leases.rs, docs/RELIABILITY.md).
//! Each change of owner is also a job event (`owner`), the audit trail of
//! who planned a job when.

use std::time::Duration;

use async_nats::jetstream::kv::{self, CreateErrorKind};
use async_nats::jetstream::{context::PublishErrorKind, stream};
use bytes::Bytes;
use flotilla_protocol::ids::JobId;
use futures::{Stream, StreamExt};

use crate::{Bus, BusError};

/// How long the server keeps the marker of an expired lease.
const MARKER_TTL: Duration = Duration::from_secs(60);

/// The lease bucket.
#[derive(Clone)]
pub struct Leases {
    kv: kv::Store,
    js: async_nats::jetstream::Context,
    bucket: String,
}

/// A lease held by this process.
#[derive(Clone, Debug)]
pub struct Lease {
    /// The leased job.
    pub job: JobId,
    /// Who holds it.
    pub owner: String,
    revision: u64,
}

impl Bus {
    /// Declares (or opens) the lease bucket.
    pub async fn leases(&self) -> Result<Leases, BusError> {
        let bucket = self.subjects.leases_bucket();
        let kv = self
            .js
            .create_or_update_key_value(kv::Config {
                bucket: bucket.clone(),
                history: 1,
                storage: stream::StorageType::File,
                num_replicas: self.config.replicas,
                limit_markers: Some(MARKER_TTL),
                ..Default::default()
            })
            .await
            .map_err(|e| BusError::new(format!("cannot open KV bucket {bucket}"), e))?;
        Ok(Leases { kv, js: self.js.clone(), bucket })
    }
}

impl Leases {
    /// Takes the lease of `job` for `owner` unless someone holds it.
    pub async fn acquire(&self, job: &JobId, owner: &str, ttl: Duration) -> Result<Option<Lease>, BusError> {
        match self.kv.create_with_ttl(job.to_string(), Bytes::from(owner.to_string()), ttl_of(ttl)).await {
            Ok(revision) => Ok(Some(Lease { job: *job, owner: owner.into(), revision })),
            Err(e) if e.kind() == CreateErrorKind::AlreadyExists => Ok(None),
            Err(e) => Err(BusError::new(format!("cannot take the lease of job {job}"), e)),
        }
    }

    /// Renews `lease` for another `ttl`. `Ok(false)`: it was lost (expired
    /// and maybe taken by another orchestrator); the holder is fenced.
    pub async fn renew(&self, lease: &mut Lease, ttl: Duration) -> Result<bool, BusError> {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(async_nats::header::NATS_EXPECTED_LAST_SUBJECT_SEQUENCE, lease.revision.to_string().as_str());
        headers.insert(async_nats::header::NATS_MESSAGE_TTL, ttl_of(ttl).as_secs().to_string().as_str());
        let subject = format!("$KV.{}.{}", self.bucket, lease.job);
        let ack =
            async { self.js.publish_with_headers(subject, headers, Bytes::from(lease.owner.clone())).await?.await };
        match ack.await {
            Ok(ack) => {
                lease.revision = ack.sequence;
                Ok(true)
            }
            Err(e) if e.kind() == PublishErrorKind::WrongLastSequence => Ok(false),
            Err(e) => Err(BusError::new(format!("cannot renew the lease of job {}", lease.job), e)),
        }
    }

    /// Gives `lease` back (a no-op when it was lost meanwhile).
    pub async fn release(&self, lease: &Lease) -> Result<(), BusError> {
        match self.kv.delete_expect_revision(lease.job.to_string(), Some(lease.revision)).await {
            Ok(()) => Ok(()),
            // Lost meanwhile: the key moved on, so there is nothing of ours to delete.
            Err(e) if e.kind() == kv::DeleteErrorKind::WrongLastRevision => Ok(()),
            Err(e) => Err(BusError::new(format!("cannot release the lease of job {}", lease.job), e)),
        }
    }

    /// Jobs whose lease ends from now on (given back, or expired: the
    /// server's marker), so another orchestrator can take them at once.
    pub async fn ended(&self) -> Result<impl Stream<Item = JobId> + use<>, BusError> {
        let updates = self.kv.watch_all().await.map_err(|e| BusError::new("cannot watch job leases", e))?;
        Ok(updates.filter_map(|entry| async move {
            match entry {
                Ok(e) if e.operation != kv::Operation::Put => e.key.parse().ok(),
                Ok(_) => None,
                Err(e) => {
                    tracing::warn!(error = %e, "lease watch hiccup");
                    None
                }
            }
        }))
    }

    /// The current owner of `job`'s lease, if any.
    pub async fn owner(&self, job: &JobId) -> Result<Option<String>, BusError> {
        let entry = self.kv.get(job.to_string()).await.map_err(|e| BusError::new(format!("lease of {job}"), e))?;
        Ok(entry.map(|b| String::from_utf8_lossy(&b).into_owned()))
    }
}

/// A TTL the server accepts (whole seconds, at least one).
fn ttl_of(ttl: Duration) -> Duration {
    Duration::from_secs(ttl.as_secs().max(1))
}
