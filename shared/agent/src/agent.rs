//! The tool-call loop shared by the planner and every subagent:
//! the model returns tool calls, the [`ToolSet`] validates and
//! runs them (concurrently, each isolated from its siblings), the results go
//! back to the model, until it answers with text or a limit ends the run.
//!
//! The loop owns no I/O of its own: progress reporting and checkpointing are
//! the [`AgentObserver`]'s job, so the planner can persist its conversation
//! after every step and a worker can publish progress events. A conversation
//! whose last message is a model turn with unanswered tool calls resumes by
//! running those calls, which is how a restarted planner picks up a job.
//!
//! Before every model call the loop takes the follow-up messages waiting in
//! the run's [`Inbox`] (a user's `message_task`, docs/PROTOCOL.md) and, when a
//! [`ContextBudget`] is set, keeps the request under it by compacting older
//! turns into a model-written summary ([`compaction`], docs/CONFIG.md
//! "Bounded context").

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::model::{ChatMessage, ChatModel, DeltaSink, ModelRequest, Purpose, ToolCall};
use crate::tool::{ApprovalGate, ToolContext, ToolOutcome, ToolSet};
use flotilla_protocol::ids::{JobId, TaskId, Tenant};
use flotilla_protocol::{ErrorInfo, ErrorKind, Usage};

pub mod compaction;
pub mod output_schema;
pub mod steps;
pub mod tool_policy;

pub use compaction::ContextBudget;
pub use output_schema::OutputSchema;
pub use steps::Step;
pub use tool_policy::ToolPolicy;

/// Limits of one agent run.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Model calls at most.
    pub max_steps: u32,
    /// Wall time of the whole run.
    pub timeout: Duration,
    /// Input plus output tokens at most, when set.
    pub max_tokens: Option<u64>,
    /// The bound on each request's size, when set: past it older turns are
    /// compacted.
    pub context: Option<ContextBudget>,
}

/// An agent's memory: its messages and what it has spent. Serializable so the
/// planner can checkpoint it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Conversation {
    /// All messages, system prompt first.
    pub messages: Vec<ChatMessage>,
    /// Spend so far.
    pub usage: Usage,
    /// Model calls so far (compaction calls not included).
    pub steps: u32,
    /// Model turns replaced by a compaction summary, so no longer in
    /// `messages`.
    #[serde(default)]
    pub compacted_turns: u32,
    /// Follow-up messages taken so far ([`Inbox`]), compacted ones included.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub inbox_taken: u64,
    /// Call ids of the last turn that may have started before an earlier
    /// attempt stopped ([`steps`]): run again, their results say so.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interrupted: Vec<String>,
    /// A note for the model, added as a user message before the next model
    /// call (after any pending tool calls ran): what a resumed run should
    /// know that its conversation does not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Conversation {
    /// A fresh context: system prompt and one user message, nothing else.
    pub fn new(system: impl Into<String>, user: impl Into<String>) -> Self {
        Self {
            messages: vec![ChatMessage::System { content: system.into() }, ChatMessage::User { content: user.into() }],
            usage: Usage::default(),
            steps: 0,
            compacted_turns: 0,
            inbox_taken: 0,
            interrupted: Vec::new(),
            note: None,
        }
    }

    /// The answer the conversation ends with: a last model turn of text
    /// and no tool calls.
    pub fn final_answer(&self) -> Option<String> {
        match self.messages.last() {
            Some(ChatMessage::Assistant { content: Some(text), tool_calls }) if tool_calls.is_empty() => {
                Some(text.clone())
            }
            _ => None,
        }
    }

    /// Tool calls of the last model turn that have no results yet (a
    /// resumed turn may have some of its results already).
    fn pending_calls(&self) -> Vec<ToolCall> {
        let Some((calls, results)) = self.last_turn() else { return Vec::new() };
        calls.iter().filter(|c| !results.iter().any(|r| tool_call_id(r) == Some(c.id.as_str()))).cloned().collect()
    }

    /// The last model turn's calls and the tool results after it, when
    /// nothing but tool results follows it.
    fn last_turn(&self) -> Option<(&[ToolCall], &[ChatMessage])> {
        let at = self.messages.iter().rposition(|m| !matches!(m, ChatMessage::Tool { .. }))?;
        match &self.messages[at] {
            ChatMessage::Assistant { tool_calls, .. } if !tool_calls.is_empty() => {
                Some((tool_calls, &self.messages[at + 1..]))
            }
            _ => None,
        }
    }
}

fn tool_call_id(m: &ChatMessage) -> Option<&str> {
    match m {
        ChatMessage::Tool { tool_call_id, .. } => Some(tool_call_id),
        _ => None,
    }
}

/// Sees what the loop does. Every method has a no-op default.
#[async_trait]
pub trait AgentObserver: Send + Sync {
    /// A streaming model (`stream = true`) wrote `text`, the next piece of
    /// the current step's answer; a step's deltas all come, in order, before
    /// its [`model_called`](Self::model_called).
    async fn model_delta(&self, _text: &str) {}
    /// A model call returned.
    async fn model_called(&self, _step: u32, _usage: Usage, _latency: Duration) {}
    /// The model call of `step` (the one [`model_called`](Self::model_called)
    /// would have announced) failed with `kind` after `latency`; the run ends
    /// with that error. `usage` is what the failed call reported; zero for
    /// now, as a [`ModelError`](crate::model::ModelError) carries no token
    /// counts (a refused or unreadable reply has none to trust).
    async fn model_failed(&self, _step: u32, _kind: ErrorKind, _latency: Duration, _usage: Usage) {}
    /// A tool call is about to run.
    async fn tool_started(&self, _call: &ToolCall) {}
    /// A tool call ended.
    async fn tool_finished(&self, _call: &ToolCall, _outcome: &ToolOutcome) {}
    /// The conversation changed (after a model turn, after its tool results,
    /// after inbox messages were added, after a compaction).
    async fn checkpoint(&self, _conversation: &Conversation) {}
    /// A step completed ([`steps`]); the loop waits for this before it acts
    /// on the step, so an observer that makes it durable (a worker's step
    /// journal) lets a later attempt resume after it. The turn that answers
    /// is handed over like any other.
    async fn step(&self, _step: &Step) {}
    /// A model call returned turn `number` of the run: `step` (its
    /// [`Step::Turn`]) is handed over as [`step`](Self::step) would be, then
    /// announced as [`model_called`](Self::model_called) would; an observer
    /// that records and announces a step in one write (a worker, whose step
    /// journal carries the progress event) does both at once.
    async fn turn_completed(&self, step: &Step, number: u32, usage: Usage, latency: Duration) {
        self.step(step).await;
        self.model_called(number, usage, latency).await;
    }
    /// A tool call ended: its result `step` (none when the call was cut short
    /// by the run stopping: not a step), then the announcement of
    /// [`tool_finished`](Self::tool_finished); together, as
    /// [`turn_completed`](Self::turn_completed).
    async fn tool_completed(&self, step: Option<&Step>, call: &ToolCall, outcome: &ToolOutcome) {
        if let Some(step) = step {
            self.step(step).await;
        }
        self.tool_finished(call, outcome).await;
    }
    /// Older turns were replaced by a summary: the request measured
    /// `before_tokens` and now measures `after_tokens` (o200k_base, the whole
    /// request); `usage` is the compaction call's, already added to the
    /// conversation's.
    async fn on_compacted(&self, _before_tokens: u64, _after_tokens: u64, _usage: Usage) {}
}

/// Follow-up messages for a running agent (`message_task`): the loop takes
/// them before each model call and adds each as a user message.
pub trait Inbox: Send + Sync {
    /// Every message waiting, oldest first; each is returned once.
    fn take(&self) -> Vec<String>;
}

/// An in-memory [`Inbox`]: whoever holds it pushes, the loop takes.
#[derive(Default)]
pub struct MessageInbox {
    waiting: std::sync::Mutex<Vec<String>>,
}

impl MessageInbox {
    /// Queues `text` for the agent's next model call.
    pub fn push(&self, text: impl Into<String>) {
        self.waiting.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(text.into());
    }
}

impl Inbox for MessageInbox {
    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.waiting.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
    }
}

/// An observer that observes nothing.
pub struct NoObserver;
impl AgentObserver for NoObserver {}

/// Who the run is for, handed to every tool call.
#[derive(Clone)]
pub struct RunContext {
    /// The job.
    pub job_id: JobId,
    /// The task; `None` for the planner.
    pub task_id: Option<TaskId>,
    /// Owner.
    pub tenant: Tenant,
    /// W3C traceparent.
    pub traceparent: Option<String>,
    /// Fires on cancellation.
    pub cancel: CancellationToken,
    /// Human approval for the tools that need it.
    pub approvals: Option<Arc<dyn ApprovalGate>>,
    /// Follow-up messages from outside the run, when it takes any.
    pub inbox: Option<Arc<dyn Inbox>>,
    /// The run's `invoke_agent` span ([`crate::spans`]), parent of its
    /// `chat` and `execute_tool` spans; `Span::none()` traces nothing.
    pub span: tracing::Span,
}

/// A model, its tools and its limits.
pub struct Agent {
    /// The model.
    pub model: Arc<dyn ChatModel>,
    /// The only tools this agent can call.
    pub tools: Arc<ToolSet>,
    /// Its limits.
    pub limits: Limits,
    /// Stop-at tools and loop detection ([`tool_policy`]).
    pub policy: ToolPolicy,
    /// The schema a final answer must match, when set ([`output_schema`]).
    pub output: Option<Arc<OutputSchema>>,
}

impl Agent {
    /// Runs until the model answers; returns its final text.
    pub async fn run(
        &self,
        conv: &mut Conversation,
        ctx: &RunContext,
        observer: &dyn AgentObserver,
    ) -> Result<String, ErrorInfo> {
        let timeout = self.limits.timeout;
        tokio::select! {
            biased;
            _ = ctx.cancel.cancelled() => Err(ErrorInfo::new(ErrorKind::Cancelled, "cancelled")),
            r = tokio::time::timeout(timeout, self.run_inner(conv, ctx, observer)) => match r {
                Ok(r) => r,
                Err(_) => Err(ErrorInfo::new(ErrorKind::Timeout, format!("agent ran out of its {}s wall-time limit", timeout.as_secs()))),
            },
        }
    }

    async fn run_inner(
        &self,
        conv: &mut Conversation,
        ctx: &RunContext,
        observer: &dyn AgentObserver,
    ) -> Result<String, ErrorInfo> {
        let mut specs: Vec<crate::tool::ToolSpec> = Vec::new();
        // A checkpoint taken after the answering turn (the process stopped
        // before the answer was recorded elsewhere) resumes to that answer:
        // the model is not asked, and billed, again. Follow-ups that arrived
        // since still get their turn.
        if let Some(answer) = conv.final_answer() {
            match &self.output {
                None => {
                    if !take_inbox(conv, ctx, observer).await {
                        return Ok(answer);
                    }
                    observer.checkpoint(conv).await;
                }
                Some(schema) => {
                    if let Some(valid) = self.checked(schema, &answer, conv, observer).await? {
                        return Ok(valid);
                    }
                }
            }
        }
        loop {
            let pending = conv.pending_calls();
            if !pending.is_empty() {
                let (results, ran) = self.run_calls(&pending, conv, ctx, observer).await?;
                conv.usage.tool_calls += ran;
                conv.messages.extend(results);
                conv.interrupted.clear();
                conv.order_last_results();
                let answer = conv.last_turn().and_then(|(calls, results)| self.stop_answer(calls, results));
                observer.checkpoint(conv).await;
                match answer {
                    Some(answer) => return Ok(answer),
                    None => continue,
                }
            }
            if conv.steps >= self.limits.max_steps {
                return Err(ErrorInfo::new(
                    ErrorKind::Limit,
                    format!("step limit reached: {} model calls without a final answer", self.limits.max_steps),
                ));
            }
            if let Some(max) = self.limits.max_tokens.filter(|m| conv.usage.total_tokens() >= *m) {
                return Err(ErrorInfo::new(ErrorKind::Limit, format!("token budget of {max} exhausted")));
            }
            if let Some(content) = conv.note.take() {
                let step = Step::Note { content };
                observer.step(&step).await;
                conv.apply(step);
            }
            if take_inbox(conv, ctx, observer).await {
                observer.checkpoint(conv).await;
            }
            // The tools listed by now (shared/agent/src/tool/set.rs,
            // `list_after`); once every tool is, the list stays.
            if specs.len() < self.tools.len() {
                specs = self.tools.model_specs(&conv.messages, conv.compacted_turns > 0);
            }
            if let Some(budget) = &self.limits.context {
                let compacted = conv.compacted_turns;
                compaction::fit(self.model.as_ref(), budget, conv, &specs, ctx, observer).await?;
                if conv.compacted_turns != compacted {
                    observer.step(&Step::Snapshot { conversation: Box::new(conv.clone()) }).await;
                    specs = self.tools.model_specs(&conv.messages, true);
                }
            }
            let started = Instant::now();
            let request = ModelRequest {
                messages: &conv.messages,
                tools: &specs,
                purpose: Purpose::Step,
                compacted_turns: conv.compacted_turns,
                deltas: Some(&ObserverDeltas(observer)),
                output_schema: self.output.as_ref().map(|o| o.schema()),
            };
            let span = crate::spans::chat(&ctx.span, self.model.identity(), "step", &conv.messages);
            let response = match self.model.complete(request).await {
                Ok(response) => response,
                Err(e) => {
                    let latency = started.elapsed();
                    let e = model_error(e, ctx);
                    crate::spans::failed(&span, e.kind, &e.message);
                    drop(span);
                    observer.model_failed(conv.steps + 1, e.kind, latency, Usage::default()).await;
                    return Err(e);
                }
            };
            crate::spans::chat_answered(&span, &response.usage, response.content.as_deref(), &response.tool_calls);
            drop(span);
            let latency = started.elapsed();
            let done = response.tool_calls.is_empty();
            let answer = response.content.clone().unwrap_or_default();
            let message = ChatMessage::Assistant { content: response.content, tool_calls: response.tool_calls };
            // Recorded before it is announced or acted on.
            let step = Step::Turn { message, usage: response.usage };
            observer.turn_completed(&step, conv.steps + 1, response.usage, latency).await;
            conv.apply(step);
            if done && let Some(schema) = &self.output {
                match self.checked(schema, &answer, conv, observer).await? {
                    Some(valid) => return Ok(valid),
                    None => continue,
                }
            }
            observer.checkpoint(conv).await;
            if done {
                return Ok(answer);
            }
        }
    }

    /// Runs one turn's calls concurrently, at most
    /// [`ToolPolicy::max_parallel_calls`] at once; a failure stays in its own result.
    /// `step` is the model call that issued `calls`: it scopes their
    /// idempotency keys, since models reuse call ids across turns (`call_0`).
    /// A repeated call is answered from the conversation instead of run, and
    /// a loop ends the run ([`tool_policy`]). Returns the results and how
    /// many calls ran.
    async fn run_calls(
        &self,
        calls: &[ToolCall],
        conv: &Conversation,
        ctx: &RunContext,
        observer: &dyn AgentObserver,
    ) -> Result<(Vec<ChatMessage>, u64), ErrorInfo> {
        let (messages, step) = (&conv.messages, conv.steps);
        let mut verdicts = Vec::with_capacity(calls.len());
        for call in calls {
            match self.policy.judge(messages, call, |name| self.tools.repeatable(name)) {
                tool_policy::Verdict::Loop(error) => return Err(error),
                v => verdicts.push(v),
            }
        }
        let ran = verdicts.iter().filter(|v| **v == tool_policy::Verdict::Run).count() as u64;
        let runs = calls.iter().zip(verdicts).map(|(call, verdict)| async move {
            if let tool_policy::Verdict::Repeat { earlier } = verdict {
                let message = ChatMessage::Tool {
                    tool_call_id: call.id.clone(),
                    name: call.name.clone(),
                    content: tool_policy::repeat_text(&earlier),
                    is_error: false,
                };
                observer.step(&Step::ToolResult { message: message.clone(), ran: false }).await;
                return message;
            }
            observer.tool_started(call).await;
            let span = crate::spans::execute_tool(&ctx.span, call);
            let tool_ctx = ToolContext {
                job_id: ctx.job_id,
                task_id: ctx.task_id,
                tenant: ctx.tenant.clone(),
                call_id: call.id.clone(),
                idempotency_key: format!(
                    "{}:{step}:{}",
                    ctx.task_id.map(|t| t.to_string()).unwrap_or_else(|| ctx.job_id.to_string()),
                    call.id
                ),
                // What the call calls (a task's worker, an MCP server) joins its span.
                traceparent: crate::spans::traceparent_of(&span).or_else(|| ctx.traceparent.clone()),
                cancel: ctx.cancel.child_token(),
                approvals: ctx.approvals.clone(),
            };
            let outcome = self.tools.invoke(&tool_ctx, &call.name, &call.arguments).await;
            let mut content = outcome.to_model_text();
            crate::spans::tool_answered(&span, &content, outcome.result.as_ref().err());
            if conv.interrupted.contains(&call.id) && !self.policy.idempotent(&call.name) {
                content = steps::with_interrupted_note(&content);
            }
            let message = ChatMessage::Tool {
                tool_call_id: call.id.clone(),
                name: call.name.clone(),
                content,
                is_error: outcome.result.is_err(),
            };
            // A call cut short because the run itself stops (cancel, drain)
            // did not complete: it is not a step, and runs again on resume.
            let cut_short = ctx.cancel.is_cancelled()
                && outcome.result.as_ref().err().is_some_and(|e| e.kind == ErrorKind::Cancelled);
            let step = (!cut_short).then(|| Step::ToolResult { message: message.clone(), ran: true });
            observer.tool_completed(step.as_ref(), call, &outcome).await;
            message
        });
        let limit = self.policy.max_parallel_calls.max(1);
        if calls.len() <= limit {
            return Ok((futures::future::join_all(runs).await, ran));
        }
        // Unordered, so a long call does not hold back the start of the
        // calls after it; put back in call order after.
        let mut indexed = Vec::with_capacity(calls.len());
        for (i, run) in runs.enumerate() {
            // Not started until polled: a waiting call holds only its captures.
            indexed.push(async move { (i, run.await) });
        }
        let running = futures::StreamExt::buffer_unordered(futures::stream::iter(indexed), limit);
        let mut results: Vec<(usize, ChatMessage)> = futures::StreamExt::collect(running).await;
        results.sort_unstable_by_key(|(i, _)| *i);
        Ok((results.into_iter().map(|(_, m)| m).collect(), ran))
    }

    /// The run's answer when a call of a stop-at tool succeeded in this turn
    /// (several: their results, one a line, in call order).
    fn stop_answer(&self, calls: &[ToolCall], results: &[ChatMessage]) -> Option<String> {
        let answers: Vec<&str> = calls
            .iter()
            .filter(|call| self.policy.stops_at(&call.name))
            .filter_map(|call| {
                results.iter().find_map(|r| match r {
                    ChatMessage::Tool { tool_call_id, content, is_error: false, .. } if *tool_call_id == call.id => {
                        Some(content.as_str())
                    }
                    _ => None,
                })
            })
            .collect();
        (!answers.is_empty()).then(|| answers.join("\n"))
    }

    /// Checks a final answer against the output schema: the valid answer,
    /// or `None` after adding the repair prompt for another turn.
    async fn checked(
        &self,
        schema: &OutputSchema,
        answer: &str,
        conv: &mut Conversation,
        observer: &dyn AgentObserver,
    ) -> Result<Option<String>, ErrorInfo> {
        match schema.check(answer, &conv.messages) {
            output_schema::Checked::Valid(value) => Ok(Some(value.to_string())),
            output_schema::Checked::Repair(content) => {
                observer.step(&Step::Note { content: content.clone() }).await;
                conv.messages.push(ChatMessage::User { content });
                observer.checkpoint(conv).await;
                Ok(None)
            }
            output_schema::Checked::Invalid(e) => Err(ErrorInfo::new(ErrorKind::Validation, e)),
        }
    }
}

/// A streaming model's text goes to the observer.
struct ObserverDeltas<'a>(&'a dyn AgentObserver);

#[async_trait]
impl DeltaSink for ObserverDeltas<'_> {
    async fn delta(&self, text: &str) {
        self.0.model_delta(text).await;
    }
}

/// Adds the inbox's waiting messages as user messages (a step); whether
/// there were any.
async fn take_inbox(conv: &mut Conversation, ctx: &RunContext, observer: &dyn AgentObserver) -> bool {
    let Some(inbox) = &ctx.inbox else { return false };
    let messages = inbox.take();
    if messages.is_empty() {
        return false;
    }
    let step = Step::Inbox { messages };
    observer.step(&step).await;
    conv.apply(step);
    true
}

/// A failed model call as the run's error: reports and job records get a
/// sanitized message; the log keeps the detail.
fn model_error(e: crate::model::ModelError, ctx: &RunContext) -> ErrorInfo {
    let trace = ctx.traceparent.as_deref().and_then(flotilla_protocol::trace::trace_id);
    ErrorInfo::new(e.kind, crate::sanitize::sanitize_logged(&e.to_string(), "model error", trace))
}

#[cfg(test)]
mod tests;
