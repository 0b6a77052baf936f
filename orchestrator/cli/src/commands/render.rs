//! Human-readable lines for records, shared by `status` and `jobs`; the
//! lines of events and the time, id and count forms are the client's
//! (shared/client/src/render.rs), re-exported here for every command.

pub use flotilla_client::render::*;
use flotilla_protocol::{JobRecord, TaskCounts};

use super::table;

/// `5000 in all: 4990 completed, 10 running`: the states with tasks in them.
pub fn task_counts(total: u64, counts: &TaskCounts) -> String {
    let states: Vec<String> =
        counts.pairs().iter().filter(|(_, n)| *n > 0).map(|(s, n)| format!("{n} {}", s.as_str())).collect();
    format!("{total} in all: {}", if states.is_empty() { "none counted".into() } else { states.join(", ") })
}

/// One line per task: id, type, status, duration, worker, spend.
fn tasks(r: &JobRecord) -> String {
    let mut t = table::new(&[]);
    for task in &r.tasks {
        let status = task.status.map(|s| s.as_str()).unwrap_or("running");
        let attempt = match (task.attempt, task.resumed_from_step) {
            (_, Some(step)) => format!(" (attempt {}, resumed after step {step})", task.attempt),
            (n, None) if n > 1 => format!(" (attempt {n})"),
            _ => String::new(),
        };
        t.add_row([
            short(task.task_id),
            task.subagent_type.to_string(),
            status.to_string(),
            format!("{} ms", task.duration_ms),
            task.worker_id.clone().unwrap_or_else(|| "-".into()),
            format!("{}{attempt}", usage(&task.usage)),
        ]);
    }
    table::align_right(&mut t, &[3]);
    table::render(t, "  ")
}

/// The whole picture of a job: state, spend (total, planner, per subagent
/// type), todos, tasks, each task's full report, and the answer.
pub fn record(r: &JobRecord) -> String {
    let mut out = format!(
        "job      {}\ntenant   {}\nstatus   {}\ncreated  {}\nupdated  {}\ninput    {}\nusage    {}\n",
        r.id,
        r.tenant,
        r.status.as_str(),
        time(r.created_at),
        time(r.updated_at),
        one_line(&r.input, 200),
        usage(&r.usage),
    );
    if r.tasks_total > 0 {
        out.push_str(&format!("tasks    {}\n", task_counts(r.tasks_total, &r.task_counts)));
    }
    let mut spend = table::new(&[]);
    spend.add_row(["planner".to_string(), usage(&r.planner_usage)]);
    for (ty, u) in &r.usage_by_type {
        spend.add_row([ty.to_string(), usage(u)]);
    }
    out.push_str(&table::render(spend, "  "));
    if !r.todos.is_empty() {
        out.push_str("todos\n");
        for t in &r.todos {
            let mark = todo_mark(t.status);
            out.push_str(&format!("  {mark} {}\n", one_line(&t.content, 100)));
        }
    }
    if !r.tasks.is_empty() {
        let shown = if (r.tasks.len() as u64) < r.tasks_total {
            format!(" ({} of {} shown)", r.tasks.len(), r.tasks_total)
        } else {
            String::new()
        };
        out.push_str(&format!("task list{shown}\n"));
        out.push_str(&tasks(r));
        out.push_str("reports\n");
        for t in &r.tasks {
            let Some(status) = t.status else { continue };
            out.push_str(&format!(
                "  {} {} {}: {}\n",
                short(t.task_id),
                t.subagent_type,
                status.as_str(),
                one_line(&t.description, 100)
            ));
            let body = match &t.error {
                Some(e) => e.to_string(),
                None => t.summary.clone(),
            };
            for line in body.lines() {
                out.push_str(&format!("    {line}\n"));
            }
        }
    }
    if let Some(e) = &r.error {
        out.push_str(&format!("error    {e}\n"));
    }
    if let Some(a) = &r.answer {
        out.push_str(&format!("answer\n{a}\n"));
    }
    out
}
