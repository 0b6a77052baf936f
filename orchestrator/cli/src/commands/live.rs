//! The live terminal view of `flotilla watch` (stdout is a terminal, no
//! `--json`): per job a header line, its todos with statuses, and one line per
//! task showing worker, elapsed time, step count, last tool and tokens. A
//! finished task collapses to one summary line. Everything is derived from
//! the same events the plain and JSON outputs print, so the three never
//! disagree about what happened. A job of thousands of tasks keeps only its
//! latest [`FINISHED_LINES`] finished task lines on screen (the header counts
//! them all), so the view stays one screen.
//!
//! A model call that failed shows on its task's line (`model call 3 failed
//! (transient) after 1203 ms`) until a later call answers.
//!
//! A task whose call waits for a person gets a line under it saying so, with
//! the `flotilla approve` command to run, and then the decision
//! (docs/APPROVALS.md). A job that had ended before `watch` started is shown
//! once, from its record, by [`finished()`]: the same header, todos and task
//! lines the live view ends with.

mod finished;

pub use finished::finished;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use flotilla_client::events::Event;
use flotilla_protocol::ids::{JobId, TaskId};
use flotilla_protocol::{JobEventKind, ProgressKind, TaskStatus, Todo, Usage};
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::render::{self, short};

const TICK: Duration = Duration::from_millis(120);

/// Finished task lines kept on screen per job; older ones leave the view.
pub const FINISHED_LINES: usize = 12;

fn style(template: &str) -> ProgressStyle {
    ProgressStyle::with_template(template).expect("static progress template")
}

fn running_style() -> ProgressStyle {
    style("  {spinner:.cyan} {msg} {elapsed:.dim}")
        .tick_strings(&["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏", "✔"])
}

fn line_style() -> ProgressStyle {
    style("{msg}")
}

struct TaskLine {
    bar: ProgressBar,
    /// The approval line under the task, once one of its calls was gated.
    approval: Option<ProgressBar>,
    ty: String,
    worker: String,
    started: bool,
    steps: u32,
    last_tool: String,
    usage: Usage,
    /// The end of what a streaming model is writing in the current step
    /// (`model_delta` events, docs/MODELS.md "Streaming"), until the step ends.
    writing: String,
    /// The last model call that failed (`model_failed`), until one answers.
    failed: Option<String>,
}

/// Characters of a streaming model's text the task line shows.
const WRITING_CHARS: usize = 48;

impl TaskLine {
    /// Keeps the last [`WRITING_CHARS`] of the step's text, on one line.
    fn wrote(&mut self, text: &str) {
        self.writing.push_str(text);
        let flat: String = self.writing.split_whitespace().collect::<Vec<_>>().join(" ");
        let skip = flat.chars().count().saturating_sub(WRITING_CHARS);
        self.writing = flat.chars().skip(skip).collect();
        if text.ends_with(char::is_whitespace) {
            self.writing.push(' ');
        }
    }

    fn message(&self, id: &TaskId) -> String {
        let mut m = format!("[{}] {:<10}", short(id), self.ty);
        if !self.started {
            m.push_str(" queued");
            return m;
        }
        m.push_str(&format!(" {:<14} step {}", self.worker, self.steps));
        if !self.last_tool.is_empty() {
            m.push_str(&format!("  last {}", self.last_tool));
        }
        m.push_str(&format!("  {} tok", self.usage.total_tokens()));
        if !self.writing.is_empty() {
            m.push_str(&format!("  writing \"…{}\"", self.writing.trim_end()));
        }
        if let Some(failed) = &self.failed {
            m.push_str(&format!("  {failed}"));
        }
        m
    }
}

struct JobLines {
    header: ProgressBar,
    todos: Vec<ProgressBar>,
    tasks: Vec<TaskId>,
    lines: HashMap<TaskId, TaskLine>,
    /// Tasks seen, finished, and finished ones no longer on screen.
    seen: usize,
    done: usize,
    gone: HashSet<TaskId>,
    planner_steps: u32,
    status: &'static str,
}

impl JobLines {
    /// The bar new task lines go after.
    fn last(&self, lines: &HashMap<TaskId, TaskLine>) -> ProgressBar {
        if let Some(t) = self.tasks.last().and_then(|t| lines.get(t)) {
            return t.approval.as_ref().unwrap_or(&t.bar).clone();
        }
        self.todos.last().unwrap_or(&self.header).clone()
    }
}

/// Live view of one or more jobs.
pub struct LiveView {
    multi: MultiProgress,
    jobs: HashMap<JobId, JobLines>,
    order: Vec<JobId>,
}

impl LiveView {
    /// A view drawing on stdout.
    pub fn new() -> Self {
        Self {
            multi: MultiProgress::with_draw_target(ProgressDrawTarget::stdout()),
            jobs: HashMap::new(),
            order: Vec::new(),
        }
    }

    fn job(&mut self, id: JobId) -> &mut JobLines {
        if !self.jobs.contains_key(&id) {
            let header = match self.order.last().and_then(|j| self.jobs.get(j)) {
                Some(prev) => {
                    let after = prev.last(&prev.lines);
                    self.multi.insert_after(&after, ProgressBar::new_spinner())
                }
                None => self.multi.add(ProgressBar::new_spinner()),
            };
            header.set_style(line_style());
            self.order.push(id);
            self.jobs.insert(
                id,
                JobLines {
                    header,
                    todos: Vec::new(),
                    tasks: Vec::new(),
                    lines: HashMap::new(),
                    seen: 0,
                    done: 0,
                    gone: HashSet::new(),
                    planner_steps: 0,
                    status: "submitted",
                },
            );
        }
        self.jobs.get_mut(&id).expect("inserted above")
    }

    fn header(job: &JobLines, id: &JobId, usage: Option<&Usage>) {
        let mut m = format!("job {id}  {}  planner step {}", job.status, job.planner_steps);
        m.push_str(&format!("  tasks {}/{}", job.done, job.seen));
        if !job.gone.is_empty() {
            m.push_str(&format!(" ({} finished not shown)", job.gone.len()));
        }
        if let Some(u) = usage {
            m.push_str(&format!("  {} tok", u.total_tokens()));
            if u.cost_usd > 0.0 {
                m.push_str(&format!("  ${:.4}", u.cost_usd));
            }
        }
        job.header.set_message(m);
    }

    fn todos(multi: &MultiProgress, job: &mut JobLines, todos: &[Todo]) {
        while job.todos.len() > todos.len() {
            let bar = job.todos.pop().expect("non-empty");
            bar.finish_and_clear();
            multi.remove(&bar);
        }
        while job.todos.len() < todos.len() {
            let after = job.todos.last().unwrap_or(&job.header).clone();
            let bar = multi.insert_after(&after, ProgressBar::new_spinner());
            bar.set_style(line_style());
            job.todos.push(bar);
        }
        for (bar, t) in job.todos.iter().zip(todos) {
            let mark = render::todo_mark(t.status);
            bar.set_message(format!("  {mark} {}", t.content));
        }
    }

    /// Applies one event to the view.
    pub fn apply(&mut self, ev: &Event) {
        match ev {
            Event::Job(j) => {
                let multi = self.multi.clone();
                let id = j.job_id;
                let job = self.job(id);
                let mut usage = None;
                match &j.kind {
                    JobEventKind::Submitted { .. } => job.status = "submitted",
                    JobEventKind::Running => job.status = "running",
                    JobEventKind::PlannerStep { step, .. } => job.planner_steps = *step,
                    JobEventKind::TodosChanged { todos } => Self::todos(&multi, job, todos),
                    JobEventKind::TaskDispatched { task_id, subagent_type, .. } if !job.gone.contains(task_id) => {
                        task_line(&multi, job, task_id, subagent_type.as_str());
                    }
                    JobEventKind::TaskReported { task_id, status, summary } => {
                        if let Some(line) = job.lines.get(task_id)
                            && !line.bar.is_finished()
                        {
                            finish(line, task_id, *status, summary);
                            job.done += 1;
                            collapse(&multi, job);
                        }
                    }
                    JobEventKind::Completed { usage: u, .. } => {
                        job.status = "completed";
                        usage = Some(*u);
                    }
                    JobEventKind::Failed { .. } => job.status = "failed",
                    JobEventKind::Cancelled { .. } => job.status = "cancelled",
                    #[allow(unreachable_patterns)] // events added by later schema revisions
                    _ => {}
                }
                Self::header(job, &id, usage.as_ref());
                if j.kind.is_terminal() {
                    job.header.finish();
                    for bar in &job.todos {
                        bar.finish();
                    }
                    for (tid, l) in job.lines.iter().filter(|(_, l)| !l.bar.is_finished()) {
                        l.bar.finish_with_message(format!("{} (no report)", l.message(tid)));
                    }
                }
            }
            Event::Progress(p) => {
                let multi = self.multi.clone();
                let job = self.job(p.job_id);
                if job.gone.contains(&p.task_id) {
                    return;
                }
                // A worker's start can overtake the planner's dispatch event.
                let line = task_line(&multi, job, &p.task_id, p.subagent_type.as_str());
                if line.bar.is_finished() {
                    return;
                }
                match &p.kind {
                    ProgressKind::Started => {
                        line.started = true;
                        line.worker = p.worker_id.clone();
                        line.bar.reset_elapsed();
                    }
                    ProgressKind::Resumed { from_step, .. } => {
                        line.steps = *from_step;
                        line.worker = format!("{} (resumed)", p.worker_id);
                    }
                    ProgressKind::ModelCall { step, usage, .. } => {
                        line.steps = *step;
                        line.usage += *usage;
                        line.writing.clear();
                        line.failed = None;
                    }
                    ProgressKind::ModelFailed { step, error_kind, latency_ms, usage } => {
                        line.usage += *usage;
                        line.writing.clear();
                        line.failed = Some(format!("model call {step} failed ({error_kind}) after {latency_ms} ms"));
                    }
                    ProgressKind::ModelDelta { text, .. } => line.wrote(text),
                    ProgressKind::ToolCall { tool, .. } => line.last_tool = tool.clone(),
                    ProgressKind::ApprovalRequested { .. } | ProgressKind::ApprovalResolved { .. } => {
                        approval_line(&multi, line, ev);
                    }
                    #[allow(unreachable_patterns)]
                    _ => {}
                }
                line.bar.set_message(line.message(&p.task_id));
            }
        }
    }
}

/// Removes the oldest finished task lines beyond [`FINISHED_LINES`].
fn collapse(multi: &MultiProgress, job: &mut JobLines) {
    let finished: Vec<TaskId> =
        job.tasks.iter().filter(|t| job.lines.get(t).is_some_and(|l| l.bar.is_finished())).copied().collect();
    let excess = finished.len().saturating_sub(FINISHED_LINES);
    for id in &finished[..excess] {
        if let Some(line) = job.lines.remove(id) {
            multi.remove(&line.bar);
            if let Some(approval) = &line.approval {
                multi.remove(approval);
            }
        }
        job.gone.insert(*id);
    }
    if excess > 0 {
        job.tasks.retain(|t| job.lines.contains_key(t));
    }
}

/// The line of `id`, created (queued) on first sight.
fn task_line<'a>(multi: &MultiProgress, job: &'a mut JobLines, id: &TaskId, ty: &str) -> &'a mut TaskLine {
    if !job.lines.contains_key(id) {
        job.seen += 1;
        let after = job.last(&job.lines);
        let bar = multi.insert_after(&after, ProgressBar::new_spinner());
        bar.set_style(running_style());
        bar.enable_steady_tick(TICK);
        let line = TaskLine {
            bar,
            approval: None,
            ty: ty.to_string(),
            worker: String::new(),
            started: false,
            steps: 0,
            last_tool: String::new(),
            usage: Usage::default(),
            writing: String::new(),
            failed: None,
        };
        line.bar.set_message(line.message(id));
        job.tasks.push(*id);
        job.lines.insert(*id, line);
    }
    job.lines.get_mut(id).expect("inserted above")
}

/// Shows an approval request of the task (or its outcome) on the line under
/// it, in the words of the plain output (`render::event`): what waits, and
/// the command that answers it.
fn approval_line(multi: &MultiProgress, line: &mut TaskLine, ev: &Event) {
    let bar = line.approval.get_or_insert_with(|| {
        let bar = multi.insert_after(&line.bar, ProgressBar::new_spinner());
        bar.set_style(line_style());
        bar
    });
    // `render::event` starts with the time and the task's short id: the line
    // sits under its task, so only what follows them is shown.
    let text = render::event(ev);
    let what = text.split_once("] ").map_or(text.as_str(), |(_, what)| what);
    bar.set_message(format!("      {what}"));
}

/// Collapses a task to one line: status, worker, time, steps, tokens, result.
fn finish(line: &TaskLine, id: &TaskId, status: TaskStatus, summary: &str) {
    let mark = if status == TaskStatus::Completed { "✔" } else { "✘" };
    let secs = line.bar.elapsed().as_secs_f64();
    let flat: String = summary.split_whitespace().collect::<Vec<_>>().join(" ");
    let result: String = flat.chars().take(60).collect();
    line.bar.set_style(line_style());
    line.bar.finish_with_message(format!(
        "  {mark} [{}] {:<10} {:<9} {:<14} {secs:>5.1}s  {} steps  {} tok  {result}",
        short(id),
        line.ty,
        status.as_str(),
        line.worker,
        line.steps,
        line.usage.total_tokens(),
    ));
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_protocol::{DecisionKind, PROGRESS_VERSION, ProgressEvent};

    fn progress(job: JobId, task: TaskId, kind: ProgressKind) -> Event {
        Event::Progress(ProgressEvent {
            v: PROGRESS_VERSION,
            job_id: job,
            task_id: task,
            subagent_type: flotilla_protocol::ids::SubagentType::new("finance").unwrap(),
            worker_id: "w1".into(),
            attempt: 1,
            at: flotilla_protocol::now(),
            kind,
        })
    }

    fn approval_text(view: &LiveView, job: &JobId, task: &TaskId) -> String {
        let line = &view.jobs[job].lines[task];
        line.approval.as_ref().expect("an approval line").message().to_string()
    }

    /// docs/APPROVALS.md: the live view says what waits for a person, with
    /// the command that answers it, and then the decision.
    #[test]
    fn a_gated_call_shows_approval_needed_and_then_its_outcome() {
        let mut view =
            LiveView { multi: MultiProgress::with_draw_target(ProgressDrawTarget::hidden()), ..LiveView::new() };
        let (job, task) = (JobId::new(), TaskId::new());
        view.apply(&progress(job, task, ProgressKind::Started));
        let requested = ProgressKind::ApprovalRequested {
            call_id: "call_0_0".into(),
            tool: "calculate_margin".into(),
            args_sha256: "ab".repeat(32),
            decisions: vec![DecisionKind::Approve, DecisionKind::Reject],
            expires_at: flotilla_protocol::now(),
        };
        view.apply(&progress(job, task, requested));
        assert_eq!(
            approval_text(&view, &job, &task),
            format!(
                "      approval needed: calculate_margin (call_0_0); answer with `flotilla approve {job} call_0_0 --approve | --reject`"
            )
        );
        let resolved = ProgressKind::ApprovalResolved {
            call_id: "call_0_0".into(),
            tool: "calculate_margin".into(),
            outcome: "approve".into(),
            by: Some("ana".into()),
        };
        view.apply(&progress(job, task, resolved));
        assert_eq!(approval_text(&view, &job, &task), "      approval of calculate_margin (call_0_0): approve by ana");
        // A task dispatched later goes under the approval line, not between it and its task.
        let lines = &view.jobs[&job];
        assert_eq!(lines.last(&lines.lines).message(), approval_text(&view, &job, &task));
    }

    fn message(view: &LiveView, job: &JobId, task: &TaskId) -> String {
        view.jobs[job].lines[task].bar.message().to_string()
    }

    /// docs/MODELS.md "Streaming": a streaming model's text shows on its
    /// task's line as it is written (its last characters, on one line) and
    /// leaves when the step's model call ends.
    #[test]
    fn a_streaming_model_shows_what_it_writes_until_the_step_ends() {
        let mut view =
            LiveView { multi: MultiProgress::with_draw_target(ProgressDrawTarget::hidden()), ..LiveView::new() };
        let (job, task) = (JobId::new(), TaskId::new());
        view.apply(&progress(job, task, ProgressKind::Started));
        let delta = |text: &str| ProgressKind::ModelDelta { step: 1, text: text.into(), skipped_chars: 0 };
        view.apply(&progress(job, task, delta("The gross margin\nof north ")));
        view.apply(&progress(job, task, delta("is 0.375.")));
        assert!(
            message(&view, &job, &task).ends_with("writing \"…The gross margin of north is 0.375.\""),
            "{}",
            message(&view, &job, &task)
        );
        let long = "x".repeat(100);
        view.apply(&progress(job, task, delta(&long)));
        assert!(
            message(&view, &job, &task).ends_with(&format!("writing \"…{}\"", "x".repeat(WRITING_CHARS))),
            "{}",
            message(&view, &job, &task)
        );
        let call = ProgressKind::ModelCall { step: 1, usage: Usage::default(), latency_ms: 5 };
        view.apply(&progress(job, task, call));
        assert!(!message(&view, &job, &task).contains("writing"), "{}", message(&view, &job, &task));
    }

    /// A failed model call shows on its task's line, and in the plain
    /// output, with its step, kind and latency; the next answer clears it.
    #[test]
    fn a_failed_model_call_shows_on_its_task_line_until_a_call_answers() {
        let mut view =
            LiveView { multi: MultiProgress::with_draw_target(ProgressDrawTarget::hidden()), ..LiveView::new() };
        let (job, task) = (JobId::new(), TaskId::new());
        view.apply(&progress(job, task, ProgressKind::Started));
        let failed = ProgressKind::ModelFailed {
            step: 3,
            error_kind: flotilla_protocol::ErrorKind::Transient,
            latency_ms: 1203,
            usage: Usage::default(),
        };
        let ev = progress(job, task, failed);
        assert!(
            render::event(&ev).ends_with("] model call 3 failed (transient) after 1203 ms"),
            "{}",
            render::event(&ev)
        );
        view.apply(&ev);
        assert!(
            message(&view, &job, &task).ends_with("  model call 3 failed (transient) after 1203 ms"),
            "{}",
            message(&view, &job, &task)
        );
        let call = ProgressKind::ModelCall { step: 3, usage: Usage::default(), latency_ms: 5 };
        view.apply(&progress(job, task, call));
        assert!(!message(&view, &job, &task).contains("failed"), "{}", message(&view, &job, &task));
    }
}
