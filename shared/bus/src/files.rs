//! The job files' store: the JetStream Object Store bucket `<prefix>_files`
//! behind [`JobFiles`] (shared/job-files/src/lib.rs holds the rules). Objects are
//! chunked, so files outlive processes, are visible on every host and may be
//! larger than one NATS message.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::object_store::{self, ObjectMetadata, ObjectStore};
use async_trait::async_trait;
use base64::Engine;
use futures::StreamExt;
use tokio::io::AsyncReadExt;

use crate::denials::{Denials, GuardError};
use crate::{Bus, BusError};
use flotilla_config::FilesConfig;
use flotilla_job_files::{JobFiles, ObjectBackend, ObjectInfo};

/// The Object Store client's own default chunk size, the largest a put uses.
const MAX_CHUNK_BYTES: usize = 128 * 1024;

/// The Object Store bucket, with the connection's denials (see [`put`](ObjectBackend::put)).
struct ObjectStoreBackend {
    store: ObjectStore,
    denials: Denials,
}

impl Bus {
    /// The job files, over the files bucket (created when missing, with
    /// `config`'s retention, when this process manages the topology).
    pub async fn job_files(&self, config: &FilesConfig) -> Result<JobFiles, BusError> {
        let store = self.files(Duration::from_secs(config.max_age)).await?;
        let backend = ObjectStoreBackend { store, denials: self.denials.clone() };
        Ok(JobFiles::new(Arc::new(backend), config.max_file_bytes))
    }
}

#[async_trait]
impl ObjectBackend for ObjectStoreBackend {
    async fn info(&self, name: &str) -> Result<Option<ObjectInfo>, String> {
        match self.store.info(name).await {
            Ok(info) if !info.deleted => Ok(Some(ObjectInfo { size: info.size as u64, modified: info.modified })),
            Ok(_) => Ok(None),
            Err(e) if e.kind() == object_store::InfoErrorKind::NotFound => Ok(None),
            Err(e) => Err(e.to_string()),
        }
    }

    async fn get(&self, name: &str, max: u64) -> Result<Option<(Vec<u8>, HashMap<String, String>)>, String> {
        let mut object = match self.store.get(name).await {
            Ok(o) => o,
            Err(e) if e.kind() == object_store::GetErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e.to_string()),
        };
        let metadata = object.info().metadata.clone();
        let mut bytes = Vec::with_capacity(object.info().size.min(usize::try_from(max).unwrap_or(usize::MAX)));
        object.read_to_end(&mut bytes).await.map_err(|e| e.to_string())?;
        Ok(Some((bytes, metadata)))
    }

    /// An overwrite purges the old version's chunks after the new version is
    /// stored. A credential that may not purge the bucket (a worker: a purge
    /// without a filter would wipe every tenant's files) is refused that
    /// step: the write stands, and the old chunks go with the bucket's
    /// max_age. A refusal may belong to a concurrent write of this process,
    /// so the stored digest decides whether this write is complete.
    async fn put(&self, name: &str, bytes: &[u8], metadata: HashMap<String, String>) -> Result<(), String> {
        // The client reads a put through a buffer of one chunk (128 KiB by
        // default): a small file, such as a report, gets a chunk its size.
        let chunk_size = Some(bytes.len().clamp(1, MAX_CHUNK_BYTES));
        let meta = ObjectMetadata { name: name.to_string(), metadata, chunk_size, ..Default::default() };
        let mut reader = bytes;
        let put = self.store.put(meta, &mut reader);
        match self.denials.guard(put, |d| d.subject.starts_with("$JS.API.STREAM.PURGE.")).await {
            Ok(_) => Ok(()),
            Err(GuardError::Op(e)) => Err(e.to_string()),
            Err(GuardError::Denied(_)) => {
                use sha2::Digest;
                let digest = base64::engine::general_purpose::URL_SAFE.encode(sha2::Sha256::digest(bytes));
                let stored = self.store.info(name).await.map_err(|e| e.to_string())?;
                if stored.digest.as_deref() == Some(&format!("SHA-256={digest}")) {
                    Ok(())
                } else {
                    Err("the write was interrupted; write it again".into())
                }
            }
        }
    }

    async fn list(&self, prefix: &str) -> Result<Vec<(String, ObjectInfo)>, String> {
        let mut list = self.store.list().await.map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        while let Some(info) = list.next().await {
            let info = info.map_err(|e| e.to_string())?;
            if !info.deleted && info.name.starts_with(prefix) {
                out.push((info.name.clone(), ObjectInfo { size: info.size as u64, modified: info.modified }));
            }
        }
        Ok(out)
    }

    async fn delete(&self, name: &str) -> Result<(), String> {
        self.store.delete(name).await.map_err(|e| e.to_string())
    }
}
