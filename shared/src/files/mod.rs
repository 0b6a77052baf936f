//! Job files: a per-job virtual filesystem shared by the planner and every
//! worker of a job, over the JetStream Object Store (seed 000 section 2.3).
//!
//! Why the Object Store: files must be visible to processes on other hosts,
//! outlive their restarts and hold more than one NATS message (objects are
//! chunked). One bucket (`<prefix>_files`) holds every job; an object's name
//! is `<job id>/<base64url(path)>`, so the name alphabet is always valid and a
//! path can never name another job's object, whatever it contains. Retention
//! is the bucket's `max_age` (`[files] max_age`); [`JobFiles::purge`] removes
//! one job's files at once.
//!
//! Directories are implicit: a directory exists while a file lies below it.
//! Writes are last-writer-wins (the Object Store has no compare-and-swap);
//! agents that edit the same file concurrently should coordinate through
//! their planner.
//!
//! Listing scans the bucket's metadata (one message per live object, all
//! jobs), which is cheap for thousands of files; a per-job index is the next
//! step if a deployment keeps far more.
//!
//! Some directories are written only by the runtime and checked on every
//! read (see [`reserved`]). [`JobFiles::in_memory`] is the same contract
//! without a server, for unit tests and fuzzing of the file tools.

pub use flotilla_protocol::path;
pub mod reserved;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::object_store::{self, ObjectMetadata, ObjectStore};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use futures::StreamExt;
use time::OffsetDateTime;
use tokio::io::AsyncReadExt;

pub use path::{FilePath, PathError};
pub use reserved::{LARGE_RESULTS_DIR, RESERVED_DIRS, reserved_prefix};

use crate::bus::{Bus, BusError};
use crate::config::FilesConfig;
use crate::ids::JobId;
use crate::digest::sha256_hex;
use crate::protocol::FileRef;
use reserved::CHECKSUM_KEY;

/// A job-file operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FileError {
    /// The path broke the path policy.
    #[error("invalid path: {0}")]
    Path(#[from] PathError),
    /// No such file.
    #[error("file not found: {0}")]
    NotFound(FilePath),
    /// Over the configured size limit.
    #[error("{path} would be {size} bytes; the limit is {max} bytes")]
    TooLarge {
        /// The file.
        path: FilePath,
        /// Its size.
        size: u64,
        /// `[files] max_file_bytes`.
        max: u64,
    },
    /// A write into a directory only the runtime writes (see [`reserved`]).
    #[error("{path} is in {prefix}, which is reserved for the runtime's own results; write elsewhere")]
    Reserved {
        /// The file.
        path: FilePath,
        /// The reserved directory.
        prefix: &'static str,
    },
    /// A runtime-written file whose bytes no longer match their checksum.
    #[error("{path} failed its integrity check ({reason}); it was altered after the runtime wrote it")]
    Tampered {
        /// The file.
        path: FilePath,
        /// What did not match.
        reason: String,
    },
    /// The store could not be reached or answered with an error.
    #[error("job files unavailable: {0}")]
    Store(String),
}

/// What `ls`, `glob` and `grep` know about a file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileMeta {
    /// The file.
    pub path: FilePath,
    /// Size in bytes.
    pub size: u64,
    /// Last write.
    pub modified: Option<OffsetDateTime>,
}

/// One object of the in-memory backend.
#[derive(Clone)]
struct MemObject {
    bytes: Arc<Vec<u8>>,
    metadata: HashMap<String, String>,
    modified: OffsetDateTime,
}

/// Where the objects live: the Object Store, or a map for unit tests and
/// fuzzing (same names, same checks, no server).
#[derive(Clone)]
enum Backend {
    Store(Arc<ObjectStore>),
    Memory(Arc<Mutex<BTreeMap<String, MemObject>>>),
}

/// Handle on every job's files (cheap to clone).
#[derive(Clone)]
pub struct JobFiles {
    backend: Backend,
    max_file_bytes: u64,
    /// The connection's permission denials: a credential without the bucket
    /// purge grant (workers, `deploy/nats/roles.conf`) sees its overwrites'
    /// purge of the old version refused, see [`JobFiles::put`].
    denials: Option<crate::bus::denials::Denials>,
}

impl JobFiles {
    /// Opens (creating when missing) the files bucket with `config`'s retention.
    pub async fn open(bus: &Bus, config: &FilesConfig) -> Result<Self, BusError> {
        let store = bus.files(Duration::from_secs(config.max_age)).await?;
        Ok(Self {
            backend: Backend::Store(Arc::new(store)),
            max_file_bytes: config.max_file_bytes,
            denials: Some(bus.denials.clone()),
        })
    }

    /// Files kept in this process's memory, with the same naming, size cap,
    /// reserved directories and checksums as the Object Store: for tests and
    /// fuzzing of the file tools without a nats-server.
    pub fn in_memory(max_file_bytes: u64) -> Self {
        Self { backend: Backend::Memory(Arc::default()), max_file_bytes, denials: None }
    }

    /// The largest file a write may create.
    pub fn max_file_bytes(&self) -> u64 {
        self.max_file_bytes
    }

    fn prefix(job: &JobId) -> String {
        format!("{job}/")
    }

    fn object_name(job: &JobId, path: &FilePath) -> String {
        format!("{job}/{}", URL_SAFE_NO_PAD.encode(path.as_str()))
    }

    fn path_of(job: &JobId, name: &str) -> Option<FilePath> {
        let encoded = name.strip_prefix(&Self::prefix(job))?;
        let bytes = URL_SAFE_NO_PAD.decode(encoded).ok()?;
        FilePath::parse(std::str::from_utf8(&bytes).ok()?).ok()
    }

    fn memory(map: &Mutex<BTreeMap<String, MemObject>>) -> std::sync::MutexGuard<'_, BTreeMap<String, MemObject>> {
        map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Size and time of `path`, or `None` when it does not exist.
    pub async fn stat(&self, job: &JobId, path: &FilePath) -> Result<Option<FileMeta>, FileError> {
        let name = Self::object_name(job, path);
        let store = match &self.backend {
            Backend::Store(store) => store,
            Backend::Memory(map) => {
                return Ok(Self::memory(map).get(&name).map(|o| FileMeta {
                    path: path.clone(),
                    size: o.bytes.len() as u64,
                    modified: Some(o.modified),
                }));
            }
        };
        match store.info(name).await {
            Ok(info) if !info.deleted => {
                Ok(Some(FileMeta { path: path.clone(), size: info.size as u64, modified: info.modified }))
            }
            Ok(_) => Ok(None),
            Err(e) if e.kind() == object_store::InfoErrorKind::NotFound => Ok(None),
            Err(e) => Err(FileError::Store(e.to_string())),
        }
    }

    /// The bytes of `path`. A file in a reserved directory is verified
    /// against the checksum the runtime stored with it.
    pub async fn read(&self, job: &JobId, path: &FilePath) -> Result<Vec<u8>, FileError> {
        let (bytes, metadata) = self.read_raw(job, path).await?;
        if reserved_prefix(path).is_some() {
            let Some(stored) = metadata.get(CHECKSUM_KEY) else {
                return Err(FileError::Tampered {
                    path: path.clone(),
                    reason: "no checksum: it was not written by the runtime".into(),
                });
            };
            verify(path, &bytes, stored)?;
        }
        Ok(bytes)
    }

    /// The bytes a [`FileRef`] points at, verified against its `sha256` and
    /// size: what a reader of a large result or report by reference uses.
    pub async fn read_by_ref(&self, job: &JobId, reference: &FileRef) -> Result<Vec<u8>, FileError> {
        let path = FilePath::parse(&reference.path)?;
        let bytes = self.read(job, &path).await?;
        if bytes.len() as u64 != reference.size_bytes {
            return Err(FileError::Tampered {
                path,
                reason: format!("{} bytes where the reference says {}", bytes.len(), reference.size_bytes),
            });
        }
        verify(&path, &bytes, &reference.sha256)?;
        Ok(bytes)
    }

    async fn read_raw(&self, job: &JobId, path: &FilePath) -> Result<(Vec<u8>, HashMap<String, String>), FileError> {
        let name = Self::object_name(job, path);
        let store = match &self.backend {
            Backend::Store(store) => store,
            Backend::Memory(map) => {
                let o = Self::memory(map).get(&name).cloned().ok_or_else(|| FileError::NotFound(path.clone()))?;
                return Ok((o.bytes.to_vec(), o.metadata));
            }
        };
        let mut object = match store.get(name).await {
            Ok(o) => o,
            Err(e) if e.kind() == object_store::GetErrorKind::NotFound => {
                return Err(FileError::NotFound(path.clone()));
            }
            Err(e) => return Err(FileError::Store(e.to_string())),
        };
        let metadata = object.info().metadata.clone();
        let mut bytes = Vec::with_capacity(object.info().size.min(self.max_file_bytes as usize));
        object.read_to_end(&mut bytes).await.map_err(|e| FileError::Store(e.to_string()))?;
        Ok((bytes, metadata))
    }

    /// Creates or replaces `path`; returns whether it was created (`true`) or
    /// overwritten (`false`). Refuses the reserved directories.
    pub async fn write(&self, job: &JobId, path: &FilePath, bytes: &[u8]) -> Result<bool, FileError> {
        if let Some(prefix) = reserved_prefix(path) {
            return Err(FileError::Reserved { path: path.clone(), prefix });
        }
        self.put(job, path, bytes, HashMap::new()).await
    }

    /// Like [`Self::write`], for the runtime's own writers into a reserved
    /// directory (eviction, large reports): stores the bytes' sha256 with
    /// them so every later read can check it.
    pub async fn write_reserved(&self, job: &JobId, path: &FilePath, bytes: &[u8]) -> Result<bool, FileError> {
        let metadata = HashMap::from([(CHECKSUM_KEY.to_string(), sha256_hex(bytes))]);
        self.put(job, path, bytes, metadata).await
    }

    async fn put(
        &self,
        job: &JobId,
        path: &FilePath,
        bytes: &[u8],
        metadata: HashMap<String, String>,
    ) -> Result<bool, FileError> {
        if path.is_root() {
            return Err(FileError::Path(PathError::Empty));
        }
        if bytes.len() as u64 > self.max_file_bytes {
            return Err(FileError::TooLarge { path: path.clone(), size: bytes.len() as u64, max: self.max_file_bytes });
        }
        let name = Self::object_name(job, path);
        let store = match &self.backend {
            Backend::Store(store) => store,
            Backend::Memory(map) => {
                let object =
                    MemObject { bytes: Arc::new(bytes.to_vec()), metadata, modified: OffsetDateTime::now_utc() };
                return Ok(Self::memory(map).insert(name, object).is_none());
            }
        };
        let existed = self.stat(job, path).await?.is_some();
        let meta = ObjectMetadata { name: name.clone(), metadata, ..Default::default() };
        let mut reader = bytes;
        let put = store.put(meta, &mut reader);
        let Some(denials) = &self.denials else {
            put.await.map_err(|e| FileError::Store(e.to_string()))?;
            return Ok(!existed);
        };
        // An overwrite purges the old version's chunks after the new version is
        // stored. A credential that may not purge the bucket (a worker: a purge
        // without a filter would wipe every tenant's files) is refused that
        // step: the write stands, and the old chunks go with the bucket's
        // max_age. A refusal may belong to a concurrent write of this process,
        // so the stored digest decides whether this write is complete.
        match denials.guard(put, |d| d.subject.starts_with("$JS.API.STREAM.PURGE.")).await {
            Ok(_) => Ok(!existed),
            Err(crate::bus::denials::GuardError::Op(e)) => Err(FileError::Store(e.to_string())),
            Err(crate::bus::denials::GuardError::Denied(_)) => {
                use sha2::Digest;
                let digest = base64::engine::general_purpose::URL_SAFE.encode(sha2::Sha256::digest(bytes));
                let stored = store.info(&name).await.map_err(|e| FileError::Store(e.to_string()))?;
                if stored.digest.as_deref() == Some(&format!("SHA-256={digest}")) {
                    Ok(!existed)
                } else {
                    Err(FileError::Store(format!("the write of {path} was interrupted; write it again")))
                }
            }
        }
    }

    /// Every file of `job`, sorted by path.
    pub async fn list(&self, job: &JobId) -> Result<Vec<FileMeta>, FileError> {
        let prefix = Self::prefix(job);
        let mut out = Vec::new();
        match &self.backend {
            Backend::Memory(map) => {
                for (name, o) in Self::memory(map).range(prefix.clone()..).take_while(|(n, _)| n.starts_with(&prefix)) {
                    if let Some(path) = Self::path_of(job, name) {
                        out.push(FileMeta { path, size: o.bytes.len() as u64, modified: Some(o.modified) });
                    }
                }
            }
            Backend::Store(store) => {
                let mut list = store.list().await.map_err(|e| FileError::Store(e.to_string()))?;
                while let Some(info) = list.next().await {
                    let info = info.map_err(|e| FileError::Store(e.to_string()))?;
                    if info.deleted || !info.name.starts_with(&prefix) {
                        continue;
                    }
                    if let Some(path) = Self::path_of(job, &info.name) {
                        out.push(FileMeta { path, size: info.size as u64, modified: info.modified });
                    }
                }
            }
        }
        out.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(out)
    }

    /// Deletes `path`; `false` when it did not exist.
    pub async fn delete(&self, job: &JobId, path: &FilePath) -> Result<bool, FileError> {
        if self.stat(job, path).await?.is_none() {
            return Ok(false);
        }
        self.remove(&Self::object_name(job, path)).await?;
        Ok(true)
    }

    async fn remove(&self, name: &str) -> Result<(), FileError> {
        match &self.backend {
            Backend::Store(store) => store.delete(name).await.map_err(|e| FileError::Store(e.to_string())),
            Backend::Memory(map) => {
                Self::memory(map).remove(name);
                Ok(())
            }
        }
    }

    /// Deletes every file of `job`; returns how many.
    pub async fn purge(&self, job: &JobId) -> Result<usize, FileError> {
        let files = self.list(job).await?;
        for f in &files {
            self.remove(&Self::object_name(job, &f.path)).await?;
        }
        Ok(files.len())
    }
}

#[cfg(test)]
impl JobFiles {
    /// Replaces the bytes of `path` behind the runtime's back, as anyone with
    /// raw access to the bucket could, keeping the stored metadata.
    pub(crate) fn tamper(&self, job: &JobId, path: &FilePath, bytes: &[u8]) {
        let Backend::Memory(map) = &self.backend else { unreachable!("tamper needs the in-memory backend") };
        let mut map = Self::memory(map);
        let object = map.get_mut(&Self::object_name(job, path)).expect("tamper needs an existing file");
        object.bytes = Arc::new(bytes.to_vec());
    }
}

/// Checks `bytes` against the lowercase hex sha256 `expected`.
fn verify(path: &FilePath, bytes: &[u8], expected: &str) -> Result<(), FileError> {
    let actual = sha256_hex(bytes);
    if actual != expected {
        return Err(FileError::Tampered {
            path: path.clone(),
            reason: format!("sha256 is {actual}, expected {expected}"),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_names_stay_inside_their_job() {
        let job = JobId::new();
        let other = JobId::new();
        for raw in ["/a", "/x/../../y".replace("../", "").as_str(), "/é/ü", "/a b/c"] {
            let p = FilePath::parse(raw).unwrap();
            let name = JobFiles::object_name(&job, &p);
            assert!(name.starts_with(&format!("{job}/")));
            assert!(name.chars().all(|c| c.is_ascii_alphanumeric() || "-_/".contains(c)), "{name}");
            assert_eq!(JobFiles::path_of(&job, &name), Some(p));
            assert_eq!(JobFiles::path_of(&other, &name), None);
        }
    }

    fn job_and(path: &str) -> (JobId, FilePath) {
        (JobId::new(), FilePath::parse(path).unwrap())
    }

    #[tokio::test]
    async fn reserved_dirs_refuse_plain_writes() {
        let files = JobFiles::in_memory(1024);
        let (job, path) = job_and("/large_tool_results/t1/report");
        let e = files.write(&job, &path, b"forged").await.unwrap_err();
        assert!(matches!(e, FileError::Reserved { prefix: LARGE_RESULTS_DIR, .. }), "{e}");
        assert!(e.to_string().contains("/large_tool_results"), "{e}");
        assert!(files.stat(&job, &path).await.unwrap().is_none(), "nothing was written");
        assert!(files.write_reserved(&job, &path, b"real").await.unwrap());
        assert_eq!(files.read(&job, &path).await.unwrap(), b"real");
    }

    #[tokio::test]
    async fn tampered_reserved_file_is_detected() {
        let files = JobFiles::in_memory(1024);
        let (job, path) = job_and("/large_tool_results/t1/report");
        let answer = "the real answer\n";
        files.write_reserved(&job, &path, answer.as_bytes()).await.unwrap();
        let reference = crate::digest::describe_file(path.as_str(), answer);
        assert_eq!(files.read_by_ref(&job, &reference).await.unwrap(), answer.as_bytes());
        files.tamper(&job, &path, b"the forged answer\n");
        let e = files.read(&job, &path).await.unwrap_err();
        assert!(matches!(e, FileError::Tampered { .. }), "{e}");
        let e = files.read_by_ref(&job, &reference).await.unwrap_err();
        assert!(matches!(e, FileError::Tampered { .. }), "{e}");
    }

    #[tokio::test]
    async fn reserved_file_without_checksum_is_refused() {
        let files = JobFiles::in_memory(1024);
        let (job, path) = job_and("/large_tool_results/t1/report");
        // Written outside `write_reserved` (e.g. straight into the bucket): no checksum.
        files.put(&job, &path, b"forged", HashMap::new()).await.unwrap();
        let e = files.read(&job, &path).await.unwrap_err();
        assert!(e.to_string().contains("no checksum"), "{e}");
    }

    #[tokio::test]
    async fn read_by_ref_checks_a_plain_file_against_the_reference() {
        let files = JobFiles::in_memory(1024);
        let (job, path) = job_and("/reports/a.md");
        files.write(&job, &path, b"v1").await.unwrap();
        let reference = crate::digest::describe_file(path.as_str(), "v1");
        files.read_by_ref(&job, &reference).await.unwrap();
        files.write(&job, &path, b"v2").await.unwrap();
        assert!(matches!(files.read_by_ref(&job, &reference).await, Err(FileError::Tampered { .. })));
    }
}
