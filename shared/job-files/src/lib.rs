//! Job files: a per-job virtual filesystem shared by the planner and every
//! worker of a job. The rules (object names, size cap, reserved directories,
//! checksums) live here once, over an [`ObjectBackend`]: the JetStream Object
//! Store in production (`bus::files`), a map in tests ([`JobFiles::in_memory`]).
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
//! read (see [`reserved`]).
//!
//! A crate of its own because the agent loop (evicting large results), the
//! file tools, the bus (the Object Store backend), the orchestrator and the
//! workers all use the same rules. It depends on the wire contract only and
//! must not depend on the agent or the bus (docs/ARCHITECTURE.md).

#![deny(missing_docs)]

pub use flotilla_protocol::path;
pub mod reserved;

mod backend;
mod staging;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use time::OffsetDateTime;

pub use backend::{MemoryBackend, ObjectBackend, ObjectInfo};
pub use staging::{StagedPart, Upload};

pub use path::{FilePath, PathError};
pub use reserved::{
    LARGE_RESULTS_DIR, MAPS_DIR, REPORTS_DIR, RESERVED_DIRS, ReportAnchor, report_path, report_task, reserved_prefix,
    unfinished_report,
};

use flotilla_protocol::FileRef;
use flotilla_protocol::digest::sha256_hex;
use flotilla_protocol::ids::JobId;
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
    #[error("{path} failed its integrity check ({reason}); it is not what the runtime wrote")]
    Tampered {
        /// The file.
        path: FilePath,
        /// What did not match.
        reason: String,
    },
    /// An upload in parts that cannot be assembled (staging.rs).
    #[error("upload of {path} incomplete: {reason}")]
    Upload {
        /// Where it was to go.
        path: FilePath,
        /// What is missing or does not match.
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

/// Handle on every job's files (cheap to clone).
#[derive(Clone)]
pub struct JobFiles {
    backend: Arc<dyn ObjectBackend>,
    max_file_bytes: u64,
    /// When set, what `/reports/<task>.md` must hold, whatever checksum the
    /// object carries (see [`reserved`]).
    anchor: Option<Arc<dyn ReportAnchor>>,
}

impl JobFiles {
    /// Job files over `backend`, refusing files over `max_file_bytes`.
    pub fn new(backend: Arc<dyn ObjectBackend>, max_file_bytes: u64) -> Self {
        Self { backend, max_file_bytes, anchor: None }
    }

    /// These files, reading every `/reports/<task>.md` against `anchor`
    /// instead of the checksum stored with it: for a reader that must not
    /// trust the bucket's writers (the orchestrator; see [`reserved`]).
    pub fn with_report_anchor(mut self, anchor: Arc<dyn ReportAnchor>) -> Self {
        self.anchor = Some(anchor);
        self
    }

    /// Files kept in this process's memory, with the same naming, size cap,
    /// reserved directories and checksums as the Object Store: for tests and
    /// fuzzing of the file tools without a nats-server.
    pub fn in_memory(max_file_bytes: u64) -> Self {
        Self::new(Arc::new(MemoryBackend::default()), max_file_bytes)
    }

    /// The largest file a write may create.
    pub fn max_file_bytes(&self) -> u64 {
        self.max_file_bytes
    }

    fn prefix(job: &JobId) -> String {
        format!("{job}/")
    }

    /// The object holding `path` of `job`: `<job>/<base64url(path)>`.
    pub fn object_name(job: &JobId, path: &FilePath) -> String {
        format!("{job}/{}", URL_SAFE_NO_PAD.encode(path.as_str()))
    }

    fn path_of(job: &JobId, name: &str) -> Option<FilePath> {
        let encoded = name.strip_prefix(&Self::prefix(job))?;
        let bytes = URL_SAFE_NO_PAD.decode(encoded).ok()?;
        FilePath::parse(std::str::from_utf8(&bytes).ok()?).ok()
    }

    /// Size and time of `path`, or `None` when it does not exist.
    pub async fn stat(&self, job: &JobId, path: &FilePath) -> Result<Option<FileMeta>, FileError> {
        let info = self.backend.info(&Self::object_name(job, path)).await.map_err(FileError::Store)?;
        Ok(info.map(|i| FileMeta { path: path.clone(), size: i.size, modified: i.modified }))
    }

    /// The bytes of `path`. A file in a reserved directory is verified
    /// against the checksum the runtime stored with it, a task report
    /// against the report anchor when there is one.
    /// A task report not (yet) stored is served from the anchor when the
    /// anchor derives it ([`ReportAnchor::derived_report`]).
    pub async fn read(&self, job: &JobId, path: &FilePath) -> Result<Vec<u8>, FileError> {
        let (bytes, metadata) = match self.read_raw(job, path).await {
            Err(FileError::NotFound(missing)) => {
                if let (Some(anchor), Some(task)) = (&self.anchor, reserved::report_task(path))
                    && let Ok(Some(bytes)) = anchor.derived_report(job, &task).await
                {
                    return Ok(bytes);
                }
                return Err(FileError::NotFound(missing));
            }
            other => other?,
        };
        if let (Some(anchor), Some(task)) = (&self.anchor, reserved::report_task(path)) {
            let expected = anchor
                .report_sha256(job, &task)
                .await
                .map_err(|reason| FileError::Tampered { path: path.clone(), reason })?;
            let actual = sha256_hex(&bytes);
            if actual != expected {
                return Err(FileError::Tampered {
                    path: path.clone(),
                    reason: format!("sha256 is {actual}, but the report of task {task} has {expected}"),
                });
            }
            return Ok(bytes);
        }
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
        self.backend
            .get(&Self::object_name(job, path), self.max_file_bytes)
            .await
            .map_err(FileError::Store)?
            .ok_or_else(|| FileError::NotFound(path.clone()))
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

    /// Like [`Self::write_reserved`] without saying whether the file is new:
    /// one lookup fewer, for a writer that does not need to know (every
    /// task's report, workers/src/large_report.rs).
    pub async fn store_reserved(&self, job: &JobId, path: &FilePath, bytes: &[u8]) -> Result<(), FileError> {
        self.check_size(path, bytes)?;
        let metadata = HashMap::from([(CHECKSUM_KEY.to_string(), sha256_hex(bytes))]);
        self.backend.put(&Self::object_name(job, path), bytes, metadata).await.map_err(FileError::Store)
    }

    fn check_size(&self, path: &FilePath, bytes: &[u8]) -> Result<(), FileError> {
        if path.is_root() {
            return Err(FileError::Path(PathError::Empty));
        }
        if bytes.len() as u64 > self.max_file_bytes {
            return Err(FileError::TooLarge { path: path.clone(), size: bytes.len() as u64, max: self.max_file_bytes });
        }
        Ok(())
    }

    async fn put(
        &self,
        job: &JobId,
        path: &FilePath,
        bytes: &[u8],
        metadata: HashMap<String, String>,
    ) -> Result<bool, FileError> {
        self.check_size(path, bytes)?;
        let existed = self.stat(job, path).await?.is_some();
        self.backend.put(&Self::object_name(job, path), bytes, metadata).await.map_err(FileError::Store)?;
        Ok(!existed)
    }

    /// Every file of `job`, sorted by path.
    pub async fn list(&self, job: &JobId) -> Result<Vec<FileMeta>, FileError> {
        let objects = self.backend.list(&Self::prefix(job)).await.map_err(FileError::Store)?;
        let mut out: Vec<FileMeta> = objects
            .into_iter()
            .filter_map(|(name, i)| {
                Some(FileMeta { path: Self::path_of(job, &name)?, size: i.size, modified: i.modified })
            })
            .collect();
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
        self.backend.delete(name).await.map_err(FileError::Store)
    }

    /// Deletes every file of `job`; returns how many.
    pub async fn purge(&self, job: &JobId) -> Result<usize, FileError> {
        self.purge_jobs(&HashSet::from([*job])).await
    }

    /// Deletes every file of every job in `jobs` with one listing of the
    /// store; returns how many. A listing reads the metadata of every object
    /// of every job (the store cannot filter object names server-side), so
    /// the retention sweep (orchestrator/src/jobs/retention.rs) purges its
    /// expired jobs together rather than paying one listing per job.
    pub async fn purge_jobs(&self, jobs: &HashSet<JobId>) -> Result<usize, FileError> {
        let objects = match jobs.iter().next() {
            None => return Ok(0),
            Some(only) if jobs.len() == 1 => self.backend.list(&Self::prefix(only)).await,
            Some(_) => self.backend.list("").await,
        }
        .map_err(FileError::Store)?;
        let mut purged = 0;
        for (name, _) in objects {
            let owner = name.split_once('/').and_then(|(job, _)| job.parse::<JobId>().ok());
            if owner.is_some_and(|job| jobs.contains(&job)) {
                self.remove(&name).await?;
                purged += 1;
            }
        }
        Ok(purged)
    }
}

#[cfg(test)]
impl JobFiles {
    /// Replaces the bytes of `path` behind the runtime's back, as anyone with
    /// raw access to the bucket could, keeping the stored metadata.
    pub(crate) async fn tamper(&self, job: &JobId, path: &FilePath, bytes: &[u8]) {
        let name = Self::object_name(job, path);
        let (_, metadata) = self.backend.get(&name, u64::MAX).await.unwrap().expect("tamper needs an existing file");
        self.backend.put(&name, bytes, metadata).await.unwrap();
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

    #[tokio::test]
    async fn a_stored_report_is_checksummed_and_size_checked_without_a_lookup() {
        let backend = Arc::new(CountingLists::default());
        let files = JobFiles::new(backend.clone(), 8);
        let (job, path) = (JobId::new(), report_path(&flotilla_protocol::ids::TaskId::new()));
        files.store_reserved(&job, &path, b"answer").await.unwrap();
        assert_eq!(backend.infos.load(std::sync::atomic::Ordering::Relaxed), 0, "stored without a lookup");
        assert_eq!(files.read(&job, &path).await.unwrap(), b"answer", "read back against its checksum");
        let e = files.store_reserved(&job, &path, b"too long an answer").await.unwrap_err();
        assert!(matches!(e, FileError::TooLarge { .. }), "{e}");
    }

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

    /// Counts the listings and lookups a backend serves.
    #[derive(Default)]
    struct CountingLists {
        inner: MemoryBackend,
        lists: std::sync::atomic::AtomicUsize,
        infos: std::sync::atomic::AtomicUsize,
    }

    #[async_trait::async_trait]
    impl ObjectBackend for CountingLists {
        async fn info(&self, name: &str) -> Result<Option<ObjectInfo>, String> {
            self.infos.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.inner.info(name).await
        }
        async fn get(&self, name: &str, max: u64) -> Result<Option<(Vec<u8>, HashMap<String, String>)>, String> {
            self.inner.get(name, max).await
        }
        async fn put(&self, name: &str, bytes: &[u8], metadata: HashMap<String, String>) -> Result<(), String> {
            self.inner.put(name, bytes, metadata).await
        }
        async fn list(&self, prefix: &str) -> Result<Vec<(String, ObjectInfo)>, String> {
            self.lists.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.inner.list(prefix).await
        }
        async fn delete(&self, name: &str) -> Result<(), String> {
            self.inner.delete(name).await
        }
    }

    #[tokio::test]
    async fn purging_many_jobs_lists_the_store_once_and_spares_the_others() {
        let backend = Arc::new(CountingLists::default());
        let files = JobFiles::new(backend.clone(), 1024);
        let jobs: Vec<JobId> = (0..5).map(|_| JobId::new()).collect();
        for job in &jobs {
            for path in ["/inputs/a.csv", "/notes.md"] {
                files.write(job, &FilePath::parse(path).unwrap(), b"x").await.unwrap();
            }
            files.write_reserved(job, &report_path(&flotilla_protocol::ids::TaskId::new()), b"r").await.unwrap();
        }
        let expired: HashSet<JobId> = jobs[..3].iter().copied().collect();
        assert_eq!(files.purge_jobs(&expired).await.unwrap(), 9);
        assert_eq!(backend.lists.load(std::sync::atomic::Ordering::Relaxed), 1, "one listing for three jobs");
        for job in &jobs[..3] {
            assert!(files.list(job).await.unwrap().is_empty());
        }
        for job in &jobs[3..] {
            assert_eq!(files.list(job).await.unwrap().len(), 3, "another job's files are kept");
        }
        assert_eq!(files.purge(&jobs[3]).await.unwrap(), 3);
        assert_eq!(files.purge_jobs(&HashSet::new()).await.unwrap(), 0);
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
        let reference = flotilla_protocol::digest::describe_file(path.as_str(), answer);
        assert_eq!(files.read_by_ref(&job, &reference).await.unwrap(), answer.as_bytes());
        files.tamper(&job, &path, b"the forged answer\n").await;
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

    /// Vouches for one report's bytes, as the orchestrator's job records do.
    struct OneReport(flotilla_protocol::ids::TaskId, String);

    #[async_trait::async_trait]
    impl ReportAnchor for OneReport {
        async fn report_sha256(&self, _: &JobId, task: &flotilla_protocol::ids::TaskId) -> Result<String, String> {
            (task == &self.0).then(|| self.1.clone()).ok_or_else(|| format!("task {task} has not reported yet"))
        }
    }

    #[tokio::test]
    async fn an_anchored_report_must_match_the_anchor_whatever_its_checksum() {
        let (task, other) = (flotilla_protocol::ids::TaskId::new(), flotilla_protocol::ids::TaskId::new());
        let files = JobFiles::in_memory(1024);
        let anchored = files.clone().with_report_anchor(Arc::new(OneReport(task, sha256_hex(b"the real report"))));
        let job = JobId::new();
        files.write_reserved(&job, &report_path(&task), b"the real report").await.unwrap();
        assert_eq!(anchored.read(&job, &report_path(&task)).await.unwrap(), b"the real report");
        // Rewritten with a valid stored checksum, as any bucket writer can.
        for (t, text) in [(task, "forged"), (other, "forged for a task that did not report")] {
            files.write_reserved(&job, &report_path(&t), text.as_bytes()).await.unwrap();
            assert_eq!(files.read(&job, &report_path(&t)).await.unwrap(), text.as_bytes(), "the checksum alone passes");
            let e = anchored.read(&job, &report_path(&t)).await.unwrap_err();
            assert!(matches!(e, FileError::Tampered { .. }), "{e}");
        }
        let e = anchored.read(&job, &report_path(&other)).await.unwrap_err();
        assert!(e.to_string().contains("has not reported yet"), "{e}");
        // Other reserved files keep their stored-checksum check.
        let evicted = FilePath::parse("/large_tool_results/t1/call_1").unwrap();
        anchored.write_reserved(&job, &evicted, b"big").await.unwrap();
        assert_eq!(anchored.read(&job, &evicted).await.unwrap(), b"big");
    }

    /// Derives one task's report, as the orchestrator's records do for a
    /// report that carried its whole text.
    struct Derived(flotilla_protocol::ids::TaskId, &'static str);

    #[async_trait::async_trait]
    impl ReportAnchor for Derived {
        async fn report_sha256(&self, _: &JobId, task: &flotilla_protocol::ids::TaskId) -> Result<String, String> {
            (task == &self.0).then(|| sha256_hex(self.1.as_bytes())).ok_or_else(|| "not reported".to_string())
        }

        async fn derived_report(
            &self,
            _: &JobId,
            task: &flotilla_protocol::ids::TaskId,
        ) -> Result<Option<Vec<u8>>, String> {
            Ok((task == &self.0).then(|| self.1.as_bytes().to_vec()))
        }
    }

    #[tokio::test]
    async fn a_report_not_stored_yet_is_served_from_the_anchor_and_only_through_it() {
        let (task, other) = (flotilla_protocol::ids::TaskId::new(), flotilla_protocol::ids::TaskId::new());
        let files = JobFiles::in_memory(1024);
        let anchored = files.clone().with_report_anchor(Arc::new(Derived(task, "0.375")));
        let job = JobId::new();
        assert_eq!(anchored.read(&job, &report_path(&task)).await.unwrap(), b"0.375");
        assert!(matches!(files.read(&job, &report_path(&task)).await, Err(FileError::NotFound(_))), "no anchor");
        assert!(matches!(anchored.read(&job, &report_path(&other)).await, Err(FileError::NotFound(_))));
        let plain = FilePath::parse("/reports/q2.md").unwrap();
        assert!(matches!(anchored.read(&job, &plain).await, Err(FileError::NotFound(_))), "not a task's report");
        // Once stored, the stored file is read (and checked against the anchor).
        files.store_reserved(&job, &report_path(&task), b"forged").await.unwrap();
        assert!(matches!(anchored.read(&job, &report_path(&task)).await, Err(FileError::Tampered { .. })));
    }

    #[tokio::test]
    async fn read_by_ref_checks_a_plain_file_against_the_reference() {
        let files = JobFiles::in_memory(1024);
        let (job, path) = job_and("/reports/a.md");
        files.write(&job, &path, b"v1").await.unwrap();
        let reference = flotilla_protocol::digest::describe_file(path.as_str(), "v1");
        files.read_by_ref(&job, &reference).await.unwrap();
        files.write(&job, &path, b"v2").await.unwrap();
        assert!(matches!(files.read_by_ref(&job, &reference).await, Err(FileError::Tampered { .. })));
    }
}
