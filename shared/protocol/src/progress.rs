//! Progress events of a running task, on
//! `<prefix>.job.<tenant>.<job>.progress.<task>`. They are observations, not
//! commands: losing one never changes a result.
//!
//! On the bus a progress event is version 2 ([`PROGRESS_VERSION`]): its body
//! leaves out the job and task ids, which are tokens of the subject it is
//! published on ([`ProgressEvent::encode`], [`ProgressEvent::decode`]). A
//! task sends half a dozen of them, and the ids were a sixth of every body;
//! the subject is also what NATS authorized, so a reader takes the ids from
//! there. `attempt` is left out when it is 1. Version 1 bodies (with the
//! ids) are still read, and refused when their ids are not those of their
//! subject. Everywhere else (the CLI's `--json`, the HTTP API) an event is
//! written whole, ids and attempt included.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use super::{DecisionKind, DecodeError, ErrorKind, TaskStatus, Usage};
use crate::ids::{JobId, SubagentType, TaskId};

/// Schema version of progress events: 2 since their bus body stopped
/// repeating the ids of its subject (docs/PROTOCOL.md, "ProgressEvent").
pub const PROGRESS_VERSION: u32 = 2;

/// One observation of a task's run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProgressEvent {
    /// Schema version ([`PROGRESS_VERSION`]).
    #[serde(default = "progress_version")]
    pub v: u32,
    /// The job (on the bus: the subject's `<job>` token).
    pub job_id: JobId,
    /// The task (on the bus: the subject's `<task>` token).
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
        /// `None` (and omitted) on success.
        #[serde(default, skip_serializing_if = "Option::is_none")]
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

fn progress_version() -> u32 {
    PROGRESS_VERSION
}

/// The bus body of a progress event, as written: no ids.
#[derive(Serialize)]
struct BodyOut<'a> {
    v: u32,
    subagent_type: &'a SubagentType,
    worker_id: &'a str,
    #[serde(skip_serializing_if = "super::is_first_attempt")]
    attempt: u32,
    #[serde(with = "time::serde::rfc3339")]
    at: OffsetDateTime,
    #[serde(flatten)]
    kind: &'a ProgressKind,
}

/// The bus body of a progress event, as read: version 1 carries the ids,
/// which must then be the subject's.
#[derive(Deserialize)]
struct BodyIn {
    #[serde(default)]
    job_id: Option<JobId>,
    #[serde(default)]
    task_id: Option<TaskId>,
    subagent_type: SubagentType,
    worker_id: String,
    #[serde(default = "super::first_attempt")]
    attempt: u32,
    #[serde(with = "time::serde::rfc3339")]
    at: OffsetDateTime,
    #[serde(flatten)]
    kind: ProgressKind,
}

const NAME: &str = "progress event";

impl ProgressEvent {
    /// The body to publish on the event's progress subject
    /// ([`Subjects::progress`](crate::subjects::Subjects::progress)).
    pub fn encode(&self) -> Vec<u8> {
        let body = BodyOut {
            v: PROGRESS_VERSION,
            subagent_type: &self.subagent_type,
            worker_id: &self.worker_id,
            attempt: self.attempt,
            at: self.at,
            kind: &self.kind,
        };
        // Serializing our own plain data types cannot fail.
        serde_json::to_vec(&body).expect("protocol types serialize infallibly")
    }

    /// Reads a body received on the progress subject of `job_id` and
    /// `task_id`: version 2, or version 1 whose ids are the subject's.
    pub fn decode(bytes: &[u8], job_id: JobId, task_id: TaskId) -> Result<Self, DecodeError> {
        super::check_version(bytes, &[1, PROGRESS_VERSION])?;
        let shape = |detail: String| DecodeError::Shape { what: NAME, detail };
        let body: BodyIn = serde_json::from_slice(bytes).map_err(|e| shape(e.to_string()))?;
        if body.job_id.is_some_and(|j| j != job_id) || body.task_id.is_some_and(|t| t != task_id) {
            return Err(shape(format!("the body names another task than its subject's ({job_id} {task_id})")));
        }
        Ok(ProgressEvent {
            v: PROGRESS_VERSION,
            job_id,
            task_id,
            subagent_type: body.subagent_type,
            worker_id: body.worker_id,
            attempt: body.attempt,
            at: body.at,
            kind: body.kind,
        })
    }
}
