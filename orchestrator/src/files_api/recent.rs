//! Files read recently by `files_get`, so a download in parts reads each file
//! from the Object Store once instead of once per part: the store has no
//! ranged read, and a 16 MiB file is 32 parts (measured before this cache:
//! `flotilla files get` of 16 MiB took 53.6 s in a debug build, every part
//! reading and hashing the whole file).
//!
//! An entry is used only while the file's size and last-write time are those
//! it was read at (a `stat` before every part), and for at most [`TTL`]; at
//! most [`ENTRIES`] files are kept, so the memory held is bounded by
//! `ENTRIES × [files] max_file_bytes`. Each orchestrator keeps its own: parts
//! answered by another orchestrator of the queue group read the file there.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flotilla_job_files::{FileMeta, FilePath};
use flotilla_protocol::ids::JobId;

/// Files kept at once.
const ENTRIES: usize = 4;

/// How long an entry may serve parts after it was read.
const TTL: Duration = Duration::from_secs(60);

/// A file's bytes and their sha256, shared by the parts served from them.
#[derive(Clone)]
pub(super) struct Read {
    /// The whole file.
    pub bytes: Arc<Vec<u8>>,
    /// Lowercase hex sha256 of `bytes`.
    pub sha256: Arc<str>,
}

struct Entry {
    job: JobId,
    meta: FileMeta,
    read: Read,
    at: Instant,
}

/// The recently read files.
#[derive(Default)]
pub(super) struct Recent {
    entries: Mutex<VecDeque<Entry>>,
}

impl Recent {
    fn entries(&self) -> std::sync::MutexGuard<'_, VecDeque<Entry>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The bytes of `path` of `job` when they were read at `now_meta` (same
    /// size and last write) less than [`TTL`] ago.
    pub fn get(&self, job: &JobId, path: &FilePath, now_meta: &FileMeta) -> Option<Read> {
        now_meta.modified?;
        let mut entries = self.entries();
        entries.retain(|e| e.at.elapsed() < TTL);
        entries.iter().find(|e| &e.job == job && &e.meta.path == path && &e.meta == now_meta).map(|e| e.read.clone())
    }

    /// Keeps `read`, the bytes of `meta.path` of `job`; not when the store
    /// gives no last-write time to check it against, or the bytes do not
    /// have the size `meta` says (the file changed in between).
    pub fn put(&self, job: JobId, meta: FileMeta, read: Read) {
        if meta.modified.is_none() || meta.size != read.bytes.len() as u64 {
            return;
        }
        let mut entries = self.entries();
        entries.retain(|e| !(e.job == job && e.meta.path == meta.path));
        if entries.len() == ENTRIES {
            entries.pop_front();
        }
        entries.push_back(Entry { job, meta, read, at: Instant::now() });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(path: &str, size: u64, second: i64) -> FileMeta {
        let modified = Some(time::OffsetDateTime::from_unix_timestamp(second).unwrap());
        FileMeta { path: FilePath::parse(path).unwrap(), size, modified }
    }

    fn read(bytes: &[u8]) -> Read {
        Read { bytes: Arc::new(bytes.to_vec()), sha256: "x".into() }
    }

    #[test]
    fn an_entry_serves_only_the_same_version_of_the_same_file() {
        let recent = Recent::default();
        let (job, other) = (JobId::new(), JobId::new());
        recent.put(job, meta("/a", 3, 1), read(b"abc"));
        assert!(recent.get(&job, &FilePath::parse("/a").unwrap(), &meta("/a", 3, 1)).is_some());
        assert!(recent.get(&other, &FilePath::parse("/a").unwrap(), &meta("/a", 3, 1)).is_none(), "another job");
        assert!(recent.get(&job, &FilePath::parse("/a").unwrap(), &meta("/a", 3, 2)).is_none(), "rewritten");
        assert!(recent.get(&job, &FilePath::parse("/a").unwrap(), &meta("/a", 4, 1)).is_none(), "resized");
        recent.put(job, meta("/b", 9, 1), read(b"abc"));
        assert!(recent.get(&job, &FilePath::parse("/b").unwrap(), &meta("/b", 9, 1)).is_none(), "size mismatch");
    }

    #[test]
    fn at_most_entries_files_are_kept() {
        let recent = Recent::default();
        let job = JobId::new();
        for i in 0..=ENTRIES {
            recent.put(job, meta(&format!("/f{i}"), 1, 1), read(b"x"));
        }
        assert!(recent.get(&job, &FilePath::parse("/f0").unwrap(), &meta("/f0", 1, 1)).is_none(), "the oldest left");
        let last = format!("/f{ENTRIES}");
        assert!(recent.get(&job, &FilePath::parse(&last).unwrap(), &meta(&last, 1, 1)).is_some());
        assert_eq!(recent.entries().len(), ENTRIES);
    }
}
