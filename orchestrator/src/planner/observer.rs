//! What the planner's agent loop reports: each model call becomes a job event
//! and is added to the job's planner usage; every step is checkpointed; a
//! compaction of its context (shared/agent/src/agent/compaction.rs) becomes a
//! `compacted` job event and its call's usage is added like any other.

use std::time::Duration;

use async_trait::async_trait;
use flotilla_agent::agent::{AgentObserver, Conversation};
use flotilla_protocol::ids::JobId;
use flotilla_protocol::{JobEventKind, Usage};

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
}

#[async_trait]
impl AgentObserver for PlannerObserver {
    async fn model_called(&self, step: u32, usage: Usage, latency: Duration) {
        self.record_usage(usage).await;
        self.jobs
            .emit(self.job_id, JobEventKind::PlannerStep { step, usage, latency_ms: latency.as_millis() as u64 })
            .await;
    }

    async fn on_compacted(&self, before_tokens: u64, after_tokens: u64, usage: Usage) {
        self.record_usage(usage).await;
        self.jobs.emit(self.job_id, JobEventKind::Compacted { before_tokens, after_tokens, usage }).await;
    }

    async fn checkpoint(&self, conversation: &Conversation) {
        // The run goes on: a restart resumes from the previous checkpoint and
        // re-attaches to its tasks by call id (docs/ARCHITECTURE.md).
        if let Err(e) = self.checkpoints.save(&self.job_id, conversation).await {
            tracing::error!(job_id = %self.job_id, error = %e, "planner checkpoint not saved; the previous one stays");
        }
    }
}
