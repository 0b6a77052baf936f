//! `flotilla status <job>`: the whole picture of one job.

use clap::Args as ClapArgs;
use flotilla_config::Settings;
use flotilla_protocol::ids::{JobId, Tenant};

use super::out::{out, outln};
use super::{connect, render};

/// Show a job: status, todos, tasks with their reports, usage, answer.
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// The job id.
    pub job: JobId,
    /// Print the job record as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs the command.
pub async fn run(settings: &Settings, tenant: &Tenant, args: Args) -> anyhow::Result<i32> {
    let rec = connect(settings, tenant).await?.status(args.job).await?;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&rec)?)?;
    } else {
        out!("{}", render::record(&rec))?;
    }
    Ok(0)
}
