//! Bounded context (issue 12, docs/CONFIG.md "Bounded context"): before each
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
//! call summarises; the full detail of task reports stays in the job's files.
//!
//! The result is verified with the real count: if the summary came back too
//! long it is cut ([`tokens::truncate`]), and kept turns are dropped oldest
//! first until the request fits.

use flotilla_protocol::{ErrorInfo, ErrorKind, Usage};

use super::{AgentObserver, Conversation, RunContext};
use crate::model::{ChatMessage, ChatModel, ModelRequest, Purpose, ToolCall};
use crate::tokens;
use crate::tool::ToolSpec;

/// How large a request may grow and how to compact it.
#[derive(Clone, Debug)]
pub struct ContextBudget {
    /// Tokens (o200k_base, [`tokens::count_request`]) a request may hold.
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
    let before = tokens::count_request(&conv.messages, specs) as u64;
    if before <= budget.tokens {
        return Ok(());
    }
    let plan = Plan::select(&conv.messages, specs, budget.tokens);
    if plan.older.is_empty() {
        return Err(too_small(before, budget.tokens));
    }
    let summary_tokens = summary_share(budget.tokens);
    let transcript = transcript(&conv.messages[plan.older.clone()], budget, summary_tokens);
    let request = [
        ChatMessage::System { content: budget.prompt.clone() },
        ChatMessage::User {
            content: format!("{transcript}\n\n(Write the summary in at most {summary_tokens} tokens.)"),
        },
    ];
    let response = model
        .complete(ModelRequest { messages: &request, tools: &[], purpose: Purpose::Compaction, compacted_turns: 0 })
        .await
        .map_err(|e| super::model_error(e, ctx))?;
    let usage: Usage = response.usage;
    conv.usage += usage;
    let summary = response.content.unwrap_or_default();
    let turns_before = assistant_turns(&conv.messages);
    let messages = plan.assemble(&conv.messages, &summary, specs, budget.tokens);
    let after = tokens::count_request(&messages, specs) as u64;
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
        let base = tokens::count_request(&fixed, specs) as u64 + summary_share(budget);
        // The newest turn may fill what is left; older ones only half of it.
        let full = budget.saturating_sub(base);
        let empty = tokens::count_request(&[], &[]) as u64;
        let mut start = messages.len();
        let mut used = 0;
        for unit in units.iter().rev() {
            // Each unit costs its own tokens, plus one for a separator.
            let cost = (tokens::count_request(&messages[unit.clone()], &[]) as u64).saturating_sub(empty) + 1;
            if used + cost > if used == 0 { full } else { full / 2 } {
                break;
            }
            used += cost;
            start = unit.start;
        }
        let todos_in_older = todos.filter(|(call, _)| !holds_call(&messages[start..], &call.id));
        Plan { head: 0..head_len, older: head_len..start, todos: todos_in_older, kept: start..messages.len() }
    }

    /// The compacted messages with `summary`, cut or with fewer kept turns
    /// if that is what it takes to fit `budget`.
    fn assemble(&self, messages: &[ChatMessage], summary: &str, specs: &[ToolSpec], budget: u64) -> Vec<ChatMessage> {
        let (summary, _) = tokens::truncate(summary.trim(), summary_share(budget) as usize);
        let mut kept_units = units(messages, self.kept.start);
        loop {
            let out = self.build(messages, &summary, &kept_units);
            let total = tokens::count_request(&out, specs) as u64;
            if total <= budget || kept_units.is_empty() {
                return out;
            }
            kept_units.remove(0);
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

/// The older turns as text for the compaction call, each entry cut so the
/// call itself fits the window with room for the summary.
fn transcript(older: &[ChatMessage], budget: &ContextBudget, summary_tokens: u64) -> String {
    let entries: Vec<String> = older.iter().map(entry).collect();
    let room = budget.tokens.saturating_sub(tokens::count(&budget.prompt) as u64 + summary_tokens + 64) as usize;
    let total: usize = entries.iter().map(|e| tokens::count(e)).sum();
    let text = if total <= room {
        entries.join("\n")
    } else {
        // Every entry gets an equal share; most tool results are long only
        // because of detail the job's files keep anyway.
        let share = (room / entries.len().max(1)).max(16);
        entries
            .iter()
            .map(|e| match tokens::truncate(e, share) {
                (cut, true) => format!("{cut} […]"),
                (whole, false) => whole,
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    tokens::truncate(&text, room).0
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
