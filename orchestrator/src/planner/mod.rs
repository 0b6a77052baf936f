//! The planner: one agent run per job, with `write_todos` and `task` as its
//! tools. It owns the job's lifecycle: submitted -> running -> completed |
//! failed, written to the job record and published as job events.

mod observer;
mod task_tool;
mod write_todos;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use flotilla_shared::agent::{Agent, Conversation, Limits, RunContext};
use flotilla_shared::bus::Bus;
use flotilla_shared::config::{PlannerConfig, Settings};
use flotilla_shared::ids::{JobId, SubagentType};
use flotilla_shared::model::{self, ChatModel};
use flotilla_shared::protocol::{ErrorKind, JobEventKind, JobRecord, JobStatus};
use flotilla_shared::tool::ToolSet;
use tokio_util::sync::CancellationToken;

use crate::jobs::JobStore;
use crate::reports::ReportRouter;
use observer::PlannerObserver;
pub use task_tool::TaskTool;
pub use write_todos::WriteTodos;

/// Everything needed to plan jobs.
pub struct Planner {
    config: PlannerConfig,
    model: Arc<dyn ChatModel>,
    tools: Arc<ToolSet>,
    jobs: JobStore,
    system_prompt: String,
}

impl Planner {
    /// Builds the planner from config.
    pub fn new(settings: &Settings, bus: Bus, jobs: JobStore, reports: ReportRouter) -> anyhow::Result<Self> {
        let config = settings.planner()?.clone();
        let model = model::build(&config.model, settings.model(&config.model)?)?;
        let types: BTreeMap<SubagentType, String> =
            settings.subagents.iter().map(|(t, c)| (t.clone(), c.description.clone())).collect();
        let mut tools = ToolSet::new(Duration::from_secs(config.task_timeout + 60));
        tools.add(Arc::new(WriteTodos { jobs: jobs.clone() }), "planner")?;
        tools.add(
            Arc::new(TaskTool {
                bus,
                jobs: jobs.clone(),
                reports,
                types,
                task_timeout: Duration::from_secs(config.task_timeout),
            }),
            "planner",
        )?;
        let system_prompt = config.system_prompt.clone();
        Ok(Self { config, model, tools: Arc::new(tools), jobs, system_prompt })
    }

    /// Runs job `id` to its end. Errors are recorded in the job, not returned.
    pub async fn run(&self, id: JobId, cancel: CancellationToken) {
        let rec = match self
            .jobs
            .update(&id, |rec| {
                rec.status = JobStatus::Running;
                rec.clone()
            })
            .await
        {
            Ok(rec) => rec,
            Err(e) => {
                tracing::error!(job_id = %id, error = %e, "cannot start job");
                return;
            }
        };
        self.jobs.emit(id, JobEventKind::Running).await;
        let outcome = self.plan(&rec, cancel).await;
        let (status, kind) = match outcome {
            Ok(answer) => {
                let stored = answer.clone();
                let usage = self
                    .jobs
                    .update(&id, |r| {
                        r.status = JobStatus::Completed;
                        r.answer = Some(stored);
                        r.usage
                    })
                    .await
                    .unwrap_or_default();
                (JobStatus::Completed, JobEventKind::Completed { answer, usage })
            }
            Err(error) => {
                let status = if error.kind == ErrorKind::Cancelled { JobStatus::Cancelled } else { JobStatus::Failed };
                let e2 = error.clone();
                if let Err(e) = self
                    .jobs
                    .update(&id, |r| {
                        r.status = status;
                        r.error = Some(e2);
                    })
                    .await
                {
                    tracing::error!(job_id = %id, error = %e, "job outcome not stored");
                }
                let kind = if status == JobStatus::Cancelled {
                    JobEventKind::Cancelled { reason: error.message }
                } else {
                    JobEventKind::Failed { error }
                };
                (status, kind)
            }
        };
        tracing::info!(job_id = %id, status = status.as_str(), "job finished");
        self.jobs.emit(id, kind).await;
        self.jobs.release(&id);
    }

    async fn plan(
        &self,
        rec: &JobRecord,
        cancel: CancellationToken,
    ) -> Result<String, flotilla_shared::protocol::ErrorInfo> {
        let agent = Agent {
            model: self.model.clone(),
            tools: self.tools.clone(),
            limits: Limits {
                max_steps: self.config.max_steps,
                timeout: Duration::from_secs(self.config.timeout),
                max_tokens: None,
            },
        };
        let mut conv = Conversation::new(&self.system_prompt, &rec.input);
        let ctx = RunContext {
            job_id: rec.id,
            task_id: None,
            tenant: rec.tenant.clone(),
            traceparent: Some(flotilla_shared::trace::new_traceparent()),
            cancel,
            approvals: None,
        };
        let observer = PlannerObserver { jobs: self.jobs.clone(), job_id: rec.id };
        agent.run(&mut conv, &ctx, &observer).await
    }
}
