//! Bounded context (docs/CONFIG.md "Bounded context"): before each
//! model call, when the request would exceed the run's `context_tokens`, the
//! older turns are replaced by one summary the model writes in a separate call.
//!
//! What stays verbatim: the system prompt and the first user message (the job
//! text or task description), the newest `write_todos` call with its result
//! (the current todos), the newest turn when it fits what is left once the
//! summary's share is set aside, and the turns before it that fit in half of
//! that (so the next few steps grow into the other half instead of compacting
//! again at once). A model turn and its tool
//! results are one unit: a call is never separated from its result. Anything
//! older, an earlier summary included, goes into the transcript the compaction
//! call summarises (in chunks that each fit the window when the older part is
//! larger than it, each call folding one chunk into the summary so far); the
//! full detail of task reports stays in the job's files.
//!
//! The result is verified with the real count: if the summary came back too
//! long it is cut ([`tokens::truncate`]), and kept turns are dropped oldest
//! first until the request fits.

use flotilla_protocol::{ErrorInfo, ErrorKind, Usage};

use super::{AgentObserver, Conversation, RunContext};
use crate::model::{ChatMessage, ChatModel, ModelRequest, Purpose, ToolCall, count_request, request_within};
use crate::tokens;
use crate::tool::ToolSpec;

/// How large a request may grow and how to compact it.
#[derive(Clone, Debug)]
pub struct ContextBudget {
    /// Tokens (o200k_base, [`count_request`]) a request may hold.
    pub tokens: u64,
    /// Instructions of the compaction call (`[planner] compaction_prompt`).
    pub prompt: String,
}

/// First line of every summary message, so a reader (and a later compaction)
/// knows what it is.
pub const SUMMARY_HEADER: &str = "[Summary of earlier turns of this conversation, written when it outgrew its \
                                  context window; full task reports remain in the job's files]";

/// The tool whose newest call and result always survive a compaction.
const TODOS_TOOL: &str = "write_todos";

/// Compacts `conv` when its next request would exceed `budget`.
pub(super) async fn fit(
    model: &dyn ChatModel,
    budget: &ContextBudget,
    conv: &mut Conversation,
    specs: &[ToolSpec],
    ctx: &RunContext,
    observer: &dyn AgentObserver,
) -> Result<(), ErrorInfo> {
    if request_within(&conv.messages, specs, budget.tokens as usize) {
        return Ok(());
    }
    let before = count_request(&conv.messages, specs) as u64;
    if before <= budget.tokens {
        return Ok(());
    }
    let plan = Plan::select(&conv.messages, specs, budget.tokens);
    if plan.older.is_empty() {
        return Err(too_small(before, budget.tokens));
    }
    let (summary, usage) = summarise(model, budget, &conv.messages[plan.older.clone()], ctx).await?;
    conv.usage += usage;
    let turns_before = assistant_turns(&conv.messages);
    let messages = plan.assemble(&conv.messages, &summary, specs, budget.tokens);
    let after = count_request(&messages, specs) as u64;
    if after > budget.tokens {
        return Err(too_small(after, budget.tokens));
    }
    conv.compacted_turns += turns_before.saturating_sub(assistant_turns(&messages));
    conv.messages = messages;
    tracing::info!(before_tokens = before, after_tokens = after, "conversation compacted");
    observer.checkpoint(conv).await;
    observer.on_compacted(before, after, usage).await;
    Ok(())
}

fn too_small(tokens: u64, budget: u64) -> ErrorInfo {
    ErrorInfo::new(
        ErrorKind::Limit,
        format!(
            "the request needs {tokens} tokens even after compaction (system prompt, first message and current \
             todos), over the context_tokens limit of {budget}: raise context_tokens (docs/CONFIG.md)"
        ),
    )
}

/// Tokens a summary may take: a quarter of the window.
fn summary_share(budget: u64) -> u64 {
    (budget / 4).max(1)
}

fn assistant_turns(messages: &[ChatMessage]) -> u32 {
    messages.iter().filter(|m| matches!(m, ChatMessage::Assistant { .. })).count() as u32
}

/// Which messages stay and which are summarised.
#[derive(Debug, PartialEq)]
struct Plan {
    /// The system prompt and the first user message.
    head: std::ops::Range<usize>,
    /// Summarised away.
    older: std::ops::Range<usize>,
    /// The newest write_todos call and its result, when they are in `older`.
    todos: Option<(ToolCall, ChatMessage)>,
    /// Kept verbatim, newest turns, in order.
    kept: std::ops::Range<usize>,
}

impl Plan {
    /// Chooses what to keep of `messages` for a request bounded by `budget`.
    fn select(messages: &[ChatMessage], specs: &[ToolSpec], budget: u64) -> Self {
        let head_len = messages
            .iter()
            .position(|m| matches!(m, ChatMessage::User { .. }))
            .map_or(messages.iter().take_while(|m| matches!(m, ChatMessage::System { .. })).count(), |i| i + 1);
        let units = units(messages, head_len);
        let mut fixed = messages[..head_len].to_vec();
        let todos = newest_todos(messages, head_len);
        if let Some((call, result)) = &todos {
            fixed.push(ChatMessage::Assistant { content: None, tool_calls: vec![call.clone()] });
            fixed.push(result.clone());
        }
        let base = count_request(&fixed, specs) as u64 + summary_share(budget);
        // The newest turn may fill what is left; older ones only half of it.
        let full = budget.saturating_sub(base);
        let empty = count_request(&[], &[]) as u64;
        let mut start = messages.len();
        let mut used = 0;
        for unit in units.iter().rev() {
            // Each unit costs its own tokens, plus one for a separator.
            let cost = (count_request(&messages[unit.clone()], &[]) as u64).saturating_sub(empty) + 1;
            if used + cost > if used == 0 { full } else { full / 2 } {
                break;
            }
            used += cost;
            start = unit.start;
        }
        let todos_in_older = todos.filter(|(call, _)| !holds_call(&messages[start..], &call.id));
        Plan { head: 0..head_len, older: head_len..start, todos: todos_in_older, kept: start..messages.len() }
    }

    /// The compacted messages with `summary`, cut further if that is what
    /// it takes to fit `budget`; a kept turn is dropped only when the summary
    /// is already empty (never expected: [`Plan::select`] set its share aside).
    fn assemble(&self, messages: &[ChatMessage], summary: &str, specs: &[ToolSpec], budget: u64) -> Vec<ChatMessage> {
        let (mut summary, _) = tokens::truncate(summary.trim(), summary_share(budget) as usize);
        let mut kept_units = units(messages, self.kept.start);
        loop {
            let out = self.build(messages, &summary, &kept_units);
            let total = count_request(&out, specs) as u64;
            if total <= budget {
                return out;
            }
            let over = (total - budget) as usize;
            let have = tokens::count(&summary);
            if have > 0 {
                summary = tokens::truncate(&summary, have.saturating_sub(over + 1)).0;
            } else if kept_units.is_empty() {
                return out;
            } else {
                tracing::warn!("compaction dropped a kept turn: even without a summary it did not fit");
                kept_units.remove(0);
            }
        }
    }

    fn build(
        &self,
        messages: &[ChatMessage],
        summary: &str,
        kept_units: &[std::ops::Range<usize>],
    ) -> Vec<ChatMessage> {
        let mut out = messages[self.head.clone()].to_vec();
        out.push(ChatMessage::User { content: format!("{SUMMARY_HEADER}\n{summary}") });
        if let Some((call, result)) = &self.todos {
            out.push(ChatMessage::Assistant { content: None, tool_calls: vec![call.clone()] });
            out.push(result.clone());
        }
        for unit in kept_units {
            out.extend_from_slice(&messages[unit.clone()]);
        }
        out
    }
}

/// The messages after `from` cut into units: a model turn with the results
/// of its calls, or one user message.
fn units(messages: &[ChatMessage], from: usize) -> Vec<std::ops::Range<usize>> {
    let mut out: Vec<std::ops::Range<usize>> = Vec::new();
    for (i, m) in messages.iter().enumerate().skip(from) {
        match (m, out.last_mut()) {
            (ChatMessage::Tool { .. }, Some(last)) if last.end == i => last.end = i + 1,
            _ => out.push(i..i + 1),
        }
    }
    out
}

/// The newest write_todos call after `from` that has a result, with it.
fn newest_todos(messages: &[ChatMessage], from: usize) -> Option<(ToolCall, ChatMessage)> {
    messages[from..].iter().rev().find_map(|m| match m {
        ChatMessage::Tool { tool_call_id, name, is_error: false, .. } if name == TODOS_TOOL => {
            let call = messages[from..].iter().find_map(|a| match a {
                ChatMessage::Assistant { tool_calls, .. } => tool_calls.iter().find(|c| &c.id == tool_call_id),
                _ => None,
            })?;
            Some((call.clone(), m.clone()))
        }
        _ => None,
    })
}

fn holds_call(messages: &[ChatMessage], id: &str) -> bool {
    messages.iter().any(|m| matches!(m, ChatMessage::Tool { tool_call_id, .. } if tool_call_id == id))
}

/// The summary of `older` and the usage of the calls that wrote it. The
/// transcript goes in chunks that each fit the window beside the prompt, the
/// summary so far and room for the answer; each call folds one chunk into the
/// summary (one call unless the older part is larger than the window).
async fn summarise(
    model: &dyn ChatModel,
    budget: &ContextBudget,
    older: &[ChatMessage],
    ctx: &RunContext,
) -> Result<(String, Usage), ErrorInfo> {
    let share = summary_share(budget.tokens);
    // Prompt, summary so far, the answer, and framing.
    let room = budget.tokens.saturating_sub(tokens::count(&budget.prompt) as u64 + 2 * share + 64).max(64) as usize;
    let mut summary = String::new();
    let mut usage = Usage::default();
    let mut chunk = String::new();
    let mut chunk_tokens = 0;
    for m in older {
        // One entry never takes more than half a chunk.
        let (text, cut) = tokens::truncate(&entry(m), room / 2);
        let text = if cut { format!("{text} […]") } else { text };
        let n = tokens::count(&text) + 1;
        if chunk_tokens + n > room && !chunk.is_empty() {
            summary = fold(model, budget, &summary, &chunk, &mut usage, ctx).await?;
            (chunk, chunk_tokens) = (String::new(), 0);
        }
        chunk.push_str(&text);
        chunk.push('\n');
        chunk_tokens += n;
    }
    if !chunk.is_empty() {
        summary = fold(model, budget, &summary, &chunk, &mut usage, ctx).await?;
    }
    Ok((summary, usage))
}

/// One compaction call: `summary` so far plus `chunk` into a new summary of
/// at most the summary's share of the window.
async fn fold(
    model: &dyn ChatModel,
    budget: &ContextBudget,
    summary: &str,
    chunk: &str,
    usage: &mut Usage,
    ctx: &RunContext,
) -> Result<String, ErrorInfo> {
    let share = summary_share(budget.tokens);
    let content = if summary.is_empty() {
        format!("{chunk}\n(Write the summary in at most {share} tokens.)")
    } else {
        format!(
            "Summary so far:\n{summary}\n\nLater turns to fold into it:\n{chunk}\n(Write the whole updated summary in \
             at most {share} tokens.)"
        )
    };
    let request = [ChatMessage::System { content: budget.prompt.clone() }, ChatMessage::User { content }];
    let span = crate::spans::chat(&ctx.span, model.identity(), "compaction", &request);
    let response =
        match model.complete(ModelRequest { purpose: Purpose::Compaction, ..ModelRequest::new(&request, &[]) }).await {
            Ok(response) => response,
            Err(e) => {
                let e = super::model_error(e, ctx);
                crate::spans::failed(&span, e.kind, &e.message);
                return Err(e);
            }
        };
    crate::spans::chat_answered(&span, &response.usage, response.content.as_deref(), &[]);
    *usage += response.usage;
    Ok(tokens::truncate(response.content.unwrap_or_default().trim(), share as usize).0)
}

fn entry(m: &ChatMessage) -> String {
    match m {
        ChatMessage::System { content } => format!("system: {content}"),
        ChatMessage::User { content } => format!("user: {content}"),
        ChatMessage::Assistant { content, tool_calls } => {
            let mut s = format!("assistant: {}", content.as_deref().unwrap_or(""));
            for c in tool_calls {
                s.push_str(&format!("\n  called {} [{}] with {}", c.name, c.id, c.arguments));
            }
            s
        }
        ChatMessage::Tool { tool_call_id, name, content, is_error } => {
            let what = if *is_error { "error" } else { "result" };
            format!("{what} of {name} [{tool_call_id}]: {content}")
        }
    }
}

#[cfg(test)]
mod tests;
