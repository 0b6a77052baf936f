//! Reserved directories: parts of the job files that only the runtime writes.
//!
//! Evicted tool results (docs/TOOLS.md, "Large results travel by reference")
//! task reports (`/reports/<task id>.md`, docs/TOOLS.md, "Job inputs and
//! reports") and `map_tasks` results (`/maps/`) are read back by another agent, or a client, on the runtime's
//! word: the planner trusts that `/reports/<task>.md` is what the subagent
//! answered. If any
//! agent with `write_file`/`edit_file` (or a sandboxed command whose output
//! is staged back) could write there, one task could forge another task's
//! report or evicted result. So:
//!
//! - [`super::JobFiles::write`] (the path every agent-driven write takes)
//!   refuses a reserved path with [`super::FileError::Reserved`];
//! - only [`super::JobFiles::write_reserved`], called by the runtime's own
//!   writers (`shared/agent/src/tool/evict.rs`, `workers/src/large_report.rs`),
//!   and the dead-letter watch (`orchestrator/src/dead_letters.rs`),
//!   writes there, and it stores the sha256 of the bytes with the object;
//! - [`super::JobFiles::read`] of a reserved path verifies that sha256 and
//!   fails with [`super::FileError::Tampered`] on a mismatch or a missing
//!   checksum, so altered bytes are never silently used.
//!
//! That checksum stops agents and clients, whose writes go through
//! [`super::JobFiles`], but not a holder of a worker's NATS credential: it
//! reaches the Object Store bucket directly, and bucket grants cannot be
//! scoped per subagent type or task (object names are not subjects), so it
//! can store any bytes with their right sha256. Where a report is trusted
//! most, in the orchestrator (the planner's file tools, `flotilla files
//! get`), the files are therefore opened with a [`ReportAnchor`]: the bytes
//! of `/reports/<task>.md` must match the report the orchestrator received
//! for that task, on a subject only a worker of the task's type may publish
//! on (docs/SECURITY.md, "Worker scope"), whatever checksum the object
//! carries.

use async_trait::async_trait;
use flotilla_protocol::ids::{JobId, TaskId};

use crate::FilePath;

/// Vouches for report files from a record no worker credential can write
/// (the orchestrator's job records, orchestrator/src/reports.rs).
#[async_trait]
pub trait ReportAnchor: Send + Sync {
    /// The lowercase hex sha256 that `/reports/<task>.md` of `job` must
    /// have: that of the report the task was consolidated with. `Err` says
    /// why no report file of that task can be trusted (it has not reported,
    /// it is not a task of the job, the record cannot be read).
    async fn report_sha256(&self, job: &JobId, task: &TaskId) -> Result<String, String>;

    /// The bytes of `/reports/<task>.md` of `job` when its consolidated
    /// report carried them whole (a completed task's answer that fitted the
    /// report message, or a task that did not complete): such a file is
    /// derived from the record, written after the report (off the task's
    /// path, orchestrator/src/planner/dispatch.rs), and a read that comes
    /// before that write lands, or after it was lost, is served from here.
    /// `None` for a report by reference, whose file is the only copy.
    async fn derived_report(&self, job: &JobId, task: &TaskId) -> Result<Option<Vec<u8>>, String> {
        let _ = (job, task);
        Ok(None)
    }
}

/// Directory of evicted tool results and oversized task reports.
pub const LARGE_RESULTS_DIR: &str = "/large_tool_results";

/// Directory of `map_tasks` results and their progress
/// (orchestrator/src/planner/map_tasks/store.rs): the planner and clients
/// read a map's outcome from there on the runtime's word.
pub const MAPS_DIR: &str = "/maps";

/// Every reserved directory.
pub const RESERVED_DIRS: &[&str] = &[LARGE_RESULTS_DIR, MAPS_DIR];

/// Directory of the task reports. Only the names the runtime gives them,
/// `<task id>.md`, are reserved: agents and clients may keep other files
/// (their own drafts, `/reports/q2.md`) there.
pub const REPORTS_DIR: &str = "/reports";

/// How a refusal names the reserved report files.
const REPORT_FILES: &str = "/reports/<task id>.md";

/// Where the full report of `task` is kept.
pub fn report_path(task: &flotilla_protocol::ids::TaskId) -> FilePath {
    FilePath::parse(&format!("{REPORTS_DIR}/{task}.md")).expect("task ids make valid file names")
}

/// The text of `/reports/<task>.md` for a task that did not complete
/// (`status` failed, cancelled, …), so that file exists for every task that
/// was reported on, by its worker or, for a task JetStream gave up on, by
/// the orchestrator (orchestrator/src/dead_letters.rs).
pub fn unfinished_report(
    task: &flotilla_protocol::ids::TaskId,
    status: &str,
    error: &flotilla_protocol::ErrorInfo,
) -> String {
    format!("# Task {task} {status}\n\n{}: {}\n", error.kind.as_str(), error.message)
}

/// The task whose report `path` is, when it is `/reports/<uuid>.md`.
pub fn report_task(path: &FilePath) -> Option<TaskId> {
    let name = path.as_str().strip_prefix(REPORTS_DIR)?.strip_prefix('/')?;
    name.strip_suffix(".md").filter(|id| id.len() == 36).and_then(|id| id.parse().ok())
}

fn is_report_file(path: &FilePath) -> bool {
    report_task(path).is_some()
}

/// Object metadata key holding the lowercase hex sha256 of a runtime-written file.
pub(super) const CHECKSUM_KEY: &str = "flotilla-sha256";

/// The reserved directory `path` lies in (or is), or the reserved report
/// name it has, if any.
pub fn reserved_prefix(path: &FilePath) -> Option<&'static str> {
    let dir = RESERVED_DIRS.iter().copied().find(|dir| {
        let dir = FilePath::parse(dir).expect("reserved dirs are valid paths");
        path.is_within(&dir) && !dir.is_root()
    });
    dir.or_else(|| is_report_file(path).then_some(REPORT_FILES))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_prefix_respects_segment_boundaries() {
        let p = |s| FilePath::parse(s).unwrap();
        assert_eq!(reserved_prefix(&p("/large_tool_results")), Some(LARGE_RESULTS_DIR));
        assert_eq!(reserved_prefix(&p("/large_tool_results/t/report")), Some(LARGE_RESULTS_DIR));
        assert_eq!(reserved_prefix(&p("//large_tool_results/./x")), Some(LARGE_RESULTS_DIR));
        assert_eq!(reserved_prefix(&p("/large_tool_results_mine/x")), None);
        assert_eq!(reserved_prefix(&p("/maps/call_1-ab12.jsonl")), Some(MAPS_DIR));
        assert_eq!(reserved_prefix(&p("/maps/call_1-ab12/part-000001.jsonl")), Some(MAPS_DIR));
        assert_eq!(reserved_prefix(&p("/mapsfile.jsonl")), None);
        assert_eq!(reserved_prefix(&p("/notes/large_tool_results/x")), None);
        assert_eq!(reserved_prefix(&FilePath::root()), None);
    }

    #[test]
    fn task_report_names_are_reserved_other_reports_are_not() {
        fn p(s: &str) -> FilePath {
            FilePath::parse(s).unwrap()
        }
        let task = flotilla_protocol::ids::TaskId::new();
        assert_eq!(report_path(&task).as_str(), format!("/reports/{task}.md"));
        assert_eq!(reserved_prefix(&report_path(&task)), Some(REPORT_FILES));
        assert_eq!(report_task(&report_path(&task)), Some(task));
        assert_eq!(report_task(&p("/reports/q2.md")), None);
        assert_eq!(reserved_prefix(&p(&format!("/reports/./{task}.md"))), Some(REPORT_FILES));
        assert_eq!(reserved_prefix(&p("/reports/q2.md")), None);
        assert_eq!(reserved_prefix(&p(&format!("/reports/{task}.txt"))), None);
        assert_eq!(reserved_prefix(&p(&format!("/reports/sub/{task}.md"))), None);
        assert_eq!(reserved_prefix(&p(&format!("/notes/{task}.md"))), None);
    }
}
