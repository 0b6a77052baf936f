//! Publishes a task's progress events as the agent loop runs. Events are
//! observations: they go out without waiting for their own acks and never
//! slow the task. The `model_call` event of a turn that calls a tool with
//! effects goes out in the turn's journal entry, one write for both, whose
//! ack is awaited before the loop goes on (workers/src/journal.rs); every other
//! event is published on its own, in the loop's order on the worker's one
//! connection, so the two paths keep the loop's order.
//!
//! A streaming model's text (`[models.<name>] stream = true`) goes out as
//! `model_delta` events, coalesced by [`DeltaCoalescer`]: at most one per
//! [`DELTA_INTERVAL`] (4 a second) per task, each with the text written
//! since the previous one, at most [`MAX_DELTA_CHARS`] of it (the rest is
//! counted as `skipped_chars`), and whatever is left just before the step's
//! `model_call` event (docs/PROTOCOL.md). A token per event would be one
//! NATS message per token for every watcher. A model call that fails is a
//! `model_failed` event, so a task's timeline and the GenAI metrics show the
//! failure, how long it took and what it cost.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use flotilla_agent::agent::{AgentObserver, Conversation, Step};
use flotilla_agent::model::ToolCall;
use flotilla_agent::tool::ToolOutcome;
use flotilla_bus::Bus;
use flotilla_protocol::ids::{JobId, SubagentType, TaskId, Tenant};
use flotilla_protocol::{self as protocol, ErrorKind, ProgressEvent, ProgressKind, Usage};
use flotilla_telemetry::metrics::AgentMetrics;

use crate::journal::StepJournal;

/// Progress publisher of one task attempt.
#[derive(Clone)]
pub struct ProgressPublisher {
    /// The bus.
    pub bus: Bus,
    /// Whose job: part of every progress subject.
    pub tenant: Tenant,
    /// The job.
    pub job_id: JobId,
    /// The task.
    pub task_id: TaskId,
    /// Its type.
    pub subagent_type: SubagentType,
    /// This worker.
    pub worker_id: String,
    /// Delivery attempt.
    pub attempt: u32,
    /// Model and tool latency metrics of this worker.
    pub metrics: AgentMetrics,
    /// Streamed text not yet published; shared by clones.
    pub deltas: Arc<tokio::sync::Mutex<DeltaCoalescer>>,
    /// Where the attempt's completed steps are recorded (journal.rs).
    pub journal: Arc<StepJournal>,
}

impl ProgressPublisher {
    /// Publishes one event on its own. No journal entry whose ack is still
    /// outstanding carries an event, so none can overtake it
    /// (workers/src/journal.rs).
    pub async fn emit(&self, kind: ProgressKind) {
        self.bus.publish_progress(&self.tenant, &self.event(kind)).await;
    }

    /// Journals `step` with its event `kind` in one write when the entry
    /// carries it (an awaited turn that calls tools), else the event right
    /// behind the entry.
    async fn journaled(&self, step: &Step, kind: ProgressKind) {
        let event = self.event(kind);
        if !self.journal.step(step, Some(&event)).await {
            self.bus.publish_progress(&self.tenant, &event).await;
        }
    }

    fn event(&self, kind: ProgressKind) -> ProgressEvent {
        ProgressEvent {
            v: protocol::PROGRESS_VERSION,
            job_id: self.job_id,
            task_id: self.task_id,
            subagent_type: self.subagent_type.clone(),
            worker_id: self.worker_id.clone(),
            attempt: self.attempt,
            at: protocol::now(),
            kind,
        }
    }

    /// Publishes the streamed text still waiting (a step's end, or a run
    /// that failed mid-answer), before whatever follows it.
    pub async fn flush_deltas(&self) {
        let mut deltas = self.deltas.lock().await;
        if let Some(kind) = deltas.flush(Instant::now()) {
            self.emit(kind).await;
        }
    }
}

/// sha256 of a JSON value's text, hex encoded.
pub fn digest(value: &serde_json::Value) -> String {
    flotilla_protocol::digest::sha256_hex(value.to_string().as_bytes())
}

#[async_trait]
impl AgentObserver for ProgressPublisher {
    async fn model_delta(&self, text: &str) {
        // Held while publishing, so events leave in the order of their text.
        let mut deltas = self.deltas.lock().await;
        if let Some(kind) = deltas.push(text, Instant::now()) {
            self.emit(kind).await;
        }
    }

    async fn model_called(&self, step: u32, usage: Usage, latency: Duration) {
        let kind = self.model_call(step, usage, latency).await;
        self.emit(kind).await;
    }

    async fn turn_completed(&self, step: &Step, number: u32, usage: Usage, latency: Duration) {
        let kind = self.model_call(number, usage, latency).await;
        self.journaled(step, kind).await;
    }

    async fn model_failed(&self, step: u32, kind: ErrorKind, latency: Duration, usage: Usage) {
        // What the model wrote before it failed goes out before the failure;
        // the step stays: a later attempt asks it again.
        self.flush_deltas().await;
        tracing::debug!(step, error_kind = %kind, latency_ms = latency.as_millis() as u64, "model call failed");
        self.metrics.model_failed(self.subagent_type.as_str(), kind, &usage, latency);
        self.emit(ProgressKind::ModelFailed { step, error_kind: kind, latency_ms: latency.as_millis() as u64, usage })
            .await;
    }

    async fn tool_started(&self, call: &ToolCall) {
        tracing::debug!(tool = %call.name, call_id = %call.id, "tool call");
        self.emit(ProgressKind::ToolCall {
            call_id: call.id.clone(),
            tool: call.name.clone(),
            args_sha256: digest(&call.arguments),
        })
        .await;
    }

    async fn tool_finished(&self, call: &ToolCall, outcome: &ToolOutcome) {
        self.emit(self.tool_result(call, outcome)).await;
    }

    async fn tool_completed(&self, step: Option<&Step>, call: &ToolCall, outcome: &ToolOutcome) {
        match step {
            Some(step) => self.journaled(step, self.tool_result(call, outcome)).await,
            None => self.tool_finished(call, outcome).await,
        }
    }

    async fn checkpoint(&self, _conversation: &Conversation) {}

    async fn step(&self, step: &Step) {
        self.journal.step(step, None).await;
    }
}

impl ProgressPublisher {
    /// The `model_call` event of turn `step`, after the streamed text still
    /// waiting (which goes out first) and the metrics.
    async fn model_call(&self, step: u32, usage: Usage, latency: Duration) -> ProgressKind {
        self.flush_deltas().await;
        self.deltas.lock().await.step = step + 1;
        tracing::debug!(step, input_tokens = usage.input_tokens, output_tokens = usage.output_tokens, "model call");
        self.metrics.model_call(self.subagent_type.as_str(), &usage, latency);
        ProgressKind::ModelCall { step, usage, latency_ms: latency.as_millis() as u64 }
    }

    /// The `tool_result` event of a call that ended, counted in the metrics.
    fn tool_result(&self, call: &ToolCall, outcome: &ToolOutcome) -> ProgressKind {
        let error_kind = outcome.result.as_ref().err().map(|e| e.kind);
        self.metrics.tool_call(self.subagent_type.as_str(), &call.name, error_kind, outcome.duration);
        ProgressKind::ToolResult {
            call_id: call.id.clone(),
            tool: call.name.clone(),
            error_kind,
            size: outcome.to_model_text().len(),
            duration_ms: outcome.duration.as_millis() as u64,
        }
    }
}

/// The sandbox's `executed` events are the task's progress events.
#[async_trait]
impl flotilla_sandbox::ExecutionReporter for ProgressPublisher {
    fn worker_id(&self) -> &str {
        &self.worker_id
    }

    async fn emit(&self, kind: ProgressKind) {
        ProgressPublisher::emit(self, kind).await
    }
}

/// The shortest time between two `model_delta` events of a task.
pub const DELTA_INTERVAL: Duration = Duration::from_millis(250);
/// The most text one `model_delta` event carries, in characters.
pub const MAX_DELTA_CHARS: usize = 2_000;

/// Streamed text waiting for its `model_delta` event.
#[derive(Debug)]
pub struct DeltaCoalescer {
    /// The step being written (the next `model_call`'s).
    pub step: u32,
    text: String,
    chars: usize,
    skipped: u64,
    last_sent: Option<Instant>,
}

impl Default for DeltaCoalescer {
    fn default() -> Self {
        Self { step: 1, text: String::new(), chars: 0, skipped: 0, last_sent: None }
    }
}

impl DeltaCoalescer {
    /// Adds `text`; the event to publish now, if one is due.
    pub fn push(&mut self, text: &str, now: Instant) -> Option<ProgressKind> {
        let room = MAX_DELTA_CHARS - self.chars;
        let count = text.chars().count();
        let kept = match text.char_indices().nth(room) {
            Some((cut, _)) => &text[..cut],
            None => text,
        };
        self.text.push_str(kept);
        self.chars += count.min(room);
        self.skipped += count.saturating_sub(room) as u64;
        let due = self.last_sent.is_none_or(|at| now.duration_since(at) >= DELTA_INTERVAL);
        if due { self.flush(now) } else { None }
    }

    /// The event with everything waiting, if anything is.
    pub fn flush(&mut self, now: Instant) -> Option<ProgressKind> {
        if self.chars == 0 && self.skipped == 0 {
            return None;
        }
        self.last_sent = Some(now);
        self.chars = 0;
        Some(ProgressKind::ModelDelta {
            step: self.step,
            text: std::mem::take(&mut self.text),
            skipped_chars: std::mem::take(&mut self.skipped),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delta(kind: Option<ProgressKind>) -> Option<(u32, String, u64)> {
        kind.map(|k| match k {
            ProgressKind::ModelDelta { step, text, skipped_chars } => (step, text, skipped_chars),
            other => panic!("{other:?}"),
        })
    }

    #[test]
    fn deltas_are_coalesced_to_four_a_second_and_nothing_is_lost_at_the_step_end() {
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        let mut c = DeltaCoalescer::default();
        assert_eq!(delta(c.push("The ", at(0))), Some((1, "The ".into(), 0)), "the first delta goes at once");
        assert_eq!(delta(c.push("margin ", at(10))), None);
        assert_eq!(delta(c.push("is ", at(249))), None);
        assert_eq!(delta(c.push("0.375", at(250))), Some((1, "margin is 0.375".into(), 0)));
        // 990 deltas over the next second make at most 4 events more.
        let mut events = 0;
        for i in 0..990 {
            events += usize::from(c.push("x", at(251 + i)).is_some());
        }
        assert!(events <= 4, "{events} events in one second");
        let rest = delta(c.flush(at(1300))).expect("the rest at the step's end");
        assert_eq!(rest.0, 1);
        assert_eq!(delta(c.flush(at(1301))), None, "nothing twice");
    }

    #[test]
    fn an_event_carries_at_most_the_cap_and_counts_the_rest() {
        let start = Instant::now();
        let mut c = DeltaCoalescer { step: 3, ..DeltaCoalescer::default() };
        c.push("a", start);
        let long = "é".repeat(MAX_DELTA_CHARS + 500);
        assert_eq!(delta(c.push(&long, start + Duration::from_millis(1))), None);
        let (step, text, skipped) = delta(c.flush(start + Duration::from_millis(2))).unwrap();
        assert_eq!((step, text.chars().count(), skipped), (3, MAX_DELTA_CHARS, 500));
    }
}
