//! Routes task reports to the planner calls waiting for them.
//!
//! Reports are stored in the reports stream, so nothing is lost while a waiter
//! is not yet registered or the orchestrator is down: a waiter first registers
//! (so a live report cannot slip past), then looks for an already stored
//! report by subject, then waits for the live one. The first report for a
//! task wins; later ones (a redelivered attempt) find no waiter and are
//! dropped, which is what makes consolidation exactly-once.
//!
//! The stored-report lookup goes through [`StoredReports`]
//! (orchestrator/src/ports.rs) so unit tests route reports without NATS.
//!
//! [`completed_view`] is what of a report enters the planner's conversation:
//! a summary capped at `[planner] report_tokens` plus the path of the full
//! report (`/reports/<task>.md`, written by the worker,
//! workers/src/large_report.rs), so a job's context does not grow with the
//! size of its reports (docs/TOOLS.md, "Job inputs and reports").
//! [`structured_answer`] reads a summary that is a JSON object or array (the
//! answer of a type with an `output_schema`) as a value.
//!
//! [`ConsolidatedReports`] vouches for `/reports/<task>.md` when the
//! orchestrator reads it (the planner's file tools, `flotilla files get`):
//! the file must be what the consolidated report says, not merely carry a
//! checksum any worker credential could compute (shared/job-files/src/reserved.rs).

use std::sync::Arc;

use async_trait::async_trait;
use dashmap::DashMap;
use flotilla_bus::{Bus, BusError};
use flotilla_job_files::{ReportAnchor, report_path, unfinished_report};
use flotilla_protocol::ids::{JobId, SubagentType, TaskId, Tenant};
use flotilla_protocol::{ErrorInfo, ErrorKind, FileRef, TaskEntry, TaskReport, TaskStatus};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::sync::oneshot;

use crate::jobs::JobStore;
use crate::ports::StoredReports;

/// The report file of a task is vouched for by its consolidated entry in
/// the job records, which only the orchestrator writes; the entry's report
/// came on a subject only a worker of the task's type may publish on and
/// was taken only when of that type ([`ReportRouter::route`]).
pub struct ConsolidatedReports {
    jobs: JobStore,
}

impl ConsolidatedReports {
    /// Vouches from the records in `jobs`.
    pub fn new(jobs: JobStore) -> Self {
        Self { jobs }
    }
}

#[async_trait]
impl ReportAnchor for ConsolidatedReports {
    async fn report_sha256(&self, job: &JobId, task: &TaskId) -> Result<String, String> {
        let entry =
            self.jobs.task(job, task).await.map_err(|e| format!("the record of task {task} is unreadable: {e}"))?;
        let entry = entry.ok_or_else(|| format!("{task} is not a task of this job"))?;
        expected_report_sha256(&entry).ok_or_else(|| format!("task {task} has not reported yet"))
    }

    async fn derived_report(&self, job: &JobId, task: &TaskId) -> Result<Option<Vec<u8>>, String> {
        let entry =
            self.jobs.task(job, task).await.map_err(|e| format!("the record of task {task} is unreadable: {e}"))?;
        Ok(entry.as_ref().and_then(derived_report_text).map(String::into_bytes))
    }
}

/// The sha256 of the `/reports/<task>.md` that goes with `entry`'s
/// consolidated report, as its worker (workers/src/large_report.rs) or the
/// dead-letter watch writes it: the file the report refers to, the whole
/// answer of a report that carried it, or the text of an unfinished task.
/// `None` while the task has not reported.
pub fn expected_report_sha256(entry: &TaskEntry) -> Option<String> {
    entry.status?;
    if let Some(file) = &entry.report_file {
        return Some(file.sha256.clone());
    }
    derived_report_text(entry).map(|text| flotilla_protocol::digest::sha256_hex(text.as_bytes()))
}

/// The whole text of `/reports/<task>.md` when `entry`'s consolidated
/// report carried it (no report by reference): the answer of a completed
/// task, the status and error of one that did not complete. The
/// orchestrator writes this file after consolidating (the dispatcher's
/// report-file write) and serves it from here until then. `None` while the
/// task has not reported, or when the file is the report's only copy.
pub fn derived_report_text(entry: &TaskEntry) -> Option<String> {
    let status = entry.status?;
    if entry.report_file.is_some() {
        return None;
    }
    Some(match status {
        TaskStatus::Completed => entry.summary.clone(),
        _ => {
            let none = || ErrorInfo::new(ErrorKind::Bug, "report without error");
            let error = entry.error.clone().unwrap_or_else(none);
            unfinished_report(&entry.task_id, status.as_str(), &error)
        }
    })
}

/// A completed task's summary that is a JSON object or array, as that value:
/// what a subagent type with an `output_schema` answers (validated by the
/// worker, shared/agent/src/agent/output_schema.rs), so the planner and
/// `map_tasks` results use it as data (docs/TOOLS.md, "Structured answers").
/// Any other summary is text.
pub fn structured_answer(summary: &str) -> Option<Value> {
    let t = summary.trim_start();
    if !t.starts_with('{') && !t.starts_with('[') {
        return None;
    }
    serde_json::from_str::<Value>(summary).ok().filter(|v| v.is_object() || v.is_array())
}

/// Hands each report to the one call awaiting it.
#[derive(Clone)]
pub struct ReportRouter {
    stored: Arc<dyn StoredReports>,
    /// Each waiting task with its subagent type: only a report of that type
    /// is handed over (a report's type is the one its subject, and so its
    /// publisher's credential, allows; shared/bus/src/reports.rs).
    waiters: Arc<DashMap<TaskId, (SubagentType, oneshot::Sender<TaskReport>)>>,
    /// Registrations so far, to sweep abandoned waiters every [`SWEEP_EVERY`].
    registered: Arc<std::sync::atomic::AtomicUsize>,
}

/// Every this many registrations, waiters whose call gave up (receiver
/// dropped: a timeout or a cancelled job whose report never came) are
/// dropped, so the map holds live waits plus at most this many.
const SWEEP_EVERY: usize = 1024;

impl ReportRouter {
    /// Starts following new reports.
    pub async fn start(bus: Bus) -> Result<Self, BusError> {
        let mut reports = Box::pin(bus.reports().follow().await?);
        let router = Self::new(Arc::new(bus));
        let r = router.clone();
        tokio::spawn(async move {
            while let Some(report) = reports.next().await {
                r.route(report);
            }
            tracing::error!("report stream ended");
        });
        Ok(router)
    }

    /// A router looking stored reports up in `stored`; live reports come
    /// through [`route`](Self::route).
    pub(crate) fn new(stored: Arc<dyn StoredReports>) -> Self {
        Self { stored, waiters: Arc::default(), registered: Arc::default() }
    }

    /// Hands `report` to its waiter, if any (the first report of a task
    /// wins), when it is of the task's type; one of another type is dropped
    /// with a warning and the waiter keeps waiting.
    pub(crate) fn route(&self, report: TaskReport) {
        if let Some((_, (_, tx))) = self.waiters.remove_if(&report.task_id, |_, (ty, _)| ty == &report.subagent_type) {
            let _ = tx.send(report);
        } else if let Some(waiter) = self.waiters.get(&report.task_id) {
            tracing::warn!(task_id = %report.task_id, expected = %waiter.0, got = %report.subagent_type,
                "report refused: the task is of another subagent type");
        } else {
            tracing::debug!(task_id = %report.task_id, attempt = report.attempt, "report with no waiter (duplicate or not ours)");
        }
    }
    /// Registers interest in the report of `task`, of type `ty`. Call before
    /// publishing the task.
    pub fn expect(&self, task: TaskId, ty: &SubagentType) -> oneshot::Receiver<TaskReport> {
        let (tx, rx) = oneshot::channel();
        self.waiters.insert(task, (ty.clone(), tx));
        if self.registered.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % SWEEP_EVERY == SWEEP_EVERY - 1 {
            self.waiters.retain(|_, (_, tx)| !tx.is_closed());
        }
        rx
    }

    /// A report already stored for `task` of type `ty` (one that arrived
    /// while nobody waited, e.g. during an orchestrator restart).
    pub async fn stored(&self, tenant: &Tenant, job: &JobId, ty: &SubagentType, task: &TaskId) -> Option<TaskReport> {
        self.stored.stored(tenant, job, ty, task).await
    }

    /// Stops waiting for `task`.
    pub fn forget(&self, task: &TaskId) {
        self.waiters.remove(task);
    }

    /// How many calls wait for a report.
    #[cfg(test)]
    pub(crate) fn waiting(&self) -> usize {
        self.waiters.len()
    }
}

/// What the planner sees of a completed task whose report `summary` (and,
/// when the report travelled by reference, `report_file`) is known: from a
/// live report or from a consolidated task entry after a restart. Gives
/// `summary` (cut to `report_tokens` tokens of o200k_base), `truncated`, and
/// `report_file` (`path`, `size_bytes`, `lines`, `sha256` of the full report
/// in the job files, `/reports/<task>.md`); `note` says how to read the rest
/// when the summary was cut.
pub fn completed_view(task_id: TaskId, summary: &str, report_file: Option<&FileRef>, report_tokens: usize) -> Value {
    let file = match report_file {
        Some(f) => json!({"path": f.path, "size_bytes": f.size_bytes, "lines": f.lines, "sha256": f.sha256}),
        None => json!({
            "path": report_path(&task_id).as_str(),
            "size_bytes": summary.len(),
            "lines": flotilla_protocol::line_count(summary),
            "sha256": flotilla_protocol::digest::sha256_hex(summary.as_bytes()),
        }),
    };
    let (shown, cut) = flotilla_agent::tokens::truncate(summary, report_tokens);
    let truncated = cut || report_file.is_some();
    let mut view = json!({
        "task_id": task_id,
        "status": "completed",
        "summary": shown,
        "truncated": truncated,
        "report_file": file,
    });
    if truncated {
        view["note"] = "summary cut short: the full report is report_file.path; read it with read_file or grep".into();
    }
    view
}

#[cfg(test)]
mod view_tests {
    use super::*;
    use flotilla_protocol::TaskStatus;
    use flotilla_protocol::ids::{JobId, SubagentType, TaskId};

    pub(super) fn report(summary: &str) -> TaskReport {
        TaskReport {
            v: 1,
            job_id: JobId::new(),
            task_id: TaskId::new(),
            subagent_type: SubagentType::new("analyst").unwrap(),
            status: TaskStatus::Completed,
            summary: summary.into(),
            summary_file: None,
            error: None,
            usage: Default::default(),
            worker_id: "w1".into(),
            attempt: 1,
            resumed_from_step: None,
            started_at: flotilla_protocol::now(),
            finished_at: flotilla_protocol::now(),
            duration_ms: 1,
        }
    }

    #[test]
    fn a_short_report_is_shown_whole_with_its_path() {
        let r = report("north: margin 37.5%");
        let v = completed_view(r.task_id, &r.summary, None, 100);
        assert_eq!(v["summary"], "north: margin 37.5%");
        assert_eq!(v["truncated"], false);
        assert_eq!(v["report_file"]["path"], format!("/reports/{}.md", r.task_id));
        assert_eq!(v["report_file"]["size_bytes"], 19);
        assert!(v.get("note").is_none());
    }

    #[test]
    fn a_long_report_is_capped_in_tokens() {
        let text: String = (0..2000).map(|i| format!("finding {i}: revenue up, cost down\n")).collect();
        let r = report(&text);
        let v = completed_view(r.task_id, &r.summary, None, 50);
        let summary = v["summary"].as_str().unwrap();
        assert_eq!(flotilla_agent::tokens::count(summary), 50, "{summary}");
        assert!(text.starts_with(summary));
        assert_eq!(v["truncated"], true);
        assert_eq!(v["report_file"]["lines"], 2000);
        assert!(v["note"].as_str().unwrap().contains("report_file.path"));
        assert!(v.to_string().len() < 1000, "the view stays small: {v}");
    }

    #[test]
    fn a_report_by_reference_keeps_the_workers_file() {
        let mut r = report("head of a huge answer");
        let path = format!("/reports/{}.md", r.task_id);
        r.summary_file = Some(flotilla_protocol::digest::describe_file(path.clone(), "head of a huge answer ..."));
        let v = completed_view(r.task_id, &r.summary, r.summary_file.as_ref(), 1000);
        assert_eq!((v["report_file"]["path"].as_str(), v["truncated"].as_bool()), (Some(path.as_str()), Some(true)));
        assert!(v["report_file"].get("head").is_none(), "no head or tail copies in the planner's context");
    }
}

#[cfg(test)]
mod waiter_tests {
    use super::*;

    #[test]
    fn a_report_of_another_type_does_not_end_the_wait() {
        let router = ReportRouter::new(Arc::new(crate::fakes::FakeReports::default()));
        let mut report = super::view_tests::report("forged");
        let mut rx = router.expect(report.task_id, &SubagentType::new("research").unwrap());
        router.route(report.clone()); // an `analyst` report for a `research` task
        assert!(rx.try_recv().is_err(), "a report of another type was taken");
        assert_eq!(router.waiting(), 1, "the task still waits for its own report");
        report.subagent_type = SubagentType::new("research").unwrap();
        router.route(report.clone());
        assert_eq!(rx.try_recv().unwrap().task_id, report.task_id);
    }

    #[test]
    fn waiters_whose_call_gave_up_are_swept() {
        let router = ReportRouter::new(Arc::new(crate::fakes::FakeReports::default()));
        let tasks: Vec<TaskId> = (0..10).map(|_| TaskId::new()).collect();
        let ty = SubagentType::new("analyst").unwrap();
        let _kept: Vec<_> = tasks.iter().map(|t| router.expect(*t, &ty)).collect();
        for _ in 0..5 * SWEEP_EVERY {
            drop(router.expect(TaskId::new(), &ty)); // a call that timed out or was cancelled
        }
        assert!(router.waiting() <= tasks.len() + SWEEP_EVERY, "abandoned waiters pile up: {}", router.waiting());
        assert!(tasks.iter().all(|t| router.waiters.contains_key(t)), "live waiters stay");
    }
}
