//! `flotilla submit`: start a job; prints its id at once. `--file` uploads
//! local files into the job's files first (src/commands/files.rs): the job starts
//! only once every file is stored, and a failed upload starts no job.
//! `--subagent-type` makes it a direct job: one task of that type, no planner.
//!
//! With `--wait`, stdout holds the outcome only (the answer, or with
//! `--json` the final job record; a job that failed or was cancelled prints
//! its error on stderr and nothing on stdout), so `answer=$(flotilla submit --wait ...)`
//! captures just that; the job id goes to stderr as `job <id>` as soon as
//! the job exists, for whoever watches the terminal. While the job waits
//! for a person (a tool call under `interrupt_on`, an MCP server's
//! question), stderr says so once per request, with the command that
//! answers it: a silent terminal would look like a hung job.

use std::io::Read;

use std::collections::HashSet;
use std::time::Duration;

use clap::Args as ClapArgs;
use flotilla_config::Settings;
use flotilla_protocol::ids::{JobId, Tenant};
use flotilla_protocol::{ApiReply, ApprovalsRequest, DecisionKind, SCHEMA_VERSION};

use flotilla_client::Client;

use super::out::{self, out, outln};
use super::{Output, connect, exit_code, follow_job, render};

/// Submit a job to the planner.
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// The job text. Use `-` to read it from stdin.
    pub input: String,
    /// Wait for the job to end and print its answer (the id goes to stderr);
    /// exit 0 completed, 3 completed with failed tasks, 1 failed or cancelled.
    #[arg(long)]
    pub wait: bool,
    /// A local file for the job, `LOCAL[:/job/path]` (default path
    /// `/inputs/<file name>`); repeatable.
    #[arg(long = "file", value_name = "LOCAL[:/job/path]")]
    pub files: Vec<super::files::LocalFile>,
    /// Run the text as one task of this subagent type, without the planner:
    /// the task's report is the job's answer (a direct job).
    #[arg(long, value_name = "TYPE")]
    pub subagent_type: Option<flotilla_protocol::ids::SubagentType>,
}

/// Runs the command; returns the process exit code. `json`: print the
/// submit reply (`{"job_id"}`), with `--wait` the final job record.
pub async fn run(settings: &Settings, tenant: &Tenant, args: Args, json: bool) -> anyhow::Result<i32> {
    let input = if args.input == "-" {
        let mut s = String::new();
        std::io::stdin().read_to_string(&mut s)?;
        s
    } else {
        args.input
    };
    let api = connect(settings, tenant).await?;
    let staged = super::files::upload(&api, &args.files, settings.files.max_upload_bytes).await?;
    let id = match args.subagent_type {
        Some(ty) => api.submit_task(ty, input, staged).await?,
        None => super::files::submit(&api, input, staged).await?,
    };
    if !args.wait {
        if json {
            out::json(&flotilla_protocol::SubmitReply { job_id: id })?;
        } else {
            outln!("{id}")?;
        }
        return Ok(0);
    }
    eprintln!("job {id}");
    let rec = tokio::select! {
        rec = follow_job(&api, id, Output::Quiet) => rec?,
        never = approval_notices(&api, id) => match never {},
    };
    if json {
        out::json(&rec)?;
    } else if let Some(answer) = &rec.answer {
        outln!("{answer}")?;
    } else if let Some(error) = &rec.error {
        // No answer to capture: stdout stays empty, the reason goes where a person reads it.
        eprintln!("job {} {}: {error}", rec.id, rec.status.as_str());
    } else {
        out!("{}", render::record(&rec))?;
    }
    Ok(exit_code(&rec))
}

/// How often `--wait` asks whether the job waits for a person.
const APPROVAL_POLL: Duration = Duration::from_secs(2);

/// Tells stderr about each approval request of `job` once, as it appears,
/// with the command that answers it; runs until dropped. Asks the job API
/// (the `approvals` operation) rather than following progress events, which
/// a large job would flood the client with.
async fn approval_notices(api: &Client, job: JobId) -> std::convert::Infallible {
    let mut told = HashSet::new();
    let mut tick = tokio::time::interval(APPROVAL_POLL);
    loop {
        tick.tick().await;
        let req = ApprovalsRequest { v: SCHEMA_VERSION, job_id: Some(job) };
        let reply = api.request(&req, APPROVAL_POLL).await;
        // A failed look is retried at the next tick: the notice is a courtesy, the job goes on.
        let Ok(Ok(pending)) = reply.map(ApiReply::into_result) else { continue };
        for r in pending.approvals {
            if told.insert((r.task_id, r.call_id.clone())) {
                let task = render::short(r.task_id);
                eprintln!(
                    "waiting for a person: {} ({}) in task {task}; answer with `flotilla approve {} {} --task {task} {}`",
                    r.tool,
                    r.call_id,
                    render::short(job),
                    r.call_id,
                    r.decisions.iter().map(|d| flag(*d)).collect::<Vec<_>>().join(" | "),
                );
            }
        }
    }
}

/// The `flotilla approve` flag that makes decision `d`.
fn flag(d: DecisionKind) -> &'static str {
    match d {
        DecisionKind::Approve => "--approve",
        DecisionKind::Reject => "--reject",
        DecisionKind::Edit => "--edit '<json>'",
        DecisionKind::Accept => "--content '<json>'",
        DecisionKind::Decline => "--decline",
        DecisionKind::Cancel => "--cancel",
    }
}
