//! `task(description, subagent_type)` (seed 000 section 2.5): delegates one
//! self-contained piece of work to a subagent type over the bus and returns
//! its report. Parallel calls in one planner turn are parallel tasks; a failed
//! report is an error result for that call only.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use flotilla_shared::bus::Bus;
use flotilla_shared::ids::{SubagentType, TaskId};
use flotilla_shared::protocol::{self, ErrorKind, JobEventKind, TaskEntry, TaskMessage, TaskReport, TaskStatus, Usage};
use flotilla_shared::tool::{Tool, ToolContext, ToolError, ToolSpec};
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
        };
        let transient = |e: flotilla_shared::bus::BusError| ToolError::transient(format!("task not dispatched: {e}"));
        self.jobs.update(&ctx.job_id, |rec| rec.tasks.push(entry)).await.map_err(transient)?;
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
        let waiter = self.reports.expect(task_id);
        if let Err(e) = self
            .bus
            .publish_durable(self.bus.subjects.task(&ty), &msg, Some(&task_id.to_string()), ctx.traceparent.as_deref())
            .await
        {
            self.reports.forget(&task_id);
            return Err(transient(e));
        }
        self.jobs
            .emit(ctx.job_id, JobEventKind::TaskDispatched { task_id, subagent_type: ty.clone(), description })
            .await;
        tracing::info!(%task_id, subagent_type = %ty, "task dispatched");

        // Wait a little past the task's own deadline: the worker reports the timeout itself.
        let wait = self.task_timeout + Duration::from_secs(30);
        let report = tokio::select! {
            r = waiter => r.ok(),
            _ = tokio::time::sleep(wait) => None,
            _ = ctx.cancel.cancelled() => {
                self.reports.forget(&task_id);
                return Err(ToolError::new(ErrorKind::Cancelled, "cancelled"));
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
        match report.status {
            TaskStatus::Completed => Ok(Value::String(report.summary)),
            _ => {
                let e = report.error.unwrap_or_else(|| {
                    flotilla_shared::protocol::ErrorInfo::new(ErrorKind::Bug, "report without error")
                });
                Err(ToolError::new(e.kind, format!("task {task_id} ({ty}) {}: {}", report.status.as_str(), e.message)))
            }
        }
    }
}

impl TaskTool {
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
                entry.summary = r.summary.clone();
                entry.error = r.error.clone();
                entry.usage = r.usage;
                entry.worker_id = Some(r.worker_id.clone());
                entry.attempt = r.attempt;
                entry.duration_ms = r.duration_ms;
                rec.usage += r.usage;
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
