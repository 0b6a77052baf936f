//! Tools (docs/TOOLS.md): name, description and input schema for the model;
//! an execution policy (validation before the call, approval, timeout,
//! eviction, audit) enforced by [`ToolSet`] through the layers of
//! tool/pipeline/mod.rs; a small JSON output; and an error contract whose
//! [`ErrorKind`] tells the model what to do next.
//!
//! A tool never sees arguments that failed its schema, and the model never sees
//! a panic, stack trace or host path: a defect becomes a `bug` error that
//! carries only the trace id (the detail goes to the log).
//!
//! Which reviewer decisions a gated call accepts is decided once, for the
//! orchestrator and the worker's gate alike, in `decisions.rs`.

mod decisions;
mod evict;
mod pipeline;
mod set;

pub use decisions::{DecisionError, check_content, check_decision};
pub use evict::{Eviction, LARGE_RESULTS_DIR};
pub use pipeline::schema_problems;
pub use set::{ToolOutcome, ToolSet, ToolSetError};

use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

pub use flotilla_protocol::ErrorKind;
use flotilla_protocol::ids::{JobId, TaskId, Tenant};

/// What the model is told about a tool.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// Unique name within an agent's tool set.
    pub name: String,
    /// What it does and when to use it.
    pub description: String,
    /// JSON Schema of the arguments object.
    pub input_schema: Value,
}

/// A failed tool call, as the model will read it.
#[derive(Clone, Debug, PartialEq, thiserror::Error, Serialize, Deserialize)]
#[error("{kind} error: {message}")]
pub struct ToolError {
    /// The error class.
    pub kind: ErrorKind,
    /// Actionable, sanitized text.
    pub message: String,
}

impl ToolError {
    /// An error of `kind`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self { kind, message: message.into() }
    }
    /// Invalid arguments.
    pub fn validation(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Validation, message)
    }
    /// An expected business-rule refusal.
    pub fn business(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Business, message)
    }
    /// A temporary failure worth retrying.
    pub fn transient(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Transient, message)
    }
}

/// Who is calling, passed to every tool call.
#[derive(Clone)]
pub struct ToolContext {
    /// The job.
    pub job_id: JobId,
    /// The task, or `None` for the planner.
    pub task_id: Option<TaskId>,
    /// Owner of the job.
    pub tenant: Tenant,
    /// The model's call id.
    pub call_id: String,
    /// Stable across redeliveries of the same call: `<task or job>:<call id>`.
    /// A tool with side effects (send, charge, publish) uses it to do the
    /// effect once when the model or the runtime retries (docs/TOOLS.md,
    /// "Idempotency keys").
    pub idempotency_key: String,
    /// W3C traceparent of the run.
    pub traceparent: Option<String>,
    /// Fires when the task or job is cancelled.
    pub cancel: CancellationToken,
    /// Human approval, where the agent's config asks for it.
    pub approvals: Option<Arc<dyn ApprovalGate>>,
}

impl ToolContext {
    /// The call's key within its job or task, `<step>:<call id>` (the
    /// idempotency key without its owner): unique per call even when a model
    /// reuses a call id in a later turn. Delegating tools dispatch under it.
    pub fn call_key(&self) -> &str {
        self.idempotency_key.split_once(':').map_or(self.idempotency_key.as_str(), |(_, key)| key)
    }

    /// Where this call happens, as its audit records name it.
    pub fn call_site(&self) -> crate::audit::CallSite<'_> {
        crate::audit::CallSite {
            tenant: &self.tenant,
            job_id: self.job_id,
            task_id: self.task_id,
            call_id: &self.call_id,
            traceparent: self.traceparent.as_deref(),
        }
    }
}

impl std::fmt::Debug for ToolContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolContext")
            .field("job_id", &self.job_id)
            .field("task_id", &self.task_id)
            .field("tenant", &self.tenant)
            .field("call_id", &self.call_id)
            .field("approvals", &self.approvals.is_some())
            .finish_non_exhaustive()
    }
}

/// A gate's answer on one call, with the decision and the reviewer when the
/// gate knows them (docs/APPROVALS.md, "Audit").
#[derive(Debug)]
pub struct ApprovalVerdict {
    /// The arguments to run with, or the error the model reads.
    pub result: Result<Value, ToolError>,
    /// `approve`, `reject`, `edit`, `expired` or `cancelled`.
    pub decision: Option<String>,
    /// Who decided, as they named themselves.
    pub by: Option<String>,
}

/// A question an MCP server asks a person in the middle of a tool call
/// (`elicitation/create`, docs/APPROVALS.md, "Elicitation").
#[derive(Clone, Debug)]
pub struct ElicitationAsk {
    /// The server's name in the config.
    pub server: String,
    /// What the server says it needs.
    pub message: String,
    /// The JSON Schema the content must fit.
    pub requested_schema: Value,
}

/// A person's answer to an [`ElicitationAsk`], with the decision as
/// recorded (`accept`, `decline`, `cancel`, `expired`, `cancelled`) and the
/// reviewer when the gate knows them.
#[derive(Clone, Debug, PartialEq)]
pub struct ElicitationVerdict {
    /// What goes back to the server.
    pub answer: ElicitationAnswer,
    /// The decision as recorded.
    pub decision: String,
    /// Who decided, as they named themselves.
    pub by: Option<String>,
}

/// What goes back to the server: the protocol's three actions.
#[derive(Clone, Debug, PartialEq)]
pub enum ElicitationAnswer {
    /// The content (valid against the requested schema).
    Accept(Value),
    /// The person said no (or nobody answered in time).
    Decline,
    /// The question was dismissed (its job or task was cancelled).
    Cancel,
}

impl ElicitationVerdict {
    /// A decline nobody decided (no gate, no store).
    pub fn declined(decision: &str) -> Self {
        Self { answer: ElicitationAnswer::Decline, decision: decision.into(), by: None }
    }
}

/// Asks a person before a tool call runs (human in the loop,
/// docs/APPROVALS.md). Implemented over the bus by the worker; enforced in
/// code, never by prompt text.
#[async_trait]
pub trait ApprovalGate: Send + Sync {
    /// Blocks until a decision: the arguments to run with (possibly edited by
    /// the approver), or the rejection the model will read.
    async fn approve(&self, ctx: &ToolContext, tool: &str, args: &Value) -> Result<Value, ToolError>;

    /// [`approve`](Self::approve) plus who decided and how, for the audit
    /// record (shared/agent/src/audit.rs). A gate that knows (the worker's
    /// bus gate) overrides it; the default knows only the result.
    async fn review(&self, ctx: &ToolContext, tool: &str, args: &Value) -> ApprovalVerdict {
        ApprovalVerdict { result: self.approve(ctx, tool, args).await, decision: None, by: None }
    }

    /// Asks a person to answer `ask`, which the server behind `tool` sent
    /// during the call `ctx` with `args`. Default: declined, for gates that
    /// cannot ask (docs/APPROVALS.md, "Elicitation").
    async fn elicit(&self, ctx: &ToolContext, tool: &str, _args: &Value, ask: &ElicitationAsk) -> ElicitationVerdict {
        tracing::warn!(tool, call_id = %ctx.call_id, server = %ask.server, "this approval gate cannot ask a person; elicitation declined");
        ElicitationVerdict::declined("decline")
    }
}

/// A tool an agent can call.
#[async_trait]
pub trait Tool: Send + Sync {
    /// Name, description and input schema.
    fn spec(&self) -> ToolSpec;
    /// Runs the call. `args` already matches the input schema.
    async fn call(&self, ctx: &ToolContext, args: Value) -> Result<Value, ToolError>;

    /// Whether an identical call may return something new with nothing else
    /// called in between (polling what runs elsewhere), so that calling it
    /// again is no loop (shared/agent/src/agent/tool_policy.rs). Default: no.
    fn repeatable(&self) -> bool {
        false
    }

    /// Whether a call changes nothing outside its own result (a
    /// computation, a read): running it again, with any arguments, has no
    /// effect a first run did not have. A worker journals a model turn that
    /// calls only such tools without waiting for the stream's ack before
    /// the calls run (docs/RELIABILITY.md, "Step journal"): a replay under
    /// the same idempotency key protects nothing for them. Default: no; an
    /// MCP tool only when the operator lists it in its server's
    /// `read_only_tools` (a server's `readOnlyHint` is its own claim).
    fn read_only(&self) -> bool {
        false
    }

    /// Like [`Tool::call`], plus an artifact for the application that the
    /// model never reads, on success and on error alike (MCP
    /// `structuredContent`, docs/MCP.md). Default: no artifact.
    async fn call_with_artifact(&self, ctx: &ToolContext, args: Value) -> (Result<Value, ToolError>, Option<Value>) {
        (self.call(ctx, args).await, None)
    }
}
