//! The completed steps of a run, as the loop hands them to its observer
//! ([`AgentObserver::step`](super::AgentObserver::step)) the moment each is
//! done and before the loop acts on it. A worker journals them
//! (workers/src/journal.rs, docs/RELIABILITY.md "Step journal"); folding the
//! journaled steps onto the run's first conversation
//! ([`Conversation::apply`]) rebuilds the conversation exactly, so a later
//! attempt continues at the next step: no model turn is asked again, no
//! completed tool call runs again.
//!
//! A step is small and its size does not grow with the run: one model turn,
//! one tool result, the follow-ups taken before one call. Only a compaction
//! records the whole (bounded) conversation, which replaces every step
//! before it.

use serde::{Deserialize, Serialize};

use super::Conversation;
use crate::model::ChatMessage;
use flotilla_protocol::Usage;

/// The note appended to the result of a call that had started when its
/// run stopped and was run again on resume, unless its tool is idempotent
/// (`idempotent_tools`, docs/RELIABILITY.md).
pub const INTERRUPTED_NOTE: &str = "[note: an earlier attempt of this task stopped while this call was running, so \
     the call was run again; if the tool changes anything outside (sends, writes, pays), its first run may already \
     have taken effect: check before repeating it]";

/// `content` (a tool result as the model reads it) with
/// [`INTERRUPTED_NOTE`]: a field `note` of a JSON object, else a line after it.
pub fn with_interrupted_note(content: &str) -> String {
    match serde_json::from_str::<serde_json::Value>(content) {
        Ok(serde_json::Value::Object(mut fields)) if !fields.contains_key("note") => {
            fields.insert("note".into(), INTERRUPTED_NOTE.into());
            serde_json::Value::Object(fields).to_string()
        }
        _ => format!("{content}\n{INTERRUPTED_NOTE}"),
    }
}

/// One completed step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "step", rename_all = "snake_case")]
pub enum Step {
    /// A model turn returned (text, tool calls, or both), with its usage.
    Turn {
        /// The assistant message.
        message: ChatMessage,
        /// Tokens of this call.
        usage: Usage,
    },
    /// One tool call's result, as the model reads it.
    ToolResult {
        /// The tool message.
        message: ChatMessage,
        /// Whether the tool ran (a repeated call is answered from the
        /// conversation instead, [`tool_policy`](super::tool_policy)).
        ran: bool,
    },
    /// Follow-up messages (`message_task`) taken before a model call, in
    /// the order they arrived.
    Inbox {
        /// Their text, as added to the conversation.
        messages: Vec<String>,
    },
    /// A user message the loop or its worker added: the prompt that asks
    /// the model to repair an answer that did not match the output schema
    /// ([`output_schema`](super::output_schema)), or a worker's note on a
    /// resumed run ([`Conversation::note`]).
    Note {
        /// Its text.
        content: String,
    },
    /// Older turns were compacted: the whole conversation now, which
    /// replaces every step before it.
    Snapshot {
        /// The conversation after the compaction.
        conversation: Box<Conversation>,
    },
}

impl Conversation {
    /// Adds a completed step, as the loop did when it took it.
    pub fn apply(&mut self, step: Step) {
        match step {
            Step::Turn { message, usage } => {
                self.steps += 1;
                self.usage += usage;
                self.messages.push(message);
            }
            Step::ToolResult { message, ran } => {
                self.usage.tool_calls += u64::from(ran);
                self.messages.push(message);
            }
            Step::Inbox { messages } => {
                self.inbox_taken += messages.len() as u64;
                self.messages.extend(messages.into_iter().map(|content| ChatMessage::User { content }));
            }
            Step::Note { content } => self.messages.push(ChatMessage::User { content }),
            Step::Snapshot { conversation } => *self = *conversation,
        }
    }

    /// Puts the results after the last turn in the order of its calls (a
    /// resumed turn gets the results recorded before the stop first).
    pub(super) fn order_last_results(&mut self) {
        let Some((calls, results)) = self.last_turn() else { return };
        let rank = |m: &ChatMessage| match m {
            ChatMessage::Tool { tool_call_id, .. } => calls.iter().position(|c| c.id == *tool_call_id),
            _ => None,
        };
        let mut ordered = results.to_vec();
        ordered.sort_by_key(|m| rank(m));
        let start = self.messages.len() - ordered.len();
        self.messages.splice(start.., ordered);
    }

    /// Marks the calls of the last turn that have no result as interrupted:
    /// they may have started before the run stopped, so their results, when
    /// run again, carry [`INTERRUPTED_NOTE`] (unless their tool is
    /// idempotent). Returns how many there are.
    pub fn mark_interrupted(&mut self) -> usize {
        self.interrupted = self.pending_calls().into_iter().map(|c| c.id).collect();
        self.interrupted.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ToolCall;

    fn call(id: &str) -> ToolCall {
        ToolCall { id: id.into(), name: "t".into(), arguments: serde_json::json!({}) }
    }

    fn result(id: &str) -> ChatMessage {
        ChatMessage::Tool { tool_call_id: id.into(), name: "t".into(), content: "1".into(), is_error: false }
    }

    #[test]
    fn folded_steps_rebuild_the_conversation_and_leave_only_unanswered_calls_pending() {
        let usage = Usage { input_tokens: 10, output_tokens: 2, ..Default::default() };
        let turn = ChatMessage::Assistant { content: None, tool_calls: vec![call("a"), call("b")] };
        let mut conv = Conversation::new("sys", "task");
        for step in [
            Step::Turn { message: turn, usage },
            Step::ToolResult { message: result("b"), ran: true },
            Step::Inbox { messages: vec!["also Q3".into()] },
        ] {
            let text = serde_json::to_string(&step).unwrap();
            conv.apply(serde_json::from_str(&text).unwrap());
        }
        assert_eq!((conv.steps, conv.usage.input_tokens, conv.usage.tool_calls), (1, 10, 1));
        assert_eq!(conv.messages.len(), 5);
        // The follow-up ended the turn: nothing is pending after it.
        assert!(conv.pending_calls().is_empty());
        conv.messages.pop();
        assert_eq!(conv.pending_calls().iter().map(|c| c.id.as_str()).collect::<Vec<_>>(), ["a"]);
        assert_eq!(conv.mark_interrupted(), 1);
        assert_eq!(conv.interrupted, ["a"]);
    }

    #[test]
    fn a_snapshot_replaces_everything_before_it() {
        let mut conv = Conversation::new("sys", "task");
        conv.apply(Step::Turn {
            message: ChatMessage::Assistant { content: Some("x".into()), tool_calls: vec![] },
            usage: Usage::default(),
        });
        let mut compacted = Conversation::new("sys", "summary");
        compacted.steps = 7;
        conv.apply(Step::Snapshot { conversation: Box::new(compacted.clone()) });
        assert_eq!(conv, compacted);
    }
}
