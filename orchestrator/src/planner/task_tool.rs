//! `task(description, subagent_type)` (seed 000 section 2.5): delegates one
//! self-contained piece of work to a subagent type over the bus and returns
//! its report. Parallel calls in one planner turn are parallel tasks; a failed
//! report is an error result for that call only.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use flotilla_agent::tool::{Tool, ToolContext, ToolError, ToolSpec};
use flotilla_bus::{Bus, retry};
use flotilla_protocol::ids::{SubagentType, TaskId};
use flotilla_protocol::{
    self as protocol, ErrorInfo, ErrorKind, JobEventKind, TaskEntry, TaskMessage, TaskReport, TaskStatus, Usage,
};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::jobs::JobStore;
use crate::reports::ReportRouter;

/// Dispatches tasks and awaits their reports.
pub struct TaskTool {
    /// The bus.
    pub bus: Bus,
    /// Job records.
    pub jobs: JobStore,
    /// Report delivery.
    pub reports: ReportRouter,
    /// Subagent types with their descriptions, from config.
    pub types: BTreeMap<SubagentType, String>,
    /// Deadline of each task.
    pub task_timeout: Duration,
    /// How long a task may wait with no live worker of its type.
    pub no_worker_timeout: Duration,
}

#[derive(Deserialize)]
struct Args {
    description: String,
    subagent_type: String,
}

impl TaskTool {
    fn valid_types(&self) -> String {
        self.types.keys().map(|t| t.as_str()).collect::<Vec<_>>().join(", ")
    }
}

#[async_trait]
impl Tool for TaskTool {
    fn spec(&self) -> ToolSpec {
        let types: Vec<String> = self.types.iter().map(|(t, d)| format!("- {t}: {d}")).collect();
        ToolSpec {
            name: "task".into(),
            description: format!(
                "Delegate a self-contained task to an isolated subagent; returns its report. \
                 The description must hold everything it needs. Subagent types:\n{}",
                types.join("\n")
            ),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "description": {"type": "string", "minLength": 1},
                    "subagent_type": {"type": "string"}
                },
                "required": ["description", "subagent_type"],
                "additionalProperties": false
            }),
        }
    }

    async fn call(&self, ctx: &ToolContext, args: Value) -> Result<Value, ToolError> {
        let Args { description, subagent_type } =
            serde_json::from_value(args).map_err(|e| ToolError::validation(e.to_string()))?;
        let ty = match SubagentType::new(&subagent_type) {
            Ok(ty) if self.types.contains_key(&ty) => ty,
            _ => {
                return Err(ToolError::validation(format!(
                    "unknown subagent_type {subagent_type:?}; valid types: {}",
                    self.valid_types()
                )));
            }
        };
        let transient = |e: flotilla_bus::BusError| ToolError::transient(format!("task not dispatched: {e}"));
        // A resumed planner replays its pending calls: find the task this call
        // already created instead of dispatching it again.
        let existing = self
            .jobs
            .read(&ctx.job_id, |rec| {
                rec.tasks.iter().find(|t| t.call_id.as_deref() == Some(ctx.call_id.as_str())).cloned()
            })
            .await
            .map_err(transient)?;
        let (task_id, published) = match existing {
            Some(entry) if entry.status.is_some() => return outcome_of(&entry),
            Some(entry) => (entry.task_id, entry.published),
            None => {
                let task_id = TaskId::new();
                let entry = TaskEntry {
                    task_id,
                    subagent_type: ty.clone(),
                    description: description.clone(),
                    status: None,
                    summary: String::new(),
                    error: None,
                    usage: Usage::default(),
                    worker_id: None,
                    attempt: 0,
                    duration_ms: 0,
                    dispatched_at: Some(protocol::now()),
                    started_at: None,
                    finished_at: None,
                    call_id: Some(ctx.call_id.clone()),
                    published: false,
                };
                self.jobs.update(&ctx.job_id, |rec| rec.tasks.push(entry)).await.map_err(transient)?;
                (task_id, false)
            }
        };
        let waiter = self.reports.expect(task_id);
        if published {
            tracing::info!(%task_id, "re-attached to a task dispatched before a restart");
            if let Some(report) = self.reports.stored(&ctx.tenant, &ctx.job_id, &task_id).await {
                self.reports.forget(&task_id);
                self.consolidate(&report).await;
                return outcome_of_report(&report, &ty);
            }
        } else {
            let msg = TaskMessage {
                v: protocol::SCHEMA_VERSION,
                job_id: ctx.job_id,
                task_id,
                subagent_type: ty.clone(),
                description: description.clone(),
                tenant: ctx.tenant.clone(),
                attempt: 1,
                deadline: Some(protocol::now() + self.task_timeout),
                traceparent: ctx.traceparent.clone(),
                created_at: protocol::now(),
            };
            // Nats-Msg-Id = task id (shared/bus/src/tasks.rs): a publish repeated
            // after a crash inside the duplicate window is dropped by JetStream.
            let queue = self.bus.tasks();
            let published = retry("task publish", Duration::from_secs(30), || queue.publish(&msg)).await;
            if let Err(e) = published {
                self.reports.forget(&task_id);
                return Err(transient(e));
            }
            self.jobs
                .emit(ctx.job_id, JobEventKind::TaskDispatched { task_id, subagent_type: ty.clone(), description })
                .await;
            self.jobs
                .update(&ctx.job_id, |rec| {
                    if let Some(t) = rec.task_mut(&task_id) {
                        t.published = true;
                    }
                })
                .await
                .map_err(transient)?;
            tracing::info!(%task_id, subagent_type = %ty, "task dispatched");
        }

        // Wait a little past the task's own deadline: the worker reports the timeout itself.
        let wait = self.task_timeout + Duration::from_secs(30);
        let give_up = tokio::time::sleep(wait);
        tokio::pin!(waiter, give_up);
        // Queueing behind busy workers is fine; a type nobody serves is not.
        let mut served =
            tokio::time::interval_at(tokio::time::Instant::now() + self.no_worker_timeout, self.no_worker_timeout);
        let report = loop {
            tokio::select! {
                r = &mut waiter => break r.ok(),
                _ = &mut give_up => break None,
                _ = served.tick() => {
                    if !self.served(&ty).await {
                        self.reports.forget(&task_id);
                        self.drop_queued(&ty, &ctx.job_id).await;
                        return Err(ToolError::new(
                            ErrorKind::Transient,
                            format!(
                                "no worker serves {ty}: no live worker of that type for {}s; start `flotilla-worker` with a [subagents.{ty}] section",
                                self.no_worker_timeout.as_secs()
                            ),
                        ));
                    }
                }
                _ = ctx.cancel.cancelled() => {
                    self.reports.forget(&task_id);
                    return Err(ToolError::new(ErrorKind::Cancelled, "cancelled"));
                }
            }
        };
        let Some(report) = report else {
            self.reports.forget(&task_id);
            return Err(ToolError::new(
                ErrorKind::Timeout,
                format!("no report for task {task_id} within {}s", wait.as_secs()),
            ));
        };
        self.consolidate(&report).await;
        outcome_of_report(&report, &ty)
    }
}

/// The tool result of a task from its report: the summary, or its error.
fn outcome_of_report(report: &TaskReport, ty: &SubagentType) -> Result<Value, ToolError> {
    match report.status {
        // Too large for a message: the planner gets the reference and reads what it needs.
        TaskStatus::Completed if report.summary_file.is_some() => Ok(json!({
            "report_file": report.summary_file,
            "note": "the report is too large to show here; read report_file.path with read_file or grep",
        })),
        TaskStatus::Completed => Ok(Value::String(report.summary.clone())),
        status => Err(task_error(report.task_id, ty, status, report.error.as_ref())),
    }
}

/// The tool result of an already consolidated task (a resumed planner).
fn outcome_of(entry: &TaskEntry) -> Result<Value, ToolError> {
    match entry.status {
        Some(TaskStatus::Completed) | None => Ok(Value::String(entry.summary.clone())),
        Some(status) => Err(task_error(entry.task_id, &entry.subagent_type, status, entry.error.as_ref())),
    }
}

fn task_error(task_id: TaskId, ty: &SubagentType, status: TaskStatus, error: Option<&ErrorInfo>) -> ToolError {
    let (kind, message) =
        error.map(|e| (e.kind, e.message.as_str())).unwrap_or((ErrorKind::Bug, "report without error"));
    ToolError::new(kind, format!("task {task_id} ({ty}) {}: {message}", status.as_str()))
}

impl TaskTool {
    /// Whether a live worker (by heartbeat) serves `ty`. A failed lookup
    /// counts as served: an unreadable bucket must not fail tasks.
    async fn served(&self, ty: &SubagentType) -> bool {
        match self.bus.live_workers().await {
            Ok(workers) => workers.iter().any(|w| w.serves(ty)),
            Err(e) => {
                tracing::warn!(error = %e, "cannot read live workers");
                true
            }
        }
    }

    /// Removes the job's queued tasks of a type nobody serves.
    async fn drop_queued(&self, ty: &SubagentType, job: &flotilla_protocol::ids::JobId) {
        if let Err(e) = self.bus.tasks().purge_job(job, Some(ty)).await {
            tracing::warn!(error = %e, "queued tasks of an unserved type not purged");
        }
    }

    /// Folds a report into the job record, once.
    async fn consolidate(&self, report: &TaskReport) {
        let r = report.clone();
        let updated = self
            .jobs
            .update(&report.job_id, move |rec| {
                let Some(entry) = rec.task_mut(&r.task_id) else { return false };
                if entry.status.is_some() {
                    return false;
                }
                entry.status = Some(r.status);
                entry.summary = match &r.summary_file {
                    Some(f) => format!("{}\n[full report: {} ({} bytes)]", r.summary, f.path, f.size_bytes),
                    None => r.summary.clone(),
                };
                entry.error = r.error.clone();
                entry.usage = r.usage;
                entry.worker_id = Some(r.worker_id.clone());
                entry.attempt = r.attempt;
                entry.duration_ms = r.duration_ms;
                entry.started_at = Some(r.started_at);
                entry.finished_at = Some(r.finished_at);
                rec.usage += r.usage;
                *rec.usage_by_type.entry(r.subagent_type.clone()).or_default() += r.usage;
                true
            })
            .await;
        match updated {
            Ok(true) => {
                let summary = if report.status == TaskStatus::Completed {
                    report.summary.chars().take(200).collect()
                } else {
                    report.error.as_ref().map(|e| e.message.clone()).unwrap_or_default()
                };
                self.jobs
                    .emit(
                        report.job_id,
                        JobEventKind::TaskReported { task_id: report.task_id, status: report.status, summary },
                    )
                    .await;
            }
            Ok(false) => tracing::debug!(task_id = %report.task_id, "report already consolidated"),
            Err(e) => tracing::error!(error = %e, "report not recorded in job"),
        }
    }
}
