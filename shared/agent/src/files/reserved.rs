//! Reserved directories: parts of the job files that only the runtime writes.
//!
//! Evicted tool results and oversized task reports (docs/TOOLS.md, "Large
//! results travel by reference") are read back by another agent on the word
//! of a [`flotilla_protocol::FileRef`]: the planner trusts that
//! `/large_tool_results/<task>/report` is what the subagent answered. If any
//! agent with `write_file`/`edit_file` (or a sandboxed command whose output
//! is staged back) could write there, one task could forge another task's
//! report or evicted result. So:
//!
//! - [`super::JobFiles::write`] (the path every agent-driven write takes)
//!   refuses a reserved path with [`super::FileError::Reserved`];
//! - only [`super::JobFiles::write_reserved`], called by the runtime's own
//!   writers (`shared/src/tool/evict.rs`, `workers/src/large_report.rs`),
//!   writes there, and it stores the sha256 of the bytes with the object;
//! - [`super::JobFiles::read`] of a reserved path verifies that sha256 and
//!   fails with [`super::FileError::Tampered`] on a mismatch or a missing
//!   checksum, so altered bytes are never silently used.

use super::FilePath;

/// Directory of evicted tool results and oversized task reports.
pub const LARGE_RESULTS_DIR: &str = "/large_tool_results";

/// Every reserved directory.
pub const RESERVED_DIRS: &[&str] = &[LARGE_RESULTS_DIR];

/// Object metadata key holding the lowercase hex sha256 of a runtime-written file.
pub(super) const CHECKSUM_KEY: &str = "flotilla-sha256";

/// The reserved directory `path` lies in (or is), if any.
pub fn reserved_prefix(path: &FilePath) -> Option<&'static str> {
    RESERVED_DIRS.iter().copied().find(|dir| {
        let dir = FilePath::parse(dir).expect("reserved dirs are valid paths");
        path.is_within(&dir) && !dir.is_root()
    })
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
        assert_eq!(reserved_prefix(&p("/notes/large_tool_results/x")), None);
        assert_eq!(reserved_prefix(&FilePath::root()), None);
    }
}
