//! Human-readable lines for events, shared by the CLI (`watch`, `submit
//! --wait`, `status`, `jobs`) and `mcp serve` (its progress notifications
//! carry the line `flotilla watch` prints). Every time is RFC 3339 in UTC
//! ([`time()`], [`time_ms`]), the form the JSON output carries too.

use crate::events::Event;
use flotilla_protocol::{JobEventKind, ProgressKind, TodoStatus, Usage};

/// `t` in RFC 3339, UTC, to the second: `2026-03-04T10:00:00Z`.
pub fn time(t: time::OffsetDateTime) -> String {
    let t = t.to_offset(time::UtcOffset::UTC);
    let (h, m, s) = (t.hour(), t.minute(), t.second());
    format!("{:04}-{:02}-{:02}T{h:02}:{m:02}:{s:02}Z", t.year(), u8::from(t.month()), t.day())
}

/// `t` in RFC 3339, UTC, to the millisecond: `2026-03-04T10:00:00.123Z`
/// (event lines and audit records, where order within a second matters).
pub fn time_ms(t: time::OffsetDateTime) -> String {
    let seconds = time(t);
    let ms = t.millisecond();
    format!("{}.{ms:03}Z", seconds.trim_end_matches('Z'))
}

/// The checkbox a todo shows: `[ ]` pending, `[~]` in progress, `[x]` done.
pub fn todo_mark(status: TodoStatus) -> &'static str {
    match status {
        TodoStatus::Pending => "[ ]",
        TodoStatus::InProgress => "[~]",
        TodoStatus::Completed => "[x]",
    }
}

/// Last 8 characters of an id: ids are UUIDv7, whose start is a timestamp
/// shared by ids made in the same minute and whose end is random, so the end
/// tells the tasks of a job apart on screen.
pub fn short(id: impl std::fmt::Display) -> String {
    id.to_string().chars().rev().take(8).collect::<Vec<_>>().into_iter().rev().collect()
}

/// `s` on one line (whitespace runs as one space), cut to `max` characters.
pub fn one_line(s: &str, max: usize) -> String {
    let flat: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() > max { format!("{}…", flat.chars().take(max).collect::<String>()) } else { flat }
}

/// `in/out tokens, calls`.
pub fn usage(u: &Usage) -> String {
    format!(
        "{} in / {} out tokens, {}, {}",
        u.input_tokens,
        u.output_tokens,
        count(u.model_calls, "model call"),
        count(u.tool_calls, "tool call")
    ) + &if u.cost_usd > 0.0 { format!(", ${:.6}", u.cost_usd) } else { String::new() }
}

/// `n` and `noun`, plural unless `n` is one: "1 tool call", "3 tool calls".
pub fn count(n: impl Into<u64>, noun: &str) -> String {
    let n = n.into();
    if n == 1 { format!("1 {noun}") } else { format!("{n} {noun}s") }
}

/// The tokens a failed model call reported, when it reported any.
fn spent(u: &Usage) -> String {
    if u.input_tokens == 0 && u.output_tokens == 0 {
        return String::new();
    }
    format!(", {} in / {} out tokens", u.input_tokens, u.output_tokens)
}

/// Whether the plain output prints `e`. A running task's keep-alive
/// heartbeat (every third of `ack_wait`) says nothing a person reads: it
/// stays in `--json` for scripts and in the live view as liveness.
pub fn shown_in_plain(e: &Event) -> bool {
    !matches!(e, Event::Progress(p) if matches!(p.kind, ProgressKind::Heartbeat))
}

/// One line per event (todo lists take several).
pub fn event(e: &Event) -> String {
    match e {
        Event::Job(j) => {
            let ts = time_ms(j.at);
            let what = match &j.kind {
                JobEventKind::Submitted { input } => format!("job submitted: {}", one_line(input, 100)),
                JobEventKind::Running => "planner running".into(),
                JobEventKind::PlannerStep { step, usage, latency_ms } => format!(
                    "planner step {step}: {} in / {} out tokens, {latency_ms} ms",
                    usage.input_tokens, usage.output_tokens
                ),
                JobEventKind::PlannerStepFailed { step, error_kind, latency_ms, usage: u } => {
                    format!("planner step {step} failed ({error_kind}) after {latency_ms} ms{}", spent(u))
                }
                JobEventKind::Compacted { before_tokens, after_tokens, .. } => {
                    format!("planner context compacted: {before_tokens} -> {after_tokens} tokens")
                }
                JobEventKind::TodosChanged { todos } => {
                    let lines: Vec<String> = todos
                        .iter()
                        .map(|t| {
                            let mark = todo_mark(t.status);
                            format!("             {mark} {}", one_line(&t.content, 90))
                        })
                        .collect();
                    format!("todos:\n{}", lines.join("\n"))
                }
                JobEventKind::TaskDispatched { task_id, subagent_type, description } => {
                    format!("task {} -> {subagent_type}: {}", short(task_id), one_line(description, 80))
                }
                JobEventKind::TaskReported { task_id, status, summary } => {
                    format!("task {} {}: {}", short(task_id), status.as_str(), one_line(summary, 80))
                }
                JobEventKind::Completed { usage: u, .. } => format!("job completed ({})", usage(u)),
                JobEventKind::Failed { error } => format!("job failed: {error}"),
                JobEventKind::Cancelled { reason } => format!("job cancelled: {reason}"),
            };
            format!("{ts} {what}")
        }
        Event::Progress(p) => {
            let ts = time_ms(p.at);
            let what = match &p.kind {
                ProgressKind::Started => format!("started on {} (attempt {})", p.worker_id, p.attempt),
                ProgressKind::Resumed { from_step, reason, interrupted_calls } => {
                    let again = match interrupted_calls {
                        0 => String::new(),
                        n => format!("; {n} interrupted tool call(s) run again"),
                    };
                    format!("resumed after step {from_step} from its journal ({reason}){again}")
                }
                ProgressKind::ModelCall { step, usage, latency_ms } => format!(
                    "model step {step}: {} in / {} out tokens, {latency_ms} ms",
                    usage.input_tokens, usage.output_tokens
                ),
                ProgressKind::ModelFailed { step, error_kind, latency_ms, usage: u } => {
                    format!("model call {step} failed ({error_kind}) after {latency_ms} ms{}", spent(u))
                }
                ProgressKind::ToolCall { tool, call_id, .. } => format!("tool {tool} ({call_id})"),
                ProgressKind::ToolResult { tool, error_kind, duration_ms, .. } => match error_kind {
                    None => format!("tool {tool} ok ({duration_ms} ms)"),
                    Some(k) => format!("tool {tool} {k} error ({duration_ms} ms)"),
                },
                ProgressKind::ApprovalRequested { tool, call_id, decisions, .. } => {
                    // An elicitation's accept is given as its content (docs/APPROVALS.md).
                    let flag = |d: &flotilla_protocol::DecisionKind| match d {
                        flotilla_protocol::DecisionKind::Accept => "content '<json>'",
                        other => other.as_str(),
                    };
                    let d: Vec<_> = decisions.iter().map(flag).collect();
                    format!(
                        "approval needed: {tool} ({call_id}); answer with `flotilla approve {} {call_id} --{}`",
                        p.job_id,
                        d.join(" | --")
                    )
                }
                ProgressKind::ApprovalResolved { tool, call_id, outcome, by } => match by {
                    Some(by) => format!("approval of {tool} ({call_id}): {outcome} by {by}"),
                    None => format!("approval of {tool} ({call_id}): {outcome}"),
                },
                ProgressKind::Executed { command_sha256, exit_code, timed_out, duration_ms, .. } => format!(
                    "execute {} -> {} ({duration_ms} ms)",
                    &command_sha256[..12.min(command_sha256.len())],
                    if *timed_out { "timed out".to_string() } else { format!("exit {exit_code:?}") }
                ),
                ProgressKind::ModelDelta { step, text, .. } => format!("model step {step} writes: {text}"),
                ProgressKind::Heartbeat => "heartbeat".into(),
                ProgressKind::Finished { status, .. } => format!("finished: {}", status.as_str()),
            };
            format!("{ts}   [{}] {what}", short(p.task_id))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An MCP server's question names the flags that answer it: its accept is
    /// given as `--content` (docs/APPROVALS.md, "Elicitation").
    #[test]
    fn an_elicitation_request_names_content_decline_and_cancel() {
        use flotilla_protocol::{DecisionKind, PROGRESS_VERSION, ProgressEvent, ProgressKind};
        let job = flotilla_protocol::ids::JobId::new();
        let e = Event::Progress(ProgressEvent {
            v: PROGRESS_VERSION,
            job_id: job,
            task_id: flotilla_protocol::ids::TaskId::new(),
            subagent_type: flotilla_protocol::ids::SubagentType::new("payments").unwrap(),
            worker_id: "w1".into(),
            attempt: 1,
            at: flotilla_protocol::now(),
            kind: ProgressKind::ApprovalRequested {
                call_id: "call_0_0-elicit".into(),
                tool: "confirm_transfer".into(),
                args_sha256: "ab".repeat(32),
                decisions: DecisionKind::ELICITATION.to_vec(),
                expires_at: flotilla_protocol::now(),
            },
        });
        let line = event(&e);
        let want = format!(
            "approval needed: confirm_transfer (call_0_0-elicit); answer with `flotilla approve {job} call_0_0-elicit --content '<json>' | --decline | --cancel`"
        );
        assert!(line.ends_with(&want), "{line}");
    }

    #[test]
    fn the_plain_output_leaves_out_keep_alive_heartbeats_only() {
        let progress = |kind| {
            Event::Progress(flotilla_protocol::ProgressEvent {
                v: flotilla_protocol::PROGRESS_VERSION,
                job_id: flotilla_protocol::ids::JobId::new(),
                task_id: flotilla_protocol::ids::TaskId::new(),
                subagent_type: flotilla_protocol::ids::SubagentType::new("finance").unwrap(),
                worker_id: "w1".into(),
                attempt: 1,
                at: flotilla_protocol::now(),
                kind,
            })
        };
        assert!(!shown_in_plain(&progress(ProgressKind::Heartbeat)));
        assert!(shown_in_plain(&progress(ProgressKind::Started)));
    }

    #[test]
    fn counts_are_plural_unless_one() {
        let u = Usage { input_tokens: 5, output_tokens: 2, model_calls: 1, tool_calls: 3, ..Usage::default() };
        assert_eq!(usage(&u), "5 in / 2 out tokens, 1 model call, 3 tool calls");
        assert_eq!(count(0u64, "tool call"), "0 tool calls");
    }

    #[test]
    fn times_are_rfc3339_in_utc() {
        let t = time::OffsetDateTime::from_unix_timestamp_nanos(1_772_586_000_123_456_789).unwrap();
        let east = t.to_offset(time::UtcOffset::from_hms(2, 0, 0).unwrap());
        assert_eq!(time(east), "2026-03-04T01:00:00Z");
        assert_eq!(time_ms(east), "2026-03-04T01:00:00.123Z");
        let rfc3339 = time::format_description::well_known::Rfc3339;
        assert_eq!(time::OffsetDateTime::parse(&time_ms(t), &rfc3339).unwrap().unix_timestamp(), 1_772_586_000);
    }
}
