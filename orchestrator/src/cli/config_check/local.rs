//! The checks that need no network: the sections each process requires, the
//! models the planner and subagent types use, and each type's sandbox.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use flotilla_config::{ModelSettings, SandboxConfig, Settings};

use super::Check;

/// `[planner]` (the orchestrator refuses to start without it) and at least
/// one `[subagents.<type>]` (a worker has nothing to serve without one).
pub fn sections(settings: &Settings) -> Vec<Check> {
    let planner = match &settings.planner {
        Some(p) => Check::ok("planner", format!("model {:?}, {} tools", p.model, p.tools.len())),
        None => Check::problem(
            "planner",
            "missing: `flotilla orchestrator` refuses to start without a [planner] section",
            "add [planner] with at least `model` (docs/CONFIG.md)",
        ),
    };
    let subagents = if settings.subagents.is_empty() {
        Check::problem(
            "subagents",
            "no [subagents.<type>] section: a worker would have nothing to serve",
            "add [subagents.<type>] with description, model and tools (docs/CONFIG.md)",
        )
    } else {
        let types: Vec<&str> = settings.subagents.keys().map(|t| t.as_str()).collect();
        Check::ok("subagents", format!("{} types: {}", types.len(), types.join(", ")))
    };
    vec![planner, subagents]
}

/// The models the planner or a subagent type uses.
pub fn used_models(settings: &Settings) -> BTreeSet<String> {
    let planner = settings.planner.iter().map(|p| p.model.clone());
    planner.chain(settings.subagents.values().map(|s| s.model.clone())).collect()
}

/// Each used model built as the orchestrator and workers build it
/// (`flotilla_models::build`, the factory of every provider): API-key variable set and non-empty,
/// base URL absolute, script readable.
pub fn models(settings: &Settings) -> Vec<Check> {
    let mut checks = Vec::new();
    for name in used_models(settings) {
        let Some(model) = settings.models.get(&name) else { continue };
        let key = format!("models.{name}");
        checks.push(match flotilla_models::build(&name, model) {
            Ok(_) => Check::ok(key, describe(model)),
            Err(e) => {
                Check::problem(key, e.to_string(), "set what the message names (docs/CONFIG.md, [models.<name>])")
            }
        });
    }
    for name in settings.models.keys().filter(|n| !used_models(settings).contains(*n)) {
        checks.push(Check::ok(format!("models.{name}"), "not used by [planner] or any subagent type: not checked"));
    }
    checks
}

/// What a model that built is.
fn describe(model: &ModelSettings) -> String {
    let key = |var: &Option<String>| var.as_ref().map_or("no API key".into(), |v| format!("API key in {v} is set"));
    match model {
        ModelSettings::OpenAi { base_url, model, api_key_env, .. } => {
            format!("openai {model} at {base_url}; {}", key(api_key_env))
        }
        ModelSettings::Anthropic { base_url, model, api_key_env, .. } => {
            format!("anthropic {model} at {base_url}; {}", key(api_key_env))
        }
        ModelSettings::Scripted { script } => format!("scripted {} loads", script.display()),
    }
}

/// Each type with a `[subagents.<type>.sandbox]` (it gets `execute`) runs
/// `true` in bubblewrap with the worker's isolation flags.
pub async fn sandboxes(settings: &Settings) -> Vec<Check> {
    let mut checks = Vec::new();
    for (ty, config) in &settings.subagents {
        let Some(sb) = config.sandbox.clone() else { continue };
        let key = format!("subagents.{ty}.sandbox");
        let probe = tokio::task::spawn_blocking(move || probe(&sb)).await;
        checks.push(match probe {
            Ok(Ok(())) => Check::ok(key, "bubblewrap runs a command (execute works here)"),
            Ok(Err((message, fix))) => Check::problem(key, message, fix),
            Err(e) => Check::problem(key, format!("the probe panicked: {e}"), "report this bug"),
        });
    }
    checks
}

/// Runs `/bin/true` under prlimit + bwrap with the namespaces, capability
/// drop and read-only binds of workers/src/sandbox/bubblewrap.rs (the worker
/// adds its seccomp filter and scratch dir on top; its own probe at start,
/// `Sandbox::start`, runs the full command). Errors: (message, fix).
fn probe(config: &SandboxConfig) -> Result<(), (String, String)> {
    let missing = |what: &str, fix: &str| (format!("{what} not found"), fix.to_string());
    let bwrap = which(&config.bwrap).ok_or_else(|| {
        missing(
            &format!("bubblewrap ({})", config.bwrap),
            "install the Debian package `bubblewrap`, or set `bwrap` in this section",
        )
    })?;
    let prlimit = which("prlimit").ok_or_else(|| missing("prlimit", "install util-linux"))?;
    let mut cmd = Command::new(prlimit);
    cmd.env_clear().args(["--nproc=64", "--"]).arg(bwrap);
    cmd.args(["--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent", "--new-session"]);
    cmd.args(["--cap-drop", "ALL"]);
    for p in &config.ro_binds {
        match std::fs::symlink_metadata(p) {
            Ok(m) if m.file_type().is_symlink() => {
                if let Ok(target) = std::fs::read_link(p) {
                    cmd.arg("--symlink").arg(target).arg(p);
                }
            }
            Ok(_) => {
                cmd.arg("--ro-bind").arg(p).arg(p);
            }
            Err(_) => {}
        }
    }
    cmd.args(["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]);
    cmd.arg("--size").arg((config.shm_mb << 20).to_string()).args(["--tmpfs", "/dev/shm", "--remount-ro", "/dev"]);
    cmd.args(["--", "/bin/true"]);
    let out = run_bounded(cmd, Duration::from_secs(10)).map_err(|e| (e, "see docs/SANDBOX.md".to_string()))?;
    if out.status.success() {
        return Ok(());
    }
    let err = String::from_utf8_lossy(&out.stderr).trim().to_string();
    Err((
        format!("bubblewrap cannot build a sandbox here: {err} ({})", out.status),
        "allow unprivileged user namespaces (e.g. sysctl kernel.unprivileged_userns_clone=1), see docs/SANDBOX.md"
            .into(),
    ))
}

/// Runs `cmd` with its output captured, killed after `limit`.
fn run_bounded(mut cmd: Command, limit: Duration) -> Result<std::process::Output, String> {
    let child = cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped()).spawn();
    let child = child.map_err(|e| format!("cannot run prlimit/bwrap: {e}"))?;
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => out.map_err(|e| format!("cannot run prlimit/bwrap: {e}")),
        Err(_) => {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGKILL);
            Err(format!("the sandbox did not run `true` within {}s", limit.as_secs()))
        }
    }
}

/// `name` if it is a path, else its first match on PATH (as the worker
/// resolves `bwrap`).
fn which(name: &str) -> Option<PathBuf> {
    if name.contains('/') {
        return Path::new(name).is_file().then(|| PathBuf::from(name));
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    std::env::split_paths(&path).map(|d| d.join(name)).find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// bubblewrap is installed on the test machines (scripts/install-deps):
    /// the default sandbox runs, and a missing bwrap names the fix.
    #[test]
    fn the_default_sandbox_runs_and_a_missing_bwrap_is_named() {
        probe(&SandboxConfig::default()).expect("bubblewrap works here");
        let bad = SandboxConfig { bwrap: "/nonexistent/bwrap".into(), ..Default::default() };
        let (message, fix) = probe(&bad).expect_err("no such bwrap");
        assert!(message.contains("/nonexistent/bwrap") && fix.contains("bubblewrap"), "{message} / {fix}");
    }
}
