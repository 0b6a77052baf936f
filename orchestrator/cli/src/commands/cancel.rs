//! `flotilla cancel <job>`: stop a job, its queued tasks and running subagents.

use clap::Args as ClapArgs;
use flotilla_config::Settings;
use flotilla_protocol::ids::Tenant;

use super::connect;
use super::out::{self, outln};
use flotilla_client::JobRef;

/// Cancel a job: the planner stops, queued tasks leave the work queue, and
/// every worker aborts the job's running subagents (they report `cancelled`).
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// The job: its id, its short id as displayed, or a unique prefix (at least 4 characters).
    pub job: JobRef,
    /// Why, recorded in the job's `cancelled` event.
    #[arg(long)]
    pub reason: Option<String>,
}

/// Runs the command; `json`: print the cancel reply (`job_id`, `purged_tasks`).
pub async fn run(settings: &Settings, tenant: &Tenant, args: Args, json: bool) -> anyhow::Result<i32> {
    let api = connect(settings, tenant).await?;
    let reply = api.cancel(api.resolve(&args.job).await?, args.reason).await?;
    if json {
        out::json(&reply)?;
    } else {
        outln!("cancelling job {}: {} queued tasks removed", reply.job_id, reply.purged_tasks)?;
    }
    Ok(0)
}
