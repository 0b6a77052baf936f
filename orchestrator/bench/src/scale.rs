//! `flotilla bench --only scale`: whole jobs of 1 000 to
//! 100 000 tasks through real processes, each on a fresh deployment: the
//! rig's nats-server (its monitoring port gives the byte count), an
//! orchestrator and 2 workers, scripted zero-latency models. Jobs up to
//! 10 000 tasks run once with `task` fan-out (every task one call of one
//! planner turn) and once with `map_tasks`; larger ones with `map_tasks` only.
//!
//! Per job it measures wall time per task (submit to the `completed` event),
//! bytes clients wrote to NATS per task (the server's `in_bytes` from
//! `/varz`, before and after), the orchestrator's peak RSS (`VmHWM` of
//! `/proc/<pid>/status`) and the input tokens of the planner's largest model
//! request (its `planner_step` events). After the job ends it times the
//! status calls behind the dashboard's job page (orchestrator/dashboard):
//! the first page of 100 tasks, and a page filtered by state (`failed`,
//! which matches nothing in a job that completed, so every task is read)
//! and by search text (one item's name): each timed on its first call
//! after the job ended and as the median of the 5 calls after it, as a
//! person re-reads the page.
//! Results: docs/PERFORMANCE.md.

use std::time::{Duration, Instant};

use flotilla_protocol::path::FilePath;
use flotilla_testkit::scripts::{MAP_PLANNER, region_items};

use crate::Row;
use crate::setup::{self, Rig};
use flotilla_client::NewFile;
use flotilla_client::events::{self, Scope};

/// Task fan-out by `task` stops here (one planner turn holds every call).
const MAX_TASK_FANOUT: usize = 10_000;
/// Workers and slots per worker.
const WORKERS: usize = 2;
const SLOTS: usize = 16;
/// Longest job before the bench gives up on it.
const JOB_TIMEOUT: Duration = Duration::from_secs(3600);

/// Every call of one planner turn is a `task`; the count comes from the job text.
const TASK_PLANNER: &str = r#"
[vars]
n = "captures(input, 'tasks: ([0-9]+)')[0][1] | int"
[[turns]]
[[turns.calls]]
tool = "task"
for_each = "range(n)"
args = '''{"subagent_type": "finance", "description": "Compute the gross margin of region r{{ item }}: revenue {{ 100 + item % 1000 }}, cost {{ 50 + item % 1000 }}"}'''
[[turns]]
content = "{{ last | selectattr('ok') | list | length }} of {{ n }} tasks completed"
"#;

/// How the planner fans out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Task,
    Map,
}

/// What one job measured.
struct Measured {
    wall: Duration,
    bytes_in: u64,
    peak_rss_kib: u64,
    max_input_tokens: u64,
    /// Tasks whose report was consolidated as completed.
    completed: usize,
    answer: String,
    /// Median latency of the job page's status calls after the job ended.
    console: ConsoleCalls,
}

/// The dashboard job page's status calls on the finished job: the first
/// call and the median of the 5 after it, each.
struct ConsoleCalls {
    first_page: (Duration, Duration),
    by_state: (Duration, Duration),
    by_text: (Duration, Duration),
}

/// Rows (measure, result, target) for the bench table, one per job.
pub async fn measure(sizes: &[usize]) -> anyhow::Result<Vec<Row>> {
    let mut rows = Vec::new();
    for &n in sizes {
        let modes: &[Mode] = if n <= MAX_TASK_FANOUT { &[Mode::Task, Mode::Map] } else { &[Mode::Map] };
        for &mode in modes {
            let name =
                format!("scale: job of {n} tasks by {}", if mode == Mode::Task { "`task`" } else { "`map_tasks`" });
            let row = match job(mode, n).await {
                Ok(m) => result_row(n, &m),
                Err(e) => format!("did not finish: {e:#}"),
            };
            rows.push((name, row, "per task within 2x of 1 000; RSS < 200 MiB".into()));
        }
    }
    Ok(rows)
}

fn result_row(n: usize, m: &Measured) -> String {
    format!(
        "{:.3} ms/task ({:.1} s), {:.0} B/task written, orchestrator peak RSS {:.1} MiB, planner max request {} tokens; {} tasks reported completed; job page (first call / median of the next 5): first 100 tasks {} ms, filtered by state {} ms, by text {} ms; answer: {}",
        m.wall.as_secs_f64() * 1000.0 / n as f64,
        m.wall.as_secs_f64(),
        m.bytes_in as f64 / n as f64,
        m.peak_rss_kib as f64 / 1024.0,
        m.max_input_tokens,
        m.completed,
        cold_warm(m.console.first_page),
        cold_warm(m.console.by_state),
        cold_warm(m.console.by_text),
        m.answer.chars().take(120).collect::<String>(),
    )
}

/// `cold / warm` in ms.
fn cold_warm((cold, warm): (Duration, Duration)) -> String {
    format!("{:.1} / {:.1}", cold.as_secs_f64() * 1000.0, warm.as_secs_f64() * 1000.0)
}

/// One job of `n` tasks on a fresh deployment.
async fn job(mode: Mode, n: usize) -> anyhow::Result<Measured> {
    let rig = deploy(mode).await?;
    let measured = run(&rig, mode, n).await;
    if let Err(e) = &measured {
        tracing::error!(error = %e, logs = %rig.logs(), "scale job failed");
    }
    rig.stop();
    measured
}

async fn run(rig: &Rig, mode: Mode, n: usize) -> anyhow::Result<Measured> {
    let api = rig.api();
    let (input, files) = match mode {
        Mode::Task => (format!("Gross margin of {n} regions. tasks: {n}"), Vec::new()),
        Mode::Map => {
            // Uploaded as `flotilla submit --file` does (orchestrator/cli/src/commands/files.rs).
            let file = NewFile {
                path: FilePath::parse("/inputs/regions.jsonl")?.to_string(),
                bytes: region_items(n).into_bytes(),
            };
            let staged = api.upload(&[file]).await?;
            ("Gross margin of every region in /inputs/regions.jsonl".to_string(), staged)
        }
    };
    let events = std::pin::pin!(events::follow(rig.bus(), Scope::All, false).await?);
    let before = rig.nats().bytes_received().await;
    let started = Instant::now();
    let job_id = api.submit_with_files(input, files).await?;
    let end = setup::until_completed(events, JOB_TIMEOUT).await?;
    let wall = started.elapsed();
    let bytes_in = rig.nats().bytes_received().await - before;
    let peak_rss_kib = rig.memory_kib("orchestrator", "VmHWM:")?;
    let console = console_calls(&api, job_id, n).await?;
    let setup::JobEnd { answer, completed, max_input_tokens } = end;
    Ok(Measured { wall, bytes_in, peak_rss_kib, max_input_tokens, completed, answer, console })
}

/// Times the status calls the dashboard's job page makes (`view.rs`,
/// `Client::status_page` and `Client::filtered_page`) on the ended job.
async fn console_calls(
    api: &flotilla_client::Client,
    job: flotilla_protocol::ids::JobId,
    n: usize,
) -> anyhow::Result<ConsoleCalls> {
    use flotilla_protocol::{TaskFilter, TaskState};
    async fn cold_and_warm<F, Fut>(mut call: F) -> anyhow::Result<(Duration, Duration)>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = anyhow::Result<usize>>,
    {
        let mut times = Vec::new();
        for _ in 0..6 {
            let t = Instant::now();
            call().await?;
            times.push(t.elapsed());
        }
        let cold = times.remove(0);
        times.sort();
        Ok((cold, times[2]))
    }
    let first_page =
        cold_and_warm(|| async { Ok(api.status_page(job, Some(100), None).await?.job.tasks.len()) }).await?;
    let failed = TaskFilter { state: Some(TaskState::Failed), ..Default::default() };
    let by_state =
        cold_and_warm(|| async { Ok(api.filtered_page(job, failed.clone(), Some(100), None).await?.job.tasks.len()) })
            .await?;
    // One item's region name (flotilla_testkit::scripts::region_items), as a person searches.
    let text = TaskFilter { text: Some(format!("r{}", n - 1)), ..Default::default() };
    let by_text = cold_and_warm(|| async {
        let page = api.filtered_page(job, text.clone(), Some(100), None).await?;
        anyhow::ensure!(page.tasks_matched.unwrap_or(0) >= 1, "the search for one item found none");
        Ok(page.job.tasks.len())
    })
    .await?;
    Ok(ConsoleCalls { first_page, by_state, by_text })
}

/// A deployment for a job of `mode`, with room for its tasks and items.
async fn deploy(mode: Mode) -> anyhow::Result<Rig> {
    let planner = if mode == Mode::Task { TASK_PLANNER } else { MAP_PLANNER };
    let extra = "task_timeout = 3600\ntimeout = 7200\n[files]\nmax_file_bytes = 67108864\n";
    Rig::launch(WORKERS, |url| setup::config(url, planner, 0, SLOTS, extra)).await
}
