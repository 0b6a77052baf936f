//! Human approval of tool calls (`interrupt_on`, docs/APPROVALS.md).
//!
//! A worker about to run a gated call stores an [`ApprovalRecord`] in the
//! `<prefix>_approvals` KV bucket (state `pending`, under
//! `req.<type>.<job>.<task>.<call>`) and announces the [`ApprovalRequest`] on
//! `<prefix>.job.<tenant>.<job>.approval.<task>`. A person answers through the
//! job API (`approvals` / `approve`, see docs/APPROVALS.md); the orchestrator
//! checks the tenant and the allowed decisions and creates the one
//! [`DecisionRecord`] of that request's round under `dec.<…>.<round>`, a key
//! only the orchestrator may write (`deploy/nats/roles.conf`). The worker
//! watches that key, runs, edits or refuses the call, and marks the request
//! `used`: one decision answers one call, once. KV is the source of truth: a
//! redelivered task whose call was decided but not yet run finds the decision
//! and does not ask again.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use time::OffsetDateTime;

use super::Message;
use crate::ids::{JobId, SubagentType, TaskId, Tenant};

/// A decision a reviewer may take on one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DecisionKind {
    /// Run the call as requested.
    Approve,
    /// Do not run it; the model reads a `permission` error.
    Reject,
    /// Run it with other arguments (validated against the tool's schema).
    Edit,
    /// Elicitation: answer the server with content (validated against the
    /// requested schema).
    Accept,
    /// Elicitation: the protocol's `decline`.
    Decline,
    /// Elicitation: the protocol's `cancel`.
    Cancel,
}

impl DecisionKind {
    /// Every decision, the default of an `interrupt_on` entry.
    pub const ALL: [DecisionKind; 3] = [DecisionKind::Approve, DecisionKind::Reject, DecisionKind::Edit];

    /// The decisions of an elicitation request.
    pub const ELICITATION: [DecisionKind; 3] = [DecisionKind::Accept, DecisionKind::Decline, DecisionKind::Cancel];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            DecisionKind::Approve => "approve",
            DecisionKind::Reject => "reject",
            DecisionKind::Edit => "edit",
            DecisionKind::Accept => "accept",
            DecisionKind::Decline => "decline",
            DecisionKind::Cancel => "cancel",
        }
    }
}

impl std::fmt::Display for DecisionKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A reviewer's answer. Tagged by `"decision"`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum Decision {
    /// Run the call as requested.
    Approve,
    /// Refuse it, optionally saying why (the model reads the reason).
    Reject {
        /// Shown to the model.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// Run it with these arguments instead.
    Edit {
        /// The replacement arguments object.
        args: Value,
    },
    /// Elicitation: answer with this content (before the schema's defaults
    /// are applied by the worker).
    Accept {
        /// The content object.
        content: Value,
    },
    /// Elicitation: decline.
    Decline,
    /// Elicitation: cancel.
    Cancel,
}

impl Decision {
    /// Which kind of decision this is.
    pub fn kind(&self) -> DecisionKind {
        match self {
            Decision::Approve => DecisionKind::Approve,
            Decision::Reject { .. } => DecisionKind::Reject,
            Decision::Edit { .. } => DecisionKind::Edit,
            Decision::Accept { .. } => DecisionKind::Accept,
            Decision::Decline => DecisionKind::Decline,
            Decision::Cancel => DecisionKind::Cancel,
        }
    }
}

/// What a request asks a person.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalKind {
    /// May this tool call run (`interrupt_on`, permission rules)?
    #[default]
    ToolCall,
    /// An MCP server's `elicitation/create` during the call: what content to
    /// answer it with (docs/APPROVALS.md, "Elicitation").
    Elicitation,
}

impl ApprovalKind {
    fn is_tool_call(&self) -> bool {
        *self == ApprovalKind::ToolCall
    }
}

/// One tool call waiting for a person, as announced on
/// `<prefix>.job.<job>.approval.<task>` and kept in the approvals bucket.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ApprovalRequest {
    /// Schema version.
    #[serde(default = "super::schema_version")]
    pub v: u32,
    /// The job.
    pub job_id: JobId,
    /// The task whose subagent made the call.
    pub task_id: TaskId,
    /// Owner of the job: only this tenant may decide.
    pub tenant: Tenant,
    /// The subagent type.
    pub subagent_type: SubagentType,
    /// The worker that asked.
    pub worker_id: String,
    /// The model's tool call id (unique within a task, not within a job).
    pub call_id: String,
    /// Final tool name, as the model sees it.
    pub tool: String,
    /// The arguments the model gave (already valid against the schema).
    pub args: Value,
    /// The tool's input schema, so an edit is checked before it is accepted.
    pub input_schema: Value,
    /// What the reviewer may answer.
    pub decisions: Vec<DecisionKind>,
    /// What is asked; absent (older records) means a tool call.
    #[serde(default, skip_serializing_if = "ApprovalKind::is_tool_call")]
    pub kind: ApprovalKind,
    /// Elicitation: the MCP server that asks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// Elicitation: the server's message to the person.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Elicitation: the JSON Schema the content must fit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_schema: Option<Value>,
    /// When the worker first asked.
    #[serde(with = "time::serde::rfc3339")]
    pub requested_at: OffsetDateTime,
    /// After this the call is rejected unanswered.
    #[serde(with = "time::serde::rfc3339")]
    pub expires_at: OffsetDateTime,
}

/// Where a request stands.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum ApprovalState {
    /// Waiting for a person.
    Pending,
    /// Answered.
    Decided {
        /// The answer.
        #[serde(flatten)]
        decision: Decision,
        /// Who answered, as they named themselves (`--by`, else `$USER`); the
        /// tenant check is what authorizes, this is for the audit trail.
        by: Option<String>,
        /// Who answered as the orchestrator authenticated them
        /// ([`DecisionRecord::principal`]); absent in older records.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        principal: Option<String>,
        /// When.
        #[serde(with = "time::serde::rfc3339")]
        decided_at: OffsetDateTime,
    },
    /// Nobody answered in time: the call was rejected.
    Expired {
        /// When the worker gave up.
        #[serde(with = "time::serde::rfc3339")]
        at: OffsetDateTime,
    },
    /// Its job was cancelled while the call waited: nobody may decide it any
    /// more, and the call did not run (docs/APPROVALS.md).
    Cancelled {
        /// The job's cancel reason.
        reason: String,
        /// When the orchestrator cancelled it.
        #[serde(with = "time::serde::rfc3339")]
        at: OffsetDateTime,
    },
    /// The decision was applied to the call. The same call asked again (same
    /// call id, e.g. a model repeating it) is a new round, never a free ride.
    Used {
        /// The decision that was applied.
        #[serde(flatten)]
        decision: Decision,
        /// Who had answered.
        by: Option<String>,
        /// When the worker applied it.
        #[serde(with = "time::serde::rfc3339")]
        at: OffsetDateTime,
    },
}

/// The one answer to one round of an approval request, stored by the
/// orchestrator under `dec.<type>.<job>.<task>.<call>.<round>` with
/// create-if-absent, so a round has at most one decision.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DecisionRecord {
    /// Schema version.
    #[serde(default = "super::schema_version")]
    pub v: u32,
    /// The request round this answers ([`ApprovalRecord::round`]).
    pub round: u32,
    /// The answer.
    #[serde(flatten)]
    pub decision: Decision,
    /// Who answered, as they named themselves.
    pub by: Option<String>,
    /// Who answered as authenticated, set by the orchestrator and never
    /// taken from the request: `tenant <t> via <credential>`, the tenant
    /// being the one whose job API subject carried the request (NATS
    /// permissions confine a client to its tenant's), the credential the one
    /// a front-end checked ([`ApproveRequest::authenticated_as`]) or `job
    /// API` for a direct client. Absent in records of older orchestrators.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
    /// When.
    #[serde(with = "time::serde::rfc3339")]
    pub decided_at: OffsetDateTime,
}

/// The value stored under `<job>.<task>.<call>` in the approvals bucket.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ApprovalRecord {
    /// Schema version.
    #[serde(default = "super::schema_version")]
    pub v: u32,
    /// What was asked.
    pub request: ApprovalRequest,
    /// Where it stands.
    pub state: ApprovalState,
    /// Which asking of this call this is (from 1): each round has its own
    /// decision key, so an answer never carries over to a later round.
    #[serde(default)]
    pub round: u32,
}

impl ApprovalRecord {
    /// Pending and not past its deadline at `now`.
    pub fn is_open(&self, now: OffsetDateTime) -> bool {
        matches!(self.state, ApprovalState::Pending) && now < self.request.expires_at
    }
}

/// `<prefix>.api.<tenant>.approvals`: the tenant's open requests, oldest first.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalsRequest {
    /// Schema version.
    #[serde(default = "super::schema_version")]
    pub v: u32,
    /// Only this job's requests.
    #[serde(default)]
    pub job_id: Option<JobId>,
}

/// Reply to `approvals`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ApprovalsReply {
    /// Open requests (pending, not expired), oldest first.
    pub approvals: Vec<ApprovalRequest>,
}

/// `<prefix>.api.<tenant>.approve`: answer one request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApproveRequest {
    /// Schema version.
    #[serde(default = "super::schema_version")]
    pub v: u32,
    /// The job.
    pub job_id: JobId,
    /// The model's call id.
    pub call_id: String,
    /// The task, needed only when the call id is pending in several tasks of
    /// the job (scripted models reuse call ids across tasks).
    #[serde(default)]
    pub task_id: Option<TaskId>,
    /// The answer.
    pub decision: Decision,
    /// Who answers (audit only).
    #[serde(default)]
    pub by: Option<String>,
    /// The credential a front-end (the dashboard and its HTTP API) checked
    /// before sending this, e.g. `dashboard token of tenant acme`: set by
    /// that server from the credential, never from its caller's input. The
    /// orchestrator records it within [`DecisionRecord::principal`], under
    /// the tenant it authenticated itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authenticated_as: Option<String>,
}

/// Reply to `approve`: the record as stored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ApproveReply {
    /// The decided record.
    pub record: ApprovalRecord,
}

impl Message for ApprovalRequest {
    const NAME: &'static str = "approval request";
}
impl Message for ApprovalRecord {
    const NAME: &'static str = "approval record";
}
impl Message for DecisionRecord {
    const NAME: &'static str = "decision record";
}
impl Message for ApprovalsRequest {
    const NAME: &'static str = "approvals request";
}
impl Message for ApproveRequest {
    const NAME: &'static str = "approve request";
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn decisions_have_the_documented_wire_form() {
        let d: Decision = serde_json::from_value(json!({"decision": "reject", "reason": "no"})).unwrap();
        assert_eq!(d, Decision::Reject { reason: Some("no".into()) });
        let d: Decision = serde_json::from_value(json!({"decision": "edit", "args": {"x": 1}})).unwrap();
        assert_eq!(d.kind(), DecisionKind::Edit);
        assert_eq!(serde_json::to_value(Decision::Approve).unwrap(), json!({"decision": "approve"}));
        let d: Decision = serde_json::from_value(json!({"decision": "accept", "content": {"ok": true}})).unwrap();
        assert_eq!(d, Decision::Accept { content: json!({"ok": true}) });
        assert_eq!(serde_json::to_value(Decision::Cancel).unwrap(), json!({"decision": "cancel"}));
        let err = serde_json::from_value::<Decision>(json!({"decision": "maybe"})).unwrap_err();
        // A record of an older orchestrator, without a principal, still reads.
        let old = json!({"v": 1, "round": 1, "decision": "approve", "by": "ana", "decided_at": "2026-12-01T00:00:00Z"});
        let old: DecisionRecord = serde_json::from_value(old).unwrap();
        assert_eq!(old.principal, None);
        assert!(err.to_string().contains("unknown variant"), "{err}");
        let state =
            ApprovalState::Decided { decision: Decision::Approve, by: None, principal: None, decided_at: crate::now() };
        let v = serde_json::to_value(&state).unwrap();
        assert_eq!(v["state"], "decided");
        assert_eq!(v["decision"], "approve");
        assert_eq!(serde_json::from_value::<ApprovalState>(v).unwrap(), state);
    }
}
