//! `flotilla watch` of a job that had already ended, in a terminal: no event
//! will come, so the picture the live view would have ended with is drawn
//! once from the job record (not only its answer).
//! The lines follow the live view's (orchestrator/cli/src/commands/live.rs): a header,
//! the todos, and one collapsed line per task, the latest
//! [`FINISHED_LINES`] of them; `flotilla status` has the whole record.

use flotilla_protocol::{JobRecord, TaskEntry, TaskState};

use super::FINISHED_LINES;
use crate::commands::render::{one_line, short, task_counts, todo_mark};

/// Header, todos and the latest task lines of the ended job `r` (the answer
/// or error is printed after it, as after a live view).
pub fn finished(r: &JobRecord) -> String {
    let mut out = format!("job {}  {}", r.id, r.status.as_str());
    if r.tasks_total > 0 {
        out.push_str(&format!("  tasks {}", task_counts(r.tasks_total, &r.task_counts)));
    }
    out.push_str(&format!("  {} tok", r.usage.total_tokens()));
    if r.usage.cost_usd > 0.0 {
        out.push_str(&format!("  ${:.4}", r.usage.cost_usd));
    }
    out.push('\n');
    for t in &r.todos {
        let mark = todo_mark(t.status);
        out.push_str(&format!("  {mark} {}\n", one_line(&t.content, 100)));
    }
    let shown = &r.tasks[r.tasks.len().saturating_sub(FINISHED_LINES)..];
    let hidden = r.tasks_total.saturating_sub(shown.len() as u64);
    if hidden > 0 {
        out.push_str(&format!("  ({hidden} earlier tasks not shown: `flotilla status {}` lists them)\n", r.id));
    }
    for t in shown {
        out.push_str(&task_line(t));
        out.push('\n');
    }
    out
}

/// A task as the live view collapses it: mark, id, type, state, worker,
/// time, tokens, and the head of its report (or its error).
fn task_line(t: &TaskEntry) -> String {
    let state = t.state();
    let mark = match state {
        TaskState::Completed => "✔",
        TaskState::Pending | TaskState::Running => "…",
        TaskState::Failed | TaskState::Rejected | TaskState::Cancelled => "✘",
    };
    let result = match &t.error {
        Some(e) => e.to_string(),
        None => t.summary.clone(),
    };
    format!(
        "  {mark} [{}] {:<10} {:<9} {:<14} {:>5.1}s  {} tok  {}",
        short(t.task_id),
        t.subagent_type.as_str(),
        state.as_str(),
        t.worker_id.as_deref().unwrap_or("-"),
        t.duration_ms as f64 / 1000.0,
        t.usage.total_tokens(),
        one_line(&result, 60)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_protocol::ids::{JobId, TaskId, Tenant};
    use flotilla_protocol::{ErrorInfo, ErrorKind, JobStatus, TaskStatus, Todo, TodoStatus};

    fn entry(status: Option<TaskStatus>, summary: &str) -> TaskEntry {
        let mut t: TaskEntry = serde_json::from_value(serde_json::json!({
            "task_id": TaskId::new(), "subagent_type": "finance", "description": "margin", "status": null,
            "summary": "", "usage": {"input_tokens": 100, "output_tokens": 20}, "attempt": 1, "duration_ms": 1500,
            "published": true,
        }))
        .expect("task entry");
        t.status = status;
        t.summary = summary.into();
        t.worker_id = Some("w1".into());
        t
    }

    #[test]
    fn an_ended_job_shows_its_todos_and_task_lines_not_only_the_answer() {
        let mut r = JobRecord::new(JobId::new(), Tenant::default(), "margins".into());
        r.status = JobStatus::Completed;
        r.todos = vec![Todo { content: "compute north".into(), status: TodoStatus::Completed }];
        let mut failed = entry(Some(TaskStatus::Failed), "");
        failed.error = Some(ErrorInfo::new(ErrorKind::Business, "no worker serves legal"));
        r.tasks = vec![entry(Some(TaskStatus::Completed), "margin=0.375\nmore"), failed];
        r.tasks_total = 2;
        r.task_counts.completed = 1;
        r.task_counts.failed = 1;
        r.answer = Some("north 37.5%".into());
        let text = finished(&r);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], format!("job {}  completed  tasks 2 in all: 1 completed, 1 failed  0 tok", r.id));
        assert_eq!(lines[1], "  [x] compute north");
        assert!(lines[2].starts_with(&format!("  ✔ [{}] finance    completed", short(r.tasks[0].task_id))), "{text}");
        assert!(lines[2].contains("completed") && lines[2].contains("w1") && lines[2].contains("1.5s"), "{text}");
        assert!(lines[2].ends_with("120 tok  margin=0.375 more"), "{text}");
        assert!(lines[3].contains("✘") && lines[3].ends_with("no worker serves legal"), "{text}");
        assert!(!text.contains("north 37.5%"), "the answer is printed by watch, after the view");
    }

    #[test]
    fn a_long_job_shows_its_latest_tasks_and_says_how_many_are_not_shown() {
        let mut r = JobRecord::new(JobId::new(), Tenant::default(), "many".into());
        r.status = JobStatus::Completed;
        r.tasks = (0..FINISHED_LINES + 3).map(|i| entry(Some(TaskStatus::Completed), &format!("r{i}"))).collect();
        r.tasks_total = 500;
        let text = finished(&r);
        assert!(text.contains(&format!("({} earlier tasks not shown", 500 - FINISHED_LINES)), "{text}");
        assert_eq!(text.lines().filter(|l| l.contains("✔")).count(), FINISHED_LINES);
        assert!(text.contains(&format!("r{}", FINISHED_LINES + 2)) && !text.contains("r2\n"), "{text}");
    }
}
