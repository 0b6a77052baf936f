//! `flotilla demo`: the whole system in one command. Starts the local
//! deployment, submits `[local] demo_job`, shows its progress live, prints the
//! consolidated answer and stops everything. The config's MCP servers and
//! tools are checked first (orchestrator/cli/src/commands/config_check.rs): with a
//! server binary missing the demo fails naming it, instead of running a job
//! whose every task meets an unknown tool.

use std::path::Path;
use std::time::Duration;

use clap::Args as ClapArgs;
use flotilla_config::Settings;

use super::out::outln;
use super::{Output, connect, exit_code, follow_job, render};
use flotilla_local::Supervisor;

/// Run the demo job through a local deployment and print its answer.
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// Job text instead of `[local] demo_job`.
    #[arg(long)]
    pub job: Option<String>,
}

/// Runs the demo; exit code 0 when the job completed.
pub async fn run(settings: Settings, config: &Path, args: Args) -> anyhow::Result<i32> {
    super::config_check::preflight(&settings).await?;
    let mut sup = Supervisor::start(&settings, config).await?;
    let banner = outln!(
        "started nats-server, the orchestrator and {} workers (logs in {})",
        settings.local.workers,
        sup.log_dir().display()
    );
    // Nobody reads stdout any more: stop the deployment cleanly, then exit.
    let result = if let Err(e) = banner {
        Err(e.into())
    } else {
        tokio::select! {
        r = submit_and_follow(&settings, args.job.unwrap_or_else(|| settings.local.demo_job.clone())) => r,
        _ = crate::shutdown_signal() => Ok(130),
        (name, status) = sup.wait_any() => Err(anyhow::anyhow!(
            "{name} exited early ({}); see {}",
            status.map(|s| s.to_string()).unwrap_or_else(|e| e.to_string()),
            sup.log_dir().join(format!("{name}.log")).display()
        )),
        }
    };
    sup.stop(Duration::from_secs(15)).await;
    result
}

async fn submit_and_follow(settings: &Settings, job: String) -> anyhow::Result<i32> {
    let api = connect(settings, &Default::default()).await?;
    // The orchestrator may still be starting: retry while nobody answers.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let id = loop {
        match api.submit(job.clone()).await {
            Ok(id) => break id,
            Err(e) if tokio::time::Instant::now() < deadline && no_orchestrator_yet(&e) => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => return Err(e),
        }
    };
    outln!("submitted job {id}\n")?;
    let rec = follow_job(&api, id, Output::Text).await?;
    outln!("\n{}", render::record(&rec))?;
    Ok(exit_code(&rec))
}

/// Whether `e` says nobody answers the job API yet (the orchestrator is
/// still starting), by the bus error's kind.
fn no_orchestrator_yet(e: &anyhow::Error) -> bool {
    use flotilla_bus::{BusError, BusErrorKind};
    e.chain().any(|c| c.downcast_ref::<BusError>().is_some_and(|b| b.kind() == BusErrorKind::NoResponders))
}
