//! Planner checkpoints: the conversation of every running job, saved after
//! each model turn and after each turn's tool results, so a restarted
//! orchestrator resumes a job where it stopped. Together with the task tool's
//! call-id lookup in the job record, a resumed planner re-attaches to tasks in
//! flight instead of dispatching them again.

use std::time::Duration;

use crate::{Bus, BusError, retry};
use async_nats::jetstream::kv;
use flotilla_agent::agent::Conversation;
use flotilla_protocol::MAX_MESSAGE_BYTES;
use flotilla_protocol::ids::JobId;

/// The checkpoint bucket.
#[derive(Clone)]
pub struct Checkpoints {
    kv: kv::Store,
}

impl Checkpoints {
    /// Opens (creates) the bucket.
    pub async fn open(bus: &Bus) -> Result<Self, BusError> {
        Ok(Self { kv: bus.checkpoints().await? })
    }

    /// Saves `conv` for `job`. A conversation over the KV value limit is not
    /// saved (the previous checkpoint stays); large tool results should be
    /// evicted to job files long before that.
    pub async fn save(&self, job: &JobId, conv: &Conversation) {
        let bytes = match serde_json::to_vec(conv) {
            Ok(b) => b,
            Err(e) => return tracing::error!(%job, error = %e, "checkpoint not serializable"),
        };
        if bytes.len() > MAX_MESSAGE_BYTES {
            tracing::warn!(%job, size = bytes.len(), "conversation too large to checkpoint; keeping the previous one");
            return;
        }
        let r = retry("checkpoint write", Duration::from_secs(30), || async {
            self.kv
                .put(job.to_string(), bytes.clone().into())
                .await
                .map_err(|e| BusError::new(format!("cannot store the checkpoint of {job}"), e))
        })
        .await;
        if let Err(e) = r {
            tracing::error!(%job, error = %e, "checkpoint not saved");
        }
    }

    /// The last checkpoint of `job`.
    pub async fn load(&self, job: &JobId) -> Option<Conversation> {
        let bytes = self.kv.get(job.to_string()).await.ok()??;
        match serde_json::from_slice(&bytes) {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::error!(%job, error = %e, "unreadable checkpoint ignored; the job restarts its conversation");
                None
            }
        }
    }

    /// Removes the checkpoint of a finished job.
    pub async fn remove(&self, job: &JobId) {
        if let Err(e) = self.kv.purge(job.to_string()).await {
            tracing::warn!(%job, error = %e, "checkpoint not removed");
        }
    }
}
