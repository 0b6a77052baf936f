//! `flotilla bench --only concurrency`: 1 000 subagents in flight at once.
//! One job maps 1 000 items (`map_tasks`, `[planner] max_in_flight` 1 000)
//! onto 4 workers x 250 slots, each task two model calls of 2 s (a tool
//! call between them), so the ideal wall time is 4 s: every task starts at
//! once and the job ends when the slowest one does.
//!
//! Measured: wall time from submit to the job's `completed` event; the
//! workers' peak RSS (`VmHWM`) against their RSS before the job, as MiB per
//! in-flight subagent; bytes all clients sent to NATS during the job (the
//! server's `/varz` `in_bytes`), per task and per second.
//! Results: docs/PERFORMANCE.md.

use std::time::{Duration, Instant};

use flotilla_client::NewFile;
use flotilla_client::events::{self, Scope};
use flotilla_protocol::path::FilePath;
use flotilla_testkit::scripts::{MAP_PLANNER, finance_margin, region_items};

use crate::Row;
use crate::setup::{self, FinanceModel, Rig};

const TASKS: usize = 1000;
const WORKERS: usize = 4;
const SLOTS: usize = 250;
/// Each of the task's two model calls.
const MODEL_LATENCY_MS: u64 = 2000;
const JOB_TIMEOUT: Duration = Duration::from_secs(600);

/// The scenario's rows (measure, result, target).
pub async fn measure() -> anyhow::Result<Vec<Row>> {
    let finance = finance_margin(MODEL_LATENCY_MS);
    let extra = format!("task_timeout = 600\nmax_in_flight = {TASKS}\n");
    let rig = Rig::launch(WORKERS, |url| {
        setup::config_with(url, MAP_PLANNER, FinanceModel::Scripted(&finance), SLOTS, &extra)
    })
    .await?;
    let measured = run(&rig).await;
    if let Err(e) = &measured {
        tracing::error!(error = %e, logs = %rig.logs(), "concurrency job failed");
    }
    rig.stop();
    let m = measured?;
    let per_subagent = (m.peak_kib.saturating_sub(m.idle_kib)) as f64 / 1024.0 / SLOTS as f64;
    Ok(vec![(
        format!("concurrency: {TASKS} tasks, 2 model calls of 2 s each, {WORKERS} workers x {SLOTS} slots"),
        format!(
            "{:.2} s wall (ideal 4.0 s), {} of {TASKS} completed; worker RSS {:.1} MiB idle, {:.1} MiB peak \
             (the largest of the {WORKERS}): {:.3} MiB per in-flight subagent; {:.0} B/task to NATS ({:.1} MB/s)",
            m.wall.as_secs_f64(),
            m.completed,
            m.idle_kib as f64 / 1024.0,
            m.peak_kib as f64 / 1024.0,
            per_subagent,
            m.bytes_in as f64 / TASKS as f64,
            m.bytes_in as f64 / 1e6 / m.wall.as_secs_f64(),
        ),
        "<= 6 s wall".into(),
    )])
}

struct Measured {
    wall: Duration,
    completed: usize,
    /// The largest worker RSS before the job, KiB.
    idle_kib: u64,
    /// The largest worker peak RSS after it, KiB.
    peak_kib: u64,
    bytes_in: u64,
}

async fn run(rig: &Rig) -> anyhow::Result<Measured> {
    let workers: Vec<String> = (1..=WORKERS).map(|i| format!("worker-{i}")).collect();
    let largest = |key: &str| -> anyhow::Result<u64> {
        let mut max = 0;
        for w in &workers {
            max = max.max(rig.memory_kib(w, key)?);
        }
        Ok(max)
    };
    let idle_kib = largest("VmRSS:")?;
    let api = rig.api();
    let file = NewFile {
        path: FilePath::parse("/inputs/regions.jsonl")?.to_string(),
        bytes: region_items(TASKS).into_bytes(),
    };
    let staged = api.upload(&[file]).await?;
    let events = std::pin::pin!(events::follow(rig.bus(), Scope::All, false).await?);
    let before = rig.nats().bytes_received().await;
    let started = Instant::now();
    api.submit_with_files("Gross margin of every region in /inputs/regions.jsonl".to_string(), staged).await?;
    let end = setup::until_completed(events, JOB_TIMEOUT).await?;
    let wall = started.elapsed();
    let bytes_in = rig.nats().bytes_received().await - before;
    Ok(Measured { wall, completed: end.completed, idle_kib, peak_kib: largest("VmHWM:")?, bytes_in })
}
