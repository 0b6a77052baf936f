//! `flotilla config check [--connect]`: validates a config the way
//! the orchestrator and every worker would use it, before anything is
//! deployed, so a typo or a missing binary is found by the operator and not
//! in a worker log after a job "completed" around tools that never existed
//! (docs/CONFIG.md, "Checking a config").
//!
//! Each check is one line: `ok` or `problem`, the config key it concerns, what
//! was found and, for a problem, the fix. The checks, one module each:
//!
//! - [`mcp`]: every configured MCP server starts and lists its tools, and
//!   every `[subagents.<type>] tools` entry resolves to tools the server
//!   really lists (the part `up` and `demo` also run at start, [`preflight`]);
//! - [`local`]: the models the planner and subagent types use can be built
//!   (API-key variables set, scripts readable) and each type's sandbox starts
//!   as its worker starts it (when it has `execute`, [`flotilla_sandbox::probe`]);
//! - [`connect`] (with `--connect`): NATS answers with JetStream, and each
//!   OpenAI-compatible model endpoint answers `GET <base_url>/models`.
//!
//! Exit code 0 when every check passes, 2 otherwise (a configuration error,
//! docs/OPERATIONS.md "Exit codes").

mod connect;
mod local;
mod mcp;

use std::path::Path;

use clap::{Args as ClapArgs, Subcommand};
use flotilla_config::Settings;
use serde::Serialize;

use super::out::outln;

/// Version of the `--json` report.
const REPORT_VERSION: u32 = 1;

/// Check a config.
#[derive(ClapArgs, Debug)]
pub struct Args {
    #[command(subcommand)]
    command: ConfigCommand,
}

#[derive(Subcommand, Debug)]
enum ConfigCommand {
    /// Validate the config as the orchestrator and every worker would: tool
    /// references, MCP servers start, sandboxes work, models' API-key
    /// variables are set. Exit 0 when all pass, 2 otherwise.
    Check {
        /// Also reach NATS (connect + JetStream) and each model endpoint.
        #[arg(long)]
        connect: bool,
    },
}

/// The outcome of one check.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Check {
    /// The config key it concerns, e.g. `subagents.finance.tools`.
    pub key: String,
    /// Whether it passed.
    pub ok: bool,
    /// What was found (a problem's cause).
    pub message: String,
    /// What to do about a problem.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl Check {
    /// A passed check.
    pub fn ok(key: impl Into<String>, message: impl Into<String>) -> Self {
        Self { key: key.into(), ok: true, message: message.into(), fix: None }
    }

    /// A problem and its fix.
    pub fn problem(key: impl Into<String>, message: impl Into<String>, fix: impl Into<String>) -> Self {
        Self { key: key.into(), ok: false, message: message.into(), fix: Some(fix.into()) }
    }

    /// The human line(s): `ok      <key>: <message>` or `problem <key>: ...`
    /// followed by `        fix: ...`.
    pub fn line(&self) -> String {
        let mut s = format!("{:<8}{}: {}", if self.ok { "ok" } else { "problem" }, self.key, self.message);
        if let Some(fix) = &self.fix {
            s.push_str(&format!("\n{:<8}fix: {fix}", ""));
        }
        s
    }
}

/// The whole report, as `--json` prints it.
#[derive(Debug, Serialize)]
struct Report {
    v: u32,
    ok: bool,
    checks: Vec<Check>,
}

/// Runs `flotilla config check`. `config` is the file (None: environment
/// only); load errors are reported as a check, not as an error. `json`: the
/// global `--json`, one object `{"v", "ok", "checks": [{"key", "ok",
/// "message", "fix"}]}`.
pub async fn run(config: Option<&Path>, mcp_config: Option<&Path>, json: bool, args: Args) -> anyhow::Result<i32> {
    let ConfigCommand::Check { connect } = args.command;
    let checks = match crate::load(config, mcp_config) {
        Ok(settings) => check_all(&settings, connect).await,
        Err(e) => vec![load_problem(config, &e)],
    };
    let ok = checks.iter().all(|c| c.ok);
    if json {
        outln!("{}", serde_json::to_string(&Report { v: REPORT_VERSION, ok, checks })?)?;
    } else {
        for c in &checks {
            outln!("{}", c.line())?;
        }
        let problems = checks.iter().filter(|c| !c.ok).count();
        outln!("{} checks, {problems} problems", checks.len())?;
    }
    Ok(if ok { 0 } else { 2 })
}

/// Every check of a loaded config, in the order an operator fixes them.
async fn check_all(settings: &Settings, connect: bool) -> Vec<Check> {
    let mut checks = vec![Check::ok(
        "--config",
        match &settings.source {
            Some(p) => format!("{} loads", p.display()),
            None => "no file: defaults and FLOTILLA_* variables load".into(),
        },
    )];
    checks.extend(local::sections(settings));
    let names = settings.mcp_servers.keys().cloned().collect();
    checks.extend(mcp::check(settings, &names).await);
    checks.extend(local::models(settings));
    checks.extend(local::sandboxes(settings).await);
    if connect {
        checks.push(connect::nats(settings).await);
        checks.extend(connect::models(settings).await);
    }
    checks
}

/// A config that does not load: one problem naming the key when the error does.
fn load_problem(config: Option<&Path>, e: &anyhow::Error) -> Check {
    let message = match e.downcast_ref::<flotilla_config::ConfigError>() {
        Some(flotilla_config::ConfigError::Invalid { key, message }) => {
            let fix = match key.as_str() {
                "--config" => "pass an existing TOML file with --config (or FLOTILLA_CONFIG)",
                _ => "fix the key (docs/CONFIG.md lists every key)",
            };
            return Check::problem(key.clone(), message.clone(), fix);
        }
        Some(other) => other.to_string(),
        None => format!("{e:#}"),
    };
    // The `config` crate names the key at the end: "... for key `subagents.x.tools[0]`".
    let key = message
        .rsplit_once("for key `")
        .and_then(|(_, k)| k.split_once('`'))
        .map(|(k, _)| k.to_string())
        .unwrap_or_else(|| config.map_or("--config".into(), |p| p.display().to_string()));
    Check::problem(key, message, "fix the key (docs/CONFIG.md lists every key)")
}

/// The MCP/tools part of the check, run by `up` and `demo` before they start
/// anything: every MCP server a subagent type's `tools` names starts and
/// lists its tools, and every entry resolves. An error lists each problem
/// with its fix.
pub async fn preflight(settings: &Settings) -> anyhow::Result<()> {
    let names = flotilla_mcp::servers_in(settings.subagents.values().flat_map(|c| c.tools.iter()));
    let problems: Vec<Check> = mcp::check(settings, &names).await.into_iter().filter(|c| !c.ok).collect();
    if problems.is_empty() {
        return Ok(());
    }
    let lines: Vec<String> = problems.iter().map(|c| format!("  {}", c.line().replace('\n', "\n  "))).collect();
    anyhow::bail!(
        "the config's tools are not ready, so no worker could serve them (`flotilla config check` runs every check):\n{}",
        lines.join("\n")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_problem_prints_its_key_and_fix_on_two_lines() {
        let c = Check::problem("mcp_servers.finance.command", "command /x not found", "run `cargo build --bins`");
        assert_eq!(
            c.line(),
            "problem mcp_servers.finance.command: command /x not found\n        fix: run `cargo build --bins`"
        );
        assert_eq!(Check::ok("nats.url", "reachable").line(), "ok      nats.url: reachable");
    }

    #[test]
    fn a_load_error_names_the_key_the_config_crate_reports() {
        let dir = std::env::temp_dir().join(format!("flotilla-check-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("bad.toml");
        std::fs::write(&p, "[subagents.x]\ndescription = \"d\"\nmodel = \"m\"\ntools = [\"read_fle\"]\n").unwrap();
        let e = crate::load(Some(&p), None).expect_err("an unknown tool is refused");
        let c = load_problem(Some(&p), &e);
        assert_eq!(c.key, "subagents.x.tools[0]");
        assert!(c.message.contains("unknown tool \"read_fle\""), "{}", c.message);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
