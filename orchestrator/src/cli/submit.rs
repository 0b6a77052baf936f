//! `flotilla submit`: start a job; prints its id at once. `--file` uploads
//! local files into the job's files first (src/cli/files.rs): the job starts
//! only once every file is stored, and a failed upload starts no job.
//!
//! With `--wait`, stdout holds the outcome only (the answer, or with
//! `--json` the final job record), so `answer=$(flotilla submit --wait ...)`
//! captures just that; the job id goes to stderr as `job <id>` as soon as
//! the job exists, for whoever watches the terminal.

use std::io::Read;

use clap::Args as ClapArgs;
use flotilla_config::Settings;
use flotilla_protocol::ids::Tenant;

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
    let id = super::files::submit(&api, input, staged).await?;
    if !args.wait {
        if json {
            out::json(&flotilla_protocol::SubmitReply { job_id: id })?;
        } else {
            outln!("{id}")?;
        }
        return Ok(0);
    }
    eprintln!("job {id}");
    let rec = follow_job(&api, id, Output::Quiet).await?;
    if json {
        out::json(&rec)?;
    } else if let Some(answer) = &rec.answer {
        outln!("{answer}")?;
    } else {
        out!("{}", render::record(&rec))?;
    }
    Ok(exit_code(&rec))
}
