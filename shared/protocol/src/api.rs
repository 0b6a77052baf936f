//! Job control by request/reply on `<prefix>.api.<tenant>.<op>`. Every reply is an
//! [`ApiReply`]: `{"v":1,"ok":{...}}` or `{"v":1,"error":{"kind":..,"message":..}}`.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use super::{ErrorInfo, ErrorKind, JobStatus, Message, Usage};
use crate::ids::{JobId, TaskId, Tenant};

/// `<prefix>.api.<tenant>.submit`: start a job owned by the subject's tenant.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubmitRequest {
    /// Schema version.
    #[serde(default = "super::schema_version")]
    pub v: u32,
    /// The job text for the planner (or, with `subagent_type`, the task's
    /// description).
    pub input: String,
    /// Files uploaded beforehand by `files_put` (src/files_api.rs), stored in
    /// the new job's files before its planner starts; one that cannot be
    /// stored fails the submit and no job starts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<crate::files_api::StagedFile>,
    /// Runs `input` as one task of this subagent type, without a planner
    /// model: the job's answer is the task's report (a direct job,
    /// docs/PROTOCOL.md). A type the orchestrator does not configure is
    /// refused; an orchestrator that predates the field refuses it too
    /// (unknown fields are), rather than planning the text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subagent_type: Option<crate::ids::SubagentType>,
}

/// Reply to a submit: the job id, at once.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SubmitReply {
    /// The new job.
    pub job_id: JobId,
}

/// `<prefix>.api.<tenant>.status`: one job's header and one page of its
/// tasks (only the tenant's own jobs).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatusRequest {
    /// Schema version.
    #[serde(default = "super::schema_version")]
    pub v: u32,
    /// The job.
    pub job_id: JobId,
    /// At most this many tasks in the reply (default [`DEFAULT_TASKS_PAGE`],
    /// at most [`MAX_TASKS_PAGE`]; 0 for none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasks_limit: Option<usize>,
    /// Only tasks dispatched after this one (the previous reply's
    /// `next_after`); task ids are UUIDv7, so their order is dispatch order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasks_after: Option<TaskId>,
    /// Only tasks matching this filter (all when absent); the reply's
    /// `tasks_matched` says how many match in all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasks_filter: Option<TaskFilter>,
}

/// Which of a job's tasks a `status` page holds: every condition given
/// must hold. A filter other than `task` reads every task entry of the job
/// once (one pass over the job's keys with their values), so it costs
/// O(tasks of the job); `task` alone reads one entry.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskFilter {
    /// Only this task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<TaskId>,
    /// Only tasks in this state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<super::TaskState>,
    /// Only tasks of this subagent type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subagent_type: Option<crate::ids::SubagentType>,
    /// Only tasks whose (last) worker has this id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
    /// Only tasks whose id, description, summary or error contains this
    /// text (case-insensitive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

impl TaskFilter {
    /// Whether `task` passes every condition.
    pub fn matches(&self, task: &super::TaskEntry) -> bool {
        self.task.is_none_or(|t| t == task.task_id)
            && self.state.is_none_or(|s| s == task.state())
            && self.subagent_type.as_ref().is_none_or(|t| t == &task.subagent_type)
            && self.worker.as_deref().is_none_or(|w| task.worker_id.as_deref() == Some(w))
            && self.text.as_deref().is_none_or(|needle| {
                let needle = needle.to_lowercase();
                let error = task.error.as_ref().map(|e| e.to_string()).unwrap_or_default();
                [task.task_id.to_string().as_str(), &task.description, &task.summary, &error]
                    .iter()
                    .any(|hay| hay.to_lowercase().contains(&needle))
            })
    }

    /// Whether it lets every task through.
    pub fn is_empty(&self) -> bool {
        self == &Self::default()
    }
}

/// Tasks in a `status` reply when the request does not say.
pub const DEFAULT_TASKS_PAGE: usize = 100;

/// The most tasks one `status` reply carries (a page stays well under a message).
pub const MAX_TASKS_PAGE: usize = 1000;

/// Reply to a status request: the job header (with `tasks_total` and
/// `task_counts`), one page of its tasks in `tasks`, and the cursor of the
/// next page. A reader that knows only [`JobRecord`](crate::JobRecord) reads it as one.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StatusReply {
    /// The header and the page of tasks.
    #[serde(flatten)]
    pub job: super::JobRecord,
    /// Pass as `tasks_after` for the next page; absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_after: Option<TaskId>,
    /// With a `tasks_filter`: how many of the job's tasks match it in all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasks_matched: Option<u64>,
}

/// `<prefix>.api.<tenant>.list`: the tenant's job summaries, newest first.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListRequest {
    /// Schema version.
    #[serde(default = "super::schema_version")]
    pub v: u32,
    /// Only jobs with this status.
    #[serde(default)]
    pub status: Option<JobStatus>,
    /// At most this many (default 100); a reply holds at most
    /// [`MAX_LIST_PAGE`] and says where to go on in `next_after`.
    #[serde(default)]
    pub limit: Option<usize>,
    /// Cursor: only jobs older than this one (the `next_after` of the previous page).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<JobId>,
    /// Only jobs submitted at or after this time.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "time::serde::rfc3339::option")]
    pub since: Option<OffsetDateTime>,
}

/// Most job summaries in one list reply, so a reply stays well below the
/// NATS max_payload (1 MiB by default; a summary is under 600 bytes).
pub const MAX_LIST_PAGE: usize = 500;

/// `<prefix>.api.<tenant>.prune`: delete the tenant's finished jobs last
/// changed before `before` (records, index entry, files; docs/OPERATIONS.md).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PruneRequest {
    /// Schema version.
    #[serde(default = "super::schema_version")]
    pub v: u32,
    /// Finished jobs whose last change is before this time go.
    #[serde(with = "time::serde::rfc3339")]
    pub before: OffsetDateTime,
}

/// Reply to a prune.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PruneReply {
    /// Jobs deleted.
    pub pruned: usize,
}

/// `<prefix>.api.<tenant>.cancel`: stop a job, its queued and running tasks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CancelRequest {
    /// Schema version.
    #[serde(default = "super::schema_version")]
    pub v: u32,
    /// The job.
    pub job_id: JobId,
    /// Why; recorded in the job and its `cancelled` event.
    #[serde(default)]
    pub reason: Option<String>,
}

/// Reply to a cancel.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CancelReply {
    /// The job.
    pub job_id: JobId,
    /// Task messages removed from the work queue: the queued ones and those
    /// of running tasks (whose workers report `cancelled`).
    pub purged_tasks: u64,
}

/// One line of a job list.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobSummary {
    /// The job.
    pub id: JobId,
    /// Its owner.
    pub tenant: Tenant,
    /// Where it stands.
    pub status: JobStatus,
    /// First line of the input.
    pub input: String,
    /// Tasks dispatched.
    pub tasks: usize,
    /// Those tasks by state.
    #[serde(default)]
    pub task_counts: super::TaskCounts,
    /// Total spend.
    pub usage: Usage,
    /// Submission time.
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    /// Last change.
    #[serde(with = "time::serde::rfc3339")]
    pub updated_at: OffsetDateTime,
}

/// Reply to a list.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ListReply {
    /// Matching jobs, newest first.
    pub jobs: Vec<JobSummary>,
    /// Set when more jobs match than this page holds: pass it as `after` for the next page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_after: Option<JobId>,
}

/// Every API reply: a result or an error, under a version.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ApiReply<T> {
    /// Schema version.
    #[serde(default = "super::schema_version")]
    pub v: u32,
    /// The outcome.
    #[serde(flatten)]
    pub outcome: ApiOutcome<T>,
}

/// The outcome of an API request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApiOutcome<T> {
    /// It worked.
    Ok(T),
    /// It did not, and this is why.
    Error(ErrorInfo),
}

impl<T> ApiReply<T> {
    /// A successful reply.
    pub fn ok(value: T) -> Self {
        Self { v: super::SCHEMA_VERSION, outcome: ApiOutcome::Ok(value) }
    }

    /// An error reply.
    pub fn error(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self { v: super::SCHEMA_VERSION, outcome: ApiOutcome::Error(ErrorInfo::new(kind, message)) }
    }

    /// The outcome as a `Result`.
    pub fn into_result(self) -> Result<T, ErrorInfo> {
        match self.outcome {
            ApiOutcome::Ok(v) => Ok(v),
            ApiOutcome::Error(e) => Err(e),
        }
    }
}

impl Message for SubmitRequest {
    const NAME: &'static str = "submit request";
}
impl Message for StatusRequest {
    const NAME: &'static str = "status request";
}
impl Message for StatusReply {
    const NAME: &'static str = "status reply";
}
impl Message for CancelRequest {
    const NAME: &'static str = "cancel request";
}
impl Message for ListRequest {
    const NAME: &'static str = "list request";
}
impl Message for PruneRequest {
    const NAME: &'static str = "prune request";
}
impl<T: Serialize + serde::de::DeserializeOwned> Message for ApiReply<T> {
    const NAME: &'static str = "API reply";
}
