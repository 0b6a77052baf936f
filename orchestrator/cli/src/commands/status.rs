//! `flotilla status <job>`: the picture of one job: its header (status, task
//! counts by state, spend, todos, answer) and one page of its tasks with their
//! reports. A job may have 100 000 tasks, so tasks come a page at a time
//! (`--tasks N --after ID`, the `StatusRequest` paging of docs/PROTOCOL.md).

use clap::Args as ClapArgs;
use flotilla_config::Settings;
use flotilla_protocol::ids::{TaskId, Tenant};

use super::out::{self, out, outln};
use super::{connect, render};
use flotilla_client::JobRef;

/// Show a job: status, task counts, todos, a page of tasks with their reports, usage, answer.
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// The job: its id, its short id as displayed, or a unique prefix (at least 4 characters).
    pub job: JobRef,
    /// Tasks to show, in dispatch order (default 100, at most 1000; 0 for the header only).
    #[arg(long)]
    pub tasks: Option<usize>,
    /// Only tasks dispatched after this task (the id a previous page ends with).
    #[arg(long)]
    pub after: Option<TaskId>,
}

/// Runs the command; `json`: print the status reply (header, page of
/// tasks, `next_after`) as one JSON object.
pub async fn run(settings: &Settings, tenant: &Tenant, args: Args, json: bool) -> anyhow::Result<i32> {
    let api = connect(settings, tenant).await?;
    let job = api.resolve(&args.job).await?;
    // Paging fields only when asked: an orchestrator older than protocol 1.2 refuses them.
    let reply = api.status_page(job, args.tasks, args.after).await?;
    if json {
        out::json(&reply)?;
    } else {
        out!("{}", render::record(&reply.job))?;
        if let Some(next) = reply.next_after {
            let n = args.tasks.unwrap_or(flotilla_protocol::DEFAULT_TASKS_PAGE);
            outln!("more tasks: flotilla status {job} --tasks {n} --after {next}")?;
        }
    }
    Ok(0)
}
