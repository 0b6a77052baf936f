//! The job-files operations of the job API (`<prefix>.api.<tenant>.files_ls`,
//! `files_get`, `files_put`, `files_commit`; types and the part protocol in
//! shared/protocol/src/files_api.rs, contract in docs/PROTOCOL.md, "Job
//! files"), and the files of a `submit`.
//!
//! Why through the orchestrator: a client credential has no Object Store
//! access (deploy/nats/roles.conf) and must not get it, since one bucket holds
//! every tenant's files (docs/SECURITY.md). The orchestrator checks that the
//! job is the tenant's own (another tenant's job is `not_found`, as for
//! `status`) and writes through [`JobFiles`], so the size cap and the
//! reserved paths (shared/job-files/src/reserved.rs) hold for clients as
//! they do for agents: a client cannot overwrite a task's report.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use flotilla_config::FilesConfig;
use flotilla_job_files::{FileError, FileMeta, FilePath, JobFiles, Upload};
use flotilla_protocol::digest::sha256_hex;
use flotilla_protocol::files_api::{
    FILE_PART_BYTES, FileEntry, FilesCommitReply, FilesCommitRequest, FilesGetReply, FilesGetRequest, FilesLsReply,
    FilesLsRequest, FilesPutReply, FilesPutRequest, LS_PAGE, StagedFile,
};
use flotilla_protocol::ids::{JobId, Tenant};
use flotilla_protocol::{ApiReply, ErrorInfo, ErrorKind};

use crate::jobs::JobStore;

mod recent;
mod staging;
use recent::{Read, Recent};
use staging::{Part, Staging};

/// An API error: kind and message.
type Refusal = (ErrorKind, String);

/// Answers the job-files operations.
pub(crate) struct FilesApi {
    files: JobFiles,
    jobs: JobStore,
    /// `[files] max_upload_bytes`: most bytes one commit or submit stores.
    max_upload_bytes: u64,
    /// Files being downloaded in parts (recent.rs).
    recent: Recent,
    /// The per-tenant quota of staged parts (staging.rs).
    staging: Staging,
}

fn reply<T>(r: Result<T, Refusal>) -> ApiReply<T> {
    match r {
        Ok(v) => ApiReply::ok(v),
        Err((kind, message)) => ApiReply::error(kind, message),
    }
}

impl FilesApi {
    pub(crate) fn new(files: JobFiles, jobs: JobStore, config: &FilesConfig) -> Self {
        Self {
            files,
            jobs,
            max_upload_bytes: config.max_upload_bytes,
            recent: Recent::default(),
            staging: Staging::new(&config.staging, config.max_upload_bytes),
        }
    }

    /// The job files themselves, for the runtime's own writers.
    pub(crate) fn job_files(&self) -> JobFiles {
        self.files.clone()
    }

    /// `files_ls`: the job's files, optionally under a path prefix.
    pub(crate) async fn ls(&self, tenant: &Tenant, req: FilesLsRequest) -> ApiReply<FilesLsReply> {
        reply(self.try_ls(tenant, req).await)
    }

    async fn try_ls(&self, tenant: &Tenant, req: FilesLsRequest) -> Result<FilesLsReply, Refusal> {
        self.owned(tenant, &req.job_id).await?;
        let prefix = req.prefix.unwrap_or_default();
        let files = self.files.list(&req.job_id).await.map_err(refusal)?;
        let (page, next_after) = page(files, &prefix, req.after.as_deref().unwrap_or_default(), req.limit);
        Ok(FilesLsReply { job_id: req.job_id, files: page, next_after })
    }

    /// `files_get`: one part of a file, from the requested offset.
    pub(crate) async fn get(&self, tenant: &Tenant, req: FilesGetRequest) -> ApiReply<FilesGetReply> {
        reply(self.try_get(tenant, req).await)
    }

    async fn try_get(&self, tenant: &Tenant, req: FilesGetRequest) -> Result<FilesGetReply, Refusal> {
        self.owned(tenant, &req.job_id).await?;
        let path = path(&req.path)?;
        let Read { bytes, sha256 } = self.read(&req.job_id, &path).await?;
        let size = bytes.len() as u64;
        if req.offset > size {
            let msg = format!("offset {} is past the end of {path} ({size} bytes)", req.offset);
            return Err((ErrorKind::Validation, msg));
        }
        let start = req.offset as usize;
        let end = (start + FILE_PART_BYTES).min(bytes.len());
        Ok(FilesGetReply {
            path: path.to_string(),
            size,
            sha256: sha256.to_string(),
            offset: req.offset,
            data: STANDARD.encode(&bytes[start..end]),
            eof: end == bytes.len(),
        })
    }

    /// The whole file with its sha256: from [`Recent`] while it is unchanged
    /// (a download's later parts), else read (and, in a reserved directory,
    /// verified) from the store.
    async fn read(&self, job: &JobId, path: &FilePath) -> Result<Read, Refusal> {
        let meta = self.files.stat(job, path).await.map_err(refusal)?;
        let Some(meta) = meta else {
            // A task report not stored yet is served from its record
            // (`JobFiles::read` through the report anchor); others are missing.
            let bytes = self.files.read(job, path).await.map_err(refusal)?;
            return Ok(Read { sha256: sha256_hex(&bytes).into(), bytes: bytes.into() });
        };
        if let Some(read) = self.recent.get(job, path, &meta) {
            return Ok(read);
        }
        let bytes = self.files.read(job, path).await.map_err(refusal)?;
        let read = Read { sha256: sha256_hex(&bytes).into(), bytes: bytes.into() };
        self.recent.put(*job, meta, read.clone());
        Ok(read)
    }

    /// `files_put`: stores one part of an upload.
    pub(crate) async fn put(&self, tenant: &Tenant, req: FilesPutRequest) -> ApiReply<FilesPutReply> {
        reply(self.try_put(tenant, req).await)
    }

    async fn try_put(&self, tenant: &Tenant, req: FilesPutRequest) -> Result<FilesPutReply, Refusal> {
        let bytes = STANDARD
            .decode(req.data.as_bytes())
            .map_err(|e| (ErrorKind::Validation, format!("part {} is not standard base64: {e}", req.index)))?;
        if bytes.len() > FILE_PART_BYTES {
            let msg = format!("part {} is {} bytes; a part holds at most {FILE_PART_BYTES}", req.index, bytes.len());
            return Err((ErrorKind::Validation, msg));
        }
        // In u64: an index near u32::MAX must be refused, not overflow.
        let reach = (u64::from(req.index) + 1) * FILE_PART_BYTES as u64;
        if reach - FILE_PART_BYTES as u64 >= self.max_upload_bytes.max(1) {
            return Err((ErrorKind::Limit, self.over_limit(reach)));
        }
        let part = Part { tenant, upload: &req.upload, index: req.index, size: bytes.len() as u64 };
        self.staging.put(&self.files, part, &bytes).await?;
        Ok(FilesPutReply { upload: req.upload, index: req.index, size: bytes.len() as u64 })
    }

    /// `files_commit`: assembles uploads into an existing job's files.
    pub(crate) async fn commit(&self, tenant: &Tenant, req: FilesCommitRequest) -> ApiReply<FilesCommitReply> {
        reply(self.try_commit(tenant, req).await)
    }

    async fn try_commit(&self, tenant: &Tenant, req: FilesCommitRequest) -> Result<FilesCommitReply, Refusal> {
        let stored = match self.owned(tenant, &req.job_id).await {
            Ok(()) => self.store(tenant, &req.job_id, &req.files).await,
            Err(e) => Err(e),
        };
        if stored.is_err() {
            self.discard(tenant, &req.files).await;
        }
        Ok(FilesCommitReply { job_id: req.job_id, files: stored? })
    }

    /// Stores a submit's files in the new job `job` (not yet recorded, so no
    /// planner can see a partial set). On any failure the files already
    /// stored are removed again and the submit must fail: no job starts.
    pub(crate) async fn adopt(&self, tenant: &Tenant, job: &JobId, staged: &[StagedFile]) -> Result<(), ErrorInfo> {
        if staged.is_empty() {
            return Ok(());
        }
        match self.store(tenant, job, staged).await {
            Ok(files) => {
                tracing::info!(job_id = %job, files = files.len(), "submitted files stored");
                Ok(())
            }
            Err((kind, message)) => {
                self.discard(tenant, staged).await;
                if let Err(e) = self.files.purge(job).await {
                    tracing::warn!(job_id = %job, error = %e, "files of a refused submit not removed; max_age will");
                }
                Err(ErrorInfo::new(kind, format!("files not stored, job not started: {message}")))
            }
        }
    }

    /// Assembles every staged file into `job`, checking the total first.
    async fn store(&self, tenant: &Tenant, job: &JobId, staged: &[StagedFile]) -> Result<Vec<FileEntry>, Refusal> {
        let total: u64 = staged.iter().map(|f| f.size).sum();
        if total > self.max_upload_bytes {
            return Err((ErrorKind::Limit, self.over_limit(total)));
        }
        if let Some(f) = staged.iter().find(|f| !whole_parts(f)) {
            let want = f.size.div_ceil(FILE_PART_BYTES as u64);
            let msg = format!("{} announces {} parts for {} bytes; it takes {want}", f.path, f.parts, f.size);
            return Err((ErrorKind::Validation, msg));
        }
        let mut out = Vec::with_capacity(staged.len());
        for f in staged {
            let path = path(&f.path)?;
            let upload = Upload { id: f.upload, parts: f.parts, size: f.size, sha256: f.sha256.clone() };
            let meta = self.files.commit_upload(tenant, &upload, job, &path).await.map_err(refusal)?;
            out.push(entry(meta));
        }
        Ok(out)
    }

    /// Drops the parts of uploads that will not be stored (the client keeps
    /// its files and may upload again).
    async fn discard(&self, tenant: &Tenant, staged: &[StagedFile]) {
        for f in staged.iter().filter(|f| whole_parts(f)) {
            let upload = Upload { id: f.upload, parts: f.parts, size: f.size, sha256: f.sha256.clone() };
            self.files.discard_upload(tenant, &upload).await;
        }
    }

    fn over_limit(&self, bytes: u64) -> String {
        format!(
            "an upload of {bytes} bytes is over [files] max_upload_bytes ({} bytes); send fewer or smaller files",
            self.max_upload_bytes
        )
    }

    /// Ok when `job` exists and belongs to `tenant`; another tenant's job is
    /// indistinguishable from a missing one.
    async fn owned(&self, tenant: &Tenant, job: &JobId) -> Result<(), Refusal> {
        match self.jobs.get(job).await {
            Ok(Some(rec)) if &rec.tenant == tenant => Ok(()),
            Ok(_) => Err((ErrorKind::NotFound, format!("no job {job}"))),
            Err(e) => Err((ErrorKind::Transient, e.to_string())),
        }
    }
}

/// One page of `files` (sorted by path): those under `prefix` after the
/// cursor `after`, at most `limit` (default and most [`LS_PAGE`]), and the
/// cursor of the next page when more remain.
fn page(files: Vec<FileMeta>, prefix: &str, after: &str, limit: Option<usize>) -> (Vec<FileEntry>, Option<String>) {
    let limit = limit.unwrap_or(LS_PAGE).clamp(1, LS_PAGE);
    let mut page: Vec<FileEntry> = files
        .into_iter()
        .filter(|f| f.path.as_str().starts_with(prefix) && f.path.as_str() > after)
        .take(limit + 1)
        .map(entry)
        .collect();
    let next = (page.len() > limit).then(|| {
        page.truncate(limit);
        page[limit - 1].path.clone()
    });
    (page, next)
}

/// Whether `f` names exactly the parts its size takes (parts are full but
/// the last), which also bounds the work of assembling or discarding it.
fn whole_parts(f: &StagedFile) -> bool {
    u64::from(f.parts) == f.size.div_ceil(FILE_PART_BYTES as u64)
}

fn path(raw: &str) -> Result<FilePath, Refusal> {
    FilePath::parse(raw).map_err(|e| (ErrorKind::Validation, format!("invalid path {raw:?}: {e}")))
}

fn entry(meta: FileMeta) -> FileEntry {
    FileEntry { path: meta.path.to_string(), size: meta.size, modified: meta.modified }
}

/// What JetStream answers when its storage is full.
const STORE_FULL: &str = "insufficient resources";

/// The API error for a job-files error. A full store is a `limit`, not a
/// transient error: retrying does not free space, and a client that retries
/// only waits longer for the same answer.
fn refusal(e: FileError) -> Refusal {
    if let FileError::Store(cause) = &e
        && cause.to_ascii_lowercase().contains(STORE_FULL)
    {
        let msg = "the job-files store is full (JetStream: insufficient resources); nothing was stored: \
                   retry once files expire or are deleted, or ask the operator for more JetStream storage";
        return (ErrorKind::Limit, msg.into());
    }
    let kind = match &e {
        FileError::NotFound(_) => ErrorKind::NotFound,
        FileError::Reserved { .. } => ErrorKind::Permission,
        FileError::TooLarge { .. } => ErrorKind::Limit,
        FileError::Path(_) | FileError::Upload { .. } => ErrorKind::Validation,
        FileError::Tampered { .. } => ErrorKind::Business,
        _ => ErrorKind::Transient,
    };
    (kind, e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listing_pages_follow_the_cursor_to_the_end() {
        let meta = |p: &str| FileMeta { path: FilePath::parse(p).unwrap(), size: 1, modified: None };
        let files: Vec<FileMeta> =
            ["/inputs/a", "/reports/1.md", "/reports/2.md", "/reports/3.md", "/z"].into_iter().map(meta).collect();
        let (first, next) = page(files.clone(), "/reports/", "", Some(2));
        assert_eq!(first.iter().map(|f| f.path.as_str()).collect::<Vec<_>>(), ["/reports/1.md", "/reports/2.md"]);
        assert_eq!(next.as_deref(), Some("/reports/2.md"));
        let (second, next) = page(files.clone(), "/reports/", "/reports/2.md", Some(2));
        assert_eq!(second.iter().map(|f| f.path.as_str()).collect::<Vec<_>>(), ["/reports/3.md"]);
        assert_eq!(next, None);
        let (all, next) = page(files, "", "", Some(0));
        assert_eq!((all.len(), next.as_deref()), (1, Some("/inputs/a")), "a limit of 0 still makes progress");
    }

    #[test]
    fn file_errors_keep_their_kind() {
        let p = FilePath::parse("/reports/x.md").unwrap();
        assert_eq!(refusal(FileError::NotFound(p.clone())).0, ErrorKind::NotFound);
        assert_eq!(refusal(FileError::Reserved { path: p.clone(), prefix: "/reports" }).0, ErrorKind::Permission);
        assert_eq!(refusal(FileError::TooLarge { path: p, size: 2, max: 1 }).0, ErrorKind::Limit);
        assert_eq!(refusal(FileError::Store("down".into())).0, ErrorKind::Transient);
        let full = refusal(FileError::Store("failed to put: insufficient resources (code 10023)".into()));
        assert_eq!(full.0, ErrorKind::Limit);
        assert!(full.1.contains("store is full"), "{}", full.1);
    }

    fn files_api(max_upload_bytes: u64, max_tenant_bytes: u64) -> FilesApi {
        files_api_aged(max_upload_bytes, max_tenant_bytes, 3600)
    }

    fn files_api_aged(max_upload_bytes: u64, max_tenant_bytes: u64, max_age: u64) -> FilesApi {
        let config = FilesConfig {
            max_upload_bytes,
            staging: flotilla_config::staging::StagingConfig { max_tenant_bytes, max_age },
            ..Default::default()
        };
        let jobs = JobStore::with_backend(std::sync::Arc::new(crate::fakes::FakeJobs::default()));
        FilesApi::new(JobFiles::in_memory(1 << 24), jobs, &config)
    }

    fn put_req(upload: flotilla_protocol::files_api::UploadId, index: u32, bytes: &[u8]) -> FilesPutRequest {
        FilesPutRequest { v: flotilla_protocol::SCHEMA_VERSION, upload, index, data: STANDARD.encode(bytes) }
    }

    /// A part index near u32::MAX once overflowed the size check (a panic in
    /// a debug build, no reply); it is a limit error now.
    #[tokio::test]
    async fn a_part_index_at_u32_max_is_a_limit_error() {
        let api = files_api(1 << 20, 1 << 20);
        let reply = api.put(&Tenant::default(), put_req(uuid::Uuid::new_v4(), u32::MAX, b"x")).await;
        let e = reply.into_result().unwrap_err();
        assert_eq!(e.kind, ErrorKind::Limit, "{e}");
        assert!(e.message.contains("max_upload_bytes"), "{e}");
    }

    /// Parts count against the upload's and the tenant's limits as they
    /// arrive; another tenant's parts are its own.
    #[tokio::test]
    async fn staged_parts_count_against_the_upload_and_the_tenant_quota() {
        let part = vec![7u8; FILE_PART_BYTES];
        let api = files_api(2 * FILE_PART_BYTES as u64, 3 * FILE_PART_BYTES as u64);
        let (acme, globex) = (Tenant::new("acme").unwrap(), Tenant::new("globex").unwrap());
        let (a, b) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
        for index in 0..2 {
            api.put(&acme, put_req(a, index, &part)).await.into_result().unwrap();
        }
        // The same part again replaces itself.
        api.put(&acme, put_req(a, 1, &part)).await.into_result().unwrap();
        api.put(&acme, put_req(b, 0, &part)).await.into_result().unwrap();
        let e = api.put(&acme, put_req(b, 1, &part)).await.into_result().unwrap_err();
        assert_eq!(e.kind, ErrorKind::Limit);
        assert!(e.message.contains("[files.staging] max_tenant_bytes"), "{e}");
        // Another tenant's quota is its own.
        api.put(&globex, put_req(uuid::Uuid::new_v4(), 0, &part)).await.into_result().unwrap();

        // An upload's parts count against max_upload_bytes as they arrive.
        let api = files_api(FILE_PART_BYTES as u64 * 3 / 2, 3 * FILE_PART_BYTES as u64);
        let c = uuid::Uuid::new_v4();
        api.put(&acme, put_req(c, 0, &part)).await.into_result().unwrap();
        let e = api.put(&acme, put_req(c, 1, &part)).await.into_result().unwrap_err();
        assert!(e.message.contains("over [files] max_upload_bytes"), "{e}");
        api.put(&acme, put_req(c, 1, &part[..FILE_PART_BYTES / 2])).await.into_result().unwrap();
    }

    /// Parts older than `[files.staging] max_age` count for nothing and go
    /// with the next put, whoever's (a 0 s lifetime here: every earlier part is old).
    #[tokio::test]
    async fn expired_parts_are_swept_and_free_the_quota() {
        let part = vec![7u8; FILE_PART_BYTES];
        let api = files_api_aged(FILE_PART_BYTES as u64, FILE_PART_BYTES as u64, 0);
        let (acme, globex) = (Tenant::new("acme").unwrap(), Tenant::new("globex").unwrap());
        api.put(&globex, put_req(uuid::Uuid::new_v4(), 0, &part)).await.into_result().unwrap();
        api.put(&acme, put_req(uuid::Uuid::new_v4(), 0, &part)).await.into_result().unwrap();
        let left = api.files.staged_parts().await.unwrap();
        assert_eq!(left.iter().map(|p| p.tenant.as_str()).collect::<Vec<_>>(), ["acme"], "globex's part expired");
        api.put(&acme, put_req(uuid::Uuid::new_v4(), 0, &part)).await.into_result().unwrap();
        assert_eq!(api.files.staged_parts().await.unwrap().len(), 1, "the quota counts only live parts");
    }
}
