//! The planner: one agent run per job, with `write_todos` and `task` as its
//! tools, plus the built-in file tools `[planner] tools` names (read-only by
//! default) over the job's files. It owns the job's lifecycle: submitted -> running -> completed |
//! failed, written to the job record and published as job events.

mod async_tasks;
pub mod dispatch;
mod map_tasks;
mod observer;
mod task_tool;
mod write_todos;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use flotilla_agent::agent::{Agent, ContextBudget, Conversation, Limits, RunContext, ToolPolicy};
use flotilla_agent::model::ChatModel;
use flotilla_agent::tool::{Eviction, ToolSet};
use flotilla_bus::{Bus, BusError, BusErrorKind, Cancellations, Checkpoints};
use flotilla_config::permissions::Permissions;
use flotilla_config::{PlannerConfig, Settings, ToolRef};
use flotilla_job_files::JobFiles;
use flotilla_protocol::ids::{JobId, SubagentType};
use flotilla_protocol::{ErrorInfo, ErrorKind, JobEventKind, JobRecord, JobStatus};
use flotilla_tools::{self as builtin, FileToolEnv};
use tokio_util::sync::CancellationToken;

use crate::jobs::JobStore;
use crate::reports::ReportRouter;
pub use dispatch::Dispatcher;
use observer::PlannerObserver;
pub use task_tool::TaskTool;
pub use write_todos::WriteTodos;

/// Everything needed to plan jobs.
pub struct Planner {
    config: PlannerConfig,
    model: Arc<dyn ChatModel>,
    tools: Arc<ToolSet>,
    jobs: JobStore,
    checkpoints: Checkpoints,
    /// Cancelled jobs with their reasons.
    cancelled: Cancellations,
    system_prompt: String,
    /// `start_task` and its companions; wakes a planner whose tasks report.
    async_tasks: Arc<async_tasks::AsyncTasks>,
    /// Task dispatch, whose per-tenant places a stopped planner gives back.
    dispatcher: Dispatcher,
    /// Subagent step journals, purged when their job ends (docs/RELIABILITY.md).
    journal: flotilla_bus::Journal,
}

impl Planner {
    /// Builds the planner from config.
    pub fn new(
        settings: &Settings,
        bus: Bus,
        jobs: JobStore,
        reports: ReportRouter,
        checkpoints: Checkpoints,
        cancelled: Cancellations,
        files: JobFiles,
    ) -> anyhow::Result<Self> {
        let config = settings.planner()?.clone();
        let model = flotilla_models::priced(
            flotilla_models::build(&config.model, settings.model(&config.model)?)?,
            settings.price(&config.model),
        );
        let identity = model.identity();
        jobs.metrics().set_planner_model(identity.provider, identity.model);
        let types: BTreeMap<SubagentType, String> =
            settings.subagents.iter().map(|(t, c)| (t.clone(), c.description.clone())).collect();
        let tools = ToolSet::new(Duration::from_secs(config.task_timeout + 60));
        // Every planner tool call goes to the audit stream (docs/SECURITY.md).
        let audit = Arc::new(flotilla_bus_adapters::BusAudit(flotilla_bus::audit::BusAuditSink::new(bus.clone())));
        tools.set_auditor(flotilla_agent::audit::Auditor::new(audit, "planner", "orchestrator"));
        let mut tools = tools;
        tools.add(Arc::new(WriteTodos { jobs: jobs.clone() }), "planner")?;
        let dispatcher = Dispatcher::new(
            Arc::new(bus.clone()),
            jobs.clone(),
            reports,
            types,
            Duration::from_secs(config.task_timeout),
            Duration::from_secs(config.no_worker_timeout.max(1)),
        )
        .with_report_tokens(config.report_tokens as usize)
        .with_tenants(settings.tenants.clone())
        .with_report_files(files.clone());
        tools.add(Arc::new(TaskTool { dispatcher: dispatcher.clone() }), "planner")?;
        let journal = bus.journal();
        let async_tasks = async_tasks::AsyncTasks::new(dispatcher.clone(), bus, cancelled.clone());
        async_tasks.register(&mut tools)?;
        tools.add(
            Arc::new(map_tasks::MapTasks::new(dispatcher.clone(), files.clone(), config.max_in_flight)),
            "planner",
        )?;
        // Built-in file tools (read-only by default) over the job's files, under the planner's rules.
        let permissions = Permissions::compile(&config.permissions, config.default_permission)
            .map_err(|e| anyhow::anyhow!("invalid config key `planner.permissions[{}]`: {}", e.rule, e.message))?;
        let env = Arc::new(FileToolEnv { files: files.clone(), permissions });
        for r in &config.tools {
            // Config validation admits only built-ins here (shared/config/src/lib.rs).
            let tool = match r {
                ToolRef::Builtin(name) => builtin::tool(name, &env),
                ToolRef::Native(_) | ToolRef::Mcp { .. } | ToolRef::Execute => None,
            };
            let tool =
                tool.ok_or_else(|| anyhow::anyhow!("invalid config key `planner.tools`: \"{r}\" is not a built-in"))?;
            tools.add(tool, "builtin")?;
        }
        if let Some(max_bytes) = settings.files.large_result_bytes() {
            let exempt = builtin::READ_ONLY.iter().map(|s| s.to_string()).collect();
            tools.set_eviction(Eviction { files, max_bytes, exempt });
        }
        let system_prompt = config.system_prompt.clone();
        Ok(Self {
            config,
            model,
            tools: Arc::new(tools),
            jobs,
            checkpoints,
            cancelled,
            system_prompt,
            async_tasks,
            dispatcher,
            journal,
        })
    }

    /// Gives back the tasks-in-flight places `job`'s tasks still hold: called
    /// when its planner stops here (ended, cancelled, stopped or fenced).
    pub fn release_tasks(&self, job: &JobId) {
        self.dispatcher.release_job(job);
    }

    /// Runs job `id` to its end. Errors are recorded in the job, not returned.
    /// `cancel` fires when the job is cancelled; `shutdown` when the
    /// orchestrator stops, which leaves the job `running` for the next one.
    pub async fn run(&self, id: JobId, cancel: CancellationToken, shutdown: CancellationToken) {
        let rec = match self
            .jobs
            .update(&id, |rec| {
                // A job that ended stays ended (the runner checks too, under the lease).
                if !rec.status.is_terminal() {
                    rec.status = JobStatus::Running;
                }
                rec.clone()
            })
            .await
        {
            Ok(rec) if rec.status.is_terminal() => {
                tracing::warn!(job_id = %id, status = rec.status.as_str(), "not planning a job that ended");
                return;
            }
            Ok(rec) => rec,
            Err(e) => {
                tracing::error!(job_id = %id, error = %e, "cannot start job");
                return;
            }
        };
        self.jobs.emit(id, JobEventKind::Running).await;
        // Every log line of the planner run (dispatches included) carries the job and trace ids.
        let trace_id = rec.traceparent.as_deref().and_then(flotilla_protocol::trace::trace_id).unwrap_or("-");
        let span = tracing::info_span!("job", job_id = %id, trace_id);
        // A header too large to store stops the plan: the job fails with a `limit` error.
        let oversized = self.jobs.oversized(&id);
        let plan_cancel = cancel.child_token();
        let stop = tokio::spawn({
            let (oversized, plan_cancel) = (oversized.clone(), plan_cancel.clone());
            async move {
                oversized.cancelled().await;
                plan_cancel.cancel();
            }
        });
        let outcome = tracing::Instrument::instrument(self.plan(&rec, plan_cancel), span).await;
        stop.abort();
        if oversized.is_cancelled() && !shutdown.is_cancelled() {
            let cause = self.jobs.oversized_by(&id).unwrap_or_else(|| "a write was refused as too large".into());
            let (status, kind) = self.fail_oversized(&id, &cause).await;
            return self.finish(id, status, kind).await;
        }
        if shutdown.is_cancelled() {
            tracing::info!(job_id = %id, "orchestrator stopping; the job resumes from its checkpoint on restart");
            self.jobs.release(&id);
            return;
        }
        // The outcome is stored before it is announced and before the
        // checkpoint goes: through any outage, until stored or stopped.
        let (status, kind) = match outcome {
            Ok(answer) => {
                let written = self
                    .jobs
                    .update_until_stored(&id, &shutdown, |r| {
                        r.status = JobStatus::Completed;
                        r.answer = Some(answer.clone());
                        r.usage
                    })
                    .await;
                match written {
                    Ok(usage) => (JobStatus::Completed, JobEventKind::Completed { answer, usage }),
                    Err(e) if e.kind() == BusErrorKind::TooLarge => self.fail_oversized(&id, &e.to_string()).await,
                    Err(e) => return self.leave_unstored(id, &e),
                }
            }
            Err(error) => {
                let status = if error.kind == ErrorKind::Cancelled { JobStatus::Cancelled } else { JobStatus::Failed };
                let written = self
                    .jobs
                    .update_until_stored(&id, &shutdown, |r| {
                        r.status = status;
                        r.error = Some(error.clone());
                    })
                    .await;
                match written {
                    Err(e) if e.kind() == BusErrorKind::TooLarge => {
                        let (status, kind) = self.fail_oversized(&id, &e.to_string()).await;
                        return self.finish(id, status, kind).await;
                    }
                    Err(e) => return self.leave_unstored(id, &e),
                    Ok(()) => {}
                }
                let kind = if status == JobStatus::Cancelled {
                    let reason = match self.cancelled.reason(&id).await {
                        Ok(Some(r)) => r,
                        _ => error.message,
                    };
                    JobEventKind::Cancelled { reason }
                } else {
                    JobEventKind::Failed { error }
                };
                (status, kind)
            }
        };
        self.finish(id, status, kind).await;
    }

    /// An outcome that could not be stored (the orchestrator is stopping, or
    /// a permission error): nothing is announced and the checkpoint stays,
    /// so the job's next owner finishes it rather than it ending unrecorded.
    fn leave_unstored(&self, id: JobId, e: &BusError) {
        tracing::error!(job_id = %id, error = %e, "job outcome not stored; the job stays running with its checkpoint");
        self.jobs.release(&id);
    }

    /// Ends the job's open tasks (a cancelled or failed job), announces the
    /// stored outcome and forgets the job.
    async fn finish(&self, id: JobId, status: JobStatus, kind: JobEventKind) {
        let why = match &kind {
            JobEventKind::Cancelled { reason } => format!("the job was cancelled: {reason}"),
            JobEventKind::Failed { error } => format!("the job failed before this task reported: {}", error.message),
            _ => String::new(),
        };
        if !why.is_empty() {
            match self.jobs.settle_open_tasks(&id, &ErrorInfo::new(ErrorKind::Cancelled, why)).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(job_id = %id, tasks = n, "open tasks of the ended job marked cancelled"),
                Err(e) => tracing::warn!(job_id = %id, error = %e, "open tasks of the ended job not marked cancelled"),
            }
        }
        tracing::info!(job_id = %id, status = status.as_str(), "job finished");
        self.jobs.emit(id, kind).await;
        self.forget_journals(id).await;
        self.jobs.release(&id);
        self.checkpoints.remove(&id).await;
    }

    /// Purges the step journals of an ended job's tasks, off the job's path:
    /// a journal left behind is only storage, which the stream's age limit
    /// reclaims.
    async fn forget_journals(&self, id: JobId) {
        let Ok(tenant) = self.jobs.read(&id, |r| r.tenant.clone()).await else { return };
        let journal = self.journal.clone();
        tokio::spawn(async move {
            match journal.purge_job(&tenant, &id).await {
                Ok(n) => tracing::debug!(job_id = %id, entries = n, "step journals purged"),
                Err(e) => tracing::warn!(job_id = %id, error = %e, "step journals not purged; they expire"),
            }
        });
    }

    /// Ends a job whose todo list or header no longer fits the jobs bucket
    /// (one KV value each, NATS max_payload; tasks are keys of their own):
    /// the todos and the answer are dropped and the job fails with a `limit`
    /// error naming their sizes, so it is never left `running` behind writes
    /// that cannot succeed.
    async fn fail_oversized(&self, id: &JobId, cause: &str) -> (JobStatus, JobEventKind) {
        let written = self
            .jobs
            .update(id, |r| {
                let todo_bytes: usize = r.todos.iter().map(|t| t.content.len()).sum();
                let error = ErrorInfo::new(
                    ErrorKind::Limit,
                    format!(
                        "the job record outgrew the jobs bucket's value limit ({cause}): its {} todos hold {todo_bytes} \
                         bytes, its answer {} bytes, its input {} bytes; the todos and the answer were dropped",
                        r.todos.len(),
                        r.answer.as_ref().map_or(0, String::len),
                        r.input.len()
                    ),
                );
                r.todos.clear();
                r.tasks.clear();
                r.answer = None;
                r.status = JobStatus::Failed;
                r.error = Some(error.clone());
                error
            })
            .await;
        let error = written.unwrap_or_else(|e| {
            tracing::error!(job_id = %id, error = %e, "job outcome not stored");
            ErrorInfo::new(ErrorKind::Limit, format!("the job record outgrew the jobs bucket's value limit ({cause})"))
        });
        tracing::error!(job_id = %id, error = %error.message, "job failed: record too large");
        (JobStatus::Failed, JobEventKind::Failed { error })
    }

    async fn plan(&self, rec: &JobRecord, cancel: CancellationToken) -> Result<String, flotilla_protocol::ErrorInfo> {
        if let Some(ty) = &rec.subagent_type {
            return self.run_direct(rec, ty, cancel).await;
        }
        let agent = Agent {
            model: self.model.clone(),
            tools: self.tools.clone(),
            limits: Limits {
                max_steps: self.config.max_steps,
                timeout: Duration::from_secs(self.config.timeout),
                max_tokens: self.config.max_tokens,
                context: Some(ContextBudget {
                    tokens: self.config.context_tokens,
                    prompt: self.config.compaction_prompt.clone(),
                }),
            },
            policy: ToolPolicy {
                loop_detection: self.config.loop_detection,
                max_parallel_calls: self.config.max_in_flight,
                ..Default::default()
            },
            output: None,
        };
        let traceparent = rec.traceparent.clone().unwrap_or_else(flotilla_protocol::trace::new_traceparent);
        let span =
            flotilla_agent::spans::invoke_agent("planner", self.model.identity(), &rec.id, rec.tenant.as_str(), None);
        let mut conv = match self.checkpoints.load::<Conversation>(&rec.id).await {
            Some(conv) => {
                tracing::info!(job_id = %rec.id, steps = conv.steps, "resuming the planner from its checkpoint");
                // A later run of the job (after a failover or a restart) hangs
                // below its first, which holds the job's traceparent.
                flotilla_telemetry::trace::set_parent(&span, &traceparent);
                conv
            }
            None => {
                flotilla_telemetry::trace::start_as_root(&span, &traceparent);
                Conversation::new(&self.system_prompt, &rec.input)
            }
        };
        let ctx = RunContext {
            job_id: rec.id,
            task_id: None,
            tenant: rec.tenant.clone(),
            traceparent: Some(traceparent),
            cancel,
            approvals: None,
            inbox: None,
            span: span.clone(),
        };
        let observer = PlannerObserver {
            jobs: self.jobs.clone(),
            checkpoints: self.checkpoints.clone(),
            job_id: rec.id,
            tool_calls: Default::default(),
        };
        let outcome = self.async_tasks.run(&agent, &mut conv, &ctx, &observer).await;
        let (status, error) = match &outcome {
            Ok(_) => ("completed", None),
            Err(e) if e.kind == ErrorKind::Cancelled => ("cancelled", None),
            Err(e) => ("failed", Some((e.kind, e.message.as_str()))),
        };
        flotilla_agent::spans::agent_ended(&span, &conv.usage, status, error);
        outcome
    }

    /// A direct job: its input is the description of one task of `ty`,
    /// dispatched as the planner's `task` tool would under the fixed key
    /// [`DIRECT_TASK_KEY`] (so the job's next owner, after a failover,
    /// re-attaches to the same task instead of dispatching another), and its
    /// report is the answer. No planner model runs; the task is consolidated
    /// into the job like any other.
    async fn run_direct(
        &self,
        rec: &JobRecord,
        ty: &SubagentType,
        cancel: CancellationToken,
    ) -> Result<String, ErrorInfo> {
        let ctx = flotilla_agent::tool::ToolContext {
            job_id: rec.id,
            task_id: None,
            tenant: rec.tenant.clone(),
            call_id: DIRECT_TASK_KEY.into(),
            idempotency_key: format!("{}:{DIRECT_TASK_KEY}", rec.id),
            traceparent: rec.traceparent.clone(),
            cancel,
            approvals: None,
        };
        let to_error = |e: flotilla_agent::tool::ToolError| ErrorInfo::new(e.kind, e.message);
        // A dispatch that failed on the bus is tried again (it is idempotent
        // per key) rather than failing the job: no model would retry it.
        let deadline = tokio::time::Instant::now() + DIRECT_DISPATCH_BUDGET;
        let mut backoff = flotilla_retry::Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
        let task = loop {
            match self.dispatcher.start(&ctx, ty.as_str(), rec.input.clone(), DIRECT_TASK_KEY).await {
                Ok(task) => break task,
                Err(e) if e.kind == ErrorKind::Transient && tokio::time::Instant::now() < deadline => {
                    tracing::warn!(job_id = %rec.id, error = %e.message, "direct task not dispatched; trying again");
                    tokio::select! {
                        _ = ctx.cancel.cancelled() => return Err(ErrorInfo::new(ErrorKind::Cancelled, "cancelled")),
                        _ = tokio::time::sleep(backoff.next_delay()) => {}
                    }
                }
                Err(e) => return Err(to_error(e)),
            }
        };
        let outcome = self.dispatcher.wait(&ctx, task).await.map_err(to_error)?;
        if outcome.status != flotilla_protocol::TaskStatus::Completed {
            return Err(to_error(outcome.error(ty)));
        }
        Ok(match &outcome.report_file {
            Some(f) => format!(
                "{}\n\n(The report is cut short here: the whole of it, {} bytes, is {} in the job's files.)",
                outcome.summary, f.size_bytes, f.path
            ),
            None => outcome.summary,
        })
    }
}

/// The dispatch key of a direct job's one task (a `task` call's is its
/// tool call key).
const DIRECT_TASK_KEY: &str = "direct";

/// How long a direct job tries to dispatch its task through a bus outage.
const DIRECT_DISPATCH_BUDGET: Duration = Duration::from_secs(60);
