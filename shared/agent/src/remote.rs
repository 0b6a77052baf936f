//! A subagent whose loop runs elsewhere: an agent reached over an agent
//! protocol (docs/PROTOCOLS.md, "Remote subagent types"). The worker keeps
//! everything around the run (the task queue and its redelivery, progress,
//! the report, cancel, deadlines, approvals); a [`RemoteAgent`] only turns
//! one attempt of a task into one remote exchange.
//!
//! Defined here, beside the model loop, so a worker runs either behind the
//! same observer and approval gate, and the protocol crates implement it
//! without depending on the worker.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use flotilla_protocol::ids::{JobId, SubagentType, TaskId, Tenant};
use flotilla_protocol::{ErrorInfo, Usage};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::agent::AgentObserver;
use crate::model::ModelIdentity;
use crate::tool::{ApprovalGate, ElicitationAsk, ElicitationVerdict, ToolContext};

/// An agent that runs a task somewhere else.
#[async_trait]
pub trait RemoteAgent: Send + Sync {
    /// The protocol (`gen_ai.provider.name`, e.g. `agent-protocol`, `a2a`)
    /// and the remote agent's name (`gen_ai.request.model`), for spans and
    /// the worker's model metrics.
    fn identity(&self) -> ModelIdentity<'_>;

    /// Runs one attempt of `task`. Text the remote agent streams goes through
    /// `observer.model_delta` (it becomes the task's progress events). An
    /// error of kind `Transient` (the agent is unreachable or not there)
    /// hands the task back for a later attempt; `Cancelled` when
    /// `task.cancel` fired; any other kind fails the task.
    async fn run(&self, task: &RemoteTask, observer: &dyn AgentObserver) -> Result<RemoteAnswer, RemoteFailure>;
}

/// One attempt of a task, as a remote agent sees it.
pub struct RemoteTask {
    /// Owner of the job.
    pub tenant: Tenant,
    /// The job.
    pub job_id: JobId,
    /// The task.
    pub task_id: TaskId,
    /// The subagent type the task was queued for.
    pub subagent_type: SubagentType,
    /// The task's description: the prompt.
    pub description: String,
    /// 1 for the first delivery, more for a redelivery.
    pub attempt: u32,
    /// Wall time this attempt may take (the type's timeout, cut to the task's deadline).
    pub timeout: Duration,
    /// Fires when the job or task is cancelled, or the worker hands the task back.
    pub cancel: CancellationToken,
    /// W3C traceparent of the run.
    pub traceparent: Option<String>,
    /// Asks a person; `None` when the worker has no approval store.
    pub approvals: Option<Arc<dyn ApprovalGate>>,
    /// Questions asked so far in this attempt (numbers their approval keys).
    pub asked: AtomicU32,
}

impl RemoteTask {
    /// Stable across every attempt of this task: the remote session or
    /// context id, so a redelivered task continues the same remote
    /// conversation instead of starting a second one.
    pub fn session_key(&self) -> String {
        self.task_id.to_string()
    }

    /// Asks a person `message` on behalf of the remote agent `agent`: an
    /// elicitation through the approval gate (docs/APPROVALS.md). `schema`
    /// is the JSON Schema of the answer; `None` asks for free text
    /// (`{"answer": "..."}`). The n-th question of an attempt keeps its key
    /// across attempts, so a redelivered task that asks again in the same
    /// order gets the answer already given. Declined when there is no gate.
    pub async fn ask_person(&self, agent: &str, message: &str, schema: Option<Value>) -> ElicitationVerdict {
        let Some(gate) = &self.approvals else {
            return ElicitationVerdict::declined("decline");
        };
        let n = self.asked.fetch_add(1, Ordering::Relaxed) + 1;
        let call_id = format!("remote-{n}");
        let ctx = ToolContext {
            job_id: self.job_id,
            task_id: Some(self.task_id),
            tenant: self.tenant.clone(),
            idempotency_key: format!("{}:{call_id}", self.task_id),
            call_id,
            traceparent: self.traceparent.clone(),
            cancel: self.cancel.clone(),
            approvals: self.approvals.clone(),
        };
        let schema = schema.unwrap_or_else(
            || json!({"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}),
        );
        let ask = ElicitationAsk { server: agent.to_string(), message: message.to_string(), requested_schema: schema };
        gate.elicit(&ctx, agent, &json!({"question": message}), &ask).await
    }
}

/// What a remote agent answered, and what it reported spending.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RemoteAnswer {
    /// The answer: the task report's result.
    pub text: String,
    /// Tokens the remote agent reported; zero when it reports none.
    pub usage: Usage,
}

/// Why a remote run did not answer, and what it spent before.
#[derive(Clone, Debug, PartialEq)]
pub struct RemoteFailure {
    /// The error the task reports (or hands the task back with, when transient).
    pub error: ErrorInfo,
    /// Tokens spent before it failed.
    pub usage: Usage,
}

impl From<ErrorInfo> for RemoteFailure {
    fn from(error: ErrorInfo) -> Self {
        Self { error, usage: Usage::default() }
    }
}
