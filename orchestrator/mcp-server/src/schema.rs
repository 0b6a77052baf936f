//! The input and output shapes of `flotilla mcp serve`'s tools, from which
//! rmcp derives the JSON Schemas a host sees in `tools/list` (`inputSchema`,
//! `outputSchema`). They are this server's public contract (docs/MCP.md,
//! "Use Flotilla from an MCP host"), kept apart from the wire types of
//! flotilla-protocol so the bus schema can grow without changing what MCP
//! hosts were promised. Inputs accept unknown fields, as every Flotilla
//! reader does (docs/PROTOCOL.md).
//!
//! A `job_id` argument is also an HTTP header (`x-mcp-header`, SEP-2243):
//! 2026-07-28 clients send it as `Mcp-Param-Job-Id` next to the body, so a
//! gateway in front of `mcp serve` can log, limit or route calls by job
//! without parsing JSON-RPC, and rmcp refuses a call whose header is
//! missing or disagrees with the body (400, -32020) before any tool runs.

use flotilla_protocol::{JobRecord, JobStatus, ListReply, TaskCounts};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// The version every tool result carries as `v`.
pub const RESULT_VERSION: u32 = 1;

/// The `x-mcp-header` name of every `job_id` argument: the header is
/// `Mcp-Param-Job-Id` (see the module doc).
pub const JOB_ID_HEADER: &str = "Job-Id";

/// `submit_job` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct SubmitJobParams {
    /// The job in plain language, e.g. "Compute the gross margin of region north: revenue 120, cost 75."
    pub input: String,
    /// Text files the job starts with.
    #[serde(default)]
    pub files: Vec<InputFile>,
}

/// One text file for a job.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct InputFile {
    /// Where the job sees it: absolute (`/data/sales.csv`) or relative to `/inputs/`.
    pub path: String,
    /// Its text content (UTF-8).
    pub content: String,
}

/// `submit_job` result.
#[derive(Debug, Serialize, JsonSchema)]
pub struct SubmitJobResult {
    /// Version of this result's shape (`RESULT_VERSION`); fields may be added
    /// within a version, so readers ignore unknown ones.
    pub v: u32,
    /// The new job's id: pass it to job_status and cancel_job.
    pub job_id: String,
    /// Always `submitted`: the job runs on after this call returns.
    pub status: String,
    /// The job paths the files were stored under.
    pub files: Vec<String>,
}

/// `job_status` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct JobStatusParams {
    /// A job id, or a unique prefix of one (at least 4 characters).
    #[schemars(extend("x-mcp-header" = JOB_ID_HEADER))]
    pub job_id: String,
    /// Wait up to this many seconds (at most 60) for the job to end before
    /// answering, with a progress notification per job event when the
    /// request carries a progressToken. 0 or absent: answer at once.
    #[serde(default)]
    pub wait_seconds: Option<u64>,
}

/// `job_status` result.
#[derive(Debug, Serialize, JsonSchema)]
pub struct JobStatusResult {
    /// Version of this result's shape (`RESULT_VERSION`); fields may be added
    /// within a version, so readers ignore unknown ones.
    pub v: u32,
    /// The job's whole id.
    pub job_id: String,
    /// submitted, running, completed, failed or cancelled.
    pub status: String,
    /// Whether the job has ended (completed, failed or cancelled).
    pub done: bool,
    /// Job events seen while this call waited (`wait_seconds`); 0 otherwise.
    pub events_waited: u64,
    /// The job text as submitted.
    pub input: String,
    /// The planner's todo list.
    pub todos: Vec<TodoItem>,
    /// Tasks dispatched in all.
    pub tasks_total: u64,
    /// Tasks by state.
    pub task_counts: TaskCountsOut,
    /// The answer, once completed.
    pub answer: Option<String>,
    /// Why the job failed or was cancelled.
    pub error: Option<String>,
    /// Submission time (RFC 3339).
    pub created_at: String,
    /// Last change (RFC 3339).
    pub updated_at: String,
}

/// One item of the planner's plan.
#[derive(Debug, Serialize, JsonSchema)]
pub struct TodoItem {
    /// What is to be done.
    pub content: String,
    /// pending, in_progress or completed.
    pub status: String,
}

/// Tasks by state.
#[derive(Debug, Serialize, JsonSchema)]
pub struct TaskCountsOut {
    pub pending: u64,
    pub running: u64,
    pub completed: u64,
    pub failed: u64,
    pub rejected: u64,
    pub cancelled: u64,
}

/// `cancel_job` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct CancelJobParams {
    /// A job id, or a unique prefix of one (at least 4 characters).
    #[schemars(extend("x-mcp-header" = JOB_ID_HEADER))]
    pub job_id: String,
    /// Why, recorded on the job and its open tasks.
    #[serde(default)]
    pub reason: Option<String>,
}

/// `cancel_job` result.
#[derive(Debug, Serialize, JsonSchema)]
pub struct CancelJobResult {
    /// Version of this result's shape (`RESULT_VERSION`); fields may be added
    /// within a version, so readers ignore unknown ones.
    pub v: u32,
    /// The job's whole id.
    pub job_id: String,
    /// Task messages removed from the work queue.
    pub purged_tasks: u64,
}

/// A job status to filter `list_jobs` by.
#[derive(Clone, Copy, Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum StatusFilter {
    Submitted,
    Running,
    Completed,
    Failed,
    Cancelled,
}

impl From<StatusFilter> for JobStatus {
    fn from(s: StatusFilter) -> Self {
        match s {
            StatusFilter::Submitted => JobStatus::Submitted,
            StatusFilter::Running => JobStatus::Running,
            StatusFilter::Completed => JobStatus::Completed,
            StatusFilter::Failed => JobStatus::Failed,
            StatusFilter::Cancelled => JobStatus::Cancelled,
        }
    }
}

/// `list_jobs` arguments.
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub struct ListJobsParams {
    /// Only jobs with this status.
    #[serde(default)]
    pub status: Option<StatusFilter>,
    /// At most this many (default 20, at most 200).
    #[serde(default)]
    pub limit: Option<usize>,
}

/// `list_jobs` result.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ListJobsResult {
    /// Version of this result's shape (`RESULT_VERSION`); fields may be added
    /// within a version, so readers ignore unknown ones.
    pub v: u32,
    /// Newest first.
    pub jobs: Vec<JobLine>,
    /// Whether more jobs match than were returned.
    pub more: bool,
}

/// One job of a list.
#[derive(Debug, Serialize, JsonSchema)]
pub struct JobLine {
    pub job_id: String,
    /// submitted, running, completed, failed or cancelled.
    pub status: String,
    /// The job text as submitted.
    pub input: String,
    /// Tasks dispatched.
    pub tasks: usize,
    pub task_counts: TaskCountsOut,
    /// Submission time (RFC 3339).
    pub created_at: String,
}

/// A protocol enum as its wire name (`in_progress`, `completed`).
fn name<T: Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => s,
        other => format!("{other:?}"),
    }
}

fn rfc3339(t: OffsetDateTime) -> String {
    t.format(&Rfc3339).unwrap_or_else(|_| t.to_string())
}

impl From<TaskCounts> for TaskCountsOut {
    fn from(c: TaskCounts) -> Self {
        let TaskCounts { pending, running, completed, failed, rejected, cancelled } = c;
        Self { pending, running, completed, failed, rejected, cancelled }
    }
}

impl From<JobRecord> for JobStatusResult {
    fn from(j: JobRecord) -> Self {
        Self {
            v: RESULT_VERSION,
            job_id: j.id.to_string(),
            status: j.status.as_str().to_string(),
            done: j.status.is_terminal(),
            events_waited: 0,
            input: j.input,
            todos: j.todos.iter().map(|t| TodoItem { content: t.content.clone(), status: name(&t.status) }).collect(),
            tasks_total: j.tasks_total,
            task_counts: j.task_counts.into(),
            answer: j.answer,
            error: j.error.map(|e| e.to_string()),
            created_at: rfc3339(j.created_at),
            updated_at: rfc3339(j.updated_at),
        }
    }
}

impl From<ListReply> for ListJobsResult {
    fn from(r: ListReply) -> Self {
        let jobs = r
            .jobs
            .into_iter()
            .map(|j| JobLine {
                job_id: j.id.to_string(),
                status: j.status.as_str().to_string(),
                input: j.input,
                tasks: j.tasks,
                task_counts: j.task_counts.into(),
                created_at: rfc3339(j.created_at),
            })
            .collect();
        Self { v: RESULT_VERSION, jobs, more: r.next_after.is_some() }
    }
}
