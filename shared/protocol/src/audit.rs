//! Audit records (caller, argument digest, outcome, trace id): one per tool call and per approval decision, by the planner and
//! every worker, on `<prefix>.audit.<tenant>.<job>` in the `<PREFIX>_AUDIT`
//! stream (limits retention, `[nats] audit_retention_days`).
//!
//! A record never holds the arguments or the result, only the SHA-256 of the
//! arguments' canonical JSON: the audit trail proves *what* was called with
//! *which* input without becoming a second copy of the data.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use super::{ErrorKind, Message};
use crate::ids::{JobId, TaskId, Tenant};

/// What was audited.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AuditAction {
    /// A tool call ran (or was refused before running).
    ToolCall,
    /// A person decided on a gated tool call.
    Approval,
}

/// How it ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AuditOutcome {
    /// The call returned a value.
    Ok,
    /// The call returned an error (see `error_kind`).
    Error,
    /// Approval: run as requested.
    Approved,
    /// Approval: run with edited arguments (`args_sha256` is of the edited ones).
    Edited,
    /// Approval: refused.
    Rejected,
}

impl AuditOutcome {
    /// The snake_case wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            AuditOutcome::Ok => "ok",
            AuditOutcome::Error => "error",
            AuditOutcome::Approved => "approved",
            AuditOutcome::Edited => "edited",
            AuditOutcome::Rejected => "rejected",
        }
    }
}

/// One audit record.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AuditRecord {
    /// Schema version.
    #[serde(default = "super::schema_version")]
    pub v: u32,
    /// When the call ended (or the decision was applied).
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
    /// Tool call or approval.
    pub action: AuditAction,
    /// Owner of the job.
    pub tenant: Tenant,
    /// The job.
    pub job_id: JobId,
    /// The task; `None` for the planner's own calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<TaskId>,
    /// The agent that called: `planner` or the subagent type.
    pub agent: String,
    /// The process: worker id, or the orchestrator's name.
    pub worker: String,
    /// The tool name as the model called it.
    pub tool: String,
    /// The model's call id (unique within the conversation).
    pub call_id: String,
    /// Hex SHA-256 of the arguments' JSON (keys sorted, as serde_json writes them).
    pub args_sha256: String,
    /// How it ended.
    pub outcome: AuditOutcome,
    /// The error class, when `outcome` is `error`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_kind: Option<ErrorKind>,
    /// Approval records: the decision taken, `approve`, `reject`, `edit`,
    /// `expired` (nobody answered in time) or `cancelled` (with its job);
    /// docs/APPROVALS.md.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<String>,
    /// Approval records: who decided, as they named themselves (`flotilla
    /// approve --by`, default `$USER`); absent when nobody did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// Wall time of the call (or of the wait for a decision) in milliseconds.
    pub duration_ms: u64,
    /// W3C trace id of the run, to find the logs of the call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
}

impl Message for AuditRecord {
    const NAME: &'static str = "audit record";
}
