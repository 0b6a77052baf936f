//! Sandboxed command execution: the `execute` tool (seed 000 section 2.4).
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
//!   results copied back after it (`stage_in` / `stage_out`).

pub mod audit;
pub mod bubblewrap;
pub mod execute;
pub mod staging;

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use flotilla_shared::config::SandboxConfig;
use flotilla_shared::ids::TaskId;

pub use bubblewrap::{Bubblewrap, Limits, SandboxError};
pub use execute::ExecuteTool;

use crate::progress::ProgressPublisher;

/// The sandbox of one subagent type on this worker.
pub struct Sandbox {
    /// The static config.
    pub config: SandboxConfig,
    backend: Bubblewrap,
    /// `<scratch_root>/flotilla-sandbox`: parent of the per-task dirs.
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
    pub progress: ProgressPublisher,
    /// sha256 of each job file as last staged in or out, so unchanged files
    /// are not copied back.
    pub staged: tokio::sync::Mutex<HashMap<String, [u8; 32]>>,
}

impl Sandbox {
    /// Builds the backend and checks, by running `true` once, that it works here.
    pub fn start(ty: &str, config: &SandboxConfig) -> anyhow::Result<Arc<Self>> {
        let key = format!("subagents.{ty}.sandbox");
        let backend = Bubblewrap::new(config).with_context(|| format!("{key}: execute needs a working sandbox"))?;
        let root = config.scratch_root.clone().unwrap_or_else(std::env::temp_dir).join("flotilla-sandbox");
        std::fs::create_dir_all(&root).with_context(|| format!("{key}: cannot create {}", root.display()))?;
        // Traversable, not listable: a sandbox user finds only its own dir.
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o711))
            .with_context(|| format!("{key}: cannot set the mode of {}", root.display()))?;
        let staging = staging::Staging::new(&config.stage_in, &config.stage_out)
            .with_context(|| format!("{key}: invalid stage_in/stage_out glob"))?;
        let sandbox = Arc::new(Self { config: config.clone(), backend, root, sessions: Mutex::default(), staging });
        let probe = sandbox.make_dir(&format!("probe-{}", std::process::id()))?;
        let result = sandbox.backend.probe(&probe);
        let _ = std::fs::remove_dir_all(&probe);
        result
            .with_context(|| format!("{key}: bubblewrap was found but cannot build a sandbox (see docs/SANDBOX.md)"))?;
        Ok(sandbox)
    }

    fn make_dir(&self, name: &str) -> anyhow::Result<PathBuf> {
        let dir = self.root.join(name);
        if dir.exists() {
            std::fs::remove_dir_all(&dir).with_context(|| format!("cannot clear {}", dir.display()))?;
        }
        std::fs::create_dir(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
        if let Some((uid, gid)) = self.backend.user() {
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid))
                .with_context(|| format!("cannot hand {} to the sandbox user", dir.display()))?;
        }
        Ok(dir)
    }

    /// Opens the scratch dir of `task`; it is removed when the guard drops.
    pub fn open(self: &Arc<Self>, task: TaskId, progress: ProgressPublisher) -> anyhow::Result<SessionGuard> {
        let scratch = self.make_dir(&task.to_string())?;
        let session = Session { scratch, progress, staged: Default::default() };
        self.sessions.lock().expect("sessions lock").insert(task, Arc::new(session));
        Ok(SessionGuard { sandbox: self.clone(), task })
    }

    /// `(uid, gid)` owning files handed to the sandbox, when it runs as another user.
    pub fn owner(&self) -> Option<(u32, u32)> {
        self.backend.user()
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

/// Ends a task's session: forgets it and deletes its scratch dir.
pub struct SessionGuard {
    sandbox: Arc<Sandbox>,
    task: TaskId,
}

impl Drop for SessionGuard {
    fn drop(&mut self) {
        if let Some(s) = self.sandbox.sessions.lock().expect("sessions lock").remove(&self.task)
            && let Err(e) = std::fs::remove_dir_all(&s.scratch)
        {
            tracing::warn!(dir = %s.scratch.display(), error = %e, "scratch dir not removed");
        }
    }
}
