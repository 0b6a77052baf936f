//! What the planner's agent loop reports: each model call becomes a job event
//! (`planner_step`; `planner_step_failed` for one that failed, which the
//! metrics count by error kind) and is added to the job's planner usage;
//! every step is checkpointed; a compaction of its context
//! (shared/agent/src/agent/compaction.rs) becomes a `compacted` job event and
//! its call's usage is added like any other.
//!
//! The planner's tool calls are counted like a subagent's: a subagent's
//! report carries its conversation's `usage.tool_calls`, which the dispatcher
//! adds to the job (orchestrator/src/planner/dispatch.rs); the planner's own
//! count is its conversation's, written to the job's `planner_usage` (and
//! `usage`) at the checkpoint that follows each turn of calls. The record
//! takes the difference to what it holds, so a resumed planner, whose
//! checkpointed conversation carries its count, never counts a call twice.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use flotilla_agent::agent::{AgentObserver, Conversation};
use flotilla_protocol::ids::JobId;
use flotilla_protocol::{ErrorKind, JobEventKind, Usage};

use crate::jobs::JobStore;
use flotilla_bus::Checkpoints;

/// Observer of one job's planner run.
pub struct PlannerObserver {
    /// Job records and events.
    pub jobs: JobStore,
    /// Where the conversation is saved after every step.
    pub checkpoints: Checkpoints,
    /// The job.
    pub job_id: JobId,
    /// The planner tool calls the job record holds, as far as this run knows.
    pub tool_calls: AtomicU64,
}

impl PlannerObserver {
    /// Adds a planner model call's spend to the job record.
    async fn record_usage(&self, usage: Usage) {
        let r = self
            .jobs
            .update(&self.job_id, |rec| {
                rec.planner_usage += usage;
                rec.usage += usage;
            })
            .await;
        if let Err(e) = r {
            tracing::warn!(error = %e, "planner usage not recorded");
        }
    }

    /// Brings the job's planner tool calls up to `total`, the conversation's
    /// count; one write per turn of calls, none when nothing was called.
    async fn record_tool_calls(&self, total: u64) {
        if total <= self.tool_calls.load(Ordering::Relaxed) {
            return;
        }
        let r = self
            .jobs
            .update(&self.job_id, |rec| {
                let new = total.saturating_sub(rec.planner_usage.tool_calls);
                rec.planner_usage.tool_calls += new;
                rec.usage.tool_calls += new;
            })
            .await;
        match r {
            Ok(()) => self.tool_calls.store(total, Ordering::Relaxed),
            Err(e) => tracing::warn!(error = %e, "planner tool calls not recorded; the next turn's checkpoint retries"),
        }
    }
}

#[async_trait]
impl AgentObserver for PlannerObserver {
    async fn model_called(&self, step: u32, usage: Usage, latency: Duration) {
        self.record_usage(usage).await;
        self.jobs
            .emit(self.job_id, JobEventKind::PlannerStep { step, usage, latency_ms: latency.as_millis() as u64 })
            .await;
    }

    async fn model_failed(&self, step: u32, error_kind: ErrorKind, latency: Duration, usage: Usage) {
        if usage != Usage::default() {
            self.record_usage(usage).await;
        }
        let latency_ms = latency.as_millis() as u64;
        self.jobs.emit(self.job_id, JobEventKind::PlannerStepFailed { step, error_kind, latency_ms, usage }).await;
    }

    async fn on_compacted(&self, before_tokens: u64, after_tokens: u64, usage: Usage) {
        self.record_usage(usage).await;
        self.jobs.emit(self.job_id, JobEventKind::Compacted { before_tokens, after_tokens, usage }).await;
    }

    async fn checkpoint(&self, conversation: &Conversation) {
        self.record_tool_calls(conversation.usage.tool_calls).await;
        // The run goes on: a restart resumes from the previous checkpoint and
        // re-attaches to its tasks by call id (docs/ARCHITECTURE.md).
        if let Err(e) = self.checkpoints.save(&self.job_id, conversation).await {
            tracing::error!(job_id = %self.job_id, error = %e, "planner checkpoint not saved; the previous one stays");
        }
    }
}
