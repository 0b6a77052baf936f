//! One host uid per running sandbox session (docs/SANDBOX.md "Users").
//!
//! rlimits such as `RLIMIT_NPROC` count per host uid: with one uid for every
//! sandbox, one task holding its `max_processes` made every other task's
//! `execute` fail, whatever tenant it belonged to. So a worker running as root
//! leases a uid of `uid_range` to each task for as long as the task runs.
//!
//! A lease is an exclusive `flock(2)` on `<run_dir>/uids/<uid>.lock`, held
//! through the open file: a lock is per open file description, so two leases
//! in one process exclude each other as two processes do, and the kernel drops
//! it when the worker exits or crashes (its sandboxes die with it:
//! `--die-with-parent`), so no uid stays taken by a dead worker. Every worker
//! of a host with the same `run_dir` sees the same locks; the dir is the
//! worker's own (root, mode 0700), so nobody else can hold or plant a lock.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::{Context, bail};

/// The uids of one sandbox config and where their locks live.
#[derive(Debug)]
pub struct UidPool {
    locks: PathBuf,
    first: u32,
    count: u32,
    /// Where the next search starts, so leases spread over the range instead
    /// of every worker contending for its first uid.
    next: AtomicU32,
    /// `subagents.<type>.sandbox`, for errors.
    key: String,
}

/// A uid held for one session; dropping it frees the uid.
#[derive(Debug)]
pub struct UidLease {
    uid: u32,
    /// Holds the lock; closing it releases the uid.
    _lock: File,
}

impl UidLease {
    /// `(uid, gid)`: the gid has the uid's number.
    pub fn ids(&self) -> (u32, u32) {
        (self.uid, self.uid)
    }
}

impl UidPool {
    /// The pool of `(first, count)` with its locks under `<run_dir>/uids`.
    pub fn new(run_dir: &Path, (first, count): (u32, u32), key: &str) -> anyhow::Result<Self> {
        let (locks, what) = (run_dir.join("uids"), format!("{key}.run_dir"));
        // The sandbox uids traverse run_dir to the tmpfs mount points (`Bubblewrap::new`); only
        // the worker reaches the locks.
        own_dir(run_dir, 0o711, &what)?;
        own_dir(&locks, 0o700, &what)?;
        let start = std::process::id() % count;
        Ok(Self { locks, first, count, next: AtomicU32::new(start), key: key.into() })
    }

    /// Leases a uid no other session of this host holds.
    pub fn lease(&self) -> anyhow::Result<UidLease> {
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        for i in 0..self.count {
            let uid = self.first + (start.wrapping_add(i) % self.count);
            let path = self.locks.join(format!("{uid}.lock"));
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o600)
                .custom_flags(nix::libc::O_NOFOLLOW)
                .open(&path)
                .with_context(|| format!("cannot open the uid lock {}", path.display()))?;
            match file.try_lock() {
                Ok(()) => return Ok(UidLease { uid, _lock: file }),
                Err(std::fs::TryLockError::WouldBlock) => continue,
                Err(std::fs::TryLockError::Error(e)) => {
                    return Err(e).with_context(|| format!("cannot lock {}", path.display()));
                }
            }
        }
        bail!(
            "all {} sandbox uids of {}.uid_range are in use by running tasks on this host: \
             raise its count (docs/SANDBOX.md \"Users\")",
            self.count,
            self.key
        )
    }
}

/// Creates `dir` (and a missing parent) with `mode`, or re-uses it when this
/// uid owns it and nobody else may write to it; anything else is refused.
pub fn own_dir(dir: &Path, mode: u32, key: &str) -> anyhow::Result<()> {
    let uid = nix::unistd::geteuid().as_raw();
    if let Some(parent) = dir.parent().filter(|p| !p.exists()) {
        std::fs::DirBuilder::new()
            .mode(0o711)
            .recursive(true)
            .create(parent)
            .with_context(|| format!("{key}: cannot create {}", parent.display()))?;
    }
    match std::fs::DirBuilder::new().mode(mode).create(dir) {
        Ok(()) => std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))
            .with_context(|| format!("{key}: cannot set the mode of {}", dir.display())),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let m = std::fs::symlink_metadata(dir)?;
            if !m.file_type().is_dir() || m.uid() != uid || m.mode() & 0o022 != 0 {
                bail!(
                    "{key}: {} exists but is not a directory owned by uid {uid} that only it may write \
                     (owner uid {}, mode {:o}): remove it or choose another {key}",
                    dir.display(),
                    m.uid(),
                    m.mode() & 0o7777
                );
            }
            Ok(())
        }
        Err(e) => Err(e).with_context(|| format!("{key}: cannot create {}", dir.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_dir() -> PathBuf {
        std::env::temp_dir().join(format!("flotilla-uids-{}", uuid::Uuid::now_v7()))
    }

    /// Leases of one pool, and of a second pool over the same dir (as another
    /// worker process would open it), never share a uid; a dropped lease frees
    /// its uid, and an exhausted range says which key to raise.
    #[test]
    fn concurrent_leases_never_share_a_uid() {
        let dir = run_dir();
        let (a, b) = (
            UidPool::new(&dir, (70000, 3), "subagents.a.sandbox").unwrap(),
            UidPool::new(&dir, (70000, 3), "subagents.b.sandbox").unwrap(),
        );
        let (l1, l2, l3) = (a.lease().unwrap(), b.lease().unwrap(), a.lease().unwrap());
        let mut uids = vec![l1.ids().0, l2.ids().0, l3.ids().0];
        uids.sort();
        assert_eq!(uids, [70000, 70001, 70002]);
        assert_eq!(l2.ids().1, l2.ids().0, "the gid has the uid's number");
        let e = format!("{:#}", b.lease().unwrap_err());
        assert!(e.contains("all 3 sandbox uids of subagents.b.sandbox.uid_range are in use"), "{e}");
        let freed = l2.ids().0;
        drop(l2);
        assert_eq!(a.lease().unwrap().ids().0, freed);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_foreign_lock_dir_is_refused() {
        let dir = run_dir();
        std::fs::create_dir_all(dir.join("uids")).unwrap();
        std::fs::set_permissions(dir.join("uids"), std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = format!("{:#}", UidPool::new(&dir, (70000, 3), "subagents.a.sandbox").unwrap_err());
        assert!(e.contains("subagents.a.sandbox.run_dir") && e.contains("mode 777"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
