//! Progress events of a running task, on `<prefix>.job.<job>.progress.<task>`.
//! They are observations, not commands: losing one never changes a result.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use super::{DecisionKind, ErrorKind, Message, TaskStatus, Usage};
use crate::ids::{JobId, SubagentType, TaskId};

/// One observation of a task's run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProgressEvent {
    /// Schema version.
    #[serde(default = "super::schema_version")]
    pub v: u32,
    /// The job.
    pub job_id: JobId,
    /// The task.
    pub task_id: TaskId,
    /// Its subagent type.
    pub subagent_type: SubagentType,
    /// The worker running it.
    pub worker_id: String,
    /// Delivery attempt, from 1.
    pub attempt: u32,
    /// When it happened.
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
    /// What happened.
    #[serde(flatten)]
    pub kind: ProgressKind,
}

/// What a progress event reports. Tagged by `"event"`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum ProgressKind {
    /// A worker took the task.
    Started,
    /// An attempt after the first continues where an earlier one stopped,
    /// from its step journal (docs/RELIABILITY.md): right after `started`.
    Resumed {
        /// Model turns already completed, none of which is asked again;
        /// the next `model_call` is step `from_step + 1`.
        from_step: u32,
        /// Why the earlier attempt stopped: `worker_lost` (it went silent
        /// past `ack_wait`), `drained` (its worker stopped and the grace ran
        /// out), `transient_error` (handed back to retry).
        reason: String,
        /// Tool calls that had started with no recorded result: they run
        /// again, with the same idempotency key.
        #[serde(default, skip_serializing_if = "is_zero_u32")]
        interrupted_calls: u32,
    },
    /// A model round trip finished.
    ModelCall {
        /// Agent step, from 1.
        step: u32,
        /// Tokens of this call.
        usage: Usage,
        /// Round-trip latency.
        latency_ms: u64,
    },
    /// A model round trip failed (HTTP error, timeout, malformed or refused
    /// reply, after the client's own retries): without it a failed call
    /// would leave no trace of when it happened, how long it took or what
    /// it cost. The run ends with the error; an attempt that follows (a
    /// transient error hands the task back) asks the same step again.
    ModelFailed {
        /// The agent step that was asked, from 1 (the `model_call` it
        /// would have been).
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
    /// Text a streaming model (`[models.<name>] stream = true`) wrote since
    /// the last such event: at most 4 a second per task, each text at most
    /// 2 000 characters (docs/PROTOCOL.md, docs/MODELS.md).
    ModelDelta {
        /// The agent step being written, from 1 (its `model_call` follows).
        step: u32,
        /// The text, in order after the previous event's.
        text: String,
        /// Characters written in this interval past the cap, not sent.
        #[serde(default, skip_serializing_if = "is_zero")]
        skipped_chars: u64,
    },
    /// A tool call is about to run.
    ToolCall {
        /// The model's call id.
        call_id: String,
        /// Tool name.
        tool: String,
        /// sha256 of the canonical JSON arguments (arguments themselves may be secret).
        args_sha256: String,
    },
    /// A tool call ended.
    ToolResult {
        /// The model's call id.
        call_id: String,
        /// Tool name.
        tool: String,
        /// `None` on success.
        error_kind: Option<ErrorKind>,
        /// Size of the result as given to the model, in bytes.
        size: usize,
        /// How long the call took.
        duration_ms: u64,
    },
    /// A tool call waits for a person (see docs/APPROVALS.md).
    ApprovalRequested {
        /// The model's call id.
        call_id: String,
        /// Tool name.
        tool: String,
        /// sha256 of the arguments' JSON text.
        args_sha256: String,
        /// What the reviewer may answer.
        decisions: Vec<DecisionKind>,
        /// When the call is rejected unanswered.
        #[serde(with = "time::serde::rfc3339")]
        expires_at: OffsetDateTime,
    },
    /// A person answered, or nobody did in time.
    ApprovalResolved {
        /// The model's call id.
        call_id: String,
        /// Tool name.
        tool: String,
        /// `approve`, `reject`, `edit`, or `expired`.
        outcome: String,
        /// Who answered, as recorded.
        by: Option<String>,
    },
    /// A sandboxed command ran (the audit record of `execute`, docs/SANDBOX.md).
    Executed {
        /// The model's call id.
        call_id: String,
        /// sha256 of the command text (the command itself may hold secrets).
        command_sha256: String,
        /// Exit status, when the command exited.
        exit_code: Option<i32>,
        /// Signal that ended it, when one did (e.g. 9 after a timeout).
        signal: Option<i32>,
        /// Killed at its wall-time limit.
        timed_out: bool,
        /// Output was cut at the configured cap.
        truncated: bool,
        /// Wall time.
        duration_ms: u64,
    },
    /// Still alive (emitted with each in-progress ack).
    Heartbeat,
    /// The task ended; the report follows on the report subject.
    Finished {
        /// How it ended.
        status: TaskStatus,
        /// Total spend.
        usage: Usage,
    },
}

fn is_zero(x: &u64) -> bool {
    *x == 0
}

fn is_zero_u32(x: &u32) -> bool {
    *x == 0
}

fn is_zero_usage(u: &Usage) -> bool {
    *u == Usage::default()
}

impl Message for ProgressEvent {
    const NAME: &'static str = "progress event";
}
