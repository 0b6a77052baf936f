//! `[subagents.<type>.sandbox]`: where `execute` runs (docs/SANDBOX.md). A
//! type without this section has no `execute` tool at all.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The sandbox of one subagent type.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct SandboxConfig {
    /// Backend; only `"bubblewrap"` exists.
    pub backend: String,
    /// The `bwrap` binary (looked up on PATH when not a path).
    pub bwrap: String,
    /// Wall-time seconds of a command when the model gives no `timeout`.
    pub timeout: u64,
    /// Largest `timeout` the model may ask for.
    pub max_timeout: u64,
    /// CPU seconds of each process (RLIMIT_CPU).
    pub cpu_seconds: u64,
    /// Address space of each process in MiB (RLIMIT_AS).
    pub memory_mb: u64,
    /// Largest file a command may write, in MiB (RLIMIT_FSIZE).
    pub file_size_mb: u64,
    /// Processes of the sandbox user (RLIMIT_NPROC; counted per host uid,
    /// and every running task has a uid of its own from `uid_range`).
    pub max_processes: u64,
    /// Disk a task's scratch dir may use, in MiB: staging in stops there, and
    /// a command that leaves it over the quota gets a `limit` error and
    /// nothing staged out (measured after each command, docs/SANDBOX.md).
    pub scratch_mb: u64,
    /// Size of the sandbox's private `/tmp` (tmpfs) in MiB.
    pub tmp_mb: u64,
    /// Size of the sandbox's private `/dev/shm` (tmpfs) in MiB; the rest of
    /// `/dev` is read-only.
    pub shm_mb: u64,
    /// Files and dirs `/tmp` and `/dev/shm` may each hold (tmpfs `nr_inodes`;
    /// applied when the worker runs as root, docs/SANDBOX.md "Limits").
    pub tmp_inodes: u64,
    /// Bytes of stdout and of stderr kept each; the rest is dropped and the
    /// result says `truncated: true`.
    pub max_output_bytes: usize,
    /// Where the worker's private dir of per-task scratch dirs,
    /// `flotilla-sandbox-<uid>`, is created (default: the system temp dir).
    pub scratch_root: Option<PathBuf>,
    /// Host paths mounted read-only at the same place (missing ones are skipped,
    /// symlinks such as `/bin -> usr/bin` are recreated as symlinks).
    pub ro_binds: Vec<PathBuf>,
    /// `<first>:<count>`: host uids (each with the gid of the same number)
    /// the sandboxes run as when the worker runs as root, one per running
    /// task, never two at once on this host (a worker running as another user
    /// runs sandboxes as itself).
    pub uid_range: String,
    /// The single uid of earlier versions: refused with a pointer to
    /// `uid_range` (one shared uid let one task's processes exhaust every
    /// other task's RLIMIT_NPROC, docs/SANDBOX.md).
    #[serde(skip_serializing)]
    pub user: Option<serde_json::Value>,
    /// Root-owned dir of the uid locks (shared by every worker of the host,
    /// so they never lease the same uid) and of the private tmpfs mount
    /// points; used when the worker runs as root.
    pub run_dir: PathBuf,
    /// Job-file globs copied into `/scratch` before each command: job file
    /// `/data/q2.csv` appears as `/scratch/data/q2.csv`. Subject to the type's
    /// read permissions.
    pub stage_in: Vec<String>,
    /// Job-file globs copied back after each command: `/scratch/out/r.md`
    /// becomes job file `/out/r.md` when `/out/r.md` matches. Subject to the
    /// type's write permissions; only regular files (never symlinks) are copied.
    pub stage_out: Vec<String>,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        Self {
            backend: "bubblewrap".into(),
            bwrap: "bwrap".into(),
            timeout: 30,
            max_timeout: 300,
            cpu_seconds: 60,
            memory_mb: 512,
            file_size_mb: 64,
            max_processes: 64,
            scratch_mb: 256,
            tmp_mb: 64,
            shm_mb: 16,
            tmp_inodes: 16_384,
            max_output_bytes: 64 * 1024,
            scratch_root: None,
            ro_binds: [
                "/usr",
                "/bin",
                "/sbin",
                "/lib",
                "/lib32",
                "/lib64",
                "/libx32",
                "/etc/alternatives",
                "/etc/ld.so.cache",
                "/etc/ld.so.conf",
                "/etc/ld.so.conf.d",
                "/etc/passwd",
                "/etc/group",
                "/etc/localtime",
            ]
            .into_iter()
            .map(PathBuf::from)
            .collect(),
            // Above the 16-bit uids and below useradd's first subordinate
            // uid (100000): no account and no rootless container uses them.
            uid_range: "70000:1024".into(),
            user: None,
            run_dir: PathBuf::from("/run/flotilla-sandbox"),
            stage_in: Vec::new(),
            stage_out: Vec::new(),
        }
    }
}

impl SandboxConfig {
    /// Checks values that cannot work; `key` is the section's dotted key.
    pub fn check(&self) -> Result<(), (String, String)> {
        let bad = |k: &str, m: &str| Err((k.to_string(), m.to_string()));
        if self.backend != "bubblewrap" {
            return bad("backend", "unknown backend: use \"bubblewrap\"");
        }
        if self.timeout == 0 || self.timeout > self.max_timeout {
            return bad("timeout", "must be at least 1 and at most max_timeout");
        }
        for (k, v) in [
            ("cpu_seconds", self.cpu_seconds),
            ("memory_mb", self.memory_mb),
            ("file_size_mb", self.file_size_mb),
            ("max_processes", self.max_processes),
            ("tmp_mb", self.tmp_mb),
            ("shm_mb", self.shm_mb),
            ("tmp_inodes", self.tmp_inodes),
            ("scratch_mb", self.scratch_mb),
        ] {
            if v == 0 {
                return bad(k, "must be at least 1");
            }
        }
        if self.max_output_bytes == 0 {
            return bad("max_output_bytes", "must be at least 1");
        }
        if self.ro_binds.iter().any(|p| !p.is_absolute()) {
            return bad("ro_binds", "every path must be absolute");
        }
        for (k, globs) in [("stage_in", &self.stage_in), ("stage_out", &self.stage_out)] {
            for g in globs {
                if !g.starts_with('/') || globset::Glob::new(g).is_err() {
                    return bad(k, "every entry must be a valid glob of absolute job paths, e.g. \"/data/**\"");
                }
            }
        }
        if self.user.is_some() {
            return bad(
                "user",
                "is no longer read: sandboxes run as a uid of their own from uid_range (default \"70000:1024\"); remove `user`",
            );
        }
        if self.uids().is_none() {
            return bad(
                "uid_range",
                "use \"<first uid>:<count>\" with first at least 1000 and count at least 1, e.g. \"70000:1024\", \
                 ending below 4294967295; no account of the host may use these uids",
            );
        }
        if !self.run_dir.is_absolute() {
            return bad("run_dir", "must be an absolute path, e.g. \"/run/flotilla-sandbox\"");
        }
        Ok(())
    }

    /// `uid_range` as (first, count), when valid.
    pub fn uids(&self) -> Option<(u32, u32)> {
        let (first, count) = self.uid_range.split_once(':')?;
        let (first, count): (u32, u32) = (first.trim().parse().ok()?, count.trim().parse().ok()?);
        // Never root or a system account; never (uid_t)-1, which chown and setuid read as "unchanged".
        (first >= 1000 && count >= 1 && first.checked_add(count)? < u32::MAX).then_some((first, count))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uid_range_and_run_dir_are_checked_with_the_key() {
        let with = |r: &str| SandboxConfig { uid_range: r.into(), ..Default::default() };
        assert_eq!(SandboxConfig::default().check(), Ok(()));
        assert_eq!(with("70000:1024").uids(), Some((70000, 1024)));
        for bad in ["", "70000", "0:10", "999:10", "70000:0", "x:1", "4294967290:10", "65534:65534:1"] {
            let (key, why) = with(bad).check().unwrap_err();
            assert_eq!(key, "uid_range", "{bad}");
            assert!(why.contains("<first uid>:<count>"), "{why}");
        }
        let old = SandboxConfig { user: Some(serde_json::json!("65534")), ..Default::default() };
        let (key, why) = old.check().unwrap_err();
        assert_eq!(key, "user");
        assert!(why.contains("uid_range"), "{why}");
        let rel = SandboxConfig { run_dir: "run/x".into(), ..Default::default() };
        assert_eq!(rel.check().unwrap_err().0, "run_dir");
        for (k, c) in [
            ("shm_mb", SandboxConfig { shm_mb: 0, ..Default::default() }),
            ("tmp_inodes", SandboxConfig { tmp_inodes: 0, ..Default::default() }),
        ] {
            assert_eq!(c.check().unwrap_err().0, k);
        }
    }
}
