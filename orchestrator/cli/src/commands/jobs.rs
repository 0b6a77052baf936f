//! `flotilla jobs`: a table of jobs, newest first. The orchestrator answers
//! a page at a time (at most `MAX_LIST_PAGE` jobs, so a reply stays below
//! the NATS max_payload); this command follows the pages until it has
//! `--limit` jobs or there are no more (docs/PROTOCOL.md, `list`).

use std::time::Duration;

use anyhow::Context;
use clap::Args as ClapArgs;
use flotilla_config::Settings;
use flotilla_protocol::ids::{JobId, Tenant};
use flotilla_protocol::{JobStatus, JobSummary, ListRequest, PruneRequest, SCHEMA_VERSION};
use time::OffsetDateTime;

use super::out::{self, out, outln};
use super::{connect, render, table};

/// List jobs (or prune old ones: `jobs prune --before DATE`).
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// `prune`: delete finished jobs.
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Only jobs with this status (submitted, running, completed, failed, cancelled).
    #[arg(long)]
    pub status: Option<JobStatus>,
    /// At most this many (fetched a page at a time).
    #[arg(long, default_value_t = 50)]
    pub limit: usize,
    /// Only jobs submitted at or after this time (RFC 3339, or a date YYYY-MM-DD in UTC).
    #[arg(long, value_parser = parse_time)]
    pub since: Option<OffsetDateTime>,
    /// Only jobs older than this one (the last id of a previous listing).
    #[arg(long)]
    pub after: Option<JobId>,
}

/// What `jobs` can do besides listing.
#[derive(clap::Subcommand, Debug)]
pub enum Command {
    /// Delete this tenant's finished jobs (completed, failed, cancelled) last
    /// changed before a time: records, index entry and files. Running jobs stay.
    Prune {
        /// RFC 3339 time, or a date YYYY-MM-DD (midnight UTC).
        #[arg(long, value_parser = parse_time)]
        before: OffsetDateTime,
    },
}

/// How long a prune may take (it deletes job by job).
const PRUNE_TIMEOUT: Duration = Duration::from_secs(300);

/// Runs the command; `json`: print the list reply (`{"jobs": [...],
/// "next_after"}`, every page followed as one) or the prune reply.
pub async fn run(settings: &Settings, tenant: &Tenant, args: Args, json: bool) -> anyhow::Result<i32> {
    let client = connect(settings, tenant).await?;
    if let Some(Command::Prune { before }) = args.command {
        let req = PruneRequest { v: SCHEMA_VERSION, before };
        let reply = client.call_within(&req, PRUNE_TIMEOUT, "prune refused").await?;
        if json {
            out::json(&reply)?;
        } else {
            outln!("{} finished jobs deleted", reply.pruned)?;
        }
        return Ok(0);
    }
    let first =
        ListRequest { v: SCHEMA_VERSION, status: args.status, limit: None, after: args.after, since: args.since };
    let listed = client.list_pages(first, args.limit).await?;
    if json {
        out::json(&listed)?;
        return Ok(0);
    }
    out!("{}", table(&listed.jobs))?;
    Ok(0)
}

/// An RFC 3339 time, or a date (midnight UTC).
pub fn parse_time(s: &str) -> anyhow::Result<OffsetDateTime> {
    use time::format_description::well_known::Rfc3339;
    if let Ok(t) = OffsetDateTime::parse(s, &Rfc3339) {
        return Ok(t);
    }
    let format = time::format_description::parse_borrowed::<2>("[year]-[month]-[day]").expect("a valid date format");
    let date = time::Date::parse(s, &format)
        .with_context(|| format!("{s:?} is neither an RFC 3339 time nor a date YYYY-MM-DD"))?;
    Ok(date.midnight().assume_utc())
}

/// The human table, one line per job (its input flattened to one line);
/// TASKS is completed/dispatched and UNSUCCESSFUL names the tasks that ended
/// otherwise, from the job header's counters, so a job with a failed task
/// never reads as all done.
fn table(jobs: &[JobSummary]) -> String {
    let mut t = table::new(&["JOB", "STATUS", "TASKS", "UNSUCCESSFUL", "TOKENS", "CREATED", "INPUT"]);
    table::align_right(&mut t, &[2, 4]);
    for j in jobs {
        t.add_row([
            j.id.to_string(),
            j.status.as_str().into(),
            format!("{}/{}", j.task_counts.completed, j.tasks),
            unsuccessful(&j.task_counts),
            j.usage.total_tokens().to_string(),
            render::time(j.created_at),
            render::one_line(&j.input, 100),
        ]);
    }
    table::render(t, "")
}

/// "1 failed, 2 cancelled": the tasks that ended without completing.
fn unsuccessful(c: &flotilla_protocol::TaskCounts) -> String {
    [("failed", c.failed), ("rejected", c.rejected), ("cancelled", c.cancelled)]
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|(what, n)| format!("{n} {what}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(status: &str, input: &str, tokens: u64) -> JobSummary {
        serde_json::from_value(serde_json::json!({
            "id": uuid::Uuid::now_v7(), "tenant": "default", "status": status, "input": input, "tasks": 12,
            "usage": {"input_tokens": tokens}, "created_at": "2025-01-01T10:00:00.123456Z", "updated_at": "2025-01-01T10:00:00Z",
        }))
        .expect("job summary")
    }

    #[test]
    fn since_takes_a_time_or_a_date() {
        assert_eq!(parse_time("2026-03-04").unwrap().unix_timestamp(), 1_772_582_400);
        assert_eq!(parse_time("2026-03-04T01:00:00Z").unwrap().unix_timestamp(), 1_772_586_000);
        let err = parse_time("yesterday").unwrap_err().to_string();
        assert!(err.contains("YYYY-MM-DD"), "{err}");
    }

    #[test]
    fn one_line_per_job_with_aligned_columns() {
        let text =
            table(&[job("completed", "north: revenue 120\nsouth: revenue 0", 1_234_567), job("cancelled", "x", 5)]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "a line break in the input does not break the row: {text}");
        let created = lines[0].find("CREATED").unwrap();
        let input = lines[0].find("INPUT").unwrap();
        for row in &lines[1..] {
            assert_eq!(row.find("2025-01-01T10:00:00Z "), Some(created), "an RFC 3339 time, with its Z: {text}");
        }
        assert_eq!(lines[1].find("north: revenue 120 south: revenue 0"), Some(input), "{text}");
        // Numbers right-aligned under their titles.
        let tokens_end = lines[0].find("TOKENS").unwrap() + "TOKENS".len();
        assert_eq!(lines[1].find("1234567").map(|i| i + 7), Some(tokens_end), "{text}");
        assert_eq!(lines[2].find("5  2025").map(|i| i + 1), Some(tokens_end), "{text}");
    }

    #[test]
    fn a_job_with_failed_or_cancelled_tasks_does_not_read_as_all_done() {
        let mut failed = job("completed", "x", 1);
        failed.tasks = 4;
        failed.task_counts = serde_json::from_value(serde_json::json!({"completed": 3, "failed": 1})).unwrap();
        let mut cancelled = job("cancelled", "y", 1);
        cancelled.tasks = 200;
        cancelled.task_counts =
            serde_json::from_value(serde_json::json!({"completed": 10, "cancelled": 189, "rejected": 1})).unwrap();
        let text = table(&[failed, cancelled]);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[1].contains("3/4") && lines[1].contains("1 failed"), "{text}");
        assert!(!lines[1].contains("4/4"), "{text}");
        assert!(lines[2].contains("10/200") && lines[2].contains("1 rejected, 189 cancelled"), "{text}");
    }
}
