//! The OpenTelemetry GenAI spans of the agent loop (`chat <model>` for each
//! model call, `execute_tool <tool>` for each tool call), as `tracing`
//! spans of target `gen_ai`: a process that exports over OTLP
//! (`flotilla_telemetry::otel`) turns them into OpenTelemetry spans, and
//! where it does not they are disabled callsites that cost a branch.
//! Attribute names and meaning: docs/OPERATIONS.md "Tracing". Integers
//! are recorded as `i64`: the OpenTelemetry layer writes a `u64` as text.
//!
//! The spans are never entered: each names its parent (the run's
//! `invoke_agent` span, [`RunContext::span`](crate::agent::RunContext::span)),
//! so the span a log line shows stays the caller's (`job`, `task`), also in
//! the tasks a tool call spawns.
//!
//! The process installs two things once at start ([`install`]): whether
//! spans carry prompts, completions and tool payloads (off by default),
//! and how to read a span's W3C traceparent, so a tool call hands its own
//! span (not the run's) to what it calls: a dispatched task's worker span
//! then hangs below the planner's `execute_tool task` span.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use tracing::field::Empty;

use crate::model::{ChatMessage, ModelIdentity, ToolCall};
use flotilla_protocol::{ErrorKind, Usage};

static CAPTURE_CONTENT: AtomicBool = AtomicBool::new(false);
static TRACEPARENT_OF: OnceLock<fn(&tracing::Span) -> Option<String>> = OnceLock::new();

/// Sets, once per process, whether spans carry content and how to read a
/// span's traceparent (`flotilla_telemetry::trace::traceparent_of`).
pub fn install(capture_content: bool, traceparent_of: fn(&tracing::Span) -> Option<String>) {
    CAPTURE_CONTENT.store(capture_content, Ordering::Relaxed);
    let _ = TRACEPARENT_OF.set(traceparent_of);
}

/// The traceparent of `span`, when the process exports it.
pub fn traceparent_of(span: &tracing::Span) -> Option<String> {
    TRACEPARENT_OF.get().and_then(|f| f(span))
}

fn capture() -> bool {
    CAPTURE_CONTENT.load(Ordering::Relaxed)
}

/// `chat <model>`: one model call. `purpose` is `step` or `compaction`.
pub fn chat(
    parent: &tracing::Span,
    model: ModelIdentity<'_>,
    purpose: &'static str,
    messages: &[ChatMessage],
) -> tracing::Span {
    let span = tracing::info_span!(
        target: "gen_ai",
        parent: parent,
        "chat",
        otel.name = %format_args!("chat {}", model.model),
        otel.kind = "client",
        otel.status_code = Empty,
        otel.status_description = Empty,
        gen_ai.operation.name = "chat",
        gen_ai.provider.name = model.provider,
        gen_ai.request.model = model.model,
        gen_ai.response.finish_reasons = Empty,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        gen_ai.usage.cache_read.input_tokens = Empty,
        gen_ai.usage.cache_creation.input_tokens = Empty,
        gen_ai.input.messages = Empty,
        gen_ai.output.messages = Empty,
        flotilla.cost_usd = Empty,
        flotilla.purpose = purpose,
        error.type = Empty,
    );
    if capture() && !span.is_disabled() {
        span.record("gen_ai.input.messages", content(messages).as_str());
    }
    span
}

/// Records what a model call returned on its `chat` span.
pub fn chat_answered(span: &tracing::Span, usage: &Usage, content_text: Option<&str>, calls: &[ToolCall]) {
    if span.is_disabled() {
        return;
    }
    span.record("gen_ai.response.finish_reasons", if calls.is_empty() { "stop" } else { "tool_calls" });
    span.record("gen_ai.usage.input_tokens", usage.input_tokens as i64);
    span.record("gen_ai.usage.output_tokens", usage.output_tokens as i64);
    if usage.cache_read_input_tokens > 0 {
        span.record("gen_ai.usage.cache_read.input_tokens", usage.cache_read_input_tokens as i64);
    }
    if usage.cache_creation_input_tokens > 0 {
        span.record("gen_ai.usage.cache_creation.input_tokens", usage.cache_creation_input_tokens as i64);
    }
    if usage.cost_usd > 0.0 {
        span.record("flotilla.cost_usd", usage.cost_usd);
    }
    if capture() {
        let turn = ChatMessage::Assistant { content: content_text.map(str::to_string), tool_calls: calls.to_vec() };
        span.record("gen_ai.output.messages", content(std::slice::from_ref(&turn)).as_str());
    }
}

/// `execute_tool <tool>`: one tool call.
pub fn execute_tool(parent: &tracing::Span, call: &ToolCall) -> tracing::Span {
    let span = tracing::info_span!(
        target: "gen_ai",
        parent: parent,
        "execute_tool",
        otel.name = %format_args!("execute_tool {}", call.name),
        otel.status_code = Empty,
        otel.status_description = Empty,
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = %call.name,
        gen_ai.tool.call.id = %call.id,
        gen_ai.tool.type = "function",
        gen_ai.tool.call.arguments = Empty,
        gen_ai.tool.call.result = Empty,
        error.type = Empty,
    );
    if capture() && !span.is_disabled() {
        span.record("gen_ai.tool.call.arguments", crate::sanitize::sanitize(&call.arguments.to_string()).as_str());
    }
    span
}

/// Records a tool call's result on its `execute_tool` span: the model's
/// text of it when content is captured, the error kind when it failed.
pub fn tool_answered(span: &tracing::Span, text: &str, error: Option<&crate::tool::ToolError>) {
    if span.is_disabled() {
        return;
    }
    if capture() {
        span.record("gen_ai.tool.call.result", crate::sanitize::sanitize(text).as_str());
    }
    if let Some(e) = error {
        failed(span, e.kind, &e.message);
    }
}

/// Marks `span` failed: `error.type` is the error kind (`transient`,
/// `validation`, ...), the status description its sanitized message.
pub fn failed(span: &tracing::Span, kind: ErrorKind, message: &str) {
    if span.is_disabled() {
        return;
    }
    span.record("error.type", kind.to_string().as_str());
    span.record("otel.status_code", "ERROR");
    span.record("otel.status_description", crate::sanitize::sanitize(message).as_str());
}

/// Messages as the span attribute carries them: JSON, sanitized.
fn content(messages: &[ChatMessage]) -> String {
    crate::sanitize::sanitize(&serde_json::to_string(messages).unwrap_or_default())
}

/// `invoke_agent <agent>`: one run of the planner (`agent` = `planner`) or
/// of a subagent (its type) on one task. The caller places it in its trace
/// (`flotilla_telemetry::trace`) and ends it with [`agent_ended`].
pub fn invoke_agent(
    agent: &str,
    model: ModelIdentity<'_>,
    job: &dyn std::fmt::Display,
    tenant: &str,
    task: Option<&dyn std::fmt::Display>,
) -> tracing::Span {
    tracing::info_span!(
        target: "gen_ai",
        parent: None,
        "invoke_agent",
        otel.name = %format_args!("invoke_agent {agent}"),
        otel.status_code = Empty,
        otel.status_description = Empty,
        gen_ai.operation.name = "invoke_agent",
        gen_ai.agent.name = agent,
        gen_ai.provider.name = model.provider,
        gen_ai.request.model = model.model,
        gen_ai.conversation.id = %job,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        flotilla.tenant = tenant,
        flotilla.task.id = task.map(tracing::field::display),
        flotilla.attempt = Empty,
        flotilla.worker.id = Empty,
        flotilla.resumed_from_step = Empty,
        flotilla.model_calls = Empty,
        flotilla.tool_calls = Empty,
        flotilla.cost_usd = Empty,
        flotilla.status = Empty,
        error.type = Empty,
    )
}

/// Ends an [`invoke_agent`] span's account: what the run spent and how it
/// ended (`status`: `completed`, `failed`, `cancelled`, ...).
pub fn agent_ended(span: &tracing::Span, usage: &Usage, status: &str, error: Option<(ErrorKind, &str)>) {
    if span.is_disabled() {
        return;
    }
    span.record("gen_ai.usage.input_tokens", usage.input_tokens as i64);
    span.record("gen_ai.usage.output_tokens", usage.output_tokens as i64);
    span.record("flotilla.model_calls", usage.model_calls as i64);
    span.record("flotilla.tool_calls", usage.tool_calls as i64);
    if usage.cost_usd > 0.0 {
        span.record("flotilla.cost_usd", usage.cost_usd);
    }
    span.record("flotilla.status", status);
    if let Some((kind, message)) = error {
        failed(span, kind, message);
    }
}
