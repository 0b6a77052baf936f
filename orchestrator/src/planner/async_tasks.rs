//! Asynchronous delegation (docs/TOOLS.md, "Asynchronous
//! tasks"): `start_task` returns a task id at once, `check_tasks`,
//! `wait_tasks`, `cancel_task` and `message_task` follow and steer the
//! tasks while the planner keeps working. The blocking `task` tool
//! (task_tool.rs) waits in its own call; these tasks are instead followed
//! in the background by one follower each, over the shared
//! [`Dispatcher`](super::dispatch::Dispatcher), so a report is consolidated
//! into the job once whoever asks.
//!
//! A planner that ends its turn with tasks still running is not finished:
//! [`AsyncTasks::run`] wraps the agent run, waits for the reports and wakes
//! the planner with a user message listing what ended, until nothing is
//! running and every outcome was shown. Everything resumes after an
//! orchestrator restart: the conversation (checkpointed, wake-up notes
//! included) tells which tasks the planner started and which outcomes it
//! already saw; a task it names that the conversation no longer shows (after
//! a compaction) is recognised by its dispatch key (`async:<call id>`) in
//! the job's task records; a turn that had ended goes straight back to waiting.

mod control;
mod registry;
#[cfg(test)]
mod tests;
mod tools;

use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use flotilla_agent::agent::{Agent, AgentObserver, Conversation, RunContext};
use flotilla_agent::model::ChatMessage;
use flotilla_agent::tool::{ToolContext, ToolError, ToolSet, ToolSetError};
use flotilla_protocol::ids::{JobId, TaskId};
use flotilla_protocol::{ErrorInfo, ErrorKind};
use serde_json::{Value, json};

use super::dispatch::Dispatcher;
pub(crate) use control::{BusControl, TaskControl};
use registry::JobTasks;

/// Dispatch keys of asynchronous tasks start with this, then the call id:
/// how a restarted orchestrator tells them from `task` and `map_tasks` ones.
pub(super) const KEY_PREFIX: &str = "async:";

/// The first line of a wake-up note; the JSON list of outcomes follows.
const WAKE_HEADER: &str = "[asynchronous tasks ended]";

/// The tools whose results show outcomes to the planner.
const SHOWING_TOOLS: [&str; 3] = ["check_tasks", "wait_tasks", "cancel_task"];

/// The asynchronous tasks of every job this orchestrator plans.
pub struct AsyncTasks {
    dispatcher: Dispatcher,
    control: Arc<dyn TaskControl>,
    jobs: DashMap<JobId, Arc<JobTasks>>,
    /// How long a cancelled task may take to report `cancelled` itself (a
    /// running subagent aborts within this) before the orchestrator reports
    /// it on its behalf (a task still queued behind busy workers).
    cancel_grace: Duration,
}

impl AsyncTasks {
    /// Over the planner's dispatcher and the bus.
    pub fn new(
        dispatcher: Dispatcher,
        bus: flotilla_bus::Bus,
        cancellations: flotilla_bus::Cancellations,
    ) -> Arc<Self> {
        Self::with_control(dispatcher, Arc::new(BusControl { bus, cancellations }), Duration::from_secs(5))
    }

    pub(crate) fn with_control(
        dispatcher: Dispatcher,
        control: Arc<dyn TaskControl>,
        cancel_grace: Duration,
    ) -> Arc<Self> {
        Arc::new(Self { dispatcher, control, jobs: DashMap::new(), cancel_grace })
    }

    /// Adds the five asynchronous tools to the planner's tools.
    pub fn register(self: &Arc<Self>, tools: &mut ToolSet) -> Result<(), ToolSetError> {
        tools::register(self, tools)
    }

    /// Runs the planner's agent until it has answered with no asynchronous
    /// task running and every outcome shown to it: each time it ends a turn
    /// before that, waits for the reports and continues the conversation
    /// with a wake-up note listing what ended (checkpointed first).
    pub async fn run(
        self: &Arc<Self>,
        agent: &Agent,
        conv: &mut Conversation,
        ctx: &RunContext,
        observer: &dyn AgentObserver,
    ) -> Result<String, ErrorInfo> {
        let job = self.enter(ctx, conv).await;
        let _leave = Leave { tasks: self.clone(), job: job.clone() };
        // A resumed planner whose turn had ended goes back to waiting.
        let mut answer = match ended_turn(conv) {
            Some(answer) if !job.ids().is_empty() => answer,
            _ => agent.run(conv, ctx, observer).await?,
        };
        loop {
            let settled = |j: &JobTasks| j.running().is_empty() || !j.unseen().is_empty();
            if !job.until(&ctx.cancel, settled).await {
                return Err(ErrorInfo::new(ErrorKind::Cancelled, "cancelled"));
            }
            let unseen = job.unseen();
            if unseen.is_empty() {
                return Ok(answer);
            }
            let note = wake_note(&job, &unseen);
            tracing::info!(job_id = %job.job, ended = unseen.len(), running = job.running().len(), "planner woken by task reports");
            conv.messages.push(ChatMessage::User { content: note });
            observer.checkpoint(conv).await;
            answer = agent.run(conv, ctx, observer).await?;
        }
    }

    /// Opens the job's registry: the asynchronous tasks the conversation
    /// started (a restarted planner's), ended ones marked shown when the
    /// conversation shows their outcome, a follower for each running one.
    async fn enter(self: &Arc<Self>, ctx: &RunContext, conv: &Conversation) -> Arc<JobTasks> {
        let stop = ctx.cancel.child_token();
        let job = Arc::new(JobTasks::new(ctx.job_id, ctx.tenant.clone(), ctx.traceparent.clone(), stop));
        self.jobs.insert(ctx.job_id, job.clone());
        let shown = shown_in(conv);
        for task in started_in(conv) {
            self.adopt(&job, task, shown.contains(&task)).await;
        }
        if !job.ids().is_empty() {
            let (tasks, running) = (job.ids().len(), job.running().len());
            tracing::info!(job_id = %ctx.job_id, tasks, running, "asynchronous tasks resumed");
        }
        job
    }

    /// Tracks a task started earlier: its outcome when it has ended, else a follower.
    async fn adopt(self: &Arc<Self>, job: &Arc<JobTasks>, task: TaskId, shown: bool) {
        if !job.track(task) {
            return;
        }
        match self.dispatcher.finished(&job.job, &task).await {
            Ok(Some(outcome)) => job.ended(outcome, shown),
            Ok(None) => self.follow(job, task),
            Err(e) => {
                tracing::warn!(%task, error = %e.message, "asynchronous task not readable; following it");
                self.follow(job, task)
            }
        }
    }

    /// The task `id` names, if it is one of the job's asynchronous tasks:
    /// tracked, or recorded under an asynchronous dispatch key (a task
    /// whose start a compacted conversation no longer shows).
    async fn known(self: &Arc<Self>, job: &Arc<JobTasks>, id: &str) -> Result<TaskId, ToolError> {
        let task: TaskId = id.parse().map_err(|_| ToolError::validation(format!("{id:?} is not a task id")))?;
        if job.state(&task).is_some() {
            return Ok(task);
        }
        let entry = self.dispatcher.jobs().task(&job.job, &task).await;
        let entry = entry.map_err(|e| ToolError::transient(format!("task not readable: {e}")))?;
        if entry.is_some_and(|e| e.call_id.is_some_and(|k| k.starts_with(KEY_PREFIX))) {
            self.adopt(job, task, false).await;
            return Ok(task);
        }
        Err(ToolError::new(
            ErrorKind::NotFound,
            format!("no asynchronous task {task} in this job; start_task returns the ids, check_tasks lists them"),
        ))
    }

    /// The registry of the job `ctx` belongs to (opened by [`Self::run`];
    /// opened empty for a call outside it, as in unit tests).
    fn job(self: &Arc<Self>, ctx: &ToolContext) -> Arc<JobTasks> {
        self.jobs
            .entry(ctx.job_id)
            .or_insert_with(|| {
                let stop = ctx.cancel.child_token();
                Arc::new(JobTasks::new(ctx.job_id, ctx.tenant.clone(), ctx.traceparent.clone(), stop))
            })
            .clone()
    }

    /// Follows `task` in the background until it ends (or the job's run
    /// does) and records its outcome.
    fn follow(self: &Arc<Self>, job: &Arc<JobTasks>, task: TaskId) {
        let (dispatcher, job) = (self.dispatcher.clone(), job.clone());
        let ctx = ToolContext {
            job_id: job.job,
            task_id: None,
            tenant: job.tenant.clone(),
            call_id: format!("follow-{task}"),
            idempotency_key: format!("{}:follow-{task}", job.job),
            traceparent: job.traceparent.clone(),
            cancel: job.stop.clone(),
            approvals: None,
        };
        tokio::spawn(async move {
            let mut backoff = flotilla_bus::Backoff::new(Duration::from_millis(200), Duration::from_secs(10));
            loop {
                match dispatcher.wait(&ctx, task).await {
                    Ok(outcome) => return job.ended(outcome, false),
                    Err(e) if e.kind == ErrorKind::Cancelled => return,
                    Err(e) => tracing::warn!(%task, error = %e.message, "following an asynchronous task; retrying"),
                }
                tokio::select! {
                    _ = tokio::time::sleep(backoff.next_delay()) => {}
                    _ = job.stop.cancelled() => return,
                }
            }
        });
    }

    /// Starts a task under the call's dispatch key and follows it.
    async fn start(self: &Arc<Self>, ctx: &ToolContext, ty: &str, description: String) -> Result<TaskId, ToolError> {
        let key = format!("{KEY_PREFIX}{}", ctx.call_key());
        let task = self.dispatcher.start_now(ctx, ty, description, &key).await?;
        self.adopt(&self.job(ctx), task, false).await;
        Ok(task)
    }

    /// `ids` as given (each must be one of the job's asynchronous tasks),
    /// or `default` when none are given.
    async fn resolve(
        self: &Arc<Self>,
        job: &Arc<JobTasks>,
        ids: Option<Vec<String>>,
        default: Vec<TaskId>,
    ) -> Result<Vec<TaskId>, ToolError> {
        let Some(ids) = ids else { return Ok(default) };
        let mut out = Vec::with_capacity(ids.len());
        for id in &ids {
            out.push(self.known(job, id).await?);
        }
        Ok(out)
    }
}

/// Closes a job's registry when its planner run ends: followers stop.
struct Leave {
    tasks: Arc<AsyncTasks>,
    job: Arc<JobTasks>,
}

impl Drop for Leave {
    fn drop(&mut self) {
        self.job.stop.cancel();
        self.tasks.jobs.remove_if(&self.job.job, |_, j| Arc::ptr_eq(j, &self.job));
    }
}

/// The answer of a conversation whose last message is a final model turn
/// (text, no tool calls): the planner had ended its turn.
fn ended_turn(conv: &Conversation) -> Option<String> {
    match conv.messages.last() {
        Some(ChatMessage::Assistant { content, tool_calls }) if tool_calls.is_empty() => {
            Some(content.clone().unwrap_or_default())
        }
        _ => None,
    }
}

/// The wake-up note: the header line, then the outcomes as JSON.
fn wake_note(job: &JobTasks, ended: &[TaskId]) -> String {
    let running = job.running();
    let body = json!({"ended": job.show(ended), "running": running});
    format!(
        "{WAKE_HEADER}\n{body}\n{} of your asynchronous tasks ended (above); {} still running. Continue the job with these results.",
        ended.len(),
        running.len()
    )
}

/// Tasks the conversation started: the ids in `start_task` results.
fn started_in(conv: &Conversation) -> Vec<TaskId> {
    let started = |m: &ChatMessage| match m {
        ChatMessage::Tool { name, content, is_error: false, .. } if name == "start_task" => {
            let v: Value = serde_json::from_str(content).ok()?;
            v.get("task_id")?.as_str()?.parse().ok()
        }
        _ => None,
    };
    conv.messages.iter().filter_map(started).collect()
}

/// Tasks whose outcome the conversation already shows: in a result of
/// check_tasks, wait_tasks or cancel_task, or in a wake-up note.
fn shown_in(conv: &Conversation) -> std::collections::HashSet<TaskId> {
    let mut shown = std::collections::HashSet::new();
    for m in &conv.messages {
        let body = match m {
            ChatMessage::Tool { name, content, is_error: false, .. } if SHOWING_TOOLS.contains(&name.as_str()) => {
                content.as_str()
            }
            ChatMessage::User { content } if content.starts_with(WAKE_HEADER) => {
                content.lines().nth(1).unwrap_or_default()
            }
            _ => continue,
        };
        let Ok(value) = serde_json::from_str::<Value>(body) else { continue };
        collect_ended(&value, &mut shown);
    }
    shown
}

/// Every `{"task_id", "status"}` object in `value` whose status is an end.
fn collect_ended(value: &Value, into: &mut std::collections::HashSet<TaskId>) {
    match value {
        Value::Array(items) => items.iter().for_each(|v| collect_ended(v, into)),
        Value::Object(map) => {
            let status = map.get("status").and_then(Value::as_str);
            let task = map.get("task_id").and_then(Value::as_str).and_then(|t| t.parse().ok());
            if let (Some(task), Some(status)) = (task, status)
                && status != "running"
            {
                into.insert(task);
            }
            map.values().for_each(|v| collect_ended(v, into));
        }
        _ => {}
    }
}
