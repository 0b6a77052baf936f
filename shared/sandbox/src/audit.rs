//! The audit record of every `execute` call (who ran what, the
//! command's digest, exit status, duration). [`record`] is the one
//! place an execution is reported: a structured log line under the
//! `flotilla::audit` target and an `executed` progress event through the
//! task's [`ExecutionReporter`]; a durable audit stream hooks in here too.

use async_trait::async_trait;
use flotilla_protocol::ProgressKind;
use flotilla_protocol::ids::{JobId, SubagentType, TaskId, Tenant};

use super::bubblewrap::Execution;

/// Where the executions of one task's session are reported: the worker's
/// progress events of that task. A trait so the sandbox needs no bus.
#[async_trait]
pub trait ExecutionReporter: Send + Sync {
    /// The worker running the task, named in the audit record.
    fn worker_id(&self) -> &str;
    /// Publishes one progress event of the task.
    async fn emit(&self, kind: ProgressKind);
}

/// Who ran which command, and what happened.
#[derive(Clone, Debug)]
pub struct ExecutionAudit {
    /// Owner of the job.
    pub tenant: Tenant,
    /// The job.
    pub job_id: JobId,
    /// The task.
    pub task_id: TaskId,
    /// The subagent type.
    pub subagent_type: SubagentType,
    /// The worker that ran it.
    pub worker_id: String,
    /// The model's call id.
    pub call_id: String,
    /// sha256 of the command text (never the text: it may hold secrets).
    pub command_sha256: String,
    /// The outcome, or `None` when the sandbox could not start.
    pub execution: Option<Execution>,
}

/// sha256 of `command`, hex.
pub fn command_digest(command: &str) -> String {
    flotilla_protocol::digest::sha256_hex(command.as_bytes())
}

/// Reports one execution.
pub async fn record(audit: &ExecutionAudit, progress: &dyn ExecutionReporter) {
    let e = audit.execution.as_ref();
    let duration_ms = e.map(|e| e.duration.as_millis() as u64).unwrap_or(0);
    tracing::info!(
        target: "flotilla::audit",
        tenant = %audit.tenant,
        job_id = %audit.job_id,
        task_id = %audit.task_id,
        subagent_type = %audit.subagent_type,
        worker_id = %audit.worker_id,
        call_id = %audit.call_id,
        command_sha256 = %audit.command_sha256,
        exit_code = ?e.and_then(|e| e.exit_code),
        signal = ?e.and_then(|e| e.signal),
        timed_out = e.is_some_and(|e| e.timed_out),
        truncated = e.is_some_and(|e| e.truncated),
        started = e.is_some(),
        duration_ms,
        "sandbox execution"
    );
    progress
        .emit(ProgressKind::Executed {
            call_id: audit.call_id.clone(),
            command_sha256: audit.command_sha256.clone(),
            exit_code: e.and_then(|e| e.exit_code),
            signal: e.and_then(|e| e.signal),
            timed_out: e.is_some_and(|e| e.timed_out),
            truncated: e.is_some_and(|e| e.truncated),
            duration_ms,
        })
        .await;
}
