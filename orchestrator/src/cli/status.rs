//! `flotilla status <job>`: the picture of one job: its header (status, task
//! counts by state, spend, todos, answer) and one page of its tasks with their
//! reports. A job may have 100 000 tasks, so tasks come a page at a time
//! (`--tasks N --after ID`, the `StatusRequest` paging of docs/PROTOCOL.md).

use clap::Args as ClapArgs;
use flotilla_config::Settings;
use flotilla_protocol::ids::{JobId, TaskId, Tenant};

use super::out::{out, outln};
use super::{connect, render};

/// Show a job: status, task counts, todos, a page of tasks with their reports, usage, answer.
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// The job id.
    pub job: JobId,
    /// Print the status reply (header, page of tasks, `next_after`) as JSON.
    #[arg(long)]
    pub json: bool,
    /// Tasks to show, in dispatch order (default 100, at most 1000; 0 for the header only).
    #[arg(long)]
    pub tasks: Option<usize>,
    /// Only tasks dispatched after this task (the id a previous page ends with).
    #[arg(long)]
    pub after: Option<TaskId>,
}

/// Runs the command.
pub async fn run(settings: &Settings, tenant: &Tenant, args: Args) -> anyhow::Result<i32> {
    // Paging fields only when asked: an orchestrator older than protocol 1.2 refuses them.
    let reply = connect(settings, tenant).await?.status_page(args.job, args.tasks, args.after).await?;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&reply)?)?;
    } else {
        out!("{}", render::record(&reply.job))?;
        if let Some(next) = reply.next_after {
            let n = args.tasks.unwrap_or(flotilla_protocol::DEFAULT_TASKS_PAGE);
            outln!("more tasks: flotilla status {} --tasks {n} --after {next}", args.job)?;
        }
    }
    Ok(0)
}
