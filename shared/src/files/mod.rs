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

pub mod path;

use std::time::Duration;

use async_nats::jetstream::object_store::{self, ObjectMetadata, ObjectStore};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use futures::StreamExt;
use time::OffsetDateTime;
use tokio::io::AsyncReadExt;

pub use path::{FilePath, PathError};

use crate::bus::{Bus, BusError};
use crate::config::FilesConfig;
use crate::ids::JobId;

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

/// Handle on every job's files (cheap to clone).
#[derive(Clone)]
pub struct JobFiles {
    store: ObjectStore,
    max_file_bytes: u64,
}

impl JobFiles {
    /// Opens (creating when missing) the files bucket with `config`'s retention.
    pub async fn open(bus: &Bus, config: &FilesConfig) -> Result<Self, BusError> {
        let store = bus.files(Duration::from_secs(config.max_age)).await?;
        Ok(Self { store, max_file_bytes: config.max_file_bytes })
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

    /// Size and time of `path`, or `None` when it does not exist.
    pub async fn stat(&self, job: &JobId, path: &FilePath) -> Result<Option<FileMeta>, FileError> {
        match self.store.info(Self::object_name(job, path)).await {
            Ok(info) if !info.deleted => {
                Ok(Some(FileMeta { path: path.clone(), size: info.size as u64, modified: info.modified }))
            }
            Ok(_) => Ok(None),
            Err(e) if e.kind() == object_store::InfoErrorKind::NotFound => Ok(None),
            Err(e) => Err(FileError::Store(e.to_string())),
        }
    }

    /// The bytes of `path`.
    pub async fn read(&self, job: &JobId, path: &FilePath) -> Result<Vec<u8>, FileError> {
        let mut object = match self.store.get(Self::object_name(job, path)).await {
            Ok(o) => o,
            Err(e) if e.kind() == object_store::GetErrorKind::NotFound => {
                return Err(FileError::NotFound(path.clone()));
            }
            Err(e) => return Err(FileError::Store(e.to_string())),
        };
        let mut bytes = Vec::with_capacity(object.info().size);
        object.read_to_end(&mut bytes).await.map_err(|e| FileError::Store(e.to_string()))?;
        Ok(bytes)
    }

    /// Creates or replaces `path`; returns whether it was created (`true`) or
    /// overwritten (`false`).
    pub async fn write(&self, job: &JobId, path: &FilePath, bytes: &[u8]) -> Result<bool, FileError> {
        if path.is_root() {
            return Err(FileError::Path(PathError::Empty));
        }
        if bytes.len() as u64 > self.max_file_bytes {
            return Err(FileError::TooLarge { path: path.clone(), size: bytes.len() as u64, max: self.max_file_bytes });
        }
        let existed = self.stat(job, path).await?.is_some();
        let meta = ObjectMetadata { name: Self::object_name(job, path), ..Default::default() };
        self.store.put(meta, &mut &bytes[..]).await.map_err(|e| FileError::Store(e.to_string()))?;
        Ok(!existed)
    }

    /// Every file of `job`, sorted by path.
    pub async fn list(&self, job: &JobId) -> Result<Vec<FileMeta>, FileError> {
        let prefix = Self::prefix(job);
        let mut list = self.store.list().await.map_err(|e| FileError::Store(e.to_string()))?;
        let mut out = Vec::new();
        while let Some(info) = list.next().await {
            let info = info.map_err(|e| FileError::Store(e.to_string()))?;
            if info.deleted || !info.name.starts_with(&prefix) {
                continue;
            }
            if let Some(path) = Self::path_of(job, &info.name) {
                out.push(FileMeta { path, size: info.size as u64, modified: info.modified });
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
        self.store.delete(Self::object_name(job, path)).await.map_err(|e| FileError::Store(e.to_string()))?;
        Ok(true)
    }

    /// Deletes every file of `job`; returns how many.
    pub async fn purge(&self, job: &JobId) -> Result<usize, FileError> {
        let files = self.list(job).await?;
        for f in &files {
            self.store.delete(Self::object_name(job, &f.path)).await.map_err(|e| FileError::Store(e.to_string()))?;
        }
        Ok(files.len())
    }
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
}
