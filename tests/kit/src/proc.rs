//! Child processes of the workspace's binaries with logs captured to files.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::TempDir;

/// Path of a workspace binary (`flotilla`, `flotilla-worker`, ...): next to
/// the running executable (`flotilla bench`, in `target/<profile>/`), or one
/// directory up from it (a test, in `target/<profile>/deps/`).
pub fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let beside = exe.with_file_name(name);
    if beside.is_file() {
        return beside;
    }
    let dir = exe.parent().and_then(Path::parent).expect("target dir");
    let p = dir.join(name);
    assert!(p.is_file(), "{} not found: run `cargo build --bins` before the tests", p.display());
    p
}

/// A running child; SIGKILLed on drop.
pub struct Proc {
    /// Name for messages.
    pub name: String,
    child: Option<Child>,
    log: PathBuf,
    _dir: TempDir,
}

impl Proc {
    /// Starts `bin(exe)` with `args` and extra `env`; stdout+stderr go to a log.
    pub fn spawn(name: &str, exe: &str, args: &[&str], env: &[(&str, &str)]) -> Self {
        let dir = TempDir::new("proc");
        let log = dir.path().join(format!("{name}.log"));
        let f = std::fs::File::create(&log).expect("log file");
        let child = Command::new(bin(exe))
            .args(args)
            .envs(env.iter().copied())
            .env("RUST_LOG", std::env::var("TEST_RUST_LOG").unwrap_or_else(|_| "info".into()))
            .stdin(Stdio::null())
            .stdout(f.try_clone().unwrap())
            .stderr(f)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {exe}: {e}"));
        Self { name: name.into(), child: Some(child), log, _dir: dir }
    }

    /// OS process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    /// The file its stdout and stderr go to.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// Everything the process printed so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGKILL, no cleanup: a crash.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM, then wait for exit; returns the exit code.
    pub fn terminate(&mut self) -> Option<i32> {
        let c = self.child.as_mut()?;
        let _ = Command::new("kill").args(["-TERM", &c.id().to_string()]).status();
        let status = c.wait().ok()?;
        self.child = None;
        status.code()
    }

    /// Whether it is still running.
    pub fn running(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| c.try_wait().ok().flatten().is_none())
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("----- log of {} -----\n{}\n----- end of {} -----", self.name, self.log(), self.name);
        }
        self.kill();
    }
}

/// Runs `flotilla <args>` to completion; returns (exit code, stdout, stderr).
pub fn run_cli(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let out = Command::new(bin("flotilla"))
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .expect("run flotilla");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
