//! `flotilla watch [job]`: progress as it happens. Three outputs from the
//! same events: a live view when stdout is a terminal ([`super::live`]),
//! plain lines otherwise (or with `--plain`; the format scripts parse), and
//! `--json`, one event per line exactly as published on the bus.

use std::io::{IsTerminal, Write};

use clap::Args as ClapArgs;
use flotilla_client::{Event, Scope};
use flotilla_config::Settings;
use flotilla_protocol::ids::{JobId, Tenant};
use futures::StreamExt;

use super::error::CliError;
use super::live::LiveView;
use super::out::outln;
use super::{Output, connect, exit_code, follow_job, render};
use flotilla_client::Client;
use flotilla_client::JobRef;

/// Follow a job's events (todos, dispatched tasks, each subagent's model and
/// tool calls, reports) until it ends; without a job id, follow all jobs.
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// The job: its id, its short id as displayed, or a unique prefix (at least 4 characters);
    /// omit to follow every job from now on.
    pub job: Option<JobRef>,
    /// Plain lines even when stdout is a terminal.
    #[arg(long)]
    pub plain: bool,
}

/// Runs the command; exits with the job's outcome ([`super::exit_code`]).
/// `json`: one JSON object per event, as published on the bus.
pub async fn run(settings: &Settings, tenant: &Tenant, args: Args, json: bool) -> anyhow::Result<i32> {
    if json && args.plain {
        return Err(CliError::new("usage", "--plain and --json exclude each other: pick one output").into());
    }
    let api = connect(settings, tenant).await?;
    let live = !json && !args.plain && std::io::stdout().is_terminal();
    let job = match &args.job {
        Some(job) => Some(api.resolve(job).await?),
        None => None,
    };
    let Some(job) = job else {
        let mut events = std::pin::pin!(api.follow(Scope::Tenant(api.tenant().clone()), true).await?);
        let mut view = live.then(LiveView::new);
        let mut stdout = std::io::stdout();
        while let Some(ev) = events.next().await {
            let ev = ev?;
            match &mut view {
                Some(v) => v.apply(&ev),
                None if json => writeln!(stdout, "{}", ev.to_json())?,
                None if render::shown_in_plain(&ev) => writeln!(stdout, "{}", render::event(&ev))?,
                None => {}
            }
        }
        return Ok(0);
    };
    let rec = if live {
        follow_live(&api, job).await?
    } else {
        follow_job(&api, job, if json { Output::Json } else { Output::Text }).await?
    };
    if !json {
        if let Some(answer) = &rec.answer {
            outln!("\n{answer}")?;
        }
        if let Some(e) = &rec.error {
            outln!("\n{e}")?;
        }
    }
    Ok(exit_code(&rec))
}

/// Draws the live view of `job` until it ends; returns its final record.
async fn follow_live(api: &Client, job: JobId) -> anyhow::Result<flotilla_protocol::JobRecord> {
    let current = api.status(job).await?;
    if current.status.is_terminal() {
        outln!("{}", super::live::finished(&current).trim_end())?;
        return Ok(current);
    }
    let mut events = std::pin::pin!(api.follow(Scope::Job(api.tenant().clone(), job), true).await?);
    let mut view = LiveView::new();
    let mut ends = super::EndWatch::new(api, job, true);
    while let Some(ev) = ends.next(&mut events).await? {
        view.apply(&ev);
        if let Event::Job(j) = &ev
            && j.kind.is_terminal()
        {
            break;
        }
    }
    drop(view);
    api.status(job).await
}
