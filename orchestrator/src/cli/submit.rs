//! `flotilla submit`: start a job; prints its id at once. `--file` uploads
//! local files into the job's files first (src/cli/files.rs): the job starts
//! only once every file is stored, and a failed upload starts no job.

use std::io::Read;

use clap::Args as ClapArgs;
use flotilla_config::Settings;
use flotilla_protocol::ids::Tenant;

use super::out::{out, outln};
use super::{Output, connect, exit_code, follow_job, render};

/// Submit a job to the planner.
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// The job text. Use `-` to read it from stdin.
    pub input: String,
    /// Wait for the job to end, print its answer, exit 1 if it did not complete.
    #[arg(long)]
    pub wait: bool,
    /// Print JSON instead of text (with --wait: the final job record).
    #[arg(long)]
    pub json: bool,
    /// A local file for the job, `LOCAL[:/job/path]` (default path
    /// `/inputs/<file name>`); repeatable.
    #[arg(long = "file", value_name = "LOCAL[:/job/path]")]
    pub files: Vec<super::files::LocalFile>,
}

/// Runs the command; returns the process exit code.
pub async fn run(settings: &Settings, tenant: &Tenant, args: Args) -> anyhow::Result<i32> {
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
        if args.json {
            outln!("{}", serde_json::json!({ "job_id": id }))?;
        } else {
            outln!("{id}")?;
        }
        return Ok(0);
    }
    if !args.json {
        outln!("{id}")?;
    }
    let rec = follow_job(&api, id, Output::Quiet).await?;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&rec)?)?;
    } else if let Some(answer) = &rec.answer {
        outln!("{answer}")?;
    } else {
        out!("{}", render::record(&rec))?;
    }
    Ok(exit_code(&rec))
}
