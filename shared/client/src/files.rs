//! A job's files through the job API (`files_*` operations,
//! orchestrator/src/files_api.rs; a client has no Object Store access,
//! docs/SECURITY.md), and a submit with files. Files travel in parts of at
//! most [`FILE_PART_BYTES`], so any file up to `[files] max_file_bytes` fits
//! through 1 MiB NATS messages; a download is checked against the sha256 the
//! orchestrator reports for the whole file.
//!
//! The one upload path: `flotilla submit --file`, the dashboard's submit and
//! `mcp serve`'s `submit_job` each check their own inputs (paths, the
//! `[files] max_upload_bytes` total), then hand the bytes to
//! [`Client::upload`] and the staged files to [`Client::submit_with_files`].

use std::time::Duration;

use anyhow::{Context, bail};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use flotilla_protocol::SCHEMA_VERSION;
use flotilla_protocol::SubmitRequest;
use flotilla_protocol::digest::sha256_hex;
use flotilla_protocol::files_api::{FILE_PART_BYTES, FilesGetRequest, FilesPutRequest, StagedFile, UploadId};
use flotilla_protocol::ids::{JobId, SubagentType};

use crate::Client;

/// How long one file part or a submit naming files may take.
pub const FILE_TIMEOUT: Duration = Duration::from_secs(30);

/// A file to upload: its job path (already checked by the caller) and its bytes.
pub struct NewFile {
    /// In the job's files, e.g. `/inputs/sales.csv`.
    pub path: String,
    /// The whole content.
    pub bytes: Vec<u8>,
}

impl Client {
    /// Sends each file's parts with `files_put`; returns what a submit or
    /// `files_commit` names to store them. A refused part fails the upload,
    /// naming the file and the part.
    pub async fn upload(&self, files: &[NewFile]) -> anyhow::Result<Vec<StagedFile>> {
        let mut staged = Vec::with_capacity(files.len());
        for f in files {
            let upload = UploadId::new_v4();
            let parts = f.bytes.chunks(FILE_PART_BYTES);
            let count = parts.len() as u32;
            for (index, part) in parts.enumerate() {
                let req =
                    FilesPutRequest { v: SCHEMA_VERSION, upload, index: index as u32, data: STANDARD.encode(part) };
                self.call_within(&req, FILE_TIMEOUT, "file upload refused")
                    .await
                    .with_context(|| format!("uploading {} (part {} of {count})", f.path, index + 1))?;
            }
            let (size, sha256) = (f.bytes.len() as u64, sha256_hex(&f.bytes));
            staged.push(StagedFile { upload, parts: count, path: f.path.clone(), size, sha256 });
        }
        Ok(staged)
    }

    /// Submits a job whose `files` were uploaded by [`Client::upload`];
    /// returns its id at once.
    pub async fn submit_with_files(&self, input: String, files: Vec<StagedFile>) -> anyhow::Result<JobId> {
        self.submit_request(SubmitRequest { v: SCHEMA_VERSION, input, files, subagent_type: None }).await
    }

    /// Submits a direct job: `description` runs as one task of
    /// `subagent_type`, without a planner model, and the task's report is
    /// the job's answer (docs/PROTOCOL.md, "Direct jobs"). Returns its id at once.
    pub async fn submit_task(
        &self,
        subagent_type: SubagentType,
        description: String,
        files: Vec<StagedFile>,
    ) -> anyhow::Result<JobId> {
        let req = SubmitRequest { v: SCHEMA_VERSION, input: description, files, subagent_type: Some(subagent_type) };
        self.submit_request(req).await
    }

    async fn submit_request(&self, req: SubmitRequest) -> anyhow::Result<JobId> {
        Ok(self.call_within(&req, FILE_TIMEOUT, "submit refused").await?.job_id)
    }

    /// The whole file at `path` of `job`, part by part, checked against the
    /// sha256 the orchestrator reports; also returns that sha256.
    pub async fn download(&self, job: JobId, path: &str) -> anyhow::Result<(Vec<u8>, String)> {
        let mut bytes = Vec::new();
        let mut expected: Option<String> = None;
        loop {
            let req =
                FilesGetRequest { v: SCHEMA_VERSION, job_id: job, path: path.to_string(), offset: bytes.len() as u64 };
            let part =
                self.call_within(&req, FILE_TIMEOUT, "refused").await.with_context(|| format!("reading {path}"))?;
            if expected.get_or_insert_with(|| part.sha256.clone()) != &part.sha256 {
                bail!("{path} changed while it was being read; read it again");
            }
            bytes.extend(STANDARD.decode(part.data.as_bytes()).context("a part that is not base64")?);
            if part.eof {
                break;
            }
        }
        let sha256 = expected.unwrap_or_default();
        if sha256_hex(&bytes) != sha256 {
            bail!("{path}: the bytes received do not match the file's sha256; read it again");
        }
        Ok((bytes, sha256))
    }
}
