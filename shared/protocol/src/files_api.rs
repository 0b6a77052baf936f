//! Job files through the job API (`<prefix>.api.<tenant>.files_*`,
//! docs/PROTOCOL.md, "Job files"): clients have no access to the Object Store
//! (tenant isolation, docs/SECURITY.md), so the orchestrator reads and writes
//! a job's files for them, after checking the job is the tenant's own.
//!
//! A request or reply is one NATS message (at most [`MAX_MESSAGE_BYTES`]), so
//! file bytes travel in parts of at most [`FILE_PART_BYTES`], base64-encoded:
//! an upload is a series of `files_put` parts under a client-chosen upload id,
//! assembled by `files_commit` (into an existing job) or by a `submit` that
//! names them in `files` (into the new job, before its planner starts); a
//! download is a series of `files_get` calls with growing `offset`.
//!
//! [`MAX_MESSAGE_BYTES`]: crate::MAX_MESSAGE_BYTES

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use super::Message;
use crate::ids::JobId;

/// Largest part of a file in one `files_put` or `files_get` message, before
/// base64 (which adds a third): 512 KiB keeps each message well under 1 MiB.
pub const FILE_PART_BYTES: usize = 512 * 1024;

/// An upload's id: a random UUID the client chooses.
pub type UploadId = uuid::Uuid;

/// `<prefix>.api.<tenant>.files_ls`: a job's files, sorted by path.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilesLsRequest {
    /// Schema version.
    #[serde(default = "super::schema_version")]
    pub v: u32,
    /// The job.
    pub job_id: JobId,
    /// Only paths starting with this string (e.g. `/reports/`).
    #[serde(default)]
    pub prefix: Option<String>,
    /// Only paths after this one (the previous reply's `next_after`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    /// At most this many files (default and most [`LS_PAGE`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
}

/// Most files in one `files_ls` reply: a page stays well under one message
/// (a job of a 100 000-task map has 100 000 reports).
pub const LS_PAGE: usize = 2000;

/// One file of a job.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FileEntry {
    /// Its path, e.g. `/inputs/a.csv`.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// Last write.
    #[serde(default, with = "time::serde::rfc3339::option")]
    pub modified: Option<OffsetDateTime>,
}

/// Reply to `files_ls`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FilesLsReply {
    /// The job.
    pub job_id: JobId,
    /// Its files (matching the prefix), sorted by path: one page.
    pub files: Vec<FileEntry>,
    /// Pass as `after` for the next page; absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_after: Option<String>,
}

/// `<prefix>.api.<tenant>.files_get`: one part of a file, from `offset`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilesGetRequest {
    /// Schema version.
    #[serde(default = "super::schema_version")]
    pub v: u32,
    /// The job.
    pub job_id: JobId,
    /// The file.
    pub path: String,
    /// First byte wanted.
    #[serde(default)]
    pub offset: u64,
}

/// Reply to `files_get`: at most [`FILE_PART_BYTES`] bytes from `offset`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FilesGetReply {
    /// The file, normalised.
    pub path: String,
    /// The whole file's size.
    pub size: u64,
    /// Lowercase hex sha256 of the whole file: a reader checks it once it has
    /// every part, and a change between two parts shows as a different value.
    pub sha256: String,
    /// Where `data` starts.
    pub offset: u64,
    /// The bytes, standard base64.
    pub data: String,
    /// Whether `data` reaches the end of the file.
    pub eof: bool,
}

/// `<prefix>.api.<tenant>.files_put`: one part of an upload, kept (for the
/// files bucket's `max_age` at most) until a commit or submit assembles it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilesPutRequest {
    /// Schema version.
    #[serde(default = "super::schema_version")]
    pub v: u32,
    /// The upload, chosen by the client (a random UUID): parts are kept per
    /// tenant, so another tenant can neither read nor commit them.
    pub upload: UploadId,
    /// The part's index, from 0.
    pub index: u32,
    /// The part's bytes (at most [`FILE_PART_BYTES`]), standard base64.
    pub data: String,
}

/// Reply to `files_put`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FilesPutReply {
    /// The upload.
    pub upload: UploadId,
    /// The part stored.
    pub index: u32,
    /// Its size in bytes.
    pub size: u64,
}

/// A file uploaded in parts, to be assembled at `path` of a job.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StagedFile {
    /// The upload holding its parts.
    pub upload: UploadId,
    /// How many parts (indexes `0..parts`); 0 for an empty file.
    pub parts: u32,
    /// Where it goes, e.g. `/inputs/a.csv`.
    pub path: String,
    /// Its size in bytes.
    pub size: u64,
    /// Lowercase hex sha256 of the whole file, checked after assembly.
    pub sha256: String,
}

/// `<prefix>.api.<tenant>.files_commit`: assembles uploads into the files of
/// one of the tenant's jobs (running or finished, within retention). Writes
/// follow the job files' rules: reserved paths (docs/TOOLS.md) are refused.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilesCommitRequest {
    /// Schema version.
    #[serde(default = "super::schema_version")]
    pub v: u32,
    /// The job.
    pub job_id: JobId,
    /// The files.
    pub files: Vec<StagedFile>,
}

/// Reply to `files_commit` (and what a submit with files stored).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FilesCommitReply {
    /// The job.
    pub job_id: JobId,
    /// The files written.
    pub files: Vec<FileEntry>,
}

impl Message for FilesLsRequest {
    const NAME: &'static str = "files_ls request";
}
impl Message for FilesGetRequest {
    const NAME: &'static str = "files_get request";
}
impl Message for FilesPutRequest {
    const NAME: &'static str = "files_put request";
}
impl Message for FilesCommitRequest {
    const NAME: &'static str = "files_commit request";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_part_fits_one_message() {
        let b64 = |n: usize| n.div_ceil(3) * 4;
        let reply = FilesGetReply {
            path: "/x".repeat(100),
            size: u64::MAX,
            sha256: "0".repeat(64),
            offset: u64::MAX,
            data: "A".repeat(b64(FILE_PART_BYTES)),
            eof: false,
        };
        let bytes = serde_json::to_vec(&reply).unwrap().len();
        assert!(bytes + 1024 < crate::MAX_MESSAGE_BYTES, "{bytes}");
    }

    #[test]
    fn a_full_listing_page_fits_one_message() {
        let entry = FileEntry {
            path: format!("/reports/{}.md", crate::ids::TaskId::new()) + &"x".repeat(200),
            size: u64::MAX,
            modified: Some(crate::now()),
        };
        let reply = FilesLsReply { job_id: JobId::new(), files: vec![entry; LS_PAGE], next_after: Some("/x".into()) };
        let bytes = serde_json::to_vec(&reply).unwrap().len();
        assert!(bytes + 1024 < crate::MAX_MESSAGE_BYTES, "{bytes}");
    }

    #[test]
    fn requests_refuse_unknown_fields() {
        let json = format!(r#"{{"v":1,"job_id":"{}","path":"/a","offsett":3}}"#, JobId::new());
        assert!(crate::decode::<FilesGetRequest>(json.as_bytes()).is_err());
        let json = format!(r#"{{"v":1,"job_id":"{}"}}"#, JobId::new());
        let req: FilesLsRequest = crate::decode(json.as_bytes()).unwrap();
        assert_eq!(req.prefix, None);
    }
}
