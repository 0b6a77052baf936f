//! The bubblewrap backend: one `bwrap` process per command, wrapped in
//! `prlimit` for the resource limits.
//!
//! ```text
//! prlimit --cpu --as --fsize --nproc --nofile -- bwrap <isolation> -- /bin/sh -c <command>
//! ```
//!
//! Isolation: every namespace unshared (no network: only a private loopback),
//! all capabilities dropped, no nested user namespaces, a fresh `/proc`, a
//! minimal `/dev`, the configured system paths bound read-only, a private
//! `/tmp` (tmpfs of fixed size) and the task's scratch dir as the only
//! writable host path, at `/scratch`. A worker running as root starts the
//! sandbox as an unprivileged uid (default 65534), so even a kernel bug in
//! the namespace setup starts from nobody's rights.
//!
//! Only stdio crosses: every other descriptor the worker holds or inherited
//! is closed in the child before `exec` (a `pre_exec` hook, close_range(2)),
//! except the seccomp program bubblewrap reads (see [`super::seccomp`]),
//! which bubblewrap installs right before it runs the command.
//!
//! Limits: wall time by the worker (it kills the process group; the sandbox's
//! pid namespace and `--die-with-parent` take every descendant with it), CPU
//! seconds, address space, file size and process count by rlimits (`prlimit`
//! from util-linux). cgroups are not used: they need a delegated cgroup v2
//! subtree that a worker in a container usually lacks.

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
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
    /// Processes of the sandbox uid.
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

/// A configured bubblewrap backend.
#[derive(Clone, Debug)]
pub struct Bubblewrap {
    bwrap: PathBuf,
    prlimit: PathBuf,
    mounts: Vec<Mount>,
    tmp_bytes: u64,
    /// Uid/gid to run as (set when the worker runs as root).
    user: Option<(u32, u32)>,
}

impl Bubblewrap {
    /// Resolves the binaries and inspects the read-only paths on this host.
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
        let root = std::fs::metadata("/proc/self").map(|m| m.uid() == 0).unwrap_or(false);
        Ok(Self {
            bwrap,
            prlimit,
            mounts,
            tmp_bytes: config.tmp_mb * 1024 * 1024,
            user: if root { config.parse_user() } else { None },
        })
    }

    /// The uid/gid sandboxes run as, when the worker switches to one.
    pub fn user(&self) -> Option<(u32, u32)> {
        self.user
    }

    /// The command line, and the seccomp program's fd, which must stay open
    /// until the child is spawned.
    fn command(&self, scratch: &Path, command: &str, limits: &Limits) -> std::io::Result<(Command, OwnedFd)> {
        let program = seccomp::program_fd()?;
        let mut c = Command::new(&self.prlimit);
        c.env_clear()
            .arg(format!("--cpu={}:{}", limits.cpu_seconds, limits.cpu_seconds + 1))
            .arg(format!("--as={}", limits.memory_bytes))
            .arg(format!("--fsize={}", limits.file_bytes))
            .arg(format!("--nproc={}", limits.processes))
            .arg("--nofile=256")
            .arg("--")
            .arg(&self.bwrap)
            .args(["--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent", "--new-session"])
            .args(["--cap-drop", "ALL", "--hostname", "sandbox"])
            .args(["--seccomp", &seccomp::CHILD_FD.to_string()]);
        for m in &self.mounts {
            match m {
                Mount::Bind(p) => c.arg("--ro-bind").arg(p).arg(p),
                Mount::Symlink { target, at } => c.arg("--symlink").arg(target).arg(at),
            };
        }
        c.args(["--dev", "/dev", "--proc", "/proc"])
            .arg("--size")
            .arg(self.tmp_bytes.to_string())
            .args(["--tmpfs", "/tmp"])
            .arg("--bind")
            .arg(scratch)
            .arg(SCRATCH)
            // bwrap's own root is a tmpfs: freeze it, so /scratch and /tmp are the only writable places.
            .args(["--remount-ro", "/"])
            .args(["--chdir", SCRATCH, "--clearenv"])
            .args(["--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin"])
            .args(["--setenv", "HOME", SCRATCH, "--setenv", "TMPDIR", "/tmp", "--setenv", "LANG", "C.UTF-8"])
            .args(["--", "/bin/sh", "-c", command])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        if let Some((uid, gid)) = self.user {
            c.uid(uid).gid(gid);
        }
        let raw = program.as_raw_fd();
        // SAFETY: the hook only makes async-signal-safe syscalls (dup2, fcntl, close_range).
        unsafe { c.pre_exec(move || seccomp::child_keep_only(raw)) };
        Ok((c, program))
    }

    /// Runs `command` with `scratch` mounted at [`SCRATCH`]. A non-zero exit
    /// is an [`Execution`], not an error.
    pub async fn run(
        &self,
        scratch: &Path,
        command: &str,
        limits: &Limits,
        cancel: &CancellationToken,
    ) -> Result<Execution, SandboxError> {
        let started = Instant::now();
        let (mut cmd, program) = self.command(scratch, command, limits)?;
        let mut child = cmd.spawn()?;
        drop(program);
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
    pub fn probe(&self, scratch: &Path) -> Result<(), SandboxError> {
        let limits = Limits {
            wall: Duration::from_secs(10),
            cpu_seconds: 5,
            memory_bytes: 1 << 30,
            file_bytes: 1 << 20,
            processes: 64,
            output_bytes: 4096,
        };
        let (mut cmd, _program) = self.command(scratch, "true", &limits)?;
        let out = cmd.as_std_mut().output()?;
        if out.status.success() {
            Ok(())
        } else {
            let err = String::from_utf8_lossy(&out.stderr);
            Err(SandboxError::Unusable(format!("{} ({})", err.trim(), out.status)))
        }
    }
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

    struct Scratch(PathBuf);
    impl Scratch {
        fn new(b: &Bubblewrap) -> Self {
            let p = std::env::temp_dir().join(format!("flotilla-sbx-test-{}", uuid::Uuid::now_v7()));
            std::fs::create_dir(&p).unwrap();
            if let Some((u, g)) = b.user() {
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
        b.run(&s.0, cmd, &l, &CancellationToken::new()).await.expect("sandbox runs")
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
        if b.user().is_some() {
            assert_eq!(e.stdout.trim(), "65534", "a root worker runs sandboxes as nobody");
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
