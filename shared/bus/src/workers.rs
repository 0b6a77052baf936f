//! The live set of workers: each worker's latest [`WorkerHeartbeat`] in the
//! `<prefix>_workers` KV bucket, keyed by its worker token.
//!
//! Every entry is written with a per-message TTL (the `Nats-TTL` header,
//! NATS >= 2.11) of three of that worker's own heartbeat intervals, so expiry
//! is decided by the server's clock and each worker's own interval: a worker
//! killed without a goodbye drops out of the set within three intervals, with
//! no clock comparison between hosts and no sweeper process.

use futures::TryStreamExt;

use crate::{Bus, BusError};
use flotilla_protocol::subjects::Subjects;
use flotilla_protocol::{self as protocol, WorkerHeartbeat};

/// Entries live this many heartbeat intervals.
pub const TTL_INTERVALS: u32 = 3;

impl Bus {
    /// Publishes `hb` on `<prefix>.worker.heartbeat.<worker>` for subscribers
    /// and stores it as the worker's entry, expiring after
    /// [`TTL_INTERVALS`] × `hb.interval_ms`.
    pub async fn publish_heartbeat(&self, hb: &WorkerHeartbeat) -> Result<(), BusError> {
        let token = Subjects::worker_token(&hb.worker_id);
        self.publish_event(self.subjects.heartbeat(&token), hb).await;
        let ttl = (hb.interval_ms * TTL_INTERVALS as u64).div_ceil(1000).max(1);
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(async_nats::header::NATS_MESSAGE_TTL, ttl.to_string().as_str());
        let subject = format!("$KV.{}.{token}", self.subjects.workers_bucket());
        self.js
            .publish_with_headers(subject.clone(), headers, protocol::encode(hb).into())
            .await
            .map_err(|e| BusError::new(format!("cannot store heartbeat on {subject}"), e))?
            .await
            .map_err(|e| BusError::new(format!("heartbeat not stored on {subject}"), e))?;
        Ok(())
    }

    /// Removes a worker's entry (on a clean shutdown, once its tasks are done).
    pub async fn remove_worker(&self, worker_id: &str) -> Result<(), BusError> {
        self.workers_bucket()
            .await?
            .delete(Subjects::worker_token(worker_id))
            .await
            .map_err(|e| BusError::new(format!("cannot remove worker {worker_id}"), e))
    }

    /// The latest heartbeat of every live worker, sorted by worker id.
    /// Undecodable entries (another schema version) are skipped with a warning.
    pub async fn live_workers(&self) -> Result<Vec<WorkerHeartbeat>, BusError> {
        let store = self.workers_bucket().await?;
        let keys: Vec<String> = store
            .keys()
            .await
            .map_err(|e| BusError::new("cannot list workers", e))?
            .try_collect()
            .await
            .map_err(|e| BusError::new("cannot list workers", e))?;
        let mut out = Vec::with_capacity(keys.len());
        for key in keys {
            let bytes = match store.get(&key).await {
                Ok(Some(b)) => b,
                Ok(None) => continue, // expired between listing and reading
                Err(e) => return Err(BusError::new(format!("cannot read worker {key}"), e)),
            };
            match protocol::decode::<WorkerHeartbeat>(&bytes) {
                Ok(hb) => out.push(hb),
                Err(e) => tracing::warn!(worker = %key, error = %e, "unreadable heartbeat skipped"),
            }
        }
        out.sort_by(|a, b| a.worker_id.cmp(&b.worker_id));
        Ok(out)
    }
}
