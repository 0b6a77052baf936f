//! The sorted task ids behind a job's task pages, kept while they still
//! describe the job. Task entries have one KV key each (jobs/tasks.rs), so
//! a page of a 100 000-task job lists 100 000 keys to find its 100, and a
//! filtered page reads every entry: the console re-fetches a job's page
//! while a person looks at it, and every fetch paid that scan again.
//!
//! Two lists are kept per job, each only while it provably still holds:
//! - every task id, while there are as many as the header's `tasks_total`
//!   (tasks are only ever added, and an entry is written before the header
//!   counts it), so it serves running jobs too until their next dispatch;
//! - the ids a filter matched, only for a job that has ended with no task
//!   open, and only while its header's `updated_at` is the one seen at the
//!   scan (an ended job's entries no longer change; a resumed job's header
//!   does).
//!
//! Each orchestrator keeps its own; at most [`ENTRIES`] lists, each at most
//! [`TTL`], so memory stays bounded (16 bytes a task id).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flotilla_protocol::ids::{JobId, TaskId};
use flotilla_protocol::{JobRecord, TaskFilter};
use time::OffsetDateTime;

/// Lists kept at once.
const ENTRIES: usize = 8;

/// How long a list is kept after its scan.
const TTL: Duration = Duration::from_secs(120);

/// What a list was scanned for.
#[derive(Clone, Debug, PartialEq)]
enum Scope {
    /// Every task of the job.
    All,
    /// The tasks `filter` matched, with the header's `updated_at` at the scan.
    Matching { filter: TaskFilter, updated_at: OffsetDateTime },
}

impl Scope {
    /// Whether a new scan for `new` makes this list obsolete (same list, newer scan).
    fn replaced_by(&self, new: &Scope) -> bool {
        match (self, new) {
            (Scope::All, Scope::All) => true,
            (Scope::Matching { filter: a, .. }, Scope::Matching { filter: b, .. }) => a == b,
            _ => false,
        }
    }
}

struct Entry {
    job: JobId,
    scope: Scope,
    /// Sorted ascending (dispatch order).
    ids: Arc<Vec<TaskId>>,
    at: Instant,
}

/// The recent scans of task ids.
#[derive(Default)]
pub(super) struct TaskIds {
    entries: Mutex<VecDeque<Entry>>,
}

/// Whether a filtered scan of `rec` may be kept: the job has ended and none
/// of its tasks is still open, so no entry changes any more.
fn settled(rec: &JobRecord) -> bool {
    rec.status.is_terminal() && rec.task_counts.pending == 0 && rec.task_counts.running == 0
}

impl TaskIds {
    /// Every task id of `rec`'s job, when a scan kept them and none was added since.
    pub(super) fn all(&self, rec: &JobRecord) -> Option<Arc<Vec<TaskId>>> {
        self.find(&rec.id, |scope, ids| *scope == Scope::All && ids.len() as u64 == rec.tasks_total)
    }

    /// Keeps a scan of every task id of `rec`'s job (sorted).
    pub(super) fn keep_all(&self, rec: &JobRecord, ids: Arc<Vec<TaskId>>) {
        if ids.len() as u64 == rec.tasks_total {
            self.keep(rec.id, Scope::All, ids);
        }
    }

    /// The ids `filter` matched in `rec`'s job, when a scan kept them and the job has not changed since.
    pub(super) fn matching(&self, rec: &JobRecord, filter: &TaskFilter) -> Option<Arc<Vec<TaskId>>> {
        if !settled(rec) {
            return None;
        }
        self.find(&rec.id, |scope, _| match scope {
            Scope::Matching { filter: f, updated_at } => f == filter && *updated_at == rec.updated_at,
            Scope::All => false,
        })
    }

    /// Keeps the ids (sorted) `filter` matched in `rec`'s job, scanned after `rec` was read.
    pub(super) fn keep_matching(&self, rec: &JobRecord, filter: &TaskFilter, ids: Arc<Vec<TaskId>>) {
        if settled(rec) {
            self.keep(rec.id, Scope::Matching { filter: filter.clone(), updated_at: rec.updated_at }, ids);
        }
    }

    fn find(&self, job: &JobId, valid: impl Fn(&Scope, &[TaskId]) -> bool) -> Option<Arc<Vec<TaskId>>> {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.retain(|e| e.at.elapsed() < TTL);
        entries.iter().find(|e| &e.job == job && valid(&e.scope, &e.ids)).map(|e| e.ids.clone())
    }

    fn keep(&self, job: JobId, scope: Scope, ids: Arc<Vec<TaskId>>) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.retain(|e| !(e.job == job && e.scope.replaced_by(&scope)));
        entries.push_front(Entry { job, scope, ids, at: Instant::now() });
        entries.truncate(ENTRIES);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_protocol::{JobStatus, TaskState};

    fn job(total: u64) -> JobRecord {
        let mut rec = JobRecord::new(JobId::new(), "acme".parse().unwrap(), "x".into());
        rec.tasks_total = total;
        rec.task_counts.completed = total;
        rec
    }

    fn ids(n: usize) -> Arc<Vec<TaskId>> {
        Arc::new((0..n).map(|_| TaskId::new()).collect())
    }

    #[test]
    fn every_id_serves_until_a_task_is_added() {
        let cache = TaskIds::default();
        let mut rec = job(3);
        cache.keep_all(&rec, ids(3));
        assert_eq!(cache.all(&rec).map(|i| i.len()), Some(3));
        rec.tasks_total = 4;
        assert!(cache.all(&rec).is_none(), "a dispatch since the scan must rescan");
    }

    #[test]
    fn an_incomplete_scan_is_not_kept() {
        let cache = TaskIds::default();
        let rec = job(3);
        cache.keep_all(&rec, ids(2));
        assert!(cache.all(&rec).is_none());
    }

    #[test]
    fn a_filtered_scan_serves_only_a_settled_unchanged_job() {
        let cache = TaskIds::default();
        let filter = TaskFilter { state: Some(TaskState::Completed), ..Default::default() };
        let mut rec = job(3);
        rec.status = JobStatus::Running;
        cache.keep_matching(&rec, &filter, ids(3));
        assert!(cache.matching(&rec, &filter).is_none(), "a running job's entries still change");

        rec.status = JobStatus::Completed;
        cache.keep_matching(&rec, &filter, ids(2));
        assert_eq!(cache.matching(&rec, &filter).map(|i| i.len()), Some(2));
        let other = TaskFilter { state: Some(TaskState::Failed), ..Default::default() };
        assert!(cache.matching(&rec, &other).is_none(), "another filter scans on its own");

        rec.updated_at += time::Duration::seconds(1);
        assert!(cache.matching(&rec, &filter).is_none(), "a changed header (a resumed job) must rescan");
    }

    #[test]
    fn at_most_a_few_lists_are_kept() {
        let cache = TaskIds::default();
        let recs: Vec<JobRecord> = (0..ENTRIES + 2).map(|_| job(1)).collect();
        for rec in &recs {
            cache.keep_all(rec, ids(1));
        }
        assert!(cache.all(&recs[0]).is_none(), "the oldest list was dropped");
        assert!(cache.all(&recs[ENTRIES + 1]).is_some());
        assert!(cache.entries.lock().unwrap().len() <= ENTRIES);
    }
}
