//! Server-rendered HTML of the dashboard: minijinja templates with HTML
//! auto-escaping (job text, summaries and answers are untrusted model or user
//! output), fed by view models computed here from job records.

use std::sync::LazyLock;

use flotilla_protocol::ids::TaskId;
use flotilla_protocol::{ApprovalRequest, JobRecord, JobSummary, TaskEntry, TodoStatus, Usage};
use minijinja::Environment;
use serde::Serialize;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

static TEMPLATES: LazyLock<Environment<'static>> = LazyLock::new(|| {
    let mut env = Environment::new();
    // Names end in .html, so minijinja escapes every interpolation.
    for (name, text) in [
        ("layout.html", include_str!("templates/layout.html")),
        ("jobs.html", include_str!("templates/jobs.html")),
        ("approval.html", include_str!("templates/approval.html")),
        ("job.html", include_str!("templates/job.html")),
        ("task.html", include_str!("templates/task.html")),
        ("files.html", include_str!("templates/files.html")),
        ("workers.html", include_str!("templates/workers.html")),
        ("queues.html", include_str!("templates/queues.html")),
        ("approvals.html", include_str!("templates/approvals.html")),
    ] {
        env.add_template(name, text).expect("dashboard templates parse");
    }
    env
});

/// Any serializable value as a template value.
pub fn value(v: impl Serialize) -> minijinja::Value {
    minijinja::Value::from(minijinja::value::Serde(v))
}

/// Renders `template` with `ctx`.
pub fn render(template: &str, ctx: impl Serialize) -> Result<String, minijinja::Error> {
    TEMPLATES.get_template(template)?.render(value(ctx))
}

/// `t` as `YYYY-MM-DD HH:MM:SS` (UTC).
pub fn ts(t: OffsetDateTime) -> String {
    let s = t.format(&Rfc3339).unwrap_or_default();
    s.get(..19).unwrap_or(&s).replace('T', " ")
}

fn cost(u: &Usage) -> String {
    if u.cost_usd > 0.0 { format!("${:.4}", u.cost_usd) } else { String::new() }
}

/// One row of the jobs list.
#[derive(Serialize)]
pub struct JobRow {
    id: String,
    tenant: String,
    status: &'static str,
    input: String,
    tasks: usize,
    /// Tasks ended, of `tasks`.
    ended: u64,
    tokens: u64,
    cost: String,
    created: String,
}

/// Rows of the jobs list.
pub fn job_rows(jobs: &[JobSummary]) -> Vec<JobRow> {
    jobs.iter()
        .map(|j| JobRow {
            id: j.id.to_string(),
            tenant: j.tenant.to_string(),
            status: j.status.as_str(),
            input: j.input.clone(),
            tasks: j.tasks,
            ended: j.task_counts.ended(),
            tokens: j.usage.total_tokens(),
            cost: cost(&j.usage),
            created: ts(j.created_at),
        })
        .collect()
}

#[derive(Serialize)]
struct UsageView {
    input_tokens: u64,
    output_tokens: u64,
    model_calls: u64,
    tool_calls: u64,
    cost: String,
}

impl From<&Usage> for UsageView {
    fn from(u: &Usage) -> Self {
        Self {
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
            model_calls: u.model_calls,
            tool_calls: u.tool_calls,
            cost: cost(u),
        }
    }
}

#[derive(Serialize)]
struct TodoView {
    content: String,
    status: &'static str,
    mark: &'static str,
}

/// One task as the task table and the task page show it.
#[derive(Serialize)]
pub struct TaskView {
    id: String,
    short: String,
    subagent_type: String,
    description: String,
    status: &'static str,
    worker: String,
    attempt: u32,
    resumed_from_step: Option<u32>,
    duration_ms: u64,
    summary: String,
    error: String,
    /// The first line of the summary, at most [`HEAD_CHARS`] characters.
    summary_head: String,
    /// The same of the error.
    error_head: String,
    usage: UsageView,
    /// Timeline bar: start and width in percent of the job's span.
    offset: f64,
    width: f64,
}

#[derive(Serialize)]
struct TypeUsageView {
    subagent_type: String,
    usage: UsageView,
}

/// Everything the job page shows.
#[derive(Serialize)]
pub struct JobView {
    id: String,
    tenant: String,
    status: &'static str,
    terminal: bool,
    input: String,
    answer: Option<String>,
    error: Option<String>,
    created: String,
    updated: String,
    elapsed_s: String,
    usage: UsageView,
    planner_usage: UsageView,
    by_type: Vec<TypeUsageView>,
    todos: Vec<TodoView>,
    /// One page of tasks (a job may have 100 000).
    tasks: Vec<TaskView>,
    tasks_total: u64,
    /// `(state, count)` for the states with tasks in them.
    task_counts: Vec<(&'static str, u64)>,
    /// The last task id of this page, when more follow (`?after=` of the next page).
    next_after: Option<String>,
    /// How far the job's tasks are, for the progress bar.
    progress: ProgressView,
    /// The subagent types it used, for the task table's type filter.
    types: Vec<String>,
    maps: Vec<MapView>,
    filter: FilterView,
    matched: Option<u64>,
}

/// A job's tasks by where they stand, as shares of the bar, with the rate
/// they end at and when the rest would be done at that rate.
#[derive(Serialize, Default)]
pub struct ProgressView {
    /// Tasks planned: dispatched so far, or a map's item count when larger
    /// (see [`JobProgress::planned`]).
    planned: u64,
    completed: u64,
    /// Failed and rejected.
    failed: u64,
    cancelled: u64,
    /// Dispatched and not ended (queued or running: the page's script tells
    /// the two apart from `started` events).
    open: u64,
    /// Planned, not dispatched yet (a map's later items).
    undispatched: u64,
    /// Bar widths in percent: completed, failed, cancelled, open.
    pct: [f64; 4],
    /// Ended tasks per second since the job was created.
    rate: String,
    /// Seconds left at that rate, while the job runs.
    eta_s: Option<u64>,
}

/// What [`job_view`] needs beyond the record: the job's maps and the task
/// table's filter.
#[derive(Default)]
pub struct JobProgress {
    /// Each `map_tasks` call's item count and results so far.
    pub maps: Vec<MapView>,
    /// The filter the page's tasks were chosen by.
    pub filter: FilterView,
    /// With a filter: how many of the job's tasks match.
    pub matched: Option<u64>,
}

/// The task table's filter as the form shows it.
#[derive(Serialize, Default, Clone)]
pub struct FilterView {
    pub state: String,
    #[serde(rename = "type")]
    pub subagent_type: String,
    pub worker: String,
    pub q: String,
    /// Whether any field filters.
    pub active: bool,
    /// The query string of these fields (`?state=…`), empty when none.
    pub query: String,
}

impl JobProgress {
    /// Tasks the job will have at least: the larger of those dispatched and
    /// those its maps hold (exact for a job whose tasks are one map's items,
    /// a floor otherwise: a planner may dispatch more later).
    fn planned(&self, dispatched: u64) -> u64 {
        dispatched.max(self.maps.iter().map(|m| m.total).sum())
    }
}

/// One `map_tasks` call, from its progress record (`/maps/<id>/progress.json`,
/// docs/TOOLS.md).
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct MapView {
    /// The map id.
    pub id: String,
    /// Items in the map.
    pub total: u64,
    /// Items whose results are stored, from the first.
    pub done: u64,
    /// Of those, completed.
    pub completed: u64,
    /// Of those, not completed.
    pub failed: u64,
    /// Whether its results file is written.
    pub finished: bool,
}

/// The job page's view of `rec` (its header and one page of tasks, the
/// next page after `next_after`) at `now`, with its maps' progress.
pub fn job_view(rec: &JobRecord, next_after: Option<TaskId>, now: OffsetDateTime, extra: &JobProgress) -> JobView {
    let (start, end) = job_span(rec, now);
    let tasks = rec.tasks.iter().map(|t| task_view(t, start, end)).collect();
    JobView {
        id: rec.id.to_string(),
        tenant: rec.tenant.to_string(),
        status: rec.status.as_str(),
        terminal: rec.status.is_terminal(),
        input: rec.input.clone(),
        answer: rec.answer.clone(),
        error: rec.error.as_ref().map(|e| e.to_string()),
        created: ts(rec.created_at),
        updated: ts(rec.updated_at),
        elapsed_s: format!("{:.1}", (end - start).as_seconds_f64()),
        usage: (&rec.usage).into(),
        planner_usage: (&rec.planner_usage).into(),
        by_type: rec
            .usage_by_type
            .iter()
            .map(|(ty, u)| TypeUsageView { subagent_type: ty.to_string(), usage: u.into() })
            .collect(),
        todos: rec
            .todos
            .iter()
            .map(|t| TodoView {
                content: t.content.clone(),
                status: match t.status {
                    TodoStatus::Pending => "pending",
                    TodoStatus::InProgress => "in_progress",
                    TodoStatus::Completed => "completed",
                },
                mark: match t.status {
                    TodoStatus::Pending => "○",
                    TodoStatus::InProgress => "◐",
                    TodoStatus::Completed => "●",
                },
            })
            .collect(),
        tasks,
        tasks_total: rec.tasks_total,
        task_counts: rec.task_counts.pairs().iter().filter(|(_, n)| *n > 0).map(|(s, n)| (s.as_str(), *n)).collect(),
        next_after: next_after.map(|t| t.to_string()),
        progress: progress_view(rec, (end - start).as_seconds_f64(), extra),
        types: rec.usage_by_type.keys().map(|t| t.to_string()).collect(),
        maps: extra.maps.clone(),
        filter: extra.filter.clone(),
        matched: extra.matched,
    }
}

/// The span a job's timeline bars cover: its creation to its end, or `now`.
fn job_span(rec: &JobRecord, now: OffsetDateTime) -> (OffsetDateTime, OffsetDateTime) {
    let start = rec.created_at;
    let end = if rec.status.is_terminal() { rec.updated_at.max(start) } else { now.max(start) };
    (start, end)
}

/// One task of job `rec` as its row shows it at `now`.
pub fn task_row(rec: &JobRecord, t: &TaskEntry, now: OffsetDateTime) -> TaskView {
    let (start, end) = job_span(rec, now);
    task_view(t, start, end)
}

/// `t` as a row, its bar placed in the span `start..end`.
fn task_view(t: &TaskEntry, start: OffsetDateTime, end: OffsetDateTime) -> TaskView {
    let span = (end - start).as_seconds_f64().max(0.001);
    let pct = |t: OffsetDateTime| (((t - start).as_seconds_f64() / span) * 100.0).clamp(0.0, 100.0);
    let from = t.started_at.or(t.dispatched_at).unwrap_or(start);
    let to = t.finished_at.unwrap_or(end);
    let offset = (pct(from) * 10.0).round() / 10.0;
    let width = ((pct(to) - offset).max(0.5) * 10.0).round() / 10.0;
    TaskView {
        id: t.task_id.to_string(),
        short: t.task_id.to_string().chars().rev().take(8).collect::<Vec<_>>().into_iter().rev().collect(),
        subagent_type: t.subagent_type.to_string(),
        description: t.description.clone(),
        status: t.status.map(|s| s.as_str()).unwrap_or("running"),
        worker: t.worker_id.clone().unwrap_or_default(),
        attempt: t.attempt,
        resumed_from_step: t.resumed_from_step,
        duration_ms: t.duration_ms,
        summary: t.summary.clone(),
        error: t.error.as_ref().map(|e| e.to_string()).unwrap_or_default(),
        summary_head: head(&t.summary),
        error_head: t.error.as_ref().map(|e| head(&e.to_string())).unwrap_or_default(),
        usage: (&t.usage).into(),
        offset,
        width,
    }
}

fn progress_view(rec: &JobRecord, elapsed_s: f64, extra: &JobProgress) -> ProgressView {
    let c = &rec.task_counts;
    let planned = extra.planned(rec.tasks_total);
    let (completed, failed, cancelled, open) = (c.completed, c.failed + c.rejected, c.cancelled, c.pending + c.running);
    let ended = completed + failed + cancelled;
    let share = |n: u64| if planned == 0 { 0.0 } else { ((n as f64 / planned as f64) * 1000.0).round() / 10.0 };
    let rate = if elapsed_s > 0.0 { ended as f64 / elapsed_s } else { 0.0 };
    let left = planned.saturating_sub(ended);
    ProgressView {
        planned,
        completed,
        failed,
        cancelled,
        open,
        undispatched: planned.saturating_sub(ended + open),
        pct: [share(completed), share(failed), share(cancelled), share(open)],
        rate: if rate >= 10.0 { format!("{rate:.0}") } else { format!("{rate:.1}") },
        eta_s: (!rec.status.is_terminal() && rate > 0.0 && left > 0).then(|| (left as f64 / rate).ceil() as u64),
    }
}

/// Characters of a summary the task table shows.
const HEAD_CHARS: usize = 90;

/// The first line of `text`, cut to [`HEAD_CHARS`] characters with `…`.
pub fn head(text: &str) -> String {
    let line = text.trim().lines().next().unwrap_or_default();
    match line.char_indices().nth(HEAD_CHARS) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None if line.len() < text.trim().len() => format!("{line} …"),
        None => line.to_string(),
    }
}

/// `text` percent-encoded as one query-string value.
pub fn query_value(text: &str) -> String {
    path_segment(text)
}

/// Text made safe to put in HTML built outside a template.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `text` as one URL path segment: unreserved characters kept, the rest
/// percent-encoded (a model's call id may hold any character).
fn path_segment(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            b => format!("%{b:02X}"),
        })
        .collect()
}

/// One pending approval on a job page, with the decisions it offers.
#[derive(Serialize)]
pub struct ApprovalRow {
    job_id: String,
    tenant: String,
    subagent_type: String,
    call_id: String,
    /// `call_id` percent-encoded for the form's URL path.
    call_path: String,
    task_id: String,
    tool: String,
    /// The requested arguments, pretty JSON (the edit box starts with them).
    args: String,
    approve: bool,
    reject: bool,
    edit: bool,
    /// An MCP server's question (elicitation): `<server> asks: <message>`.
    question: Option<String>,
    /// Its requested schema, pretty JSON.
    schema: Option<String>,
    accept: bool,
    decline: bool,
    cancel: bool,
    expires_in_s: i64,
}

/// Rows of a job's pending approvals at `now`.
pub fn approval_rows(requests: &[ApprovalRequest], now: OffsetDateTime) -> Vec<ApprovalRow> {
    use flotilla_protocol::DecisionKind;
    requests
        .iter()
        .map(|r| ApprovalRow {
            job_id: r.job_id.to_string(),
            tenant: r.tenant.to_string(),
            subagent_type: r.subagent_type.to_string(),
            call_id: r.call_id.clone(),
            call_path: path_segment(&r.call_id),
            task_id: r.task_id.to_string(),
            tool: r.tool.clone(),
            args: serde_json::to_string_pretty(&r.args).unwrap_or_default(),
            approve: r.decisions.contains(&DecisionKind::Approve),
            reject: r.decisions.contains(&DecisionKind::Reject),
            edit: r.decisions.contains(&DecisionKind::Edit),
            question: r.message.as_ref().map(|m| format!("{} asks: {m}", r.server.as_deref().unwrap_or("server"))),
            schema: r.requested_schema.as_ref().map(|s| serde_json::to_string_pretty(s).unwrap_or_default()),
            accept: r.decisions.contains(&DecisionKind::Accept),
            decline: r.decisions.contains(&DecisionKind::Decline),
            cancel: r.decisions.contains(&DecisionKind::Cancel),
            expires_in_s: (r.expires_at - now).whole_seconds().max(0),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_protocol::ids::{JobId, Tenant};

    #[test]
    fn a_page_of_a_large_job_shows_its_counts_and_links_the_next_page() {
        let mut rec = JobRecord::new(JobId::new(), Tenant::default(), "many".into());
        rec.tasks_total = 250;
        rec.task_counts.completed = 240;
        rec.task_counts.running = 10;
        let next = flotilla_protocol::ids::TaskId::new();
        let html = render(
            "job.html",
            minijinja::context! { job => value(job_view(&rec, Some(next), rec.created_at, &JobProgress::default())) },
        )
        .unwrap();
        assert!(html.contains("250 in all · 10 running · 240 completed"), "{html}");
        assert!(html.contains(&format!("?after={next}")), "{html}");
    }

    #[test]
    fn a_running_job_page_carries_the_csrf_token_in_its_cancel_and_approval_forms() {
        let rec = JobRecord::new(JobId::new(), Tenant::default(), "deploy".into());
        let request: ApprovalRequest = serde_json::from_value(serde_json::json!({
            "v": 1, "job_id": rec.id, "task_id": flotilla_protocol::ids::TaskId::new(), "tenant": "default",
            "subagent_type": "ops", "worker_id": "w1", "call_id": "call/1 x", "tool": "deploy",
            "args": {"env": "<prod>"}, "input_schema": {"type": "object"}, "decisions": ["approve", "reject"],
            "requested_at": "1970-01-01T00:00:00Z", "expires_at": "1970-01-01T00:05:00Z",
        }))
        .unwrap();
        let approvals = approval_rows(&[request], OffsetDateTime::UNIX_EPOCH);
        let ctx = minijinja::context! {
            job => value(job_view(&rec, None, rec.created_at, &JobProgress::default())), csrf => "c5rf", can_act => true,
            approvals => value(approvals),
        };
        let html = render("job.html", ctx).unwrap();
        assert_eq!(html.matches(r#"name="csrf" value="c5rf""#).count(), 2, "cancel and approval forms: {html}");
        assert!(html.contains(r#"action="/actions/approvals/call%2F1%20x""#), "{html}");
        assert!(html.contains(r#"value="approve""#) && html.contains(r#"value="reject""#), "{html}");
        assert!(!html.contains(r#"value="edit""#), "edit is not offered: {html}");
        assert!(html.contains("&lt;prod&gt;") && !html.contains("<prod>"), "arguments are escaped: {html}");
        let ctx = minijinja::context! { job => value(job_view(&rec, None, rec.created_at, &JobProgress::default())), can_act => false };
        assert!(!render("job.html", ctx).unwrap().contains("cancel-form"), "no buttons without the right to act");
    }

    /// An MCP server's question shows its message and schema, a box for the
    /// answer and the protocol's three actions; nothing of a tool call's.
    #[test]
    fn an_elicitation_shows_the_question_the_schema_and_its_three_answers() {
        let rec = JobRecord::new(JobId::new(), Tenant::default(), "pay".into());
        let request: ApprovalRequest = serde_json::from_value(serde_json::json!({
            "v": 1, "job_id": rec.id, "task_id": flotilla_protocol::ids::TaskId::new(), "tenant": "default",
            "subagent_type": "payments", "worker_id": "w1", "call_id": "call_0_0-elicit", "tool": "confirm_transfer",
            "args": {"amount": 50}, "input_schema": {"type": "object"}, "decisions": ["accept", "decline", "cancel"],
            "kind": "elicitation", "server": "finance", "message": "Transfer <50>?",
            "requested_schema": {"type": "object", "properties": {"approve": {"type": "boolean"}}},
            "requested_at": "1970-01-01T00:00:00Z", "expires_at": "1970-01-01T00:05:00Z",
        }))
        .unwrap();
        let ctx = minijinja::context! {
            job => value(job_view(&rec, None, rec.created_at, &JobProgress::default())), csrf => "c5rf", can_act => true,
            approvals => value(approval_rows(&[request], OffsetDateTime::UNIX_EPOCH)),
        };
        let html = render("job.html", ctx).unwrap();
        assert!(html.contains("finance asks: Transfer &lt;50&gt;?"), "{html}");
        assert!(html.contains("&quot;approve&quot;") && html.contains(r#"name="content""#), "{html}");
        for d in ["accept", "decline", "cancel"] {
            assert!(html.contains(&format!(r#"value="{d}""#)), "{d}: {html}");
        }
        for d in ["approve", "reject", "edit"] {
            assert!(!html.contains(&format!(r#"value="{d}""#)), "{d} offered: {html}");
        }
    }

    /// A map of 1 000 items with 240 done shows 760 to go, the rate they
    /// end at and when the rest would be done.
    #[test]
    fn a_running_map_shows_its_progress_rate_and_eta() {
        let mut rec = JobRecord::new(JobId::new(), Tenant::default(), "map".into());
        rec.status = flotilla_protocol::JobStatus::Running;
        rec.tasks_total = 266;
        rec.task_counts.completed = 230;
        rec.task_counts.failed = 10;
        rec.task_counts.running = 26;
        let map =
            MapView { id: "call_0-ab".into(), total: 1000, done: 200, completed: 195, failed: 5, finished: false };
        let extra = JobProgress { maps: vec![map], ..JobProgress::default() };
        let now = rec.created_at + time::Duration::seconds(10);
        let v = job_view(&rec, None, now, &extra);
        let p = &v.progress;
        assert_eq!((p.planned, p.completed, p.failed, p.open, p.undispatched), (1000, 230, 10, 26, 734));
        assert_eq!((p.rate.as_str(), p.eta_s), ("24", Some(32)), "240 ended in 10 s: 760 left take 32 s");
        assert_eq!(p.pct, [23.0, 1.0, 0.0, 2.6]);
        let html = render("job.html", minijinja::context! { job => value(v) }).unwrap();
        assert!(html.contains(r#"aria-valuemax="1000""#) && html.contains(r#"aria-valuenow="240""#), "{html}");
        assert!(html.contains("map <code>call_0-ab</code>: 200 of 1000 items stored"), "{html}");
        assert!(html.contains(r#"<span id="eta">32</span>"#), "{html}");
    }

    #[test]
    fn untrusted_text_is_escaped() {
        let mut rec = JobRecord::new(JobId::new(), Tenant::default(), "<script>alert(1)</script>".into());
        rec.answer = Some("<img src=x onerror=alert(2)>".into());
        let html = render(
            "job.html",
            minijinja::context! { job => value(job_view(&rec, None, rec.created_at, &JobProgress::default())) },
        )
        .unwrap();
        assert!(!html.contains("<script>alert"), "{html}");
        assert!(html.contains("&lt;script&gt;"), "{html}");
        assert!(!html.contains("<img src=x"), "{html}");
    }
}
