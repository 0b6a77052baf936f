//! Flotilla's wire contract, with no I/O: typed ids ([`ids`]), every subject,
//! stream and bucket name ([`subjects`]), W3C trace context ([`trace`]), the
//! one SHA-256 hex the contract's checksums and hashed keys use ([`digest`]),
//! and every message that crosses the bus, as versioned serde types.
//! Every other Flotilla crate depends on this one; it depends on nothing of
//! Flotilla's (docs/ARCHITECTURE.md).
//!
//! Messages are JSON objects carrying `"v": 1` (the schema version), except
//! progress events and task reports, at version 2 ([`ProgressEvent::decode`],
//! [`TaskReport::decode`]), whose bodies leave out the ids of their subject;
//! [`decode`]
//! checks the version before the shape so a peer on another version gets a
//! precise error instead of a confusing missing-field one.
//!
//! Versions evolve without a flag day: `v` is `major` or `major.minor`. A
//! reader accepts every minor version of its major (a newer writer only adds
//! optional fields) and refuses another major. What peers report (task
//! reports, usage, errors, audit records, file references, events) is read
//! ignoring fields this build does not know, so a worker one release newer
//! than its planner is still heard. Inbound commands (tasks, API requests)
//! reject unknown fields: a typo in a hand-written request is an error, and a
//! task claiming a field such as `tools` is refused, not silently ignored.

#![deny(missing_docs)]

pub mod digest;
pub mod files_api;
pub mod ids;
pub mod path;
pub mod subjects;
pub mod trace;

mod api;
mod approval;
mod audit;
mod error;
mod file_ref;
mod heartbeat;
mod job;
mod job_event;
mod op;
mod progress;
mod queues;
mod report;
mod resolve;
mod task;
mod task_message;
mod todo;
mod usage;

pub use api::*;
pub use approval::{
    ApprovalKind, ApprovalRecord, ApprovalRequest, ApprovalState, ApprovalsReply, ApprovalsRequest, ApproveReply,
    ApproveRequest, Decision, DecisionKind, DecisionRecord,
};
pub use audit::{AuditAction, AuditOutcome, AuditRecord};
pub use error::{ErrorInfo, ErrorKind};
pub use file_ref::{FileRef, line_count};
pub use heartbeat::{McpServerHealth, TypeLoad, WorkerHeartbeat, WorkerState};
pub use job::{JobInput, JobRecord, JobStatus, JobTodos, TaskCounts, TaskEntry, TaskState};
pub use job_event::{JobEvent, JobEventKind};
pub use op::{OPERATIONS, Op};
pub use progress::{PROGRESS_VERSION, ProgressEvent, ProgressKind};
pub use queues::QueueStats;
pub use report::{REPORT_VERSION, TaskReport, TaskStatus};
pub use resolve::{
    MAX_RESOLVE_CANDIDATES, MIN_JOB_PREFIX, ResolveReply, ResolveRequest, check_job_prefix, matches_short_id,
};
pub use task::TaskMessage;
pub use task_message::{FollowUp, MAX_FOLLOW_UP_BYTES, check_text as check_follow_up_text};
pub use todo::{Todo, TodoStatus};
pub use usage::Usage;

use serde::{Deserialize, Serialize, de::DeserializeOwned};
use time::OffsetDateTime;

/// The schema version this build speaks.
pub const SCHEMA_VERSION: u32 = 1;

/// Largest message Flotilla publishes or accepts (NATS default max payload).
pub const MAX_MESSAGE_BYTES: usize = 1024 * 1024;

/// The current time, as stamped on messages.
pub fn now() -> OffsetDateTime {
    OffsetDateTime::now_utc()
}

/// Why bytes from the bus were not accepted as a message.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// Larger than [`MAX_MESSAGE_BYTES`].
    #[error("message of {size} bytes exceeds the {max} byte limit")]
    TooLarge {
        /// Payload size.
        size: usize,
        /// The limit.
        max: usize,
    },
    /// Not JSON, or not an object with a version.
    #[error("malformed message: {0}")]
    Malformed(String),
    /// A major version this build does not speak.
    #[error(
        "unsupported schema version {found} (this build speaks version {} of this message and its minor versions)",
        versions(speaks)
    )]
    Version {
        /// The version in the message, as written.
        found: String,
        /// The majors this build reads for the message.
        speaks: Vec<u32>,
    },
    /// Right version, wrong shape (missing or unknown field, wrong type).
    #[error("invalid {what}: {detail}")]
    Shape {
        /// The message type expected.
        what: &'static str,
        /// serde's explanation, with the line and column.
        detail: String,
    },
}

fn versions(majors: &[u32]) -> String {
    majors.iter().map(u32::to_string).collect::<Vec<_>>().join(" or ")
}

#[derive(Deserialize)]
struct VersionProbe {
    v: Option<serde_json::Number>,
}

/// Whether `v` is `major` or one of its minor versions (`1.1`).
fn is_version_of(v: &serde_json::Number, major: u32) -> bool {
    if let Some(n) = v.as_u64() {
        return n == u64::from(major);
    }
    v.as_f64().is_some_and(|f| f.is_finite() && f >= 0.0 && f.trunc() == f64::from(major))
}

/// Checks size, JSON syntax and the version field of a message whose type
/// speaks the majors `known`; true when `v` is a bare major (`1`), not a
/// minor version of one (`1.1`).
fn check_version(bytes: &[u8], known: &[u32]) -> Result<bool, DecodeError> {
    if bytes.len() > MAX_MESSAGE_BYTES {
        return Err(DecodeError::TooLarge { size: bytes.len(), max: MAX_MESSAGE_BYTES });
    }
    // serde would also accept a struct written as a JSON array: refuse it.
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(DecodeError::Malformed("expected a JSON object".into()));
    }
    let probe: VersionProbe =
        serde_json::from_slice(bytes).map_err(|e| DecodeError::Malformed(format!("expected a JSON object: {e}")))?;
    let Some(v) = probe.v else {
        return Err(DecodeError::Malformed("missing schema version field \"v\"".into()));
    };
    if !known.iter().any(|major| is_version_of(&v, *major)) {
        return Err(DecodeError::Version { found: v.to_string(), speaks: known.to_vec() });
    }
    Ok(v.as_u64().is_some())
}

/// A message type with a name for error messages.
pub trait Message: Serialize + DeserializeOwned {
    /// Human name of the message type, e.g. `"task message"`.
    const NAME: &'static str;
}

/// Decodes a message, checking size, JSON syntax, version and shape in that order.
pub fn decode<T: Message>(bytes: &[u8]) -> Result<T, DecodeError> {
    let exact = check_version(bytes, &[SCHEMA_VERSION])?;
    let shape = |e: serde_json::Error| DecodeError::Shape { what: T::NAME, detail: e.to_string() };
    if exact {
        return serde_json::from_slice(bytes).map_err(shape);
    }
    // A minor version of this major: read with `v` set to the major.
    let mut value: serde_json::Value = serde_json::from_slice(bytes).map_err(shape)?;
    value["v"] = SCHEMA_VERSION.into();
    serde_json::from_value(value).map_err(shape)
}

/// Encodes a message as JSON bytes.
pub fn encode<T: Message>(msg: &T) -> Vec<u8> {
    // Serializing our own plain data types cannot fail.
    serde_json::to_vec(msg).expect("protocol types serialize infallibly")
}

/// Serde helper: an `attempt` left out of a bus body is the first.
fn first_attempt() -> u32 {
    1
}

/// Serde helper: bus bodies leave out `attempt` when it is the first.
fn is_first_attempt(attempt: &u32) -> bool {
    *attempt == 1
}

/// Serde helper for the `v` field: always written as [`SCHEMA_VERSION`].
pub fn schema_version() -> u32 {
    SCHEMA_VERSION
}

#[cfg(test)]
mod tests;
