//! `flotilla watch [job]`: progress as it happens.

use std::io::Write;

use clap::Args as ClapArgs;
use flotilla_shared::config::Settings;
use flotilla_shared::ids::{JobId, Tenant};
use futures::StreamExt;

use super::follow::{self, Scope};
use super::{Output, connect, exit_code, follow_job, render};

/// Follow a job's events (todos, dispatched tasks, each subagent's model and
/// tool calls, reports) until it ends; without a job id, follow all jobs.
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// The job id; omit to follow every job from now on.
    pub job: Option<JobId>,
    /// One JSON object per event, as published on the bus.
    #[arg(long)]
    pub json: bool,
}

/// Runs the command; exits with the job's status (0 completed, 1 otherwise).
pub async fn run(settings: &Settings, tenant: &Tenant, args: Args) -> anyhow::Result<i32> {
    let api = connect(settings, tenant).await?;
    let output = if args.json { Output::Json } else { Output::Text };
    let Some(job) = args.job else {
        let mut events = std::pin::pin!(follow::follow(&api.bus, Scope::All, true).await?);
        let mut stdout = std::io::stdout();
        while let Some(ev) = events.next().await {
            let ev = ev?;
            let line = if args.json { ev.to_json() } else { render::event(&ev) };
            writeln!(stdout, "{line}")?;
        }
        return Ok(0);
    };
    let rec = follow_job(&api, job, output).await?;
    if !args.json {
        if let Some(answer) = &rec.answer {
            println!("\n{answer}");
        }
        if let Some(e) = &rec.error {
            println!("\n{e}");
        }
    }
    Ok(exit_code(rec.status))
}
