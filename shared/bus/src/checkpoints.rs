//! Planner checkpoints: the conversation of every running job, saved after
//! each model turn, each turn's tool results and each compaction, so a
//! restarted orchestrator resumes a job where it stopped. The store takes any
//! serde value (the planner stores the agent's `Conversation`), so the bus
//! needs nothing of the agent crate. Together with the
//! task tool's call-id lookup in the job record, a resumed planner re-attaches
//! to tasks in flight instead of dispatching them again.
//!
//! A conversation that fits one KV value (NATS max_payload) is the value of
//! its job's key in `<prefix>_checkpoints`. A larger one is never skipped:
//! it is written to the job files bucket as the object
//! `checkpoints/<job>` (outside every job's `<job>/` prefix, so no file tool
//! or `flotilla files` lists it), and the KV value becomes a small pointer
//! naming the object, its size and its sha256; [`Checkpoints::load`] follows
//! it and checks the digest. The object is written before the pointer, so the
//! key always names a complete checkpoint.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{kv, object_store};
use tokio::io::AsyncReadExt;
use tokio::sync::OnceCell;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::{Bus, BusError, retry};
use flotilla_protocol::MAX_MESSAGE_BYTES;
use flotilla_protocol::ids::JobId;

/// How long a checkpoint write is retried through transient errors.
const WRITE_BUDGET: Duration = Duration::from_secs(30);

/// The checkpoint bucket, and the files bucket for the large ones.
#[derive(Clone)]
pub struct Checkpoints {
    kv: kv::Store,
    bus: Bus,
    objects: Arc<OnceCell<object_store::ObjectStore>>,
    /// Conversations larger than this many bytes go to the object store.
    inline_max: usize,
    /// Jobs whose checkpoint this process stored or found as an object.
    with_object: Arc<std::sync::Mutex<std::collections::HashSet<JobId>>>,
}

/// The KV value of a checkpoint stored as an object:
/// `{"checkpoint_object": name, "size": bytes, "sha256": hex}`.
#[derive(Debug, PartialEq)]
struct Pointer {
    /// Name of the object in the files bucket.
    checkpoint_object: String,
    /// Its length in bytes.
    size: usize,
    /// Hex sha256 of its bytes.
    sha256: String,
}

impl Pointer {
    fn to_json(&self) -> Vec<u8> {
        serde_json::json!({"checkpoint_object": self.checkpoint_object, "size": self.size, "sha256": self.sha256})
            .to_string()
            .into_bytes()
    }

    /// The pointer in a KV value, or `None` when the value is a conversation.
    fn parse(value: &[u8]) -> Option<Self> {
        let v: serde_json::Value = serde_json::from_slice(value).ok()?;
        Some(Self {
            checkpoint_object: v.get("checkpoint_object")?.as_str()?.to_string(),
            size: usize::try_from(v.get("size")?.as_u64()?).ok()?,
            sha256: v.get("sha256")?.as_str()?.to_string(),
        })
    }
}

impl Checkpoints {
    /// Opens (creates) the bucket.
    pub async fn open(bus: &Bus) -> Result<Self, BusError> {
        Ok(Self {
            kv: bus.checkpoints().await?,
            bus: bus.clone(),
            objects: Arc::default(),
            inline_max: MAX_MESSAGE_BYTES,
            with_object: Arc::default(),
        })
    }

    fn held(&self) -> std::sync::MutexGuard<'_, std::collections::HashSet<JobId>> {
        self.with_object.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The same stores with a lower inline limit, so tests reach the object
    /// path with small conversations.
    pub fn with_inline_max(mut self, bytes: usize) -> Self {
        self.inline_max = bytes;
        self
    }

    /// The object holding `job`'s checkpoint when it is too large for KV.
    fn object_name(job: &JobId) -> String {
        format!("checkpoints/{job}")
    }

    async fn objects(&self) -> Result<&object_store::ObjectStore, BusError> {
        let bucket = self.bus.subjects.files_bucket();
        self.objects
            .get_or_try_init(|| async {
                self.bus.js.get_object_store(&bucket).await.map_err(|e| {
                    BusError::new(format!("cannot open Object Store bucket {bucket} for a large checkpoint"), e)
                })
            })
            .await
    }

    /// Saves `conv` for `job`: inline when it fits a KV value, otherwise as
    /// an object with a pointer. An error means the previous checkpoint is
    /// still the stored one.
    pub async fn save<T: Serialize>(&self, job: &JobId, conv: &T) -> Result<(), BusError> {
        let bytes = encode_checkpoint(conv)
            .map_err(|e| BusError::new(format!("the checkpoint of {job} is not serializable"), e))?;
        let large = bytes.len() > self.inline_max;
        let value = if large {
            let pointer = self.put_object(job, &bytes).await?;
            tracing::info!(%job, size = bytes.len(), "checkpoint stored as an object");
            pointer.to_json()
        } else {
            bytes
        };
        self.put_value(job, value).await?;
        if large {
            self.held().insert(*job);
        } else if self.held().remove(job) {
            // A conversation that shrank (compaction) leaves no stale object behind.
            self.delete_object(job).await;
        }
        Ok(())
    }

    async fn put_value(&self, job: &JobId, value: Vec<u8>) -> Result<(), BusError> {
        retry("checkpoint write", WRITE_BUDGET, || async {
            self.kv
                .put(job.to_string(), value.clone().into())
                .await
                .map_err(|e| BusError::new(format!("cannot store the checkpoint of {job}"), e))
        })
        .await
        .map(|_revision| ())
    }

    async fn put_object(&self, job: &JobId, bytes: &[u8]) -> Result<Pointer, BusError> {
        let store = self.objects().await?;
        let name = Self::object_name(job);
        retry("checkpoint object write", WRITE_BUDGET, || async {
            let mut reader = bytes;
            store
                .put(name.as_str(), &mut reader)
                .await
                .map(|_| ())
                .map_err(|e| BusError::new(format!("cannot store the checkpoint object of {job}"), e))
        })
        .await?;
        Ok(Pointer { checkpoint_object: name, size: bytes.len(), sha256: flotilla_protocol::digest::sha256_hex(bytes) })
    }

    /// The last checkpoint of `job`; `None` when there is none or it cannot
    /// be read (logged: the job then restarts its conversation).
    pub async fn load<T: DeserializeOwned>(&self, job: &JobId) -> Option<T> {
        let bytes = self.kv.get(job.to_string()).await.ok()??;
        let bytes = match Pointer::parse(&bytes) {
            Some(pointer) => match self.get_object(&pointer).await {
                Ok(b) => {
                    self.held().insert(*job);
                    b
                }
                Err(e) => {
                    tracing::error!(%job, error = %e, "checkpoint object unreadable; the job restarts its conversation");
                    return None;
                }
            },
            None => bytes.to_vec(),
        };
        match decode_checkpoint(&bytes) {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::error!(%job, error = %e, "unreadable checkpoint ignored; the job restarts its conversation");
                None
            }
        }
    }

    async fn get_object(&self, pointer: &Pointer) -> Result<Vec<u8>, String> {
        let store = self.objects().await.map_err(|e| e.to_string())?;
        let mut object = store.get(&pointer.checkpoint_object).await.map_err(|e| e.to_string())?;
        let mut bytes = Vec::with_capacity(pointer.size);
        object.read_to_end(&mut bytes).await.map_err(|e| e.to_string())?;
        let digest = flotilla_protocol::digest::sha256_hex(&bytes);
        if bytes.len() != pointer.size || digest != pointer.sha256 {
            return Err(format!(
                "object {} has {} bytes with sha256 {digest}, the pointer says {} bytes with {}",
                pointer.checkpoint_object,
                bytes.len(),
                pointer.size,
                pointer.sha256
            ));
        }
        Ok(bytes)
    }

    async fn delete_object(&self, job: &JobId) {
        let Ok(store) = self.objects().await else { return };
        if let Err(e) = store.delete(Self::object_name(job)).await {
            tracing::warn!(%job, error = %e, "stale checkpoint object not removed; the files bucket's max_age will");
        }
    }

    /// Removes the checkpoint of a finished job, its object included.
    pub async fn remove(&self, job: &JobId) {
        if let Err(e) = self.kv.purge(job.to_string()).await {
            tracing::warn!(%job, error = %e, "checkpoint not removed");
        }
        if self.held().remove(job) {
            self.delete_object(job).await;
        }
    }
}

/// Major version of the checkpoint format: the conversation plus `"v"`.
pub const CHECKPOINT_VERSION: u32 = 1;

/// The stored form of a conversation: its JSON with `"v"` added.
fn encode_checkpoint<T: Serialize>(conv: &T) -> Result<Vec<u8>, serde_json::Error> {
    let mut value = serde_json::to_value(conv)?;
    if let Some(fields) = value.as_object_mut() {
        fields.insert("v".into(), CHECKPOINT_VERSION.into());
    }
    serde_json::to_vec(&value)
}

/// Reads a checkpoint of this major version: one without `"v"` (written
/// before checkpoints were versioned), or any minor version (`1.1`) with
/// fields this build does not know, which are ignored. A newer major
/// version is refused rather than misread.
fn decode_checkpoint<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    let value: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
    let major = value.get("v").and_then(serde_json::Value::as_f64).map_or(CHECKPOINT_VERSION, |v| v.trunc() as u32);
    if major != CHECKPOINT_VERSION {
        return Err(format!("checkpoint format version {major}; this build reads version {CHECKPOINT_VERSION}"));
    }
    serde_json::from_value(value).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in for the planner's conversation: an object with required fields.
    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Conversation {
        messages: Vec<String>,
        steps: u32,
    }

    impl Conversation {
        fn new(system: &str, user: &str) -> Self {
            Self { messages: vec![system.into(), user.into()], steps: 0 }
        }
    }

    #[test]
    fn old_and_newer_minor_checkpoints_load_and_a_newer_major_is_refused() {
        let mut conv = Conversation::new("sys", "job");
        conv.steps = 3;
        let stored = encode_checkpoint(&conv).unwrap();
        assert_eq!(serde_json::from_slice::<serde_json::Value>(&stored).unwrap()["v"], 1);
        assert_eq!(decode_checkpoint::<Conversation>(&stored).unwrap(), conv);
        // Written before versions: no "v".
        let old = serde_json::to_vec(&conv).unwrap();
        assert_eq!(decode_checkpoint::<Conversation>(&old).unwrap(), conv);
        // A newer minor version with a field this build does not know.
        let mut newer: serde_json::Value = serde_json::from_slice(&stored).unwrap();
        newer["v"] = serde_json::json!(1.1);
        newer["summary_cache"] = serde_json::json!({"turns": 2});
        assert_eq!(decode_checkpoint::<Conversation>(&serde_json::to_vec(&newer).unwrap()).unwrap(), conv);
        newer["v"] = serde_json::json!(2);
        let e = decode_checkpoint::<Conversation>(&serde_json::to_vec(&newer).unwrap()).unwrap_err();
        assert!(e.contains("version 2"), "{e}");
    }

    #[test]
    fn a_pointer_is_never_mistaken_for_a_conversation_nor_the_reverse() {
        let conv = Conversation::new("sys", "job");
        let inline = serde_json::to_vec(&conv).unwrap();
        assert_eq!(Pointer::parse(&inline), None);
        let p = Pointer { checkpoint_object: "checkpoints/j".into(), size: 3, sha256: "ab".into() };
        let bytes = p.to_json();
        assert_eq!(Pointer::parse(&bytes), Some(p));
        assert!(serde_json::from_slice::<Conversation>(&bytes).is_err());
    }
}
