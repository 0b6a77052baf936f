//! The `flotilla` subcommands, one file each. Client commands talk to the
//! orchestrator only through the bus (job API and event streams), so they work
//! from any host that reaches NATS.

pub mod approvals;
pub mod approve;
pub mod audit;
pub mod bench;
pub mod cancel;
pub mod config_check;
pub mod demo;
pub mod endpoints;
pub mod error;
pub mod files;
pub mod jobs;
pub mod live;
pub mod mcp;
pub mod mcp_login;
pub mod models;
pub mod orchestrator;
pub mod out;
pub mod queues;
pub mod render;
pub mod status;
pub mod submit;
pub mod table;
pub mod up;
pub mod watch;
pub mod workers;

use std::io::Write;
use std::time::Duration;

use flotilla_bus::Bus;
use flotilla_client::{Event, Scope};
use flotilla_config::Settings;
use flotilla_protocol::ids::{JobId, Tenant};
use flotilla_protocol::{JobRecord, JobStatus};

use flotilla_client::{Client, EndWatch};
use out::outln;

/// Connects as a short-lived client of `tenant`.
pub async fn connect(settings: &Settings, tenant: &Tenant) -> anyhow::Result<Client> {
    let bus = Bus::connect(&settings.nats, "flotilla-cli", Duration::from_secs(5)).await?;
    Ok(Client::new(bus, tenant.clone()))
}

/// Output style of commands that follow events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    /// Human lines.
    Text,
    /// One JSON object per line.
    Json,
    /// Nothing until the end.
    Quiet,
}

/// Prints a job's events until it ends; returns its final record.
pub async fn follow_job(api: &Client, job: JobId, output: Output) -> anyhow::Result<JobRecord> {
    let current = api.status(job).await?;
    // A finished job is replayed from the events stream (kept 24 h), as far as
    // it is still there; a running one is followed until it ends.
    let finished = current.status.is_terminal();
    if finished && output == Output::Quiet {
        return Ok(current);
    }
    let scope = Scope::Job(api.tenant().clone(), job);
    let (stored, events) = api.follow_counted(scope, output != Output::Quiet).await?;
    let mut events = std::pin::pin!(events);
    let limit = if finished { stored } else { usize::MAX };
    if finished {
        if output == Output::Text {
            outln!("job {job} already {}; replaying its {limit} stored events", current.status.as_str())?;
        }
        if limit == 0 {
            return Ok(current);
        }
    }
    let mut stdout = std::io::stdout();
    let mut seen = 0;
    let mut ends = EndWatch::new(api, job, !finished);
    while seen < limit
        && let Some(ev) = ends.next(&mut events).await?
    {
        seen += 1;
        match output {
            Output::Text if render::shown_in_plain(&ev) => writeln!(stdout, "{}", render::event(&ev))?,
            Output::Text => {}
            Output::Json => writeln!(stdout, "{}", ev.to_json())?,
            Output::Quiet => {}
        }
        stdout.flush()?;
        if let Event::Job(j) = &ev
            && j.kind.is_terminal()
        {
            break;
        }
    }
    api.status(job).await
}

/// Exit code for a finished job (docs/OPERATIONS.md, "Exit codes"): 0 when
/// it completed with every task completed (or cancelled by its planner), 3
/// when it completed with failed or refused tasks, 1 when it failed or was
/// cancelled. A job that "completed" around tasks that never ran must not
/// look like success to a script.
pub fn exit_code(job: &flotilla_protocol::JobRecord) -> i32 {
    match job.status {
        JobStatus::Completed if job.task_counts.failed + job.task_counts.rejected > 0 => 3,
        JobStatus::Completed => 0,
        _ => 1,
    }
}
