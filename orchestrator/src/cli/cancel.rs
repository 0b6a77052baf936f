//! `flotilla cancel <job>`: stop a job, its queued tasks and running subagents.

use clap::Args as ClapArgs;
use flotilla_config::Settings;
use flotilla_protocol::ids::{JobId, Tenant};

use super::connect;
use super::out::outln;

/// Cancel a job: the planner stops, queued tasks leave the work queue, and
/// every worker aborts the job's running subagents (they report `cancelled`).
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// The job id.
    pub job: JobId,
    /// Why, recorded in the job's `cancelled` event.
    #[arg(long)]
    pub reason: Option<String>,
    /// Print the reply as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs the command.
pub async fn run(settings: &Settings, tenant: &Tenant, args: Args) -> anyhow::Result<i32> {
    let reply = connect(settings, tenant).await?.cancel(args.job, args.reason).await?;
    if args.json {
        outln!("{}", serde_json::json!({"job_id": reply.job_id, "purged_tasks": reply.purged_tasks}))?;
    } else {
        outln!("cancelling job {}: {} queued tasks removed", reply.job_id, reply.purged_tasks)?;
    }
    Ok(0)
}
