//! `flotilla bench`: measures Flotilla on this machine with real processes (a
//! fresh nats-server, orchestrator and workers per scenario, all on loopback)
//! and deterministic scripted models, and prints a table. Results and their
//! setup are recorded in docs/PERFORMANCE.md.
//!
//! Scenarios:
//! - `overhead`: per-task orchestration overhead, dispatch -> report, with a
//!   zero-latency model: one task at a time, p50/p99 over `--tasks` tasks.
//! - `throughput`: `--tasks` tasks published at once, tasks/s with 1 and 2 workers.
//! - `fanout`: a whole job of 20 parallel tasks through the planner with
//!   200 ms per model call and 4 workers (ideal 1.0 s: 3 planner + 2 subagent calls).
//! - `footprint`: first-call prompt tokens of planner and subagent, idle worker RSS.
//! - `mcp`: MCP stdio tool-call latency, persistent session vs per call ([`mcp`]).
//! - `scale`: whole jobs of 1 000 to 100 000 tasks ([`scale`]); only when
//!   named in `--only`, since it takes minutes.
//! - `load`: many concurrent jobs, then listing against a long history
//!   ([`load`]); only when named in `--only`.

mod load;
pub mod mcp;
mod scale;
mod setup;

use std::time::{Duration, Instant};

use clap::Args as ClapArgs;
use flotilla_protocol::ids::{JobId, SubagentType, TaskId};
use flotilla_protocol::{self as protocol, TaskMessage};
use futures::StreamExt;

use setup::Rig;

/// Measure orchestration overhead, throughput, fan-out and footprint.
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// Tasks per overhead/throughput run.
    #[arg(long, default_value_t = 300)]
    pub tasks: usize,
    /// Only these scenarios (overhead, throughput, fanout, footprint, mcp;
    /// scale and load run only when named here).
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// Tasks per job of the `scale` scenario.
    #[arg(long, value_delimiter = ',', default_values_t = [1_000, 10_000, 100_000])]
    pub scale_sizes: Vec<usize>,
    /// Concurrent jobs of the `load` scenario.
    #[arg(long, default_value_t = 1_000)]
    pub load_jobs: usize,
    /// Tasks per job of the `load` scenario.
    #[arg(long, default_value_t = 5)]
    pub load_tasks: usize,
    /// Times the `load` scenario runs its jobs (memory is read after each).
    #[arg(long, default_value_t = 1)]
    pub load_rounds: usize,
    /// Finished jobs in history when the `load` scenario times listings.
    #[arg(long, value_delimiter = ',', default_values_t = [10_000, 100_000])]
    pub load_history: Vec<usize>,
}

fn wanted(args: &Args, name: &str) -> bool {
    args.only.is_empty() || args.only.iter().any(|o| o == name)
}

/// Runs the selected scenarios and prints the table.
pub async fn run(args: Args) -> anyhow::Result<i32> {
    let mut rows: Vec<(String, String, String)> = Vec::new();
    if wanted(&args, "overhead") {
        let rig = Rig::start(1, 4, 0).await?;
        let lat = overhead(&rig, args.tasks).await?;
        rows.push(("dispatch -> report, p50 (1 worker, sequential)".into(), ms(pct(&lat, 50.0)), "<= 2 ms".into()));
        rows.push(("dispatch -> report, p99".into(), ms(pct(&lat, 99.0)), String::new()));
        rig.stop().await;
    }
    if wanted(&args, "throughput") {
        for workers in [1, 2] {
            let rig = Rig::start(workers, 8, 0).await?;
            let tps = throughput(&rig, args.tasks).await?;
            rows.push((
                format!("throughput, {} tasks at once, {workers} worker(s) x 8 slots", args.tasks),
                format!("{tps:.0} tasks/s"),
                String::new(),
            ));
            rig.stop().await;
        }
    }
    if wanted(&args, "fanout") {
        let rig = Rig::start(4, 5, 200).await?;
        let wall = rig.run_job(&setup::regions(20)).await?;
        rows.push((
            "job: 20 parallel tasks, 200 ms/model call, 4 workers (ideal 1.0 s)".into(),
            format!("{:.3} s", wall.as_secs_f64()),
            "<= 1.11 s".into(),
        ));
        rig.stop().await;
    }
    if wanted(&args, "footprint") {
        let rig = Rig::start(1, 4, 0).await?;
        let (planner, subagent) = rig.first_call_tokens(&setup::regions(4)).await?;
        rows.push(("input tokens, first planner model call (demo job)".into(), planner.to_string(), "<= 1300".into()));
        rows.push(("input tokens, first subagent model call".into(), subagent.to_string(), "<= 780".into()));
        rows.push((
            "idle worker RSS".into(),
            format!("{:.1} MiB", rig.worker_rss_kib()? as f64 / 1024.0),
            "<= 30 MiB".into(),
        ));
        rig.stop().await;
    }
    if wanted(&args, "mcp") {
        let settings = flotilla_config::Settings::load(None)?;
        rows.extend(mcp::measure(&settings, 500).await?);
    }
    if args.only.iter().any(|o| o == "scale") {
        rows.extend(scale::measure(&args.scale_sizes).await?);
    }
    if args.only.iter().any(|o| o == "load") {
        rows.extend(load::measure(args.load_jobs, args.load_tasks, args.load_rounds, &args.load_history).await?);
    }
    let mut t = super::table::new(&["measure", "result", "target"]);
    super::table::align_right(&mut t, &[1]);
    for (m, r, target) in rows {
        t.add_row([m, r, target]);
    }
    super::out::out!("{}", super::table::render(t, ""))?;
    Ok(0)
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1000.0)
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    let i = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn task(job: JobId, ty: &SubagentType) -> TaskMessage {
    TaskMessage {
        v: protocol::SCHEMA_VERSION,
        job_id: job,
        task_id: TaskId::new(),
        subagent_type: ty.clone(),
        description: "Compute the gross margin: revenue 120, cost 75".into(),
        tenant: Default::default(),
        attempt: 1,
        deadline: None,
        traceparent: None,
        created_at: protocol::now(),
    }
}

/// Sequential dispatch -> report latencies, sorted.
async fn overhead(rig: &Rig, n: usize) -> anyhow::Result<Vec<Duration>> {
    let job = JobId::new();
    let ty = SubagentType::new("finance")?;
    let mut reports = Box::pin(rig.bus().reports().live_of_job(&Default::default(), &job).await?);
    let mut out = Vec::with_capacity(n);
    for i in 0..n + 20 {
        let t = task(job, &ty);
        let started = Instant::now();
        rig.bus().tasks().publish(&t).await?;
        tokio::time::timeout(Duration::from_secs(30), reports.next())
            .await?
            .ok_or_else(|| anyhow::anyhow!("report stream ended"))?;
        if i >= 20 {
            out.push(started.elapsed()); // the first 20 warm up connections and caches
        }
    }
    out.sort();
    Ok(out)
}

/// Tasks per second with `n` tasks published at once.
async fn throughput(rig: &Rig, n: usize) -> anyhow::Result<f64> {
    let job = JobId::new();
    let ty = SubagentType::new("finance")?;
    let mut reports = Box::pin(rig.bus().reports().live_of_job(&Default::default(), &job).await?);
    let started = Instant::now();
    let publishes = (0..n).map(|_| {
        let t = task(job, &ty);
        let queue = rig.bus().tasks();
        async move { queue.publish(&t).await }
    });
    for r in futures::future::join_all(publishes).await {
        r?;
    }
    for _ in 0..n {
        tokio::time::timeout(Duration::from_secs(60), reports.next())
            .await?
            .ok_or_else(|| anyhow::anyhow!("report stream ended"))?;
    }
    Ok(n as f64 / started.elapsed().as_secs_f64())
}
