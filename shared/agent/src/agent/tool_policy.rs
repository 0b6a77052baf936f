//! How a run treats its tool calls beyond running them (docs/TOOLS.md,
//! "Stopping at a tool and loop detection"):
//!
//! - **Stop at tools.** When a call of one of `stop_at_tools` succeeds, its
//!   result is the run's answer and the model is not called again. Small
//!   models often call the one tool that computes the answer and then, not
//!   trusting it, call it again until `max_steps`; a type whose job is "call
//!   this tool" ends at its result instead. A failed call still goes back to
//!   the model, which may correct its arguments.
//! - **Loop detection.** A call identical to one the model made in the turns
//!   just before (same tool, same arguments, and those turns called nothing
//!   else) learns nothing new: it is not run again; the model gets the
//!   earlier result with a note. The next identical turn ends the run with a
//!   `limit` error naming the call, instead of burning the remaining steps.
//!   Only unbroken runs of identical turns count, so reading a file again
//!   after writing it, or after a follow-up message arrived, is no repeat, and tools whose result changes by itself
//!   (polling: [`Tool::repeatable`](crate::tool::Tool::repeatable)) are never
//!   repeats. The rule reads only the conversation, so a planner resumed from
//!   its checkpoint applies it as before.

use serde_json::Value;

use crate::model::{ChatMessage, ToolCall};
use flotilla_protocol::{ErrorInfo, ErrorKind};

/// What the model reads instead of a repeated call's result, after it.
pub const REPEAT_NOTE: &str = "[not run again: this call is identical to your previous one and its result is above. \
     Use that result: answer, or call a different tool or different arguments. Repeating it once more ends the run.]";

/// The run's treatment of tool calls.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolPolicy {
    /// Tools (names as the model sees them) whose successful result ends the
    /// run as its answer.
    pub stop_at_tools: Vec<String>,
    /// Whether identical consecutive calls are caught (default on).
    pub loop_detection: bool,
    /// Tools (names as the model sees them) that may run twice with the same
    /// arguments to the same effect: a call of one that an earlier attempt
    /// may have started runs again without a note to the model
    /// ([`steps::INTERRUPTED_NOTE`](super::steps::INTERRUPTED_NOTE)).
    pub idempotent_tools: Vec<String>,
    /// Calls of one turn running at once (default: all of them). The others
    /// start as those end; the results keep the model's call order. A call
    /// holds its memory while it runs, and a `task` call runs until its
    /// task's report: a planner turn of 10 000 of them held every one at once.
    pub max_parallel_calls: usize,
}

impl Default for ToolPolicy {
    fn default() -> Self {
        Self {
            stop_at_tools: Vec::new(),
            loop_detection: true,
            idempotent_tools: Vec::new(),
            max_parallel_calls: usize::MAX,
        }
    }
}

/// What to do with one call of the model's latest turn.
#[derive(Debug, PartialEq)]
pub enum Verdict {
    /// Run it.
    Run,
    /// Do not run it: answer with the earlier result (and [`REPEAT_NOTE`]).
    Repeat {
        /// The earlier call's result text.
        earlier: String,
    },
    /// Do not run it: the run ends with this `limit` error.
    Loop(ErrorInfo),
}

impl ToolPolicy {
    /// Whether running a call of `tool` twice has the effect of running it once.
    pub fn idempotent(&self, tool: &str) -> bool {
        self.idempotent_tools.iter().any(|t| t == tool)
    }

    /// The verdict on `call`, the model's latest turn being the last message
    /// of `messages`; `repeatable` says whether a tool's identical calls may
    /// return something new.
    pub fn judge(&self, messages: &[ChatMessage], call: &ToolCall, repeatable: impl Fn(&str) -> bool) -> Verdict {
        if !self.loop_detection || repeatable(&call.name) {
            return Verdict::Run;
        }
        // Earlier turns, newest first, that called exactly this and nothing
        // else, and succeeded.
        let latest = messages.iter().rposition(|m| matches!(m, ChatMessage::Assistant { .. }));
        let Some(latest) = latest else { return Verdict::Run };
        let mut identical = 0;
        let mut earlier = None;
        for (i, m) in messages[..latest].iter().enumerate().rev() {
            let tool_calls = match m {
                ChatMessage::Assistant { tool_calls, .. } => tool_calls,
                ChatMessage::Tool { .. } => continue,
                // A follow-up message or a compaction summary is news: what
                // the model calls after it is a fresh decision.
                ChatMessage::User { .. } | ChatMessage::System { .. } => break,
            };
            let only_this = !tool_calls.is_empty() && tool_calls.iter().all(|c| same_call(c, call));
            let result = only_this.then(|| success_of(&messages[i + 1..], &tool_calls[0].id)).flatten();
            let Some(result) = result else { break };
            identical += 1;
            earlier.get_or_insert(result);
        }
        match (identical, earlier) {
            (0, _) | (_, None) => Verdict::Run,
            (1, Some(earlier)) => Verdict::Repeat { earlier: strip_note(earlier).to_string() },
            _ => Verdict::Loop(ErrorInfo::new(
                ErrorKind::Limit,
                format!(
                    "loop detected: the model called {}({}) {} times in a row with the same result; \
                     stopped instead of using the remaining steps",
                    call.name,
                    canonical(&call.arguments),
                    identical + 1
                ),
            )),
        }
    }

    /// Whether a successful call of `name` ends the run.
    pub fn stops_at(&self, name: &str) -> bool {
        self.stop_at_tools.iter().any(|t| t == name)
    }
}

/// The text of a repeated call's result: the earlier result, then the note.
pub fn repeat_text(earlier: &str) -> String {
    format!("{earlier}\n{REPEAT_NOTE}")
}

fn strip_note(text: &str) -> &str {
    text.strip_suffix(REPEAT_NOTE).map_or(text, |t| t.strip_suffix('\n').unwrap_or(t))
}

fn same_call(a: &ToolCall, b: &ToolCall) -> bool {
    // `Value` equality ignores object key order: the canonical comparison.
    a.name == b.name && a.arguments == b.arguments
}

/// The result text of the call `id` among the tool messages after its turn,
/// when it succeeded.
fn success_of<'a>(after: &'a [ChatMessage], id: &str) -> Option<&'a str> {
    after.iter().find_map(|m| match m {
        ChatMessage::Tool { tool_call_id, content, is_error: false, .. } if tool_call_id == id => {
            Some(content.as_str())
        }
        _ => None,
    })
}

/// Arguments as the error message shows them: compact JSON, keys sorted,
/// cut to a readable length.
fn canonical(args: &Value) -> String {
    let text = args.to_string();
    match text.char_indices().nth(200) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(id: &str, name: &str, args: Value) -> ToolCall {
        ToolCall { id: id.into(), name: name.into(), arguments: args }
    }

    fn turn(calls: Vec<ToolCall>) -> ChatMessage {
        ChatMessage::Assistant { content: None, tool_calls: calls }
    }

    fn result(id: &str, content: &str, is_error: bool) -> ChatMessage {
        ChatMessage::Tool { tool_call_id: id.into(), name: "t".into(), content: content.into(), is_error }
    }

    fn never(_: &str) -> bool {
        false
    }

    #[test]
    fn the_first_repeat_gets_the_earlier_result_and_the_second_ends_the_run() {
        let policy = ToolPolicy::default();
        let args = json!({"revenue": 120, "cost": 75});
        let reordered = json!({"cost": 75, "revenue": 120});
        let mut m = vec![ChatMessage::User { content: "go".into() }];
        m.push(turn(vec![call("c0", "margin", args.clone())]));
        assert_eq!(policy.judge(&m, &call("c0", "margin", args.clone()), never), Verdict::Run, "the first call runs");
        m.push(result("c0", "0.375", false));
        m.push(turn(vec![call("c1", "margin", reordered.clone())]));
        let v = policy.judge(&m, &call("c1", "margin", reordered.clone()), never);
        assert_eq!(v, Verdict::Repeat { earlier: "0.375".into() }, "key order does not matter");
        m.push(result("c1", &repeat_text("0.375"), false));
        m.push(turn(vec![call("c2", "margin", args.clone())]));
        let Verdict::Loop(e) = policy.judge(&m, &call("c2", "margin", args), never) else { panic!("a loop") };
        assert_eq!(e.kind, ErrorKind::Limit);
        assert!(e.message.contains(r#"margin({"cost":75,"revenue":120}) 3 times"#), "{}", e.message);
    }

    #[test]
    fn changed_arguments_other_calls_news_failures_and_polling_are_no_repeats() {
        let policy = ToolPolicy::default();
        let a = json!({"x": 1});
        let base = vec![turn(vec![call("c0", "t", a.clone())]), result("c0", "1", false)];

        let mut other_args = base.clone();
        other_args.push(turn(vec![call("c1", "t", json!({"x": 2}))]));
        assert_eq!(policy.judge(&other_args, &call("c1", "t", json!({"x": 2})), never), Verdict::Run);

        let mut between = base.clone();
        between.push(turn(vec![call("c1", "write", json!({}))]));
        between.push(result("c1", "ok", false));
        between.push(turn(vec![call("c2", "t", a.clone())]));
        assert_eq!(policy.judge(&between, &call("c2", "t", a.clone()), never), Verdict::Run, "state may have changed");

        let failed = vec![
            turn(vec![call("c0", "t", a.clone())]),
            result("c0", "{\"error\":{}}", true),
            turn(vec![call("c1", "t", a.clone())]),
        ];
        assert_eq!(policy.judge(&failed, &call("c1", "t", a.clone()), never), Verdict::Run, "a failure may be retried");

        let mut news = base.clone();
        news.push(ChatMessage::User { content: "[message from the planner] also east".into() });
        news.push(turn(vec![call("c1", "t", a.clone())]));
        assert_eq!(policy.judge(&news, &call("c1", "t", a.clone()), never), Verdict::Run, "a follow-up is news");

        let mut polling = base.clone();
        polling.push(turn(vec![call("c1", "t", a.clone())]));
        assert_eq!(policy.judge(&polling, &call("c1", "t", a.clone()), |n| n == "t"), Verdict::Run);

        let off = ToolPolicy { loop_detection: false, ..ToolPolicy::default() };
        assert_eq!(off.judge(&polling, &call("c1", "t", a), never), Verdict::Run, "detection off");
    }
}
