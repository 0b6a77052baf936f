//! The bubblewrap backend: one `bwrap` process per command, wrapped in
//! `prlimit` for the resource limits.
//!
//! ```text
//! prlimit --cpu --as --fsize --nproc --nofile -- bwrap --args 4 -- /bin/sh -c <command>
//! ```
//!
//! Isolation: every namespace unshared (no network: only a private loopback),
//! all capabilities dropped, no nested user namespaces, a fresh `/proc`, a
//! minimal read-only `/dev` with a size-capped `/dev/shm`, the configured
//! system paths bound read-only, a private `/tmp` (tmpfs of fixed size) and
//! the task's scratch dir as the only writable host path, at `/scratch`. A
//! worker running as root starts each task's sandboxes as a uid of its own
//! ([`super::uids`]), so a kernel bug in the namespace setup starts from
//! nobody's rights and one task's rlimits never count another's processes.
//!
//! bubblewrap reads its options from a memfd (`--args 4`), not its command
//! line: its copy that is pid 1 inside the sandbox keeps the command line, so
//! `/proc/1/cmdline` would show the scratch dir's host path and every setting.
//!
//! Only stdio crosses: every other descriptor the worker holds or inherited
//! is closed in the child before `exec` (a `pre_exec` hook, close_range(2)),
//! except the seccomp program bubblewrap reads (see [`super::seccomp`]),
//! which bubblewrap installs right before it runs the command, and the
//! options file.
//!
//! Limits: wall time by the worker (it kills the process group; the sandbox's
//! pid namespace and `--die-with-parent` take every descendant with it), CPU
//! seconds, address space, file size and process count by rlimits (`prlimit`
//! from util-linux). cgroups are not used: they need a delegated cgroup v2
//! subtree that a worker in a container usually lacks. bubblewrap's
//! `--tmpfs` takes a size but no inode cap, so a root worker mounts `/tmp`
//! and `/dev/shm` itself (`size` and `nr_inodes`) in a private mount
//! namespace of the child, right before it switches to the sandbox uid, and
//! bubblewrap binds them.

use std::ffi::{CString, OsStr, OsString};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use flotilla_config::SandboxConfig;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Command;
use tokio_util::sync::CancellationToken;

use super::seccomp;

/// Where the scratch dir appears inside the sandbox.
pub const SCRATCH: &str = "/scratch";

/// Why a command could not be run (not: why it failed, that is its exit status).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SandboxError {
    /// A binary the backend needs is missing.
    #[error("{what} not found on PATH ({hint})")]
    Missing {
        /// Which binary.
        what: String,
        /// How to get it.
        hint: &'static str,
    },
    /// The sandbox could not be started.
    #[error("cannot start the sandbox: {0}")]
    Spawn(#[from] std::io::Error),
    /// bubblewrap refused to build the sandbox (its own message).
    #[error("bubblewrap does not work on this host: {0}")]
    Unusable(String),
    /// The worker's own setup for sandboxes failed (its message names the key).
    #[error("{0}")]
    Setup(String),
    /// The run was cancelled.
    #[error("cancelled")]
    Cancelled,
}

/// Per-command limits.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Wall time; the process tree is killed after it.
    pub wall: Duration,
    /// CPU seconds per process.
    pub cpu_seconds: u64,
    /// Address space per process, bytes.
    pub memory_bytes: u64,
    /// Largest file written, bytes.
    pub file_bytes: u64,
    /// Processes of the sandbox uid (one uid per task when the worker runs as root).
    pub processes: u64,
    /// Bytes kept of stdout and of stderr each.
    pub output_bytes: usize,
}

/// What a command did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Execution {
    /// Exit status, when it exited.
    pub exit_code: Option<i32>,
    /// Signal that ended it, when one did.
    pub signal: Option<i32>,
    /// Killed at the wall-time limit.
    pub timed_out: bool,
    /// Captured stdout (lossy UTF-8), at most the output cap.
    pub stdout: String,
    /// Captured stderr (lossy UTF-8), at most the output cap.
    pub stderr: String,
    /// Some output was dropped at the cap.
    pub truncated: bool,
    /// Wall time.
    pub duration: Duration,
}

#[derive(Clone, Debug)]
enum Mount {
    Bind(PathBuf),
    Symlink { target: PathBuf, at: PathBuf },
}

/// Where bubblewrap reads its options from, in the child.
const ARGS_FD: i32 = seccomp::CHILD_FD + 1;

/// A configured bubblewrap backend.
#[derive(Clone, Debug)]
pub struct Bubblewrap {
    bwrap: PathBuf,
    prlimit: PathBuf,
    mounts: Vec<Mount>,
    tmp_bytes: u64,
    shm_bytes: u64,
    /// `nr_inodes` of `/tmp` and `/dev/shm` each (private mounts only).
    inodes: u64,
    /// The worker runs as root: sandboxes run as the uid they are given.
    switch_user: bool,
    /// Mount points of the private `/tmp` and `/dev/shm` (empty dirs under
    /// `run_dir`), when the worker runs as root with `CAP_SYS_ADMIN` (a root
    /// worker in a container often lacks it) and so may mount them.
    private: Option<(PathBuf, PathBuf)>,
}

impl Bubblewrap {
    /// Resolves the binaries and inspects the read-only paths on this host;
    /// a root worker also makes its mount points under `run_dir`.
    pub fn new(config: &SandboxConfig) -> Result<Self, SandboxError> {
        let bwrap = which(&config.bwrap).ok_or_else(|| SandboxError::Missing {
            what: format!("bubblewrap ({})", config.bwrap),
            hint: "install the Debian package `bubblewrap` or set [subagents.<type>.sandbox] bwrap",
        })?;
        let prlimit =
            which("prlimit").ok_or(SandboxError::Missing { what: "prlimit".into(), hint: "install util-linux" })?;
        let mut mounts = Vec::new();
        for p in &config.ro_binds {
            match std::fs::symlink_metadata(p) {
                Ok(m) if m.file_type().is_symlink() => {
                    if let Ok(target) = std::fs::read_link(p) {
                        mounts.push(Mount::Symlink { target, at: p.clone() });
                    }
                }
                Ok(_) => mounts.push(Mount::Bind(p.clone())),
                Err(_) => {} // not on this host: skipped, as documented
            }
        }
        let root = nix::unistd::geteuid().is_root();
        let private = if root && may_mount() {
            let dir = config.run_dir.join("mnt");
            let (tmp, shm) = (dir.join("tmp"), dir.join("shm"));
            for d in [&config.run_dir, &dir, &tmp, &shm] {
                super::uids::own_dir(d, 0o711, "run_dir").map_err(|e| SandboxError::Setup(format!("{e:#}")))?;
            }
            Some((tmp, shm))
        } else {
            None
        };
        Ok(Self {
            bwrap,
            prlimit,
            mounts,
            tmp_bytes: config.tmp_mb * 1024 * 1024,
            shm_bytes: config.shm_mb * 1024 * 1024,
            inodes: config.tmp_inodes,
            switch_user: root,
            private,
        })
    }

    /// Whether sandboxes run as another user than the worker's (it runs as root).
    pub fn switches_user(&self) -> bool {
        self.switch_user
    }

    /// Whether `/tmp` and `/dev/shm` get inode caps (docs/SANDBOX.md "Limits").
    pub fn caps_inodes(&self) -> bool {
        self.private.is_some()
    }

    /// bubblewrap's options, all but the command (they go to [`ARGS_FD`]).
    fn options(&self, scratch: &Path, private: bool) -> Vec<OsString> {
        let mut o: Vec<OsString> = Vec::new();
        let mut add = |args: &[&OsStr]| o.extend(args.iter().map(|a| a.to_os_string()));
        let s = |x: &'static str| OsStr::new(x);
        add(&[s("--unshare-all"), s("--unshare-user"), s("--disable-userns"), s("--die-with-parent")]);
        add(&[s("--new-session"), s("--cap-drop"), s("ALL"), s("--hostname"), s("sandbox")]);
        let seccomp_fd = seccomp::CHILD_FD.to_string();
        add(&[s("--seccomp"), OsStr::new(&seccomp_fd)]);
        for m in &self.mounts {
            match m {
                Mount::Bind(p) => add(&[s("--ro-bind"), p.as_os_str(), p.as_os_str()]),
                Mount::Symlink { target, at } => add(&[s("--symlink"), target.as_os_str(), at.as_os_str()]),
            }
        }
        add(&[s("--dev"), s("/dev"), s("--proc"), s("/proc")]);
        match (&self.private, private) {
            // Mounted by the child with size and nr_inodes (`PrivateTmp`).
            (Some((tmp, shm)), true) => {
                add(&[s("--bind"), tmp.as_os_str(), s("/tmp"), s("--bind"), shm.as_os_str(), s("/dev/shm")]);
            }
            _ => {
                let (tmp, shm) = (self.tmp_bytes.to_string(), self.shm_bytes.to_string());
                add(&[s("--size"), OsStr::new(&tmp), s("--tmpfs"), s("/tmp")]);
                add(&[s("--size"), OsStr::new(&shm), s("--tmpfs"), s("/dev/shm")]);
            }
        }
        // /dev is a tmpfs of half the host's RAM: read-only, only /dev/shm (mounted above) takes writes.
        add(&[s("--remount-ro"), s("/dev")]);
        add(&[s("--bind"), scratch.as_os_str(), s(SCRATCH)]);
        // bwrap's own root is a tmpfs: freeze it, so /scratch, /tmp and /dev/shm are the only writable places.
        add(&[s("--remount-ro"), s("/"), s("--chdir"), s(SCRATCH), s("--clearenv")]);
        add(&[s("--setenv"), s("PATH"), s("/usr/local/bin:/usr/bin:/bin"), s("--setenv"), s("HOME"), s(SCRATCH)]);
        add(&[s("--setenv"), s("TMPDIR"), s("/tmp"), s("--setenv"), s("LANG"), s("C.UTF-8")]);
        o
    }

    /// The command line, and the fds of the seccomp program and of the
    /// options, which must stay open until the child is spawned. `user`: the
    /// uid/gid to switch to (a root worker).
    fn command(
        &self,
        scratch: &Path,
        user: Option<(u32, u32)>,
        command: &str,
        limits: &Limits,
    ) -> std::io::Result<(Command, [OwnedFd; 2])> {
        let user = user.filter(|_| self.switch_user);
        let private = match (&self.private, user) {
            (Some((tmp, shm)), Some(ids)) => Some(PrivateTmp::new(tmp, shm, self, ids)?),
            _ => None,
        };
        let mut options = Vec::new();
        for o in self.options(scratch, private.is_some()) {
            options.extend_from_slice(o.as_bytes());
            options.push(0);
        }
        let fds = [seccomp::program_fd()?, seccomp::memfd(c"flotilla-bwrap-args", &options)?];
        let mut c = Command::new(&self.prlimit);
        c.env_clear()
            .arg(format!("--cpu={}:{}", limits.cpu_seconds, limits.cpu_seconds + 1))
            .arg(format!("--as={}", limits.memory_bytes))
            .arg(format!("--fsize={}", limits.file_bytes))
            .arg(format!("--nproc={}", limits.processes))
            .arg("--nofile=256")
            .arg("--")
            .arg(&self.bwrap)
            .args(["--args", &ARGS_FD.to_string(), "--", "/bin/sh", "-c", command])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        let raw = [fds[0].as_raw_fd(), fds[1].as_raw_fd()];
        // SAFETY: the hook only makes async-signal-safe syscalls (unshare, mount, setgroups, setgid,
        // setuid, dup2, fcntl, close_range) on data prepared before the fork.
        unsafe {
            c.pre_exec(move || {
                if let Some(p) = &private {
                    p.mount()?;
                }
                if let Some((uid, gid)) = user {
                    switch_user(uid, gid)?;
                }
                seccomp::child_keep_only(raw)
            })
        };
        Ok((c, fds))
    }

    /// Runs `command` with `scratch` mounted at [`SCRATCH`]. A non-zero exit
    /// is an [`Execution`], not an error.
    pub async fn run(
        &self,
        scratch: &Path,
        user: Option<(u32, u32)>,
        command: &str,
        limits: &Limits,
        cancel: &CancellationToken,
    ) -> Result<Execution, SandboxError> {
        let started = Instant::now();
        let (mut cmd, fds) = self.command(scratch, user, command, limits)?;
        let mut child = cmd.spawn()?;
        drop(fds);
        let mut group = KillGroup(child.id().map(|p| p as i32));
        let out = tokio::spawn(capture(child.stdout.take(), limits.output_bytes));
        let err = tokio::spawn(capture(child.stderr.take(), limits.output_bytes));
        let (status, timed_out) = tokio::select! {
            s = child.wait() => {
                group.0 = None; // exited by itself: its pid may be reused
                (s?, false)
            }
            _ = tokio::time::sleep(limits.wall) => {
                group.kill();
                (child.wait().await?, true)
            }
            _ = cancel.cancelled() => {
                group.kill();
                let _ = child.wait().await;
                return Err(SandboxError::Cancelled);
            }
        };
        // The pid namespace is gone with bwrap, so the pipes close promptly;
        // the bound only guards against the unforeseen.
        let join = |h: tokio::task::JoinHandle<(Vec<u8>, bool)>| async move {
            tokio::time::timeout(Duration::from_secs(2), h).await.ok().and_then(Result::ok).unwrap_or_default()
        };
        let ((stdout, cut_out), (stderr, cut_err)) = (join(out).await, join(err).await);
        Ok(Execution {
            exit_code: status.code(),
            signal: status.signal(),
            timed_out,
            stdout: String::from_utf8_lossy(&stdout).into_owned(),
            stderr: String::from_utf8_lossy(&stderr).into_owned(),
            truncated: cut_out || cut_err,
            duration: started.elapsed(),
        })
    }

    /// Runs `true` in a sandbox once (blocking, at worker start), so a host
    /// where bubblewrap cannot work fails at once with bubblewrap's own reason.
    pub fn probe(&self, scratch: &Path, user: Option<(u32, u32)>) -> Result<(), SandboxError> {
        let limits = Limits {
            wall: Duration::from_secs(10),
            cpu_seconds: 5,
            memory_bytes: 1 << 30,
            file_bytes: 1 << 20,
            processes: 64,
            output_bytes: 4096,
        };
        let (mut cmd, _fds) = self.command(scratch, user, "true", &limits)?;
        let out = cmd.as_std_mut().output()?;
        if out.status.success() {
            Ok(())
        } else {
            let err = String::from_utf8_lossy(&out.stderr);
            Err(SandboxError::Unusable(format!("{} ({})", err.trim(), out.status)))
        }
    }
}

/// The child's own `/tmp` and `/dev/shm`: tmpfs mounts with a size and an
/// inode cap, owned by the sandbox uid, made in a mount namespace of the
/// child alone (private propagation: nothing reaches the host's), on the
/// empty mount points under `run_dir` that bubblewrap then binds. Every
/// string is made before the fork.
struct PrivateTmp {
    tmp: CString,
    shm: CString,
    tmp_options: CString,
    shm_options: CString,
}

impl PrivateTmp {
    fn new(tmp: &Path, shm: &Path, b: &Bubblewrap, (uid, gid): (u32, u32)) -> std::io::Result<Self> {
        let c = |b: &[u8]| CString::new(b).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e));
        let options = |bytes: u64| format!("size={bytes},nr_inodes={},mode=1777,uid={uid},gid={gid}", b.inodes);
        Ok(Self {
            tmp: c(tmp.as_os_str().as_bytes())?,
            shm: c(shm.as_os_str().as_bytes())?,
            tmp_options: c(options(b.tmp_bytes).as_bytes())?,
            shm_options: c(options(b.shm_bytes).as_bytes())?,
        })
    }

    /// In the forked child: only syscalls.
    fn mount(&self) -> std::io::Result<()> {
        use nix::libc;
        let check = |r: libc::c_int| if r < 0 { Err(std::io::Error::last_os_error()) } else { Ok(()) };
        let flags = libc::MS_NOSUID | libc::MS_NODEV;
        // SAFETY: plain syscalls with NUL-terminated strings that outlive them.
        unsafe {
            check(libc::unshare(libc::CLONE_NEWNS))?;
            check(libc::mount(
                std::ptr::null(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ))?;
            for (at, options) in [(&self.tmp, &self.tmp_options), (&self.shm, &self.shm_options)] {
                check(libc::mount(c"tmpfs".as_ptr(), at.as_ptr(), c"tmpfs".as_ptr(), flags, options.as_ptr().cast()))?;
            }
        }
        Ok(())
    }
}

/// Whether this process holds `CAP_SYS_ADMIN` (bit 21 of `CapEff` in
/// /proc/self/status), which mounting the private tmpfs needs.
fn may_mount() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let eff = status.lines().find_map(|l| l.strip_prefix("CapEff:")).map(str::trim);
    eff.and_then(|hex| u64::from_str_radix(hex, 16).ok()).is_some_and(|caps| caps & (1 << 21) != 0)
}

/// In the forked child, as std does for `Command::uid`: no supplementary
/// groups, then the gid, then the uid. Only syscalls.
fn switch_user(uid: u32, gid: u32) -> std::io::Result<()> {
    use nix::libc;
    // SAFETY: plain syscalls.
    unsafe {
        if libc::setgroups(0, std::ptr::null()) < 0 || libc::setgid(gid) < 0 || libc::setuid(uid) < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Kills the whole process group of the sandbox (bwrap and anything that
/// stayed in its group); the pid namespace takes the rest.
struct KillGroup(Option<i32>);

impl KillGroup {
    fn kill(&self) {
        if let Some(pid) = self.0 {
            let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
        }
    }
}

impl Drop for KillGroup {
    fn drop(&mut self) {
        // Dropped mid-run (tool timeout, cancelled task): leave nothing behind.
        self.kill();
    }
}

/// Reads `r` to its end, keeping at most `cap` bytes; `true` when some were dropped.
async fn capture(r: Option<impl AsyncRead + Unpin>, cap: usize) -> (Vec<u8>, bool) {
    let Some(mut r) = r else { return (Vec::new(), false) };
    let (mut kept, mut cut, mut buf) = (Vec::new(), false, vec![0u8; 16 * 1024]);
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => return (kept, cut),
            Ok(n) => {
                let room = cap.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
                cut |= n > room;
            }
        }
    }
}

/// `name` if it is a path, else its first match on PATH.
fn which(name: &str) -> Option<PathBuf> {
    if name.contains('/') {
        return Path::new(name).is_file().then(|| PathBuf::from(name));
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    std::env::split_paths(&path).map(|d| d.join(name)).find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    //! Real bubblewrap processes (install the `bubblewrap` package; the
    //! tests fail, not skip, without it).

    use super::*;

    fn backend() -> Bubblewrap {
        Bubblewrap::new(&SandboxConfig::default()).expect("bubblewrap installed (scripts/install-deps --test)")
    }

    /// The uid a root worker's test sandboxes run as (unit tests lease none).
    const TEST_USER: (u32, u32) = (65534, 65534);

    fn user(b: &Bubblewrap) -> Option<(u32, u32)> {
        b.switches_user().then_some(TEST_USER)
    }

    struct Scratch(PathBuf);
    impl Scratch {
        fn new(b: &Bubblewrap) -> Self {
            let p = std::env::temp_dir().join(format!("flotilla-sbx-test-{}", uuid::Uuid::now_v7()));
            std::fs::create_dir(&p).unwrap();
            if let Some((u, g)) = user(b) {
                std::os::unix::fs::chown(&p, Some(u), Some(g)).unwrap();
            }
            Self(p)
        }
    }
    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn limits(wall_secs: u64) -> Limits {
        Limits {
            wall: Duration::from_secs(wall_secs),
            cpu_seconds: 10,
            memory_bytes: 256 << 20,
            file_bytes: 1 << 20,
            processes: 64,
            output_bytes: 64 * 1024,
        }
    }

    async fn run(b: &Bubblewrap, s: &Scratch, cmd: &str, l: Limits) -> Execution {
        b.run(&s.0, user(b), cmd, &l, &CancellationToken::new()).await.expect("sandbox runs")
    }

    #[tokio::test]
    async fn there_is_no_network() {
        let (b, s) = (backend(), Scratch::new(&backend()));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let probe = format!("bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port}' && echo connected");
        // The same command reaches the port outside the sandbox...
        let outside = std::process::Command::new("sh").args(["-c", &probe]).output().unwrap();
        assert_eq!(String::from_utf8_lossy(&outside.stdout).trim(), "connected");
        // ...and not inside, where only a private loopback exists.
        let e = run(&b, &s, &probe, limits(10)).await;
        assert_ne!(e.exit_code, Some(0), "{e:?}");
        assert!(!e.stdout.contains("connected"), "{e:?}");
        assert!(e.stderr.contains("Connection refused"), "{e:?}");
        let e = run(&b, &s, "cat /proc/net/dev", limits(10)).await;
        let ifaces: Vec<_> = e.stdout.lines().skip(2).map(|l| l.split(':').next().unwrap().trim()).collect();
        assert_eq!(ifaces, ["lo"], "{e:?}");
        let e = run(&b, &s, "getent hosts example.com || echo unresolved", limits(10)).await;
        assert!(e.stdout.contains("unresolved"), "{e:?}");
    }

    #[tokio::test]
    async fn only_scratch_and_tmp_are_writable() {
        let (b, s) = (backend(), Scratch::new(&backend()));
        let marker = format!("flotilla-{}", uuid::Uuid::now_v7());
        for target in ["/usr/", "/etc/", "/", "/bin/", "/proc/sys/kernel/", "/scratch/../"] {
            let e = run(&b, &s, &format!("echo x > {target}{marker}"), limits(10)).await;
            assert_ne!(e.exit_code, Some(0), "write to {target} succeeded: {e:?}");
        }
        let e = run(&b, &s, "echo x > /proc/sys/kernel/hostname", limits(10)).await;
        assert_ne!(e.exit_code, Some(0), "{e:?}");
        for host in ["/usr", "/etc", "/", "/tmp"] {
            assert!(!Path::new(host).join(&marker).exists(), "{host}/{marker} appeared on the host");
        }
        let e =
            run(&b, &s, &format!("echo kept > /scratch/{marker} && echo gone > /tmp/{marker} && id -u"), limits(10))
                .await;
        assert_eq!(e.exit_code, Some(0), "{e:?}");
        assert_eq!(std::fs::read_to_string(s.0.join(&marker)).unwrap(), "kept\n");
        assert!(!Path::new("/tmp").join(&marker).exists(), "the sandbox /tmp is private");
        if b.switches_user() {
            assert_eq!(e.stdout.trim(), "65534", "a root worker runs sandboxes as the uid it is given");
        }
        let e = run(&b, &s, "cat /proc/self/status | grep CapEff", limits(10)).await;
        assert!(e.stdout.contains("0000000000000000"), "no capabilities: {e:?}");
    }

    #[tokio::test]
    async fn timeout_kills_the_whole_process_tree() {
        let (b, s) = (backend(), Scratch::new(&backend()));
        let secs = 900_000 + fastrand_u32() % 90_000; // unique marker in the process table
        let cmd = format!("sleep {secs} & (setsid sleep {secs} &) ; sh -c 'sleep {secs}' & sleep {secs}");
        let started = Instant::now();
        let e = run(&b, &s, &cmd, limits(1)).await;
        assert!(e.timed_out, "{e:?}");
        assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
        let alive = || {
            std::fs::read_dir("/proc")
                .unwrap()
                .filter_map(|d| std::fs::read(d.ok()?.path().join("cmdline")).ok())
                .filter(|c| String::from_utf8_lossy(c).contains(&secs.to_string()))
                .count()
        };
        let deadline = Instant::now() + Duration::from_secs(3);
        while alive() > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(alive(), 0, "sleep {secs} processes survived the timeout");
    }

    fn fastrand_u32() -> u32 {
        (uuid::Uuid::now_v7().as_u128() as u32) ^ std::process::id()
    }

    #[tokio::test]
    async fn output_is_capped_and_flagged() {
        let (b, s) = (backend(), Scratch::new(&backend()));
        let mut l = limits(10);
        l.output_bytes = 1000;
        let e = run(&b, &s, "head -c 200000 /dev/zero | tr '\\0' a; echo err >&2", l).await;
        assert_eq!(e.exit_code, Some(0), "{e:?}");
        assert_eq!(e.stdout.len(), 1000);
        assert!(e.stdout.bytes().all(|c| c == b'a'));
        assert!(e.truncated);
        assert_eq!(e.stderr, "err\n");
        let e = run(&b, &s, "echo small", l).await;
        assert!(!e.truncated && e.stdout == "small\n", "{e:?}");
    }

    /// `/dev` is read-only and `/dev/shm` and `/tmp` are full at their sizes,
    /// whether the worker mounts them (a uid to switch to, inode caps too) or
    /// bubblewrap does (no uid: sizes only, as for a worker not running as root).
    #[tokio::test]
    async fn dev_is_read_only_and_shm_and_tmp_are_capped_either_way() {
        let config = SandboxConfig { shm_mb: 1, tmp_mb: 1, tmp_inodes: 32, ..Default::default() };
        let b = Bubblewrap::new(&config).unwrap();
        let s = Scratch::new(&b);
        let cmd = "echo x > /dev/null && (echo x > /dev/x; head -c 2000000 /dev/zero > /dev/shm/a; \
                   head -c 2000000 /dev/zero > /tmp/a) 2>&1; rm /tmp/a; i=0; while [ $i -lt 100 ]; do \
                   printf '' > /tmp/f$i 2>/dev/null || break; i=$((i+1)); done; echo files=$i";
        let l = Limits { file_bytes: 64 << 20, ..limits(10) };
        for u in [None, user(&b)] {
            let e = b.run(&s.0, u, cmd, &l, &CancellationToken::new()).await.unwrap();
            assert_eq!(e.stdout.matches("Read-only file system").count(), 1, "{u:?}: {e:?}");
            assert_eq!(e.stdout.matches("No space left on device").count(), 2, "{u:?}: {e:?}");
            let files = if u.is_some() && b.caps_inodes() { "files=31" } else { "files=100" };
            assert!(e.stdout.ends_with(&format!("{files}\n")), "{u:?}: {e:?}");
        }
    }

    #[tokio::test]
    async fn cpu_memory_and_file_size_are_limited() {
        let (b, s) = (backend(), Scratch::new(&backend()));
        let mut l = limits(20);
        l.cpu_seconds = 1;
        let started = Instant::now();
        let e = run(&b, &s, "while :; do :; done", l).await;
        assert!(!e.timed_out && e.exit_code != Some(0), "{e:?}");
        assert!(started.elapsed() < Duration::from_secs(5), "stopped by RLIMIT_CPU, not the wall clock");
        let e = run(&b, &s, "python3 -c 'bytearray(512 * 1024 * 1024)'", limits(20)).await;
        assert!(e.stderr.contains("MemoryError"), "{e:?}");
        let e = run(&b, &s, "head -c 2000000 /dev/zero > big", limits(20)).await;
        assert_ne!(e.exit_code, Some(0), "{e:?}");
        assert_eq!(std::fs::metadata(s.0.join("big")).unwrap().len(), 1 << 20);
    }

    /// Escape-prone syscalls fail with EPERM (docs/SANDBOX.md "Isolation").
    /// The arguments are chosen so that, without the filter, none of the
    /// calls would fail with EPERM (they succeed or fail otherwise).
    #[tokio::test]
    async fn escape_syscalls_fail_with_eperm() {
        let (b, s) = (backend(), Scratch::new(&backend()));
        use nix::libc as c;
        let calls = [
            ("ptrace", format!("{}, 0, 0, 0, 0", c::SYS_ptrace)),
            ("keyctl", format!("{}, 0, -3, 0", c::SYS_keyctl)),
            ("add_key", format!("{}, 0, 0, 0, 0, 0", c::SYS_add_key)),
            ("perf_event_open", format!("{}, 0, 0, -1, -1, 0", c::SYS_perf_event_open)),
            ("userfaultfd", format!("{}, 1", c::SYS_userfaultfd)),
            ("io_uring_setup", format!("{}, 0, 0", c::SYS_io_uring_setup)),
            ("process_vm_readv", format!("{}, os.getpid(), 0, 0, 0, 0, 0", c::SYS_process_vm_readv)),
            ("name_to_handle_at", format!("{}, -100, 0, 0, 0, 0", c::SYS_name_to_handle_at)),
            ("setns", format!("{}, -1, 0", c::SYS_setns)),
            ("unshare", format!("{}, {}", c::SYS_unshare, c::CLONE_NEWUSER)),
            ("clone_newuser", format!("{}, {}, 0, 0, 0, 0", c::SYS_clone, c::CLONE_NEWUSER | c::SIGCHLD)),
            ("clone3", format!("{}, 0, 0", c::SYS_clone3)),
        ];
        let mut py = String::from(
            "import ctypes, os\nl = ctypes.CDLL(None, use_errno=True)\nl.syscall.restype = ctypes.c_long\n",
        );
        for (name, args) in &calls {
            py.push_str(&format!("r = l.syscall({args}); print('{name}', 0 if r >= 0 else ctypes.get_errno())\n"));
        }
        py.push_str("pid = os.fork()\nos._exit(0) if pid == 0 else print('fork', os.waitpid(pid, 0)[1])\n");
        std::fs::write(s.0.join("probe.py"), py).unwrap();
        let e = run(&b, &s, "python3 probe.py", limits(20)).await;
        let got: std::collections::HashMap<&str, i32> =
            e.stdout.lines().filter_map(|l| l.split_once(' ')).map(|(n, v)| (n, v.parse().unwrap())).collect();
        for (name, _) in &calls {
            let want = if *name == "clone3" { c::ENOSYS } else { c::EPERM };
            assert_eq!(got.get(name), Some(&want), "{name}: {e:?}");
        }
        assert_eq!(got.get("fork"), Some(&0), "plain fork still works: {e:?}");
        let e = run(&b, &s, "unshare -U true", limits(10)).await;
        assert!(e.exit_code != Some(0) && e.stderr.contains("Operation not permitted"), "{e:?}");
    }

    /// A descriptor the worker holds without close-on-exec (as one inherited
    /// from its parent would be) is closed before the command starts.
    #[tokio::test]
    async fn inherited_descriptors_do_not_reach_the_command() {
        let (b, s) = (backend(), Scratch::new(&backend()));
        let target = s.0.join("outside-target");
        std::fs::write(&target, "").unwrap();
        let flags = nix::fcntl::OFlag::O_WRONLY | nix::fcntl::OFlag::O_APPEND;
        let fd = nix::fcntl::open(&target, flags, nix::sys::stat::Mode::empty()).unwrap();
        let n = fd.as_raw_fd();
        let e = run(&b, &s, &format!("bash -c 'echo leaked >&{n}'"), limits(10)).await;
        assert_ne!(e.exit_code, Some(0), "{e:?}");
        assert!(e.stderr.contains("Bad file descriptor"), "{e:?}");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "", "nothing arrived through fd {n}");
    }
}
