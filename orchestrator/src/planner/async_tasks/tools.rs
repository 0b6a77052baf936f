//! The five asynchronous delegation tools (docs/TOOLS.md, "Planner tools"):
//! argument shapes and validation here, the state they act on in
//! [`AsyncTasks`] (async_tasks.rs).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use flotilla_agent::tool::{Tool, ToolContext, ToolError, ToolSet, ToolSetError, ToolSpec};
use flotilla_bus::retry;
use flotilla_protocol::ids::TaskId;
use flotilla_protocol::{self as protocol, ErrorInfo, ErrorKind, FollowUp, TaskReport, TaskStatus, Usage};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::AsyncTasks;

/// Longest `wait_tasks` timeout, in seconds.
const MAX_WAIT_S: u64 = 3600;

/// How long `cancel_task` waits for the cancelled task's report after the
/// orchestrator reported on its behalf (the report travels through the bus).
const REPORT_SETTLE: Duration = Duration::from_secs(10);

pub(super) fn register(tasks: &Arc<AsyncTasks>, set: &mut ToolSet) -> Result<(), ToolSetError> {
    set.add(Arc::new(StartTask(tasks.clone())), "planner")?;
    set.add(Arc::new(CheckTasks(tasks.clone())), "planner")?;
    set.add(Arc::new(WaitTasks(tasks.clone())), "planner")?;
    set.add(Arc::new(CancelTask(tasks.clone())), "planner")?;
    set.add(Arc::new(MessageTask(tasks.clone())), "planner")?;
    // Following a task matters once one was started: until then these four
    // cost the planner's prompt nothing (they stay callable).
    for follow in ["check_tasks", "wait_tasks", "cancel_task", "message_task"] {
        set.list_after(follow, "start_task")?;
    }
    Ok(())
}

fn args<T: DeserializeOwned>(v: Value) -> Result<T, ToolError> {
    serde_json::from_value(v).map_err(|e| ToolError::validation(e.to_string()))
}

fn transient(what: &'static str) -> impl Fn(flotilla_bus::BusError) -> ToolError {
    move |e| ToolError::transient(format!("{what}: {e}"))
}

const IDS_SCHEMA: &str = "Task ids from start_task; default: every asynchronous task of this job.";

/// `start_task(description, subagent_type)`.
pub(super) struct StartTask(pub Arc<AsyncTasks>);

#[derive(Deserialize)]
struct StartArgs {
    description: String,
    subagent_type: String,
}

#[async_trait]
impl Tool for StartTask {
    fn spec(&self) -> ToolSpec {
        // The subagent types are listed once, in `task`'s description.
        self.0.dispatcher.delegating_spec(
            "start_task",
            "Like task, but returns the task id at once; then check_tasks, wait_tasks, message_task and \
             cancel_task follow it. Ending your turn while tasks run wakes you with their results.",
            false,
        )
    }

    async fn call(&self, ctx: &ToolContext, v: Value) -> Result<Value, ToolError> {
        let StartArgs { description, subagent_type } = args(v)?;
        let task = self.0.start(ctx, &subagent_type, description).await?;
        Ok(json!({"task_id": task, "status": "running"}))
    }
}

/// `check_tasks(ids?)`.
pub(super) struct CheckTasks(pub Arc<AsyncTasks>);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CheckArgs {
    ids: Option<Vec<String>>,
}

#[async_trait]
impl Tool for CheckTasks {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "check_tasks".into(),
            description: "Statuses of asynchronous tasks (running, or how each ended with its summary, error and \
                          report_path). Does not wait."
                .into(),
            input_schema: json!({
                "type": "object",
                "properties": {"ids": {"type": "array", "items": {"type": "string"}, "description": IDS_SCHEMA}},
                "additionalProperties": false
            }),
        }
    }

    /// Polls tasks that run elsewhere: the same call may see new outcomes.
    fn repeatable(&self) -> bool {
        true
    }

    async fn call(&self, ctx: &ToolContext, v: Value) -> Result<Value, ToolError> {
        let CheckArgs { ids } = args(v)?;
        let job = self.0.job(ctx);
        let ids = self.0.resolve(&job, ids, job.ids()).await?;
        let tasks = job.show(&ids);
        let running = tasks.iter().filter(|t| t["status"] == "running").count();
        Ok(json!({"tasks": tasks, "running": running, "ended": ids.len() - running}))
    }
}

/// `wait_tasks(ids?, timeout_s, all?)`.
pub(super) struct WaitTasks(pub Arc<AsyncTasks>);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WaitArgs {
    ids: Option<Vec<String>>,
    timeout_s: u64,
    #[serde(default)]
    all: bool,
}

#[async_trait]
impl Tool for WaitTasks {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "wait_tasks".into(),
            description: format!(
                "Wait until one of the tasks ends (all=true: every one) or timeout_s seconds pass (at most \
                 {MAX_WAIT_S}). Without ids: the tasks running or not yet seen. Returns the ended ones and the \
                 ids still running."
            ),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "ids": {"type": "array", "items": {"type": "string"}, "description": IDS_SCHEMA},
                    "timeout_s": {"type": "integer", "minimum": 1, "maximum": MAX_WAIT_S},
                    "all": {"type": "boolean"}
                },
                "required": ["timeout_s"],
                "additionalProperties": false
            }),
        }
    }

    /// Polls tasks that run elsewhere: the same call may see new outcomes.
    fn repeatable(&self) -> bool {
        true
    }

    async fn call(&self, ctx: &ToolContext, v: Value) -> Result<Value, ToolError> {
        let WaitArgs { ids, timeout_s, all } = args(v)?;
        if !(1..=MAX_WAIT_S).contains(&timeout_s) {
            return Err(ToolError::validation(format!("timeout_s must be 1..={MAX_WAIT_S}, not {timeout_s}")));
        }
        let job = self.0.job(ctx);
        let default = [job.running(), job.unseen()].concat();
        let targets = self.0.resolve(&job, ids, default).await?;
        let ended = |j: &super::JobTasks, t: &TaskId| matches!(j.state(t), Some(Some(_)));
        let done = |j: &super::JobTasks| {
            if all { targets.iter().all(|t| ended(j, t)) } else { targets.iter().any(|t| ended(j, t)) }
        };
        let waited =
            tokio::time::timeout(Duration::from_secs(timeout_s), job.until(&ctx.cancel, done)).await.unwrap_or(false);
        if ctx.cancel.is_cancelled() {
            return Err(ToolError::new(ErrorKind::Cancelled, "cancelled"));
        }
        let (finished, running): (Vec<TaskId>, Vec<TaskId>) = targets.iter().partition(|t| ended(&job, t));
        Ok(json!({"ended": job.show(&finished), "running": running, "timed_out": !waited && !targets.is_empty()}))
    }
}

/// `cancel_task(id, reason?)`.
pub(super) struct CancelTask(pub Arc<AsyncTasks>);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CancelArgs {
    id: String,
    reason: Option<String>,
}

#[async_trait]
impl Tool for CancelTask {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "cancel_task".into(),
            description: "Cancel one asynchronous task: a queued one never runs, a running subagent stops. It \
                          ends `cancelled`; the job and its other tasks go on. Returns its outcome."
                .into(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "id": {"type": "string"},
                    "reason": {"type": "string", "maxLength": 500}
                },
                "required": ["id"],
                "additionalProperties": false
            }),
        }
    }

    async fn call(&self, ctx: &ToolContext, v: Value) -> Result<Value, ToolError> {
        let CancelArgs { id, reason } = args(v)?;
        let job = self.0.job(ctx);
        let task = self.0.known(&job, &id).await?;
        if let Some(Some(done)) = job.state(&task) {
            let status = done.status.as_str();
            return Err(ToolError::business(format!("task {task} already ended ({status}); nothing to cancel")));
        }
        let reason = reason.filter(|r| !r.trim().is_empty()).unwrap_or_else(|| "cancelled by the planner".into());
        let control = &self.0.control;
        retry("task cancel", Duration::from_secs(10), || control.cancel(&ctx.job_id, &task, &reason))
            .await
            .map_err(transient("task not cancelled"))?;
        tracing::info!(%task, %reason, "asynchronous task cancelled");
        let ended = |j: &super::JobTasks| matches!(j.state(&task), Some(Some(_)));
        let by_itself = tokio::time::timeout(self.0.cancel_grace, job.until(&ctx.cancel, ended)).await;
        if !matches!(by_itself, Ok(true)) && !ctx.cancel.is_cancelled() {
            // No worker reported: the task waits in the queue. Report for it;
            // the worker that pulls it later refuses it (workers/src/cancel.rs).
            self.report_cancelled(ctx, &task, &reason).await?;
            let _ = tokio::time::timeout(REPORT_SETTLE, job.until(&ctx.cancel, ended)).await;
        }
        let shown = job.show(&[task]).pop().unwrap_or_default();
        if shown["status"] == "running" {
            return Ok(json!({"task_id": task, "status": "running", "cancel": "requested; it ends cancelled shortly"}));
        }
        Ok(shown)
    }
}

impl CancelTask {
    async fn report_cancelled(&self, ctx: &ToolContext, task: &TaskId, reason: &str) -> Result<(), ToolError> {
        let entry = self.0.dispatcher.jobs().task(&ctx.job_id, task).await.map_err(transient("task not readable"))?;
        let Some(entry) = entry else { return Ok(()) };
        let now = protocol::now();
        let report = TaskReport {
            v: protocol::REPORT_VERSION,
            job_id: ctx.job_id,
            task_id: *task,
            subagent_type: entry.subagent_type,
            status: TaskStatus::Cancelled,
            summary: String::new(),
            summary_file: None,
            error: Some(ErrorInfo::new(ErrorKind::Cancelled, format!("the task was cancelled: {reason}"))),
            usage: Usage::default(),
            worker_id: "orchestrator".into(),
            attempt: 1,
            resumed_from_step: None,
            started_at: now,
            finished_at: now,
            duration_ms: 0,
        };
        let control = &self.0.control;
        retry("cancelled report", Duration::from_secs(10), || control.report(&ctx.tenant, &report))
            .await
            .map_err(transient("cancelled report not stored"))
    }
}

/// `message_task(id, text)`.
pub(super) struct MessageTask(pub Arc<AsyncTasks>);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MessageArgs {
    id: String,
    text: String,
}

#[async_trait]
impl Tool for MessageTask {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "message_task".into(),
            description: format!(
                "Send follow-up instructions to a queued or running asynchronous task; its subagent reads them \
                 as a user message before its next model call. At most {} bytes: put long material in a job \
                 file and name it.",
                protocol::MAX_FOLLOW_UP_BYTES
            ),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "id": {"type": "string"},
                    "text": {"type": "string", "minLength": 1}
                },
                "required": ["id", "text"],
                "additionalProperties": false
            }),
        }
    }

    async fn call(&self, ctx: &ToolContext, v: Value) -> Result<Value, ToolError> {
        let MessageArgs { id, text } = args(v)?;
        protocol::check_follow_up_text(&text).map_err(ToolError::validation)?;
        let job = self.0.job(ctx);
        let task = self.0.known(&job, &id).await?;
        if let Some(Some(done)) = job.state(&task) {
            return Err(ToolError::business(format!(
                "task {task} has ended ({}); a message reaches only a queued or running task",
                done.status.as_str()
            )));
        }
        // The type is part of the subject, so only a worker of that type can read it.
        let entry = self.0.dispatcher.jobs().task(&ctx.job_id, &task).await.map_err(transient("task not readable"))?;
        let Some(entry) = entry else {
            return Err(ToolError::new(ErrorKind::NotFound, format!("task {task} is not recorded in this job")));
        };
        let msg = FollowUp {
            v: protocol::SCHEMA_VERSION,
            id: format!("{}.{}", ctx.job_id, ctx.call_key()),
            job_id: ctx.job_id,
            task_id: task,
            subagent_type: entry.subagent_type,
            text,
            sent_at: protocol::now(),
        };
        let control = &self.0.control;
        retry("follow-up message", Duration::from_secs(10), || control.message(&ctx.tenant, &msg))
            .await
            .map_err(transient("message not sent"))?;
        Ok(json!({
            "task_id": task,
            "status": "running",
            "delivered": "stored; the subagent reads it before its next model call (when it starts, if still queued)"
        }))
    }
}
