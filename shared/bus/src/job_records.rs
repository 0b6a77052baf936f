//! Job records in the `<prefix>_jobs` KV bucket, one encoded `JobRecord` per
//! job id. The orchestrator's job store (orchestrator/src/jobs.rs) keeps the
//! live copies, orders the writes and retries them; this is only the bucket.

use async_nats::jetstream::kv;
use bytes::Bytes;
use flotilla_protocol::ids::JobId;
use futures::TryStreamExt;

use crate::{Bus, BusError};

/// The jobs bucket.
#[derive(Clone)]
pub struct JobRecords {
    kv: kv::Store,
}

impl Bus {
    /// The job records bucket (opened once per connection).
    pub async fn job_records(&self) -> Result<JobRecords, BusError> {
        Ok(JobRecords { kv: self.jobs().await? })
    }
}

impl JobRecords {
    /// The encoded record of `id`, if stored.
    pub async fn get(&self, id: &JobId) -> Result<Option<Bytes>, BusError> {
        self.kv.get(id.to_string()).await.map_err(|e| BusError::new(format!("cannot read job {id}"), e))
    }

    /// Stores the encoded record of `id` (one attempt: the caller retries).
    pub async fn put(&self, id: &JobId, record: Bytes) -> Result<(), BusError> {
        self.kv.put(id.to_string(), record).await.map_err(|e| BusError::new(format!("cannot store job {id}"), e))?;
        Ok(())
    }

    /// Every stored key (job ids, and anything else written there).
    pub async fn keys(&self) -> Result<Vec<String>, BusError> {
        let keys = self.kv.keys().await.map_err(|e| BusError::new("cannot list jobs", e))?;
        keys.try_collect().await.map_err(|e| BusError::new("cannot list jobs", e))
    }
}
