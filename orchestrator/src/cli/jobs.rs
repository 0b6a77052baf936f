//! `flotilla jobs`: a table of jobs, newest first.

use clap::Args as ClapArgs;
use flotilla_shared::config::Settings;
use flotilla_shared::ids::Tenant;
use flotilla_shared::protocol::JobStatus;

use super::connect;

/// List jobs.
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// Only jobs with this status (submitted, running, completed, failed, cancelled).
    #[arg(long)]
    pub status: Option<JobStatus>,
    /// At most this many.
    #[arg(long, default_value_t = 50)]
    pub limit: usize,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs the command.
pub async fn run(settings: &Settings, tenant: &Tenant, args: Args) -> anyhow::Result<i32> {
    let list = connect(settings, tenant).await?.list(args.status, args.limit).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&list.jobs)?);
        return Ok(0);
    }
    println!("{:<36}  {:<9}  {:>5}  {:>8}  {:<20}  INPUT", "JOB", "STATUS", "TASKS", "TOKENS", "CREATED");
    for j in &list.jobs {
        let created = j.created_at.format(&time::format_description::well_known::Rfc3339).unwrap_or_default();
        println!(
            "{:<36}  {:<9}  {:>5}  {:>8}  {:<20}  {}",
            j.id,
            j.status.as_str(),
            j.tasks,
            j.usage.total_tokens(),
            &created[..created.len().min(19)],
            j.input
        );
    }
    Ok(0)
}
