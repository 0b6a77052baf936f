//! Sandboxed command execution: the `execute` tool (docs/SANDBOX.md).
//!
//! A crate of its own so the worker runs it and `flotilla config check` asks
//! the same code whether it works on a host ([`probe`]) instead of retyping
//! its bubblewrap command line. It must not depend on the bus, MCP, the
//! model providers or the worker: a task's progress reaches it through
//! [`ExecutionReporter`].
//!
//! A subagent type gets `execute` only when its config has a
//! `[subagents.<type>.sandbox]` section; without one the tool does not exist
//! and a call to it is an unknown-tool error. Each task gets a private scratch
//! dir (the sandbox's `/scratch`), created when the task starts and removed
//! when it ends, so commands of one task share files and tasks share nothing.
//!
//! - [`bubblewrap`]: the backend (isolation and limits).
//! - [`execute`]: the tool the model calls.
//! - [`audit`]: the record of every execution.
//! - [`staging`]: job files copied into `/scratch` before each command and
//!   results copied back after it (`stage_in` / `stage_out`), through
//!   [`beneath`], which never follows a symlink a command planted.
//! - [`seccomp`]: the syscall filter bubblewrap installs.
//! - [`uids`]: the host uid each task's sandboxes run as, one per running
//!   task on the host.
//! - [`probe`]: whether a sandbox config works on this host, with the fix.
//!
//! The scratch dirs live in one private dir per worker uid,
//! `<scratch_root>/flotilla-sandbox-<uid>` (mode 0711): the worker creates it
//! or uses it only when it already owns it and nobody else can write it, so
//! no other local user can pre-create it, swap entries in it, or have the
//! worker chmod something it did not make.

pub mod audit;
pub mod beneath;
pub mod bubblewrap;
pub mod execute;
mod probe;
pub mod seccomp;
pub mod staging;
pub mod uids;

use std::collections::HashMap;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, bail};
use flotilla_config::SandboxConfig;
use flotilla_protocol::ids::TaskId;

pub use audit::ExecutionReporter;
pub use bubblewrap::{Bubblewrap, Limits, SandboxError};
pub use execute::ExecuteTool;
pub use probe::{ProbeError, probe};

/// The sandbox of one subagent type on this worker.
pub struct Sandbox {
    /// The static config.
    pub config: SandboxConfig,
    backend: Bubblewrap,
    /// The uids sessions lease, when the worker runs as root.
    uids: Option<uids::UidPool>,
    /// `<scratch_root>/flotilla-sandbox-<uid>`: parent of the per-task dirs.
    root: PathBuf,
    /// Running tasks: their scratch dir and progress publisher.
    sessions: Mutex<HashMap<TaskId, Arc<Session>>>,
    /// Job files in and out of scratch dirs.
    pub staging: staging::Staging,
}

/// One task's use of the sandbox.
pub struct Session {
    /// Host path of the task's scratch dir.
    pub scratch: PathBuf,
    /// Where the audit's progress events go.
    pub progress: Arc<dyn ExecutionReporter>,
    /// sha256 of each job file as last staged in or out, so unchanged files
    /// are not copied back.
    pub staged: tokio::sync::Mutex<HashMap<String, [u8; 32]>>,
    /// The uid this task's commands run as, held until the session ends.
    uid: Option<uids::UidLease>,
}

impl Session {
    /// `(uid, gid)` of the task's commands and of the files handed to them,
    /// when they run as another user than the worker.
    pub fn owner(&self) -> Option<(u32, u32)> {
        self.uid.as_ref().map(uids::UidLease::ids)
    }
}

impl Sandbox {
    /// Builds the backend and checks, by running `true` once, that it works here.
    pub fn start(ty: &str, config: &SandboxConfig) -> anyhow::Result<Arc<Self>> {
        let key = format!("subagents.{ty}.sandbox");
        let backend = Bubblewrap::new(config).with_context(|| format!("{key}: execute needs a working sandbox"))?;
        let base = config.scratch_root.clone().unwrap_or_else(std::env::temp_dir);
        let root = private_root(&base, &key)?;
        let quota = config.scratch_mb.saturating_mul(1024 * 1024);
        let staging = staging::Staging::new(&config.stage_in, &config.stage_out, quota)
            .with_context(|| format!("{key}: invalid stage_in/stage_out glob"))?;
        if !backend.caps_inodes() {
            tracing::warn!(
                "{key}: /tmp and /dev/shm of the sandbox have sizes but no inode cap (tmp_inodes): the worker \
                 runs without root or CAP_SYS_ADMIN, so bubblewrap mounts them (docs/SANDBOX.md \"Limits\")"
            );
        }
        let uids = match config.uids() {
            Some(range) if backend.switches_user() => Some(uids::UidPool::new(&config.run_dir, range, &key)?),
            _ => None,
        };
        let sandbox =
            Arc::new(Self { config: config.clone(), backend, uids, root, sessions: Mutex::default(), staging });
        let uid = sandbox.lease()?;
        let owner = uid.as_ref().map(uids::UidLease::ids);
        let probe = sandbox.make_dir(&format!("probe-{}", std::process::id()), owner)?;
        let result = sandbox.backend.probe(&probe, owner);
        let _ = std::fs::remove_dir_all(&probe);
        result
            .with_context(|| format!("{key}: bubblewrap was found but cannot build a sandbox (see docs/SANDBOX.md)"))?;
        Ok(sandbox)
    }

    /// A uid for one session, when sandboxes run as another user.
    fn lease(&self) -> anyhow::Result<Option<uids::UidLease>> {
        self.uids.as_ref().map(uids::UidPool::lease).transpose()
    }

    fn make_dir(&self, name: &str, owner: Option<(u32, u32)>) -> anyhow::Result<PathBuf> {
        let dir = self.root.join(name);
        if dir.exists() {
            std::fs::remove_dir_all(&dir).with_context(|| format!("cannot clear {}", dir.display()))?;
        }
        std::fs::create_dir(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid))
                .with_context(|| format!("cannot hand {} to the sandbox user", dir.display()))?;
        }
        Ok(dir)
    }

    /// Leases the task's uid and opens its scratch dir, owned by that uid
    /// (made off the async threads: clearing a stale dir may take long);
    /// [`SessionGuard::close`] removes it and frees the uid.
    pub async fn open(
        self: &Arc<Self>,
        task: TaskId,
        progress: Arc<dyn ExecutionReporter>,
    ) -> anyhow::Result<SessionGuard> {
        let sandbox = self.clone();
        let (scratch, uid) = tokio::task::spawn_blocking(move || {
            let uid = sandbox.lease()?;
            let dir = sandbox.make_dir(&task.to_string(), uid.as_ref().map(uids::UidLease::ids))?;
            anyhow::Ok((dir, uid))
        })
        .await
        .context("the scratch dir task panicked")??;
        let session = Session { scratch, progress, staged: Default::default(), uid };
        self.sessions.lock().expect("sessions lock").insert(task, Arc::new(session));
        Ok(SessionGuard { sandbox: self.clone(), task, closed: false })
    }

    fn session(&self, task: &TaskId) -> Option<Arc<Session>> {
        self.sessions.lock().expect("sessions lock").get(task).cloned()
    }

    /// The limits of one command that asked for `timeout` seconds.
    pub fn limits(&self, timeout: Option<u64>) -> Limits {
        let c = &self.config;
        Limits {
            wall: Duration::from_secs(timeout.unwrap_or(c.timeout).clamp(1, c.max_timeout)),
            cpu_seconds: c.cpu_seconds,
            memory_bytes: c.memory_mb * 1024 * 1024,
            file_bytes: c.file_size_mb * 1024 * 1024,
            processes: c.max_processes,
            output_bytes: c.max_output_bytes,
        }
    }
}

/// Creates `<base>/flotilla-sandbox-<uid>` (mode 0711: traversable, not
/// listable, so a sandbox user finds only its own dir), or re-uses it when this
/// uid already owns it and nobody else may write to it. Anything else there is
/// refused, never chmodded or chowned: another local user may have planted it.
fn private_root(base: &Path, key: &str) -> anyhow::Result<PathBuf> {
    let uid = nix::unistd::geteuid().as_raw();
    let root = base.join(format!("flotilla-sandbox-{uid}"));
    let fix = format!("remove it, or set {key}.scratch_root to a directory only this worker (uid {uid}) controls");
    let base_meta = std::fs::metadata(base).with_context(|| {
        format!("{key}.scratch_root: cannot use {}: it must be an existing directory", base.display())
    })?;
    if base_meta.mode() & 0o022 != 0 && base_meta.mode() & 0o1000 == 0 {
        bail!("{key}.scratch_root: {} is writable by other users and not sticky: {fix}", base.display());
    }
    match std::fs::DirBuilder::new().mode(0o711).create(&root) {
        Ok(()) => std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o711))
            .with_context(|| format!("{key}.scratch_root: cannot set the mode of {}", root.display()))?,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let m = std::fs::symlink_metadata(&root)?;
            if !m.file_type().is_dir() || m.uid() != uid || m.mode() & 0o022 != 0 {
                bail!(
                    "{key}.scratch_root: {} already exists and is not a directory owned by uid {uid} that only \
                     it may write (found {}, owner uid {}, mode {:o}): {fix}",
                    root.display(),
                    if m.file_type().is_symlink() {
                        "a symlink"
                    } else if m.is_dir() {
                        "a directory"
                    } else {
                        "a file"
                    },
                    m.uid(),
                    m.mode() & 0o7777
                );
            }
        }
        Err(e) => {
            return Err(e).with_context(|| format!("{key}.scratch_root: cannot create {}", root.display()));
        }
    }
    Ok(root)
}

/// Ends a task's session: forgets it and deletes its scratch dir (up to
/// `scratch_mb` of files) on a blocking thread, never on the async runtime.
/// [`SessionGuard::close`] waits for the removal; a guard dropped without it
/// (a panic, an aborted task) starts the removal and does not wait.
pub struct SessionGuard {
    sandbox: Arc<Sandbox>,
    task: TaskId,
    closed: bool,
}

impl SessionGuard {
    /// Forgets the session and removes its scratch dir, returning once it is gone.
    pub async fn close(mut self) {
        self.closed = true;
        if let Some(removal) = self.remove() {
            let _ = removal.await;
        }
    }

    /// Forgets the session and starts removing its scratch dir.
    fn remove(&self) -> Option<tokio::task::JoinHandle<()>> {
        let session = self.sandbox.sessions.lock().expect("sessions lock").remove(&self.task)?;
        remove_scratch(session.scratch.clone())
    }
}

/// Removes `scratch` on a blocking thread of the current runtime (the handle
/// says when it is gone), or right here outside a runtime.
fn remove_scratch(scratch: PathBuf) -> Option<tokio::task::JoinHandle<()>> {
    let remove = move || {
        if let Err(e) = std::fs::remove_dir_all(&scratch) {
            tracing::warn!(dir = %scratch.display(), error = %e, "scratch dir not removed");
        }
    };
    match tokio::runtime::Handle::try_current() {
        Ok(rt) => Some(rt.spawn_blocking(remove)),
        // Outside a runtime nothing async can be blocked.
        Err(_) => {
            remove();
            None
        }
    }
}

impl Drop for SessionGuard {
    fn drop(&mut self) {
        if !self.closed {
            self.remove();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> PathBuf {
        let d = std::env::temp_dir().join(format!("sandbox-root-{}", uuid::Uuid::now_v7()));
        std::fs::create_dir(&d).unwrap();
        d
    }

    #[test]
    fn a_fresh_private_root_is_created_0711() {
        let b = base();
        let root = private_root(&b, "subagents.t.sandbox").unwrap();
        let m = std::fs::symlink_metadata(&root).unwrap();
        assert_eq!((m.mode() & 0o7777, m.uid()), (0o711, nix::unistd::geteuid().as_raw()));
        assert_eq!(private_root(&b, "subagents.t.sandbox").unwrap(), root, "its own dir is re-used");
        std::fs::remove_dir_all(&b).unwrap();
    }

    /// Another user pre-created the root (the worker runs as root in tests, so
    /// it can play that user), or planted a symlink there: refused, untouched.
    #[test]
    fn a_root_planted_by_someone_else_is_refused() {
        let b = base();
        let uid = nix::unistd::geteuid().as_raw();
        let root = b.join(format!("flotilla-sandbox-{uid}"));
        std::fs::create_dir(&root).unwrap();
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o777)).unwrap();
        if uid == 0 {
            std::os::unix::fs::chown(&root, Some(4242), Some(4242)).unwrap();
        }
        let e = format!("{:#}", private_root(&b, "subagents.t.sandbox").unwrap_err());
        assert!(e.contains(&root.display().to_string()) && e.contains("subagents.t.sandbox.scratch_root"), "{e}");
        let m = std::fs::symlink_metadata(&root).unwrap();
        assert_eq!(m.mode() & 0o7777, 0o777, "never chmodded");
        std::fs::remove_dir(&root).unwrap();
        std::os::unix::fs::symlink("/etc", &root).unwrap();
        let e = format!("{:#}", private_root(&b, "subagents.t.sandbox").unwrap_err());
        assert!(e.contains("a symlink"), "{e}");
        std::fs::remove_dir_all(&b).unwrap();
    }

    fn full_scratch() -> PathBuf {
        let d = base();
        std::fs::create_dir_all(d.join("a/b")).unwrap();
        for i in 0..50 {
            std::fs::write(d.join(format!("a/b/f{i}")), vec![0u8; 4096]).unwrap();
        }
        d
    }

    /// Inside a runtime the removal goes to a blocking thread and the dir
    /// is gone once it is awaited; outside one it happens at once.
    #[tokio::test(flavor = "current_thread")]
    async fn a_scratch_dir_is_removed_off_the_runtime() {
        let d = full_scratch();
        let removal = remove_scratch(d.clone()).expect("handed to a blocking thread");
        removal.await.unwrap();
        assert!(!d.exists(), "{} still exists", d.display());
        let d = full_scratch();
        std::thread::spawn({
            let d = d.clone();
            move || assert!(remove_scratch(d).is_none(), "no runtime: removed inline")
        })
        .join()
        .unwrap();
        assert!(!d.exists());
    }
}
