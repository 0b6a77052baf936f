//! Where job-file objects are kept: [`ObjectBackend`] is the small storage
//! contract [`JobFiles`](super::JobFiles) enforces its rules over. The
//! JetStream Object Store implements it in the bus module; [`MemoryBackend`]
//! keeps objects in this process, for tests and fuzzing without a server.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use async_trait::async_trait;
use time::OffsetDateTime;

/// What the store knows of one object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectInfo {
    /// Size in bytes.
    pub size: u64,
    /// Last write, when the store records it.
    pub modified: Option<OffsetDateTime>,
}

/// Raw object storage by name. Errors are the store's message: the caller
/// turns them into a `FileError::Store`.
#[async_trait]
pub trait ObjectBackend: Send + Sync {
    /// The object's info, `None` when it does not exist.
    async fn info(&self, name: &str) -> Result<Option<ObjectInfo>, String>;
    /// The object's bytes (reading at most `max` bytes ahead) and metadata.
    async fn get(&self, name: &str, max: u64) -> Result<Option<(Vec<u8>, HashMap<String, String>)>, String>;
    /// Creates or replaces the object.
    async fn put(&self, name: &str, bytes: &[u8], metadata: HashMap<String, String>) -> Result<(), String>;
    /// Every live object whose name starts with `prefix`.
    async fn list(&self, prefix: &str) -> Result<Vec<(String, ObjectInfo)>, String>;
    /// Removes the object (nothing when it does not exist).
    async fn delete(&self, name: &str) -> Result<(), String>;
}

/// One object kept in memory.
#[derive(Clone)]
struct MemObject {
    bytes: Vec<u8>,
    metadata: HashMap<String, String>,
    modified: OffsetDateTime,
}

/// Objects in this process's memory.
#[derive(Default)]
pub struct MemoryBackend {
    objects: Mutex<BTreeMap<String, MemObject>>,
}

impl MemoryBackend {
    fn objects(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, MemObject>> {
        self.objects.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn info(o: &MemObject) -> ObjectInfo {
    ObjectInfo { size: o.bytes.len() as u64, modified: Some(o.modified) }
}

#[async_trait]
impl ObjectBackend for MemoryBackend {
    async fn info(&self, name: &str) -> Result<Option<ObjectInfo>, String> {
        Ok(self.objects().get(name).map(info))
    }

    async fn get(&self, name: &str, _max: u64) -> Result<Option<(Vec<u8>, HashMap<String, String>)>, String> {
        Ok(self.objects().get(name).map(|o| (o.bytes.clone(), o.metadata.clone())))
    }

    async fn put(&self, name: &str, bytes: &[u8], metadata: HashMap<String, String>) -> Result<(), String> {
        let object = MemObject { bytes: bytes.to_vec(), metadata, modified: OffsetDateTime::now_utc() };
        self.objects().insert(name.to_string(), object);
        Ok(())
    }

    async fn list(&self, prefix: &str) -> Result<Vec<(String, ObjectInfo)>, String> {
        let objects = self.objects();
        let matching = objects.range(prefix.to_string()..).take_while(|(n, _)| n.starts_with(prefix));
        Ok(matching.map(|(n, o)| (n.clone(), info(o))).collect())
    }

    async fn delete(&self, name: &str) -> Result<(), String> {
        self.objects().remove(name);
        Ok(())
    }
}
