//! The job record: a job's durable state, kept in the jobs KV bucket.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use super::{ErrorInfo, Message, TaskStatus, Todo, Usage};
use crate::ids::{JobId, SubagentType, TaskId, Tenant};

/// Where a job stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobStatus {
    /// Accepted, planner not started yet.
    Submitted,
    /// The planner is working.
    Running,
    /// Finished with an answer.
    Completed,
    /// Finished without one.
    Failed,
    /// Stopped on request.
    Cancelled,
}

impl JobStatus {
    /// Whether the job has ended.
    pub fn is_terminal(self) -> bool {
        matches!(self, JobStatus::Completed | JobStatus::Failed | JobStatus::Cancelled)
    }

    /// The snake_case wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::Submitted => "submitted",
            JobStatus::Running => "running",
            JobStatus::Completed => "completed",
            JobStatus::Failed => "failed",
            JobStatus::Cancelled => "cancelled",
        }
    }
}

impl std::str::FromStr for JobStatus {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        serde_json::from_value(serde_json::Value::String(s.into()))
            .map_err(|_| format!("unknown job status {s:?}: use submitted, running, completed, failed or cancelled"))
    }
}

/// Where a task stands, as counted in the job header's `task_counts`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskState {
    /// Recorded, not yet published.
    Pending,
    /// Published, no report consolidated yet (queued or running).
    Running,
    /// Ended: completed.
    Completed,
    /// Ended: failed (including timed out).
    Failed,
    /// Ended: refused before it ran.
    Rejected,
    /// Ended: cancelled.
    Cancelled,
}

impl TaskState {
    /// The snake_case wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Pending => "pending",
            TaskState::Running => "running",
            TaskState::Completed => "completed",
            TaskState::Failed => "failed",
            TaskState::Rejected => "rejected",
            TaskState::Cancelled => "cancelled",
        }
    }
}

/// How many of a job's tasks are in each state (the job header keeps it, so
/// status and listings need not read every task).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TaskCounts {
    /// Recorded, not yet published.
    pub pending: u64,
    /// Published, not yet ended.
    pub running: u64,
    /// Completed.
    pub completed: u64,
    /// Failed (including timed out).
    pub failed: u64,
    /// Refused before running.
    pub rejected: u64,
    /// Cancelled.
    pub cancelled: u64,
}

impl TaskCounts {
    /// The counts of `tasks`.
    pub fn of<'a>(tasks: impl IntoIterator<Item = &'a TaskEntry>) -> Self {
        let mut counts = Self::default();
        for t in tasks {
            *counts.slot(t.state()) += 1;
        }
        counts
    }

    /// The counter of `state`.
    pub fn slot(&mut self, state: TaskState) -> &mut u64 {
        match state {
            TaskState::Pending => &mut self.pending,
            TaskState::Running => &mut self.running,
            TaskState::Completed => &mut self.completed,
            TaskState::Failed => &mut self.failed,
            TaskState::Rejected => &mut self.rejected,
            TaskState::Cancelled => &mut self.cancelled,
        }
    }

    /// Moves one task from `from` (`None`: a new task) to `to`.
    pub fn moved(&mut self, from: Option<TaskState>, to: TaskState) {
        if let Some(from) = from {
            let n = self.slot(from);
            *n = n.saturating_sub(1);
        }
        *self.slot(to) += 1;
    }

    /// Tasks that have ended, whatever the outcome.
    pub fn ended(&self) -> u64 {
        self.completed + self.failed + self.rejected + self.cancelled
    }

    /// `(state, count)` in a fixed order, for display.
    pub fn pairs(&self) -> [(TaskState, u64); 6] {
        [
            (TaskState::Pending, self.pending),
            (TaskState::Running, self.running),
            (TaskState::Completed, self.completed),
            (TaskState::Failed, self.failed),
            (TaskState::Rejected, self.rejected),
            (TaskState::Cancelled, self.cancelled),
        ]
    }
}

/// A task as the job sees it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskEntry {
    /// Schema version (each entry is its own KV value, `<job>.t.<task>`).
    #[serde(default = "super::schema_version")]
    pub v: u32,
    /// The task.
    pub task_id: TaskId,
    /// Its type.
    pub subagent_type: SubagentType,
    /// Its brief.
    pub description: String,
    /// `None` while it is in flight.
    pub status: Option<TaskStatus>,
    /// The report's summary.
    #[serde(default)]
    pub summary: String,
    /// The report's error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorInfo>,
    /// The subagent's spend.
    #[serde(default)]
    pub usage: Usage,
    /// Who ran it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_id: Option<String>,
    /// Delivery attempt of the consolidated report.
    #[serde(default)]
    pub attempt: u32,
    /// Model turns that attempt took over from earlier ones (step journal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed_from_step: Option<u32>,
    /// Subagent wall time.
    #[serde(default)]
    pub duration_ms: u64,
    /// When the planner published the task.
    #[serde(default, with = "time::serde::rfc3339::option", skip_serializing_if = "Option::is_none")]
    pub dispatched_at: Option<OffsetDateTime>,
    /// When the subagent of the consolidated report started.
    #[serde(default, with = "time::serde::rfc3339::option", skip_serializing_if = "Option::is_none")]
    pub started_at: Option<OffsetDateTime>,
    /// When that report was written.
    #[serde(default, with = "time::serde::rfc3339::option", skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<OffsetDateTime>,
    /// The planner's tool-call id that dispatched it: a resumed planner finds
    /// its task here instead of dispatching it again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    /// Whether the task message was stored in JetStream.
    #[serde(default)]
    pub published: bool,
    /// The full report in the job files, when the summary is only its head.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report_file: Option<super::FileRef>,
}

impl TaskEntry {
    /// Where the task stands.
    pub fn state(&self) -> TaskState {
        match self.status {
            None if self.published => TaskState::Running,
            None => TaskState::Pending,
            Some(TaskStatus::Completed) => TaskState::Completed,
            Some(TaskStatus::Failed) => TaskState::Failed,
            Some(TaskStatus::Rejected) => TaskState::Rejected,
            Some(TaskStatus::Cancelled) => TaskState::Cancelled,
        }
    }

    /// A task just dispatched by the planner's call `call_id`, not yet
    /// published: no status, no report, stamped now.
    pub fn dispatched(task_id: TaskId, subagent_type: SubagentType, description: String, call_id: String) -> Self {
        Self {
            v: super::SCHEMA_VERSION,
            task_id,
            subagent_type,
            description,
            status: None,
            summary: String::new(),
            error: None,
            usage: crate::Usage::default(),
            worker_id: None,
            attempt: 0,
            resumed_from_step: None,
            duration_ms: 0,
            dispatched_at: Some(crate::now()),
            started_at: None,
            finished_at: None,
            call_id: Some(call_id),
            published: false,
            report_file: None,
        }
    }
}

/// Everything known about a job. In the jobs bucket this is the job header
/// (key `<job id>`): `tasks` is empty there and each task is its own key
/// (`<job id>.t.<task id>`, docs/PROTOCOL.md). Records of the old layout
/// carry every task inline in `tasks` and no counts; they are still read.
/// A `status` reply carries one page of tasks in `tasks`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobRecord {
    /// Schema version.
    #[serde(default = "super::schema_version")]
    pub v: u32,
    /// The job.
    pub id: JobId,
    /// Its owner.
    pub tenant: Tenant,
    /// The job text as submitted.
    pub input: String,
    /// A direct job: `input` runs as one task of this type, without a
    /// planner model, and the task's report is the answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subagent_type: Option<SubagentType>,
    /// Where it stands.
    pub status: JobStatus,
    /// The planner's current todo list.
    #[serde(default)]
    pub todos: Vec<Todo>,
    /// Tasks in dispatch order: inline in records of the old layout,
    /// one page of them in a `status` reply, empty in a stored header.
    #[serde(default)]
    pub tasks: Vec<TaskEntry>,
    /// Tasks dispatched in all.
    #[serde(default)]
    pub tasks_total: u64,
    /// Tasks by state.
    #[serde(default)]
    pub task_counts: TaskCounts,
    /// The consolidated answer once completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
    /// Why it failed or was cancelled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorInfo>,
    /// The planner's own spend.
    #[serde(default)]
    pub planner_usage: Usage,
    /// Planner plus every consolidated task.
    #[serde(default)]
    pub usage: Usage,
    /// Spend of the consolidated tasks per subagent type.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub usage_by_type: BTreeMap<SubagentType, Usage>,
    /// W3C traceparent of the job's planner run, kept so a resumed job keeps its trace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// Submission time.
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    /// Last change.
    #[serde(with = "time::serde::rfc3339")]
    pub updated_at: OffsetDateTime,
}

impl JobRecord {
    /// A freshly submitted job.
    pub fn new(id: JobId, tenant: Tenant, input: String) -> Self {
        let now = super::now();
        Self {
            v: super::SCHEMA_VERSION,
            id,
            tenant,
            input,
            subagent_type: None,
            status: JobStatus::Submitted,
            todos: Vec::new(),
            tasks: Vec::new(),
            tasks_total: 0,
            task_counts: TaskCounts::default(),
            answer: None,
            error: None,
            planner_usage: Usage::default(),
            usage: Usage::default(),
            usage_by_type: BTreeMap::new(),
            traceparent: Some(crate::trace::new_traceparent()),
            created_at: now,
            updated_at: now,
        }
    }

    /// The entry of `task` among the inline tasks, if there.
    pub fn task_mut(&mut self, task: &TaskId) -> Option<&mut TaskEntry> {
        self.tasks.iter_mut().find(|t| &t.task_id == task)
    }

    /// Whether this is a record of the old layout (tasks inline, no
    /// counts); [`normalized`](Self::normalized) fills the counts in.
    pub fn is_legacy(&self) -> bool {
        self.tasks_total == 0 && !self.tasks.is_empty()
    }

    /// The record with `tasks_total` and `task_counts` derived from inline
    /// tasks when it predates them.
    pub fn normalized(mut self) -> Self {
        if self.is_legacy() {
            self.tasks_total = self.tasks.len() as u64;
            self.task_counts = TaskCounts::of(&self.tasks);
        }
        self
    }
}

impl Message for JobRecord {
    const NAME: &'static str = "job record";
}

/// The job text, stored once under `<job>.input` (the header keeps its head).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobInput {
    /// Schema version.
    #[serde(default = "super::schema_version")]
    pub v: u32,
    /// The job text as submitted.
    pub input: String,
}

/// The todo list, stored under `<job>.todos` whenever it changes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobTodos {
    /// Schema version.
    #[serde(default = "super::schema_version")]
    pub v: u32,
    /// The planner's current todo list.
    pub todos: Vec<Todo>,
}

impl Message for JobInput {
    const NAME: &'static str = "job input";
}

impl Message for JobTodos {
    const NAME: &'static str = "job todos";
}

impl Message for TaskEntry {
    const NAME: &'static str = "task entry";
}
