//! Answers too large for a report message travel by reference (seed 000
//! section 3.5; NATS payloads stop at 1 MiB): the whole answer is written to
//! `/large_tool_results/<task>/report` in the job files, and the report carries a
//! [`FileRef`] plus the answer's head, so the planner reads only what it needs.
//!
//! The directory is reserved (shared/src/files/reserved.rs): no agent tool
//! can write there, and the answer is stored with its sha256, which every
//! read checks, so another task cannot replace this report with a forgery.

use flotilla_agent::files::FilePath;
use flotilla_agent::tool::LARGE_RESULTS_DIR;
use flotilla_protocol::ids::TaskId;
use flotilla_protocol::{ErrorInfo, ErrorKind, FileRef, TaskMessage};

use crate::runtime::SubagentRuntime;

/// Where the oversized answer of `task` goes.
pub fn path_for(task: &TaskId) -> FilePath {
    FilePath::parse(LARGE_RESULTS_DIR)
        .and_then(|d| d.child(&task.to_string()))
        .and_then(|d| d.child("report"))
        .expect("ids make valid path segments")
}

/// Returns the summary to send and its file reference, storing the answer in
/// the job files when it exceeds the runtime's report budget.
pub async fn offload(
    rt: &SubagentRuntime,
    task: &TaskMessage,
    answer: String,
) -> Result<(String, Option<FileRef>), ErrorInfo> {
    if answer.len() <= rt.report_budget {
        return Ok((answer, None));
    }
    let path = path_for(&task.task_id);
    rt.files.write_reserved(&task.job_id, &path, answer.as_bytes()).await.map_err(|e| {
        ErrorInfo::new(
            ErrorKind::Transient,
            format!("the answer ({} bytes) is too large for a report and could not be stored: {e}", answer.len()),
        )
    })?;
    let reference = flotilla_agent::digest::describe_file(path.as_str(), &answer);
    tracing::info!(bytes = answer.len(), path = %path, "answer stored in job files; report carries a reference");
    Ok((reference.head.clone(), Some(reference)))
}
