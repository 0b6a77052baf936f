//! The job-API calls the bench makes, as typed requests over the rig's bus
//! for the default tenant: the same requests as `flotilla submit --file` and
//! `flotilla jobs --limit` (orchestrator/cli/src/commands/files.rs, cli/jobs.rs), and
//! every job's events read from the events stream as `flotilla watch` reads
//! them (shared/client/src/events.rs), so the bench times what a client of
//! the API waits for. The bench cannot call the orchestrator library: the
//! `flotilla` binary, in the same package, depends on the bench.

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use flotilla_bus::Bus;
use flotilla_protocol::digest::sha256_hex;
use flotilla_protocol::files_api::{FILE_PART_BYTES, FilesPutReply, FilesPutRequest, StagedFile, UploadId};
use flotilla_protocol::ids::{JobId, Tenant};
use flotilla_protocol::path::FilePath;
use flotilla_protocol::{
    ApiReply, JobEvent, JobStatus, JobSummary, ListReply, ListRequest, MAX_LIST_PAGE, Message, ProgressEvent,
    SCHEMA_VERSION, SubmitReply, SubmitRequest,
};
use futures::{Stream, StreamExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Budget of a submit or a listing page (the CLI's).
const TIMEOUT: Duration = Duration::from_secs(10);
/// Budget of one uploaded part (the CLI's for file operations).
const FILES_TIMEOUT: Duration = Duration::from_secs(30);

/// One followed event of either kind.
pub enum Event {
    /// A job-level event.
    Job(JobEvent),
    /// A task progress event.
    Progress(ProgressEvent),
}

/// Follows every job's events from now on, with task progress when
/// `with_progress`; an event that does not decode is logged and skipped.
pub async fn follow_all(
    bus: &Bus,
    with_progress: bool,
) -> anyhow::Result<impl Stream<Item = anyhow::Result<Event>> + use<>> {
    let s = &bus.subjects;
    let filter = if with_progress { s.all_jobs() } else { s.all_job_events() };
    let (_, messages) = bus.events().follow(filter, false).await?;
    let marker = format!("{}.job.", s.prefix());
    Ok(messages.filter_map(move |m| {
        let marker = marker.clone();
        async move {
            let m = match m {
                Ok(m) => m,
                Err(e) => return Some(Err(e.into())),
            };
            let is_event = m.subject.strip_prefix(&marker).is_some_and(|r| r.ends_with(".event"));
            let decoded = if is_event {
                flotilla_protocol::decode::<JobEvent>(&m.payload).map(Event::Job)
            } else {
                flotilla_protocol::decode::<ProgressEvent>(&m.payload).map(Event::Progress)
            };
            match decoded {
                Ok(e) => Some(Ok(e)),
                Err(e) => {
                    tracing::warn!(subject = %m.subject, error = %e, "undecodable event skipped");
                    None
                }
            }
        }
    }))
}

/// A client of the default tenant's jobs.
#[derive(Clone)]
pub struct JobApi {
    bus: Bus,
}

impl JobApi {
    /// A client over `bus`.
    pub fn new(bus: Bus) -> Self {
        Self { bus }
    }

    /// Submits a job with no files; returns its id.
    pub async fn submit(&self, input: String) -> anyhow::Result<JobId> {
        self.submit_with(input, Vec::new()).await
    }

    /// Submits a job whose `files` were sent by [`JobApi::upload`].
    pub async fn submit_with(&self, input: String, files: Vec<StagedFile>) -> anyhow::Result<JobId> {
        let req = SubmitRequest { v: SCHEMA_VERSION, input, files };
        let reply: SubmitReply = self.call("submit", &req, TIMEOUT).await.context("submit refused")?;
        Ok(reply.job_id)
    }

    /// One page of job summaries with `status`, newest first.
    pub async fn list(&self, status: Option<JobStatus>, limit: usize) -> anyhow::Result<ListReply> {
        let req = ListRequest { v: SCHEMA_VERSION, status, limit: Some(limit), ..Default::default() };
        self.call("list", &req, TIMEOUT).await.context("list")
    }

    /// Up to `limit` jobs with `status`, newest first, a page at a time.
    pub async fn list_all(&self, status: Option<JobStatus>, limit: usize) -> anyhow::Result<Vec<JobSummary>> {
        let mut jobs: Vec<JobSummary> = Vec::new();
        let mut after = None;
        while jobs.len() < limit {
            let req = ListRequest {
                v: SCHEMA_VERSION,
                status,
                limit: Some((limit - jobs.len()).min(MAX_LIST_PAGE)),
                after,
                since: None,
            };
            let page: ListReply = self.call("list", &req, TIMEOUT).await.context("list")?;
            jobs.extend(page.jobs);
            match page.next_after.filter(|next| Some(*next) != after) {
                Some(next) => after = Some(next),
                None => break,
            }
        }
        Ok(jobs)
    }

    /// Sends the file `local` in parts with `files_put`, to be stored at
    /// `path` by the submit that names the returned [`StagedFile`].
    pub async fn upload(&self, local: &Path, path: &FilePath) -> anyhow::Result<StagedFile> {
        let bytes = std::fs::read(local).with_context(|| format!("reading {}", local.display()))?;
        let upload = UploadId::new_v4();
        let parts = bytes.chunks(FILE_PART_BYTES);
        let count = parts.len() as u32;
        for (index, part) in parts.enumerate() {
            let req = FilesPutRequest { v: SCHEMA_VERSION, upload, index: index as u32, data: STANDARD.encode(part) };
            let _: FilesPutReply = self
                .call("files_put", &req, FILES_TIMEOUT)
                .await
                .with_context(|| format!("uploading {} (part {} of {count})", local.display(), index + 1))?;
        }
        let (size, sha256) = (bytes.len() as u64, sha256_hex(&bytes));
        Ok(StagedFile { upload, parts: count, path: path.to_string(), size, sha256 })
    }

    /// One typed request/reply; an error reply becomes an error with its kind.
    async fn call<Req: Message, Rep: Serialize + DeserializeOwned>(
        &self,
        op: &str,
        req: &Req,
        timeout: Duration,
    ) -> anyhow::Result<Rep> {
        let reply: ApiReply<Rep> = self.bus.request(&Tenant::default(), op, req, timeout).await?;
        reply.into_result().map_err(anyhow::Error::new)
    }
}
