//! Cancelled jobs: the `<prefix>_cancelled` KV bucket (key = job id, value =
//! reason; entries expire after a day). The orchestrator records a
//! cancellation (orchestrator/src/service.rs); every worker watches the bucket
//! from its current entries on (workers/src/cancel.rs), so a worker started
//! after the cancel also knows.

use async_nats::jetstream::kv;
use futures::{Stream, StreamExt};

use crate::{Bus, BusError};
use flotilla_protocol::ids::JobId;

/// The cancelled-jobs bucket.
#[derive(Clone)]
pub struct Cancellations {
    kv: kv::Store,
}

/// A job recorded as cancelled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cancelled {
    /// The job.
    pub job: JobId,
    /// Why, as recorded.
    pub reason: String,
}

impl Bus {
    /// The cancelled-jobs bucket (opened once per connection, see `buckets.rs`).
    pub async fn cancellations(&self) -> Result<Cancellations, BusError> {
        Ok(Cancellations { kv: self.cancelled().await? })
    }
}

impl Cancellations {
    /// Records `job` as cancelled for `reason`.
    pub async fn record(&self, job: &JobId, reason: &str) -> Result<(), BusError> {
        self.kv
            .put(job.to_string(), reason.to_string().into_bytes().into())
            .await
            .map_err(|e| BusError::new(format!("cannot record the cancel of {job}"), e))?;
        Ok(())
    }

    /// The reason `job` was cancelled, `None` when it was not.
    pub async fn reason(&self, job: &JobId) -> Result<Option<String>, BusError> {
        let value = self
            .kv
            .get(job.to_string())
            .await
            .map_err(|e| BusError::new(format!("cannot read the cancel of {job}"), e))?;
        Ok(value.map(|v| String::from_utf8_lossy(&v).into_owned()))
    }

    /// Every cancellation: those recorded so far, then new ones as they are
    /// recorded. Keys that are not job ids and deletions are skipped.
    pub async fn watch(&self) -> Result<impl Stream<Item = Cancelled> + use<>, BusError> {
        let updates =
            self.kv.watch_with_history(">").await.map_err(|e| BusError::new("cannot watch cancelled jobs", e))?;
        Ok(updates.filter_map(|entry| async move {
            match entry {
                Ok(e) if e.operation == kv::Operation::Put => {
                    let job = e.key.parse::<JobId>().ok()?;
                    Some(Cancelled { job, reason: String::from_utf8_lossy(&e.value).into_owned() })
                }
                Ok(_) => None,
                Err(e) => {
                    tracing::warn!(error = %e, "cancel watch hiccup");
                    None
                }
            }
        }))
    }
}
