//! `flotilla files ls|get|put <job> ...`, and the local files of `flotilla
//! submit --file`: a job's files through the job API (`files_*` operations,
//! orchestrator/src/files_api.rs; a client has no Object Store access,
//! docs/SECURITY.md). The parts, uploads and checked downloads are the
//! client's (shared/client/src/files.rs); this file reads and writes local
//! files and prints.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::{Args as ClapArgs, Subcommand};
use flotilla_client::{Client, FILE_TIMEOUT, JobRef, NewFile};
use flotilla_config::Settings;
use flotilla_job_files::FilePath;
use flotilla_protocol::files_api::{
    FileEntry, FilesCommitReply, FilesCommitRequest, FilesLsReply, FilesLsRequest, StagedFile,
};
use flotilla_protocol::ids::{JobId, Tenant};
use flotilla_protocol::{SCHEMA_VERSION, check_job_prefix, matches_short_id};

use super::error::CliError;
use super::out::{self, out, outln};
use super::{connect, render, table};

/// Read and write a job's files (running or finished, within retention).
#[derive(ClapArgs, Debug)]
pub struct Args {
    #[command(subcommand)]
    pub command: Command,
}

/// The `files` subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// List a job's files: path, size, last write.
    Ls {
        /// The job: its id, its short id as displayed, or a unique prefix (at least 4 characters).
        job: JobRef,
        /// Only paths starting with this (e.g. /reports/).
        prefix: Option<String>,
    },
    /// Print a job file (or write it to a local file with -o).
    Get {
        /// The job: its id, its short id as displayed, or a unique prefix (at least 4 characters).
        job: JobRef,
        /// The job path, e.g. `/reports/<task>.md` (the task by its id or its
        /// short id as displayed).
        path: String,
        /// Write to this local file instead of stdout (with --json, print
        /// a JSON object: path, size, sha256, output).
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
    /// Upload a local file to a job path (reserved paths are refused).
    Put {
        /// The job: its id, its short id as displayed, or a unique prefix (at least 4 characters).
        job: JobRef,
        /// The local file.
        local: PathBuf,
        /// The job path, e.g. /inputs/extra.csv.
        path: String,
    },
}

/// Runs the command; returns the process exit code. `json`: `ls` prints
/// `{"job_id", "files"}`, `put` the commit reply (`{"files"}`), `get -o`
/// what it wrote.
pub async fn run(settings: &Settings, tenant: &Tenant, args: Args, json: bool) -> anyhow::Result<i32> {
    let api = connect(settings, tenant).await?;
    match args.command {
        Command::Ls { job, prefix } => ls(&api, api.resolve(&job).await?, prefix, json).await,
        Command::Get { job, path, output } => get(&api, api.resolve(&job).await?, &path, output.as_deref(), json).await,
        Command::Put { job, local, path } => {
            let job = api.resolve(&job).await?;
            let spec = LocalFile { local, path: job_path(&path)? };
            let staged = upload(&api, &[spec], settings.files.max_upload_bytes).await?;
            let req = FilesCommitRequest { v: SCHEMA_VERSION, job_id: job, files: staged };
            let reply: FilesCommitReply = api.call_within(&req, FILE_TIMEOUT, "refused").await.context("files put")?;
            if json {
                out::json(&reply)?;
            } else {
                for f in &reply.files {
                    outln!("stored {} ({} bytes)", f.path, f.size)?;
                }
            }
            Ok(0)
        }
    }
}

/// Lists every page, then prints every file at once: `--json` one object,
/// else [`ls_table`].
async fn ls(api: &Client, job: JobId, prefix: Option<String>, json: bool) -> anyhow::Result<i32> {
    let mut all = Vec::new();
    let mut after = None;
    loop {
        let req = FilesLsRequest { v: SCHEMA_VERSION, job_id: job, prefix: prefix.clone(), after, limit: None };
        let reply: FilesLsReply = api.call_within(&req, FILE_TIMEOUT, "refused").await?;
        all.extend(reply.files);
        after = reply.next_after;
        if after.is_none() {
            break;
        }
    }
    if json {
        out::json(&serde_json::json!({"job_id": job, "files": all}))?;
    } else {
        out!("{}", ls_table(&all))?;
    }
    Ok(0)
}

/// A header like every other table, then one line per file: size in bytes
/// (right-aligned), last write (`-` when unknown), path; one table over
/// every page, so the columns line up however long a value is. Scripts read
/// `--json`.
fn ls_table(files: &[FileEntry]) -> String {
    let mut t = table::new(&["SIZE", "MODIFIED", "PATH"]);
    for f in files {
        let modified = f.modified.map(render::time).unwrap_or_else(|| "-".into());
        t.add_row([f.size.to_string(), modified, f.path.clone()]);
    }
    table::align_right(&mut t, &[0]);
    table::render(t, "")
}

async fn get(api: &Client, job: JobId, path: &str, output: Option<&Path>, json: bool) -> anyhow::Result<i32> {
    if json && output.is_none() {
        bail!("--json describes a file written with -o; without -o the file's bytes go to stdout");
    }
    let path = &report_path(api, job, path).await?;
    let (bytes, sha256) = api.download(job, path).await?;
    match output {
        Some(local) => {
            std::fs::write(local, &bytes).with_context(|| format!("writing {}", local.display()))?;
            if json {
                out::json(&serde_json::json!({"path": path, "size": bytes.len(), "sha256": sha256, "output": local}))?;
            }
        }
        None => {
            use std::io::Write;
            let mut stdout = std::io::stdout().lock();
            stdout.write_all(&bytes)?;
            stdout.flush()?;
        }
    }
    Ok(0)
}

/// `path`, or for `/reports/<short>.md` naming a task by the short id the
/// CLI displays (or a prefix), the report of the one task whose id matches.
async fn report_path(api: &Client, job: JobId, path: &str) -> anyhow::Result<String> {
    let Some(short) = path.strip_prefix("/reports/").and_then(|p| p.strip_suffix(".md")) else {
        return Ok(path.to_string());
    };
    if short.parse::<flotilla_protocol::ids::TaskId>().is_ok() || check_job_prefix(short).is_err() {
        return Ok(path.to_string());
    }
    let short = short.to_ascii_lowercase();
    let mut found = Vec::new();
    let mut after = None;
    loop {
        let req =
            FilesLsRequest { v: SCHEMA_VERSION, job_id: job, prefix: Some("/reports/".into()), after, limit: None };
        let reply: FilesLsReply = api.call_within(&req, FILE_TIMEOUT, "refused").await?;
        found.extend(reply.files.into_iter().map(|f| f.path).filter(|p| {
            p.strip_prefix("/reports/").and_then(|t| t.strip_suffix(".md")).is_some_and(|t| matches_short_id(t, &short))
        }));
        after = reply.next_after;
        if after.is_none() {
            break;
        }
    }
    match found.as_slice() {
        [one] => Ok(one.clone()),
        [] => Err(CliError::new("not_found", format!("job {job} has no report of a task matching {short}")).into()),
        many => Err(CliError::new(
            "validation",
            format!("task {short} is ambiguous: {} reports match ({}); give the whole id", many.len(), many.join(", ")),
        )
        .into()),
    }
}

/// A local file and the job path it goes to.
#[derive(Clone, Debug)]
pub struct LocalFile {
    /// On this machine.
    pub local: PathBuf,
    /// In the job's files.
    pub path: FilePath,
}

impl std::str::FromStr for LocalFile {
    type Err = anyhow::Error;

    /// `LOCAL[:/job/path]`; the job path defaults to `/inputs/<file name>`.
    fn from_str(spec: &str) -> anyhow::Result<Self> {
        let (local, path) = match spec.rsplit_once(":/") {
            Some((local, rest)) if !local.is_empty() => (PathBuf::from(local), format!("/{rest}")),
            _ => {
                let local = PathBuf::from(spec);
                let name = local.file_name().and_then(|n| n.to_str()).with_context(|| {
                    format!("{spec:?} has no file name to put under /inputs; write LOCAL:/job/path")
                })?;
                (local.clone(), format!("/inputs/{name}"))
            }
        };
        Ok(Self { path: job_path(&path)?, local })
    }
}

fn job_path(raw: &str) -> anyhow::Result<FilePath> {
    let path = FilePath::parse(raw).with_context(|| format!("invalid job path {raw:?}"))?;
    if path.is_root() {
        bail!("job path {raw:?} names the root directory, not a file");
    }
    Ok(path)
}

/// Reads every local file (refusing more than `max_total` bytes in all,
/// before anything is sent), then uploads them ([`Client::upload`]).
/// Returns what a submit or `files_commit` names to store them.
pub async fn upload(api: &Client, files: &[LocalFile], max_total: u64) -> anyhow::Result<Vec<StagedFile>> {
    let mut contents = Vec::with_capacity(files.len());
    let mut total = 0u64;
    for f in files {
        let bytes = std::fs::read(&f.local).with_context(|| format!("reading {}", f.local.display()))?;
        total += bytes.len() as u64;
        if total > max_total {
            bail!(
                "the files come to more than [files] max_upload_bytes ({max_total} bytes) at {}; send fewer or smaller files",
                f.local.display()
            );
        }
        contents.push(bytes);
    }
    let new: Vec<NewFile> =
        files.iter().zip(contents).map(|(f, bytes)| NewFile { path: f.path.to_string(), bytes }).collect();
    api.upload(&new).await
}

/// Submits a job whose `files` were uploaded by [`upload`].
pub async fn submit(api: &Client, input: String, files: Vec<StagedFile>) -> anyhow::Result<JobId> {
    api.submit_with_files(input, files).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_specs_default_to_inputs() {
        let f: LocalFile = "data/sales.csv".parse().unwrap();
        assert_eq!((f.local.as_path(), f.path.as_str()), (Path::new("data/sales.csv"), "/inputs/sales.csv"));
        let f: LocalFile = "items.jsonl:/maps/in/items.jsonl".parse().unwrap();
        assert_eq!((f.local.as_path(), f.path.as_str()), (Path::new("items.jsonl"), "/maps/in/items.jsonl"));
        assert!("x:/../..".parse::<LocalFile>().is_err());
        assert!("/".parse::<LocalFile>().is_err());
    }

    #[test]
    fn ls_prints_one_aligned_line_per_file() {
        let at = time::OffsetDateTime::from_unix_timestamp(1_767_323_045).unwrap(); // 2026-01-02 03:04:05 UTC
        let entry = |path: &str, size, modified| FileEntry { path: path.into(), size, modified };
        let text =
            ls_table(&[entry("/inputs/a.csv", 7, Some(at)), entry("/reports/0195-long-task-id.md", 1_234_567, None)]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "a header and one line per file: {text}");
        assert!(lines[0].trim_start().starts_with("SIZE") && lines[0].contains("MODIFIED"), "{text}");
        assert!(lines[1].starts_with("      7  2026-01-02T03:04:05Z"), "{text}");
        assert!(lines[2].starts_with("1234567  -"), "{text}");
        let column = |l: &str| l.find('/').unwrap();
        assert_eq!(column(lines[1]), column(lines[2]), "paths line up: {text}");
        assert_eq!(lines[0].find("PATH"), Some(column(lines[1])), "{text}");
        assert!(text.ends_with(".md\n"), "{text}");
    }
}
