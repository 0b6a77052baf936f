//! `flotilla jobs`: a table of jobs, newest first.

use clap::Args as ClapArgs;
use flotilla_config::Settings;
use flotilla_protocol::JobStatus;
use flotilla_protocol::ids::Tenant;

use flotilla_protocol::JobSummary;

use super::out::{out, outln};
use super::{connect, render, table};

/// List jobs.
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// Only jobs with this status (submitted, running, completed, failed, cancelled).
    #[arg(long)]
    pub status: Option<JobStatus>,
    /// At most this many.
    #[arg(long, default_value_t = 50)]
    pub limit: usize,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs the command.
pub async fn run(settings: &Settings, tenant: &Tenant, args: Args) -> anyhow::Result<i32> {
    let list = connect(settings, tenant).await?.list(args.status, args.limit).await?;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&list.jobs)?)?;
        return Ok(0);
    }
    out!("{}", table(&list.jobs))?;
    Ok(0)
}

/// The human table, one line per job (its input flattened to one line);
/// TASKS is ended/dispatched, from the job header's counters.
fn table(jobs: &[JobSummary]) -> String {
    let mut t = table::new(&["JOB", "STATUS", "TASKS", "TOKENS", "CREATED", "INPUT"]);
    table::align_right(&mut t, &[2, 3]);
    for j in jobs {
        let created = j.created_at.format(&time::format_description::well_known::Rfc3339).unwrap_or_default();
        t.add_row([
            j.id.to_string(),
            j.status.as_str().into(),
            format!("{}/{}", j.task_counts.ended(), j.tasks),
            j.usage.total_tokens().to_string(),
            created.chars().take(19).collect(),
            render::one_line(&j.input, 100),
        ]);
    }
    table::render(t, "")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(status: &str, input: &str, tokens: u64) -> JobSummary {
        serde_json::from_value(serde_json::json!({
            "id": uuid::Uuid::now_v7(), "tenant": "default", "status": status, "input": input, "tasks": 12,
            "usage": {"input_tokens": tokens}, "created_at": "2025-01-01T10:00:00Z", "updated_at": "2025-01-01T10:00:00Z",
        }))
        .expect("job summary")
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
            assert_eq!(row.find("2025-01-01T10:00:00"), Some(created), "{text}");
        }
        assert_eq!(lines[1].find("north: revenue 120 south: revenue 0"), Some(input), "{text}");
        // Numbers right-aligned under their titles.
        let tokens_end = lines[0].find("TOKENS").unwrap() + "TOKENS".len();
        assert_eq!(lines[1].find("1234567").map(|i| i + 7), Some(tokens_end), "{text}");
        assert_eq!(lines[2].find("5  2025").map(|i| i + 1), Some(tokens_end), "{text}");
    }
}
