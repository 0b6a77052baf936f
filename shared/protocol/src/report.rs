//! The task report: the one final answer of a subagent to the planner.
//!
//! On the bus a report is version 2 ([`REPORT_VERSION`]): its body leaves out
//! the job, the type and the task, which are tokens of its subject
//! (`<prefix>.job.<tenant>.<job>.report.<type>.<task>`), and `attempt` when
//! it is 1 ([`TaskReport::encode`], [`TaskReport::decode`]). A version 1
//! body, with the ids, is still read; its readers (shared/bus/src/reports.rs)
//! refuse one whose ids are not its subject's.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use super::{DecodeError, ErrorInfo, FileRef, Usage};
use crate::ids::{JobId, SubagentType, TaskId};

/// Schema version of task reports: 2 since their bus body stopped repeating
/// the ids of its subject (docs/PROTOCOL.md, "TaskReport").
pub const REPORT_VERSION: u32 = 2;

/// How a task ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    /// The subagent answered.
    Completed,
    /// The subagent could not finish (see `error`).
    Failed,
    /// The task was refused before it ran (unknown type, malformed, expired).
    Rejected,
    /// The job or task was cancelled.
    Cancelled,
}

impl TaskStatus {
    /// The snake_case wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Completed => "completed",
            TaskStatus::Failed => "failed",
            TaskStatus::Rejected => "rejected",
            TaskStatus::Cancelled => "cancelled",
        }
    }
}

/// Published on `<prefix>.job.<tenant>.<job>.report.<type>.<task>` (kept in
/// the reports stream).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskReport {
    /// Schema version ([`REPORT_VERSION`]).
    #[serde(default = "report_version")]
    pub v: u32,
    /// The job (on the bus: the subject's `<job>` token).
    pub job_id: JobId,
    /// The task reported on (on the bus: the subject's `<task>` token).
    pub task_id: TaskId,
    /// The subagent type that ran it (on the bus: the subject's `<type>` token).
    pub subagent_type: SubagentType,
    /// How it ended.
    pub status: TaskStatus,
    /// The subagent's final answer (empty when it failed). When the answer
    /// was too large for a message, only its beginning (see `summary_file`).
    pub summary: String,
    /// Set when the answer exceeded the report budget: the whole answer is in
    /// the job files at this reference, and `summary` holds its head only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary_file: Option<super::FileRef>,
    /// Why it did not complete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorInfo>,
    /// What the subagent spent.
    #[serde(default)]
    pub usage: Usage,
    /// The worker process that ran it.
    pub worker_id: String,
    /// JetStream delivery attempt that produced this report, from 1.
    pub attempt: u32,
    /// Model turns this attempt took over from earlier ones through the
    /// task's step journal (docs/RELIABILITY.md); `None` when it did not resume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed_from_step: Option<u32>,
    /// When the subagent started.
    #[serde(with = "time::serde::rfc3339")]
    pub started_at: OffsetDateTime,
    /// When the report was written.
    #[serde(with = "time::serde::rfc3339")]
    pub finished_at: OffsetDateTime,
    /// Wall time of the subagent run in milliseconds.
    pub duration_ms: u64,
}

fn report_version() -> u32 {
    REPORT_VERSION
}

/// The bus body of a report, as written: no ids, no first attempt.
#[derive(Serialize)]
struct BodyOut<'a> {
    v: u32,
    status: TaskStatus,
    summary: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    summary_file: Option<&'a FileRef>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a ErrorInfo>,
    usage: &'a Usage,
    worker_id: &'a str,
    #[serde(skip_serializing_if = "super::is_first_attempt")]
    attempt: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    resumed_from_step: Option<u32>,
    #[serde(with = "time::serde::rfc3339")]
    started_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    finished_at: OffsetDateTime,
    duration_ms: u64,
}

/// The bus body of a report, as read: a version 1 body carries the ids.
/// Readers ignore fields they do not know (a newer minor version's).
#[derive(Deserialize)]
struct BodyIn {
    #[serde(default)]
    job_id: Option<JobId>,
    #[serde(default)]
    task_id: Option<TaskId>,
    #[serde(default)]
    subagent_type: Option<SubagentType>,
    status: TaskStatus,
    summary: String,
    #[serde(default)]
    summary_file: Option<FileRef>,
    #[serde(default)]
    error: Option<ErrorInfo>,
    #[serde(default)]
    usage: Usage,
    worker_id: String,
    #[serde(default = "super::first_attempt")]
    attempt: u32,
    #[serde(default)]
    resumed_from_step: Option<u32>,
    #[serde(with = "time::serde::rfc3339")]
    started_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    finished_at: OffsetDateTime,
    duration_ms: u64,
}

impl TaskReport {
    /// Human name of the message type, for errors.
    pub const NAME: &'static str = "task report";

    /// The body to publish on the report's subject
    /// ([`Subjects::report`](crate::subjects::Subjects::report)).
    pub fn encode(&self) -> Vec<u8> {
        let body = BodyOut {
            v: REPORT_VERSION,
            status: self.status,
            summary: &self.summary,
            summary_file: self.summary_file.as_ref(),
            error: self.error.as_ref(),
            usage: &self.usage,
            worker_id: &self.worker_id,
            attempt: self.attempt,
            resumed_from_step: self.resumed_from_step,
            started_at: self.started_at,
            finished_at: self.finished_at,
            duration_ms: self.duration_ms,
        };
        // Serializing our own plain data types cannot fail.
        serde_json::to_vec(&body).expect("protocol types serialize infallibly")
    }

    /// Reads a body received on the report subject of `job_id`,
    /// `subagent_type` and `task_id`: ids the body leaves out (version 2)
    /// are the subject's; ids it carries (version 1) are kept, for the
    /// reader to check against the subject's (a report that claims another
    /// task or type is a forgery, docs/SECURITY.md).
    pub fn decode(
        bytes: &[u8],
        job_id: JobId,
        subagent_type: &SubagentType,
        task_id: TaskId,
    ) -> Result<Self, DecodeError> {
        super::check_version(bytes, &[1, REPORT_VERSION])?;
        let body: BodyIn = serde_json::from_slice(bytes)
            .map_err(|e| DecodeError::Shape { what: Self::NAME, detail: e.to_string() })?;
        Ok(TaskReport {
            v: REPORT_VERSION,
            job_id: body.job_id.unwrap_or(job_id),
            task_id: body.task_id.unwrap_or(task_id),
            subagent_type: body.subagent_type.unwrap_or_else(|| subagent_type.clone()),
            status: body.status,
            summary: body.summary,
            summary_file: body.summary_file,
            error: body.error,
            usage: body.usage,
            worker_id: body.worker_id,
            attempt: body.attempt,
            resumed_from_step: body.resumed_from_step,
            started_at: body.started_at,
            finished_at: body.finished_at,
            duration_ms: body.duration_ms,
        })
    }
}
