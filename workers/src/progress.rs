//! Publishes a task's progress events as the agent loop runs. Events are
//! observations: they go out without waiting for acks and never slow the task.

use std::time::Duration;

use async_trait::async_trait;
use flotilla_agent::agent::{AgentObserver, Conversation};
use flotilla_agent::metrics::AgentMetrics;
use flotilla_agent::model::ToolCall;
use flotilla_agent::tool::ToolOutcome;
use flotilla_bus::Bus;
use flotilla_protocol::ids::{JobId, SubagentType, TaskId, Tenant};
use flotilla_protocol::{self as protocol, ProgressEvent, ProgressKind, Usage};

/// Progress publisher of one task attempt.
#[derive(Clone)]
pub struct ProgressPublisher {
    /// The bus.
    pub bus: Bus,
    /// Whose job: part of every progress subject.
    pub tenant: Tenant,
    /// The job.
    pub job_id: JobId,
    /// The task.
    pub task_id: TaskId,
    /// Its type.
    pub subagent_type: SubagentType,
    /// This worker.
    pub worker_id: String,
    /// Delivery attempt.
    pub attempt: u32,
    /// Model and tool latency metrics of this worker.
    pub metrics: AgentMetrics,
}

impl ProgressPublisher {
    /// Publishes one event.
    pub async fn emit(&self, kind: ProgressKind) {
        let ev = ProgressEvent {
            v: protocol::SCHEMA_VERSION,
            job_id: self.job_id,
            task_id: self.task_id,
            subagent_type: self.subagent_type.clone(),
            worker_id: self.worker_id.clone(),
            attempt: self.attempt,
            at: protocol::now(),
            kind,
        };
        self.bus.publish_event(self.bus.subjects.progress(&self.tenant, &self.job_id, &self.task_id), &ev).await;
    }
}

/// sha256 of a JSON value's text, hex encoded.
pub fn digest(value: &serde_json::Value) -> String {
    flotilla_agent::digest::sha256_hex(value.to_string().as_bytes())
}

#[async_trait]
impl AgentObserver for ProgressPublisher {
    async fn model_called(&self, step: u32, usage: Usage, latency: Duration) {
        tracing::debug!(step, input_tokens = usage.input_tokens, output_tokens = usage.output_tokens, "model call");
        self.metrics.model_call(self.subagent_type.as_str(), &usage, latency);
        self.emit(ProgressKind::ModelCall { step, usage, latency_ms: latency.as_millis() as u64 }).await;
    }

    async fn tool_started(&self, call: &ToolCall) {
        tracing::debug!(tool = %call.name, call_id = %call.id, "tool call");
        self.emit(ProgressKind::ToolCall {
            call_id: call.id.clone(),
            tool: call.name.clone(),
            args_sha256: digest(&call.arguments),
        })
        .await;
    }

    async fn tool_finished(&self, call: &ToolCall, outcome: &ToolOutcome) {
        let error_kind = outcome.result.as_ref().err().map(|e| e.kind);
        self.metrics.tool_call(self.subagent_type.as_str(), &call.name, error_kind, outcome.duration);
        self.emit(ProgressKind::ToolResult {
            call_id: call.id.clone(),
            tool: call.name.clone(),
            error_kind: outcome.result.as_ref().err().map(|e| e.kind),
            size: outcome.to_model_text().len(),
            duration_ms: outcome.duration.as_millis() as u64,
        })
        .await;
    }

    async fn checkpoint(&self, _conversation: &Conversation) {}
}
