//! The id lists behind paged listings. The first page of a listing reads
//! only a tail of the job index (jobs/index.rs); a later page (`after` a
//! cursor) needs every matching id older than the cursor, which costs a scan
//! of the filter's index keys. Paging through all of a long history would
//! repeat that scan on every page, so the sorted ids of a scan are kept here
//! for a minute and the next pages of the same listing slice them: `jobs
//! --limit 100000` costs one scan plus a page's headers per page.
//!
//! Each orchestrator keeps its own (a page answered by another one scans
//! there); at most [`ENTRIES`] listings are kept, for at most [`TTL`]. A
//! scan serves a cursor made before it (with a margin for clock skew):
//! every job older than such a cursor was filed before the scan, so none is
//! missed; a newer cursor scans again. A job deleted or moved since is
//! dropped when its header is read.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flotilla_protocol::JobStatus;
use flotilla_protocol::ids::{JobId, Tenant};
use time::OffsetDateTime;

/// Listings kept at once.
const ENTRIES: usize = 8;

/// How long the pages of one listing may slice its scan.
const TTL: Duration = Duration::from_secs(60);

/// What identifies one listing's scan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Scan {
    pub tenant: Option<Tenant>,
    pub status: Option<JobStatus>,
    pub since: Option<OffsetDateTime>,
}

struct Entry {
    scan: Scan,
    /// Matching ids, newest first.
    ids: Arc<Vec<JobId>>,
    at: Instant,
    /// Wall-clock time of the scan, ms since the epoch (job ids carry theirs).
    at_ms: u64,
}

/// How far apart the clocks of orchestrators (which stamp job ids) and of
/// the NATS server (which stamps index writes) may be; hosts are expected to
/// run NTP (docs/OPERATIONS.md, "Job history").
pub(super) const CLOCK_SKEW_MS: u64 = 2_000;

fn now_ms() -> u64 {
    (OffsetDateTime::now_utc().unix_timestamp_nanos() / 1_000_000) as u64
}

/// The recent scans.
#[derive(Default)]
pub(super) struct ListCache {
    entries: Mutex<VecDeque<Entry>>,
}

impl ListCache {
    fn entries(&self) -> std::sync::MutexGuard<'_, VecDeque<Entry>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The ids of `scan` if it ran less than [`TTL`] ago and after a job
    /// made at `cursor_ms` (ms since the epoch) was filed.
    pub fn get(&self, scan: &Scan, cursor_ms: u64) -> Option<Arc<Vec<JobId>>> {
        let mut entries = self.entries();
        entries.retain(|e| e.at.elapsed() < TTL);
        entries.iter().find(|e| &e.scan == scan && cursor_ms + CLOCK_SKEW_MS < e.at_ms).map(|e| e.ids.clone())
    }

    /// Keeps the ids (newest first) of `scan`, made now, dropping the oldest scan when full.
    pub fn put(&self, scan: Scan, ids: Arc<Vec<JobId>>) {
        self.put_at(scan, ids, now_ms());
    }

    fn put_at(&self, scan: Scan, ids: Arc<Vec<JobId>>, at_ms: u64) {
        let mut entries = self.entries();
        entries.retain(|e| e.scan != scan);
        if entries.len() >= ENTRIES {
            entries.pop_front();
        }
        entries.push_back(Entry { scan, ids, at: Instant::now(), at_ms });
    }
}

/// The ids of `ids` (newest first) older than `after`: at most `take`, and
/// whether more follow.
pub(super) fn older_than(ids: &[JobId], after: &JobId, take: usize) -> (Vec<JobId>, bool) {
    let from = ids.partition_point(|id| id >= after);
    let rest = &ids[from..];
    (rest.iter().take(take).copied().collect(), rest.len() > take)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_slice_the_scan_after_the_cursor() {
        let mut ids: Vec<JobId> = (0..10).map(|_| JobId::new()).collect();
        ids.sort_unstable_by(|a, b| b.cmp(a));
        let (page, more) = older_than(&ids, &ids[2], 4);
        assert_eq!(page, ids[3..7].to_vec());
        assert!(more);
        let (page, more) = older_than(&ids, &ids[6], 4);
        assert_eq!(page, ids[7..].to_vec());
        assert!(!more);
        // A cursor that is not in the scan (a job deleted since) still slices by age.
        let newest = JobId::new();
        assert_eq!(older_than(&ids, &newest, 3).0, ids[..3].to_vec());
    }

    #[test]
    fn at_most_entries_scans_are_kept_and_a_rescan_replaces_its_entry() {
        let cache = ListCache::default();
        let scan = |i: u8| Scan { tenant: Some(Tenant::new(format!("t{i}")).unwrap()), status: None, since: None };
        for i in 0..ENTRIES as u8 + 2 {
            cache.put(scan(i), Arc::new(vec![JobId::new()]));
        }
        let old = now_ms() - 60_000; // a cursor made well before the scans
        assert!(cache.get(&scan(0), old).is_none() && cache.get(&scan(1), old).is_none(), "oldest dropped");
        assert!(cache.get(&scan(2), old).is_some());
        let fresh = Arc::new(vec![JobId::new(), JobId::new()]);
        cache.put(scan(2), fresh.clone());
        assert_eq!(cache.get(&scan(2), old).unwrap().len(), 2);
        assert_eq!(cache.entries().len(), ENTRIES);
    }

    #[test]
    fn a_cursor_newer_than_the_scan_scans_again() {
        let cache = ListCache::default();
        let scan = Scan { tenant: None, status: None, since: None };
        cache.put_at(scan.clone(), Arc::new(vec![JobId::new()]), now_ms() - 30_000);
        // Jobs older than this cursor may have been filed after the scan.
        assert!(cache.get(&scan, now_ms()).is_none());
        assert!(cache.get(&scan, now_ms() - 60_000).is_some());
    }
}
