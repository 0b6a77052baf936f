//! The task report: the one final answer of a subagent to the planner.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use super::{ErrorInfo, Message, Usage};
use crate::ids::{JobId, SubagentType, TaskId};

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

/// Published on `<prefix>.job.<job>.report.<task>` (kept in the reports stream).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskReport {
    /// Schema version.
    #[serde(default = "super::schema_version")]
    pub v: u32,
    /// The job.
    pub job_id: JobId,
    /// The task reported on.
    pub task_id: TaskId,
    /// The subagent type that ran it.
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

impl Message for TaskReport {
    const NAME: &'static str = "task report";
}
