//! Every task's full report lives in the job files at `/reports/<task>.md`
//! (docs/TOOLS.md, "Job inputs and reports"): the planner's conversation
//! only gets a summary capped at `[planner] report_tokens` plus that path
//! (orchestrator/src/reports.rs, `completed_view`), and a client reads the whole
//! report with `flotilla files get`.
//!
//! The report message itself carries the whole answer when it fits the
//! runtime's report budget, and then the worker stores nothing: the file is
//! derived from the consolidated report, written by the orchestrator off the
//! task's path (orchestrator/src/planner/dispatch.rs), so a task waits for no
//! Object Store write. The same goes for the report of a task that did not
//! complete (its status and error travel in the report). A larger answer
//! (NATS payloads stop at 1 MiB) travels by reference: the worker stores it
//! here first, and the report carries a [`FileRef`] to the file plus the
//! answer's head.
//!
//! `/reports/<task id>.md` is reserved (shared/job-files/src/reserved.rs):
//! no agent tool nor client can write it, and it is stored with its sha256,
//! which every read checks, so another task cannot forge this report.

use flotilla_job_files::{FilePath, report_path};
use flotilla_protocol::{ErrorInfo, ErrorKind, FileRef, TaskMessage};

use crate::runtime::SubagentRuntime;

/// Where the full report of `task` goes.
pub fn path_for(task: &TaskMessage) -> FilePath {
    report_path(&task.task_id)
}

/// The summary to send and, when the answer exceeds the report budget, its
/// file reference: such an answer is stored at `/reports/<task>.md` first,
/// and one that cannot be stored fails the task, so no answer is ever lost.
/// An answer that fits is sent whole and stored by no one here.
pub async fn offload(
    rt: &SubagentRuntime,
    task: &TaskMessage,
    answer: String,
) -> Result<(String, Option<FileRef>), ErrorInfo> {
    if answer.len() <= rt.report_budget {
        return Ok((answer, None));
    }
    let path = path_for(task);
    rt.files.store_reserved(&task.job_id, &path, answer.as_bytes()).await.map_err(|e| {
        ErrorInfo::new(
            ErrorKind::Transient,
            format!("the answer ({} bytes) is too large for a report and could not be stored: {e}", answer.len()),
        )
    })?;
    let reference = flotilla_protocol::digest::describe_file(path.as_str(), &answer);
    tracing::info!(bytes = answer.len(), path = %path, "answer stored in job files; report carries a reference");
    Ok((reference.head.clone(), Some(reference)))
}
