//! One task's page: its entry (state, worker, attempts, spend), its step
//! timeline and its full report.
//!
//! The timeline is the task's progress events (`<prefix>.job.<tenant>.<job>.progress.<task>`,
//! docs/PROTOCOL.md), read from the events stream from the first: every
//! model call, tool call, approval, sandboxed command and resume of every
//! attempt, in order. The report is the task's `/reports/<task>.md` job
//! file (docs/TOOLS.md), which holds the whole text the job record cuts
//! to a summary. The page stays live over `/jobs/<id>/tasks/<task>/events`,
//! the same events as they come.

use std::time::Duration;

use axum::Extension;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{Html, Response};
use flotilla_client::{Event, Scope};
use flotilla_protocol::ids::{JobId, TaskId};
use flotilla_protocol::{ProgressEvent, TaskEntry, TaskFilter};
use futures::StreamExt;
use serde::Serialize;
use serde_json::Value;
use time::OffsetDateTime;

use super::guard::Principal;
use super::{Dash, Failure, csrf_of, page, template_failure, unavailable, view};
use crate::csrf::CsrfToken;

/// How long the page waits for the task's stored events.
const REPLAY_WAIT: Duration = Duration::from_secs(5);

/// Timeline rows shown at most (a task of many steps shows its first ones
/// and says how many more there were).
const MAX_ROWS: usize = 2000;

/// One row of the timeline.
#[derive(Serialize, Debug, PartialEq)]
pub struct Step {
    /// `HH:MM:SS.mmm` UTC.
    at: String,
    /// Milliseconds since the task's first event.
    offset_ms: i64,
    attempt: u32,
    worker: String,
    /// The event's wire name (`model_call`, `tool_result`, …).
    event: String,
    /// What it says, in a line.
    detail: String,
    /// Whether it reports something that went wrong.
    bad: bool,
}

/// The timeline rows of `events` (heartbeats and streamed text left out).
pub fn steps(events: &[ProgressEvent]) -> Vec<Step> {
    let first = events.first().map(|e| e.at);
    events
        .iter()
        .filter_map(|e| {
            let kind = serde_json::to_value(&e.kind).ok()?;
            let event = kind["event"].as_str().unwrap_or("?").to_string();
            if event == "heartbeat" || event == "model_delta" {
                return None;
            }
            let (detail, bad) = describe(&event, &kind);
            Some(Step {
                at: clock(e.at),
                offset_ms: first.map_or(0, |f| (e.at - f).whole_milliseconds() as i64),
                attempt: e.attempt,
                worker: e.worker_id.clone(),
                event,
                detail,
                bad,
            })
        })
        .collect()
}

fn clock(t: OffsetDateTime) -> String {
    format!("{:02}:{:02}:{:02}.{:03}", t.hour(), t.minute(), t.second(), t.millisecond())
}

/// One line for an event, from its JSON form (so a kind added to the
/// protocol later still shows, with its fields).
fn describe(event: &str, k: &Value) -> (String, bool) {
    let s = |f: &str| k[f].as_str().unwrap_or_default().to_string();
    let n = |f: &str| k[f].as_u64().unwrap_or_default();
    let tokens = |u: &Value| {
        format!(
            "{} in / {} out tokens",
            u["input_tokens"].as_u64().unwrap_or(0),
            u["output_tokens"].as_u64().unwrap_or(0)
        )
    };
    match event {
        "started" => ("a worker took the task".into(), false),
        "resumed" => {
            let calls = n("interrupted_calls");
            let again = if calls > 0 { format!(", {calls} interrupted tool calls run again") } else { String::new() };
            (format!("resumed after step {} ({}){again}", n("from_step"), s("reason")), false)
        }
        "model_call" => (format!("step {} · {} · {} ms", n("step"), tokens(&k["usage"]), n("latency_ms")), false),
        "tool_call" => (format!("{} (call {})", s("tool"), s("call_id")), false),
        "tool_result" => match k["error_kind"].as_str() {
            Some(kind) => (format!("{} failed: {kind} · {} ms", s("tool"), n("duration_ms")), true),
            None => (format!("{} ok · {} bytes · {} ms", s("tool"), n("size"), n("duration_ms")), false),
        },
        "approval_requested" => (format!("{} waits for a person (call {})", s("tool"), s("call_id")), false),
        "approval_resolved" => {
            let by = k["by"].as_str().map(|b| format!(" by {b}")).unwrap_or_default();
            let outcome = s("outcome");
            let bad = outcome != "approve" && outcome != "edit" && outcome != "accept";
            (format!("{}: {outcome}{by}", s("tool")), bad)
        }
        "executed" => {
            let how = match (k["exit_code"].as_i64(), k["signal"].as_i64()) {
                (Some(code), _) => format!("exit {code}"),
                (None, Some(sig)) => format!("signal {sig}"),
                _ => "no exit status".into(),
            };
            let cut = if k["timed_out"].as_bool() == Some(true) { ", timed out" } else { "" };
            (format!("command {how}{cut} · {} ms", n("duration_ms")), k["exit_code"].as_i64() != Some(0))
        }
        "finished" => {
            let status = s("status");
            (format!("{status} · {}", tokens(&k["usage"])), status != "completed")
        }
        _ => {
            let mut rest = k.clone();
            if let Some(o) = rest.as_object_mut() {
                o.remove("event");
            }
            let bad = event.contains("fail") || event.contains("error");
            (rest.to_string(), bad)
        }
    }
}

/// The task's stored progress events, read from the first; at most
/// [`MAX_ROWS`] of them, with how many there were in all.
async fn stored_events(
    d: &Dash,
    entry_of: &super::JobRecord,
    task: TaskId,
) -> Result<(Vec<ProgressEvent>, usize), Failure> {
    let scope = Scope::Task(entry_of.tenant.clone(), entry_of.id, task);
    let (stored, events) = d.client.follow_counted(scope, true).await.map_err(unavailable)?;
    let read = events
        .take(stored)
        .filter_map(|e| async move {
            match e {
                Ok(Event::Progress(p)) => Some(p),
                _ => None,
            }
        })
        .take(MAX_ROWS)
        .collect::<Vec<_>>();
    // A stream that delivers fewer than it counted (events expired meanwhile) stops at the wait.
    let events = tokio::time::timeout(REPLAY_WAIT, read).await.unwrap_or_default();
    Ok((events, stored))
}

/// The task `task` of job `id`, if `who` sees the job.
async fn entry(d: &Dash, who: &Principal, id: &str, task: &str) -> Result<(super::JobRecord, TaskEntry), Failure> {
    let id: JobId = id.parse().map_err(|_| Failure(StatusCode::BAD_REQUEST, format!("{id:?} is not a job id")))?;
    let task: TaskId =
        task.parse().map_err(|_| Failure(StatusCode::BAD_REQUEST, format!("{task:?} is not a task id")))?;
    let filter = TaskFilter { task: Some(task), ..TaskFilter::default() };
    let reply = d.reader.status(&id, None, 1, Some(&filter)).await.map_err(unavailable)?;
    let mut reply =
        reply.filter(|r| who.sees(&r.job.tenant)).ok_or(Failure(StatusCode::NOT_FOUND, format!("no job {id}")))?;
    let found = reply.job.tasks.pop().ok_or(Failure(StatusCode::NOT_FOUND, format!("job {id} has no task {task}")))?;
    Ok((reply.job, found))
}

pub async fn fragment(
    State(d): State<Dash>,
    Extension(who): Extension<Principal>,
    csrf: Option<Extension<CsrfToken>>,
    Path((id, task)): Path<(String, String)>,
) -> Result<Html<String>, Failure> {
    let (job, t) = entry(&d, &who, &id, &task).await?;
    let (events, stored) = stored_events(&d, &job, t.task_id).await?;
    let steps = steps(&events);
    let ended = t.status.is_some();
    // The full report, once the task has one; the summary when the file is
    // not there (a record of an older version, or expired files).
    let report = if ended {
        let path = format!("/reports/{}.md", t.task_id);
        match d.client.for_tenant(job.tenant.clone()).download(job.id, &path).await {
            Ok((bytes, _)) => Some(String::from_utf8_lossy(&bytes).into_owned()),
            Err(_) => None,
        }
    } else {
        None
    };
    let ctx = minijinja::context! {
        job_id => job.id.to_string(), job_status => job.status.as_str(),
        task => view::value(view::task_row(&job, &t, flotilla_protocol::now())),
        description => t.description.clone(),
        error => t.error.as_ref().map(|e| e.to_string()),
        summary => t.summary.clone(), report, ended,
        steps => view::value(&steps), more_steps => stored.saturating_sub(events.len()),
        csrf => csrf_of(csrf),
    };
    view::render("task.html", ctx).map(Html).map_err(template_failure)
}

pub async fn page_handler(
    State(d): State<Dash>,
    who: Extension<Principal>,
    csrf: Option<Extension<CsrfToken>>,
    Path((id, task)): Path<(String, String)>,
) -> Result<Html<String>, Failure> {
    let Html(body) = fragment(State(d), who, csrf, Path((id.clone(), task.clone()))).await?;
    page(
        &format!("task {task}"),
        &format!("/fragment/jobs/{id}/tasks/{task}"),
        &format!("/jobs/{id}/tasks/{task}/events"),
        body,
    )
}

/// The task's progress events as SSE, from its first stored one on.
pub async fn events(
    State(d): State<Dash>,
    Extension(who): Extension<Principal>,
    Path((id, task)): Path<(String, String)>,
) -> Result<Response, Failure> {
    let (job, t) = entry(&d, &who, &id, &task).await?;
    let events = d.client.follow(Scope::Task(job.tenant, job.id, t.task_id), true).await.map_err(unavailable)?;
    Ok(super::sse(events))
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_protocol::ids::SubagentType;
    use flotilla_protocol::{ProgressKind, Usage};

    fn ev(ms: i64, kind: ProgressKind) -> ProgressEvent {
        ProgressEvent {
            v: flotilla_protocol::PROGRESS_VERSION,
            job_id: JobId::new(),
            task_id: TaskId::new(),
            subagent_type: SubagentType::new("finance").unwrap(),
            worker_id: "w1".into(),
            attempt: 1,
            at: OffsetDateTime::UNIX_EPOCH + time::Duration::milliseconds(ms),
            kind,
        }
    }

    #[test]
    fn a_timeline_names_each_step_with_its_offset_and_leaves_out_keep_alives() {
        let usage = Usage { input_tokens: 120, output_tokens: 30, model_calls: 1, ..Usage::default() };
        let events = [
            ev(0, ProgressKind::Started),
            ev(5, ProgressKind::Heartbeat),
            ev(250, ProgressKind::ModelCall { step: 1, usage, latency_ms: 240 }),
            ev(260, ProgressKind::ToolCall { call_id: "c1".into(), tool: "calc".into(), args_sha256: "x".into() }),
            ev(
                270,
                ProgressKind::ToolResult {
                    call_id: "c1".into(),
                    tool: "calc".into(),
                    error_kind: Some(flotilla_protocol::ErrorKind::Business),
                    size: 10,
                    duration_ms: 9,
                },
            ),
        ];
        let rows = steps(&events);
        let names: Vec<&str> = rows.iter().map(|r| r.event.as_str()).collect();
        assert_eq!(names, ["started", "model_call", "tool_call", "tool_result"]);
        assert_eq!(rows[1].offset_ms, 250);
        assert_eq!(rows[1].detail, "step 1 · 120 in / 30 out tokens · 240 ms");
        assert!(rows[3].bad && rows[3].detail.contains("calc failed: business"), "{:?}", rows[3]);
        assert_eq!(rows[0].at, "00:00:00.000");
    }
}
