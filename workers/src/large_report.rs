//! Every task's full report lives in the job files at `/reports/<task>.md`
//! (docs/TOOLS.md, "Job inputs and reports"): the planner's conversation
//! only gets a summary capped at `[planner] report_tokens` plus that path
//! (orchestrator/src/reports.rs, `completed_view`), and a client reads the whole
//! report with `flotilla files get`.
//!
//! The report message itself carries the whole answer when it fits the
//! runtime's report budget; a larger answer (NATS payloads stop at 1 MiB)
//! travels by reference: the report carries a [`FileRef`] to the file plus
//! the answer's head.
//!
//! `/reports/<task id>.md` is reserved (shared/job-files/src/reserved.rs):
//! no agent tool nor client can write it, and it is stored with its sha256,
//! which every read checks, so another task cannot forge this report.

use flotilla_job_files::{FilePath, report_path, unfinished_report};
use flotilla_protocol::{ErrorInfo, ErrorKind, FileRef, TaskMessage};

use crate::runtime::SubagentRuntime;

/// Where the full report of `task` goes.
pub fn path_for(task: &TaskMessage) -> FilePath {
    report_path(&task.task_id)
}

/// Stores the answer at `/reports/<task>.md` and returns the summary to send
/// and, when the answer exceeds the report budget, its file reference. An
/// answer that fits is sent whole even if the file could not be stored (a
/// warning says so); one that does not fit fails the task, so no answer is
/// ever lost.
pub async fn offload(
    rt: &SubagentRuntime,
    task: &TaskMessage,
    answer: String,
) -> Result<(String, Option<FileRef>), ErrorInfo> {
    let path = path_for(task);
    let stored = rt.files.store_reserved(&task.job_id, &path, answer.as_bytes()).await;
    if answer.len() <= rt.report_budget {
        if let Err(e) = stored {
            tracing::warn!(error = %e, path = %path, "full report not stored in job files; the report message carries it");
        }
        return Ok((answer, None));
    }
    stored.map_err(|e| {
        ErrorInfo::new(
            ErrorKind::Transient,
            format!("the answer ({} bytes) is too large for a report and could not be stored: {e}", answer.len()),
        )
    })?;
    let reference = flotilla_protocol::digest::describe_file(path.as_str(), &answer);
    tracing::info!(bytes = answer.len(), path = %path, "answer stored in job files; report carries a reference");
    Ok((reference.head.clone(), Some(reference)))
}

/// Stores the report of a task that did not complete (its status and error),
/// so `/reports/<task>.md` exists for every task a worker reports on. Best
/// effort: the report message carries the same error.
pub async fn store_failure(rt: &SubagentRuntime, task: &TaskMessage, status: &str, error: &ErrorInfo) {
    let path = path_for(task);
    let text = unfinished_report(&task.task_id, status, error);
    if let Err(e) = rt.files.store_reserved(&task.job_id, &path, text.as_bytes()).await {
        tracing::warn!(error = %e, path = %path, "report of an unfinished task not stored in job files");
    }
}
