//! `flotilla bench --only load`: many concurrent jobs
//! through the real processes, then job listing against a long history.
//!
//! One deployment: the bench's nats-server, an orchestrator (`[planner]
//! concurrency` 16) and 2 workers of 8 slots, zero-latency scripted models.
//! `--load-jobs` demo jobs of `--load-tasks` tasks each are submitted at
//! once (64 submissions in flight); it measures jobs/s (first submit to last
//! `completed` event), the latency of each task under that load (its
//! `task_dispatched` to its `task_reported` event, as the bench receives
//! them) and the resident memory of the orchestrator and each worker before,
//! at peak (`VmHWM`) and after; `--load-rounds` repeats the jobs and reads
//! the memory after each round (flat, or a leak). Then it fills the history
//! up to each `--load-history` size: finished jobs written straight into
//! the jobs bucket and the job index as the job store files them
//! (shared/bus/src/history_seed.rs), then 100 real jobs, the newest; and
//! times three listings: the newest 20 (`jobs`), a status that matches
//! no job (`jobs --status failed`), and every job a page at a time (`jobs
//! --limit <all>`). Results: docs/PERFORMANCE.md.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::Context;
use flotilla_protocol::ids::TaskId;
use flotilla_protocol::{JobEventKind, JobStatus, ListRequest, SCHEMA_VERSION};
use futures::StreamExt;

use crate::setup::{self, Rig};
use crate::{Row, ms, pct};
use flotilla_client::Client;
use flotilla_client::events::{self, Event, Scope};

/// Workers and slots per worker.
const WORKERS: usize = 2;
const SLOTS: usize = 8;
/// Submissions in flight at once.
const SUBMITTING: usize = 64;
/// Longest the jobs may take before the bench gives up.
const LOAD_TIMEOUT: Duration = Duration::from_secs(1800);
/// Pause between writing history and running the newest jobs.
const HISTORY_SETTLES: Duration = Duration::from_secs(3);
/// Real jobs run after each history is written (the newest in the listing).
const RECENT_JOBS: usize = 100;
/// Timed runs of the short listings (the median is reported).
const LISTINGS: usize = 5;

/// Rows (measure, result, target) for the bench table.
pub async fn measure(jobs: usize, tasks: usize, rounds: usize, history: &[usize]) -> anyhow::Result<Vec<Row>> {
    let rig = Rig::start(WORKERS, SLOTS, 0).await?;
    let rows = run(&rig, jobs, tasks, rounds, history).await;
    if let Err(e) = &rows {
        tracing::error!(error = %e, logs = %rig.logs(), "load bench failed");
    }
    rig.stop();
    rows
}

async fn run(rig: &Rig, jobs: usize, tasks: usize, rounds: usize, history: &[usize]) -> anyhow::Result<Vec<Row>> {
    let mut rows = Vec::new();
    let before = Memory::read(rig)?;
    let load = concurrent_jobs(rig, jobs, tasks).await?;
    let peak = Memory::peak(rig)?;
    let after = Memory::read(rig)?;
    // Further rounds of the same jobs show whether memory stays flat.
    let mut later = Vec::new();
    for _ in 1..rounds {
        concurrent_jobs(rig, jobs, tasks).await?;
        later.push(Memory::read(rig)?);
    }
    let setup = format!("{jobs} jobs x {tasks} tasks at once, {WORKERS} workers x {SLOTS} slots");
    rows.push((
        format!("load: {setup}"),
        format!("{:.1} jobs/s ({:.1} s)", load.jobs_per_s, load.wall.as_secs_f64()),
        String::new(),
    ));
    rows.push((
        "load: task latency under load (dispatched -> reported), p50 / p99".into(),
        format!("{} / {}", ms(pct(&load.task_latency, 50.0)), ms(pct(&load.task_latency, 99.0))),
        String::new(),
    ));
    for (name, b, p, a) in before.rows(&peak, &after) {
        rows.push((format!("load: {name} RSS before / peak / after"), format!("{b} / {p} / {a}"), String::new()));
    }
    for (round, mem) in later.iter().enumerate() {
        let all: Vec<String> = mem.0.iter().map(|(n, k)| format!("{n} {:.1} MiB", *k as f64 / 1024.0)).collect();
        rows.push((format!("load: RSS after round {} of {jobs} jobs", round + 2), all.join(", "), "flat".into()));
    }
    let api = rig.api();
    let (records, index) = (rig.bus().job_records().await?, rig.bus().job_index().await?);
    let mut stored = jobs * rounds.max(1);
    for &size in history {
        if size > stored + RECENT_JOBS {
            let older = size - stored - RECENT_JOBS;
            flotilla_bus::seed_finished_jobs(&records, &index, &Default::default(), older).await?;
            stored += older;
            // The newest jobs are real ones run after the history was written,
            // as in a fleet; a first page trusts the index tail only for jobs
            // made more than the clock-skew margin (2 s) after its first write
            // (orchestrator/src/jobs/index.rs).
            tokio::time::sleep(HISTORY_SETTLES).await;
            concurrent_jobs(rig, RECENT_JOBS, tasks).await?;
            stored += RECENT_JOBS;
        }
        let (newest, none, all, listed) = listings(&api, stored).await?;
        rows.push((
            format!("load: listing with {stored} finished jobs: newest 20 / --status failed (none) / all"),
            format!("{} / {} / {} ({listed} jobs)", ms(newest), ms(none), ms(all)),
            "flat in history size".into(),
        ));
    }
    Ok(rows)
}

/// What the concurrent jobs measured.
struct Load {
    wall: Duration,
    jobs_per_s: f64,
    /// Sorted.
    task_latency: Vec<Duration>,
}

/// Submits `jobs` demo jobs of `tasks` tasks and follows their events until all completed.
async fn concurrent_jobs(rig: &Rig, jobs: usize, tasks: usize) -> anyhow::Result<Load> {
    let mut events = std::pin::pin!(events::follow(rig.bus(), Scope::All, false).await?);
    let api = rig.api();
    let input = setup::regions(tasks);
    let started = Instant::now();
    let submit = futures::stream::iter(0..jobs)
        .map(|_| {
            let (api, input) = (api.clone(), input.clone());
            async move { api.submit(input).await }
        })
        .buffer_unordered(SUBMITTING)
        .collect::<Vec<_>>();
    let follow = async {
        let mut dispatched: HashMap<TaskId, Instant> = HashMap::new();
        let mut latency = Vec::with_capacity(jobs * tasks);
        let mut completed = 0;
        while completed < jobs {
            let Some(ev) = events.next().await else { anyhow::bail!("event stream ended") };
            let Event::Job(j) = ev? else { continue };
            match j.kind {
                JobEventKind::TaskDispatched { task_id, .. } => {
                    dispatched.insert(task_id, Instant::now());
                }
                JobEventKind::TaskReported { task_id, .. } => {
                    latency.extend(dispatched.remove(&task_id).map(|t| t.elapsed()));
                }
                JobEventKind::Completed { .. } => completed += 1,
                JobEventKind::Failed { error } => anyhow::bail!("a load job failed: {error}"),
                _ => {}
            }
        }
        Ok(latency)
    };
    let (submitted, latency) = tokio::time::timeout(LOAD_TIMEOUT, futures::future::join(submit, follow))
        .await
        .with_context(|| format!("the jobs did not complete within {LOAD_TIMEOUT:?}"))?;
    let wall = started.elapsed();
    for s in submitted {
        s?;
    }
    let mut task_latency = latency?;
    anyhow::ensure!(!task_latency.is_empty(), "no task was reported");
    task_latency.sort();
    Ok(Load { wall, jobs_per_s: jobs as f64 / wall.as_secs_f64(), task_latency })
}

/// Median times of the short listings, the time of the full one, and how many jobs it returned.
async fn listings(api: &Client, stored: usize) -> anyhow::Result<(Duration, Duration, Duration, usize)> {
    let (mut newest, mut none) = (Vec::new(), Vec::new());
    for _ in 0..LISTINGS {
        newest.push(timed(api.list(None, 20)).await.context("listing the newest 20")?.0);
        none.push(timed(api.list(Some(JobStatus::Failed), 20)).await.context("listing failed jobs")?.0);
    }
    // Once: at 100 000 jobs it reads 100 000 headers.
    let every = ListRequest { v: SCHEMA_VERSION, ..Default::default() };
    let (all, reply) = timed(api.list_pages(every, stored + 1)).await.context("listing every job")?;
    let listed = reply.jobs.len();
    anyhow::ensure!(listed == stored, "the full listing returned {listed} of {stored} jobs");
    Ok((median(newest), median(none), all, listed))
}

async fn timed<T>(f: impl Future<Output = anyhow::Result<T>>) -> anyhow::Result<(Duration, T)> {
    let started = Instant::now();
    let out = f.await?;
    Ok((started.elapsed(), out))
}

fn median(mut d: Vec<Duration>) -> Duration {
    d.sort();
    d[d.len() / 2]
}

/// Resident memory of the orchestrator and each worker, in KiB.
struct Memory(Vec<(String, u64)>);

impl Memory {
    fn names() -> impl Iterator<Item = String> {
        std::iter::once("orchestrator".to_string()).chain((1..=WORKERS).map(|i| format!("worker-{i}")))
    }

    fn read(rig: &Rig) -> anyhow::Result<Self> {
        Self::names().map(|n| Ok((n.clone(), rig.memory_kib(&n, "VmRSS:")?))).collect::<anyhow::Result<_>>().map(Self)
    }

    fn peak(rig: &Rig) -> anyhow::Result<Self> {
        Self::names().map(|n| Ok((n.clone(), rig.memory_kib(&n, "VmHWM:")?))).collect::<anyhow::Result<_>>().map(Self)
    }

    /// (name, before, peak, after) in MiB.
    fn rows(&self, peak: &Self, after: &Self) -> Vec<(String, String, String, String)> {
        let mib = |k: u64| format!("{:.1} MiB", k as f64 / 1024.0);
        self.0
            .iter()
            .zip(&peak.0)
            .zip(&after.0)
            .map(|(((n, b), (_, p)), (_, a))| (n.clone(), mib(*b), mib(*p), mib(*a)))
            .collect()
    }
}
