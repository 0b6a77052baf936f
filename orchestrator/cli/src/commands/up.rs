//! `flotilla up`: the local all-in-one mode. It checks the config's MCP
//! servers and tools before starting anything (a missing server binary is
//! named with its fix, orchestrator/cli/src/commands/config_check.rs) and says "is up"
//! only once every child is ready ([`flotilla_local::until_ready`]).
//! Each child logs to its own file under `<state_dir>/logs/`, so the
//! terminal shows `up`'s own lines and a child that dies is named with the
//! end of its log.

use std::path::Path;
use std::time::Duration;

use clap::Args as ClapArgs;
use flotilla_config::Settings;

use super::out::outln;
use flotilla_local::{Supervisor, until_ready};

/// How long the children may take to become ready: MCP discovery alone may
/// take a server's `init_timeout` (docs/MCP.md).
const READY_BUDGET: Duration = Duration::from_secs(90);

/// Start nats-server (or reuse a running one), the orchestrator and
/// `[local] workers` worker processes; Ctrl-C or SIGTERM stops them all.
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// Worker processes to start (default: `[local] workers`).
    #[arg(long)]
    pub workers: Option<usize>,
}

/// Runs until a signal or until a child dies.
pub async fn run(mut settings: Settings, config: &Path, args: Args) -> anyhow::Result<i32> {
    if let Some(n) = args.workers {
        settings.local.workers = n;
    }
    super::config_check::preflight(&settings).await?;
    let mut sup = Supervisor::start(&settings, config).await?;
    let workers = sup.worker_ids();
    let started = tokio::select! {
        r = until_ready(&settings, &workers, READY_BUDGET) => r.map(|()| None),
        _ = crate::shutdown_signal() => Ok(Some(0)),
        (name, status) = sup.wait_any() => Err(anyhow::anyhow!(
            "{name} exited before the deployment was ready ({}); the end of {}:\n{}",
            status.map(|s| s.to_string()).unwrap_or_else(|e| e.to_string()),
            sup.log_file(&name).display(),
            sup.log_tail(&name, 20)
        )),
    };
    match started {
        Ok(None) => {}
        done => {
            sup.stop(Duration::from_secs(settings.worker.grace + 5)).await;
            return done.map(|code| code.unwrap_or(0));
        }
    }
    // A closed stdout (`flotilla up | head -1`) does not stop the deployment.
    let _ = outln!(
        "flotilla is up: orchestrator and {} workers on {} (logs in {}). Submit with `flotilla submit \"...\"`; Ctrl-C stops.",
        settings.local.workers,
        flotilla_bus::redact_url(&settings.nats.url),
        sup.log_dir().display()
    );
    let code = tokio::select! {
        _ = crate::shutdown_signal() => 0,
        (name, status) = sup.wait_any() => {
            eprintln!(
                "{name} exited ({status:?}); stopping everything. The end of {}:\n{}",
                sup.log_file(&name).display(),
                sup.log_tail(&name, 20)
            );
            1
        }
    };
    // Workers drain for `[worker] grace`; give them that before SIGKILL.
    sup.stop(Duration::from_secs(settings.worker.grace + 5)).await;
    Ok(code)
}
