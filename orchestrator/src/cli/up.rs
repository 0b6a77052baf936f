//! `flotilla up`: the local all-in-one mode.

use std::path::Path;
use std::time::Duration;

use clap::Args as ClapArgs;
use flotilla_config::Settings;

use super::out::outln;
use super::supervisor::{Logs, Supervisor};

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
    let mut sup = Supervisor::start(&settings, config, Logs::Inherit).await?;
    // A closed stdout (`flotilla up | head -1`) does not stop the deployment.
    let _ = outln!(
        "flotilla is up: orchestrator and {} workers on {}. Submit with `flotilla submit \"...\"`; Ctrl-C stops.",
        settings.local.workers,
        settings.nats.url
    );
    let code = tokio::select! {
        _ = crate::shutdown_signal() => 0,
        (name, status) = sup.wait_any() => {
            eprintln!("{name} exited ({status:?}); stopping everything");
            1
        }
    };
    // Workers drain for `[worker] grace`; give them that before SIGKILL.
    sup.stop(Duration::from_secs(settings.worker.grace + 5)).await;
    Ok(code)
}
