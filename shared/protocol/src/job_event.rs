//! Job-level events on `<prefix>.job.<job>.event`, written by the planner.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use super::{ErrorInfo, ErrorKind, Message, TaskStatus, Todo, Usage};
use crate::ids::{JobId, SubagentType, TaskId};

/// One thing that happened to a job.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobEvent {
    /// Schema version.
    #[serde(default = "super::schema_version")]
    pub v: u32,
    /// The job.
    pub job_id: JobId,
    /// When it happened.
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
    /// What happened.
    #[serde(flatten)]
    pub kind: JobEventKind,
}

/// What a job event reports. Tagged by `"event"`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum JobEventKind {
    /// The job was accepted.
    Submitted {
        /// The job text.
        input: String,
    },
    /// The planner started (or resumed) working on it.
    Running,
    /// The planner made a model call.
    PlannerStep {
        /// Planner step, from 1.
        step: u32,
        /// Tokens of this call.
        usage: Usage,
        /// Round-trip latency.
        latency_ms: u64,
    },
    /// A planner model call failed (after the client's own retries); the
    /// job fails with the error. Tells when, after how long and at what cost.
    PlannerStepFailed {
        /// The planner step that was asked, from 1.
        step: u32,
        /// What failed: `transient`, `timeout`, `validation`, `permission`, ...
        error_kind: ErrorKind,
        /// Time from sending the request to the failure.
        latency_ms: u64,
        /// Tokens the failed call reported; zero (and omitted) when it
        /// reported none, which is the usual case.
        #[serde(default, skip_serializing_if = "is_zero_usage")]
        usage: Usage,
    },
    /// The planner's conversation outgrew `[planner] context_tokens` and its
    /// older turns were replaced by a model-written summary
    /// (docs/CONFIG.md, "Bounded context").
    Compacted {
        /// Tokens of the request before (o200k_base, the whole request).
        before_tokens: u64,
        /// Tokens of the request after.
        after_tokens: u64,
        /// Tokens of the compaction call itself.
        #[serde(default)]
        usage: Usage,
    },
    /// `write_todos` replaced the plan.
    TodosChanged {
        /// The whole new list.
        todos: Vec<Todo>,
    },
    /// A task message was published.
    TaskDispatched {
        /// The task.
        task_id: TaskId,
        /// Its type.
        subagent_type: SubagentType,
        /// Its brief.
        description: String,
    },
    /// A task's report was consolidated into the job.
    TaskReported {
        /// The task.
        task_id: TaskId,
        /// How it ended.
        status: TaskStatus,
        /// First part of the summary.
        summary: String,
    },
    /// The job has its answer.
    Completed {
        /// The consolidated answer.
        answer: String,
        /// Total spend of planner and subagents.
        usage: Usage,
    },
    /// The job failed.
    Failed {
        /// Why.
        error: ErrorInfo,
    },
    /// The job was cancelled.
    Cancelled {
        /// Why (who asked).
        reason: String,
    },
}

impl JobEventKind {
    /// Whether this event ends the job.
    pub fn is_terminal(&self) -> bool {
        matches!(self, JobEventKind::Completed { .. } | JobEventKind::Failed { .. } | JobEventKind::Cancelled { .. })
    }
}

fn is_zero_usage(u: &Usage) -> bool {
    *u == Usage::default()
}

impl Message for JobEvent {
    const NAME: &'static str = "job event";
}
