//! The scenarios of `flotilla bench`: they measure Flotilla on this machine
//! with real processes (a fresh nats-server, orchestrator and workers per
//! scenario, all on loopback, started by the dev and test kit, tests/kit)
//! and deterministic scripted models, and return the rows of a table that
//! the `flotilla` binary prints (orchestrator/cli/src/commands/bench.rs). Results
//! and their setup are recorded in docs/PERFORMANCE.md.
//!
//! A library of its own so that the `flotilla` binary stays commands and
//! rendering. It drives the processes from outside, over the bus, as a
//! client would: it must not depend on the worker crate, nor on the
//! orchestrator package (whose `flotilla` binary depends on it).
//!
//! Scenarios:
//! - `overhead`: per-task orchestration overhead, dispatch -> report, with a
//!   zero-latency model: one task at a time, p50/p99 over `--tasks` tasks;
//!   then the NATS floor on the same server (tests/kit/src/floor.rs) and the
//!   p50 as a multiple of a JetStream publish-ack; then two paired runs:
//!   with and without OTLP export (`tracing_cost`), and a task calling an
//!   MCP tool with its turn stored before the call and with the tool
//!   listed read-only (`write_ahead`).
//! - `throughput`: `--tasks` tasks published at once, tasks/s with 1 and 2 workers.
//! - `fanout`: a whole job of 20 parallel tasks through the planner with
//!   200 ms per model call and 4 workers (ideal 1.0 s: 3 planner + 2 subagent calls).
//! - `footprint`: first-call prompt tokens of planner and subagent; worker
//!   RSS idle and with 16 subagents in flight (`memory`).
//! - `mcp`: MCP stdio tool-call latency, persistent session vs per call ([`mcp`]).
//! - `scale`: whole jobs of 1 000 to 100 000 tasks (`scale`); only when
//!   named in `--only`, since it takes minutes.
//! - `load`: many concurrent jobs, then listing against a long history
//!   (`load`); only when named in `--only`.
//! - `concurrency`: 1 000 subagents in flight at once, each two 2 s model
//!   calls, on 4 workers x 250 slots (`concurrency`); only when named in
//!   `--only`.
//! - `resume`: the step journal's size and cost per step, and how soon a
//!   SIGKILLed worker's tasks resume elsewhere (`resume`); only when named
//!   in `--only`, since its takeovers wait for `ack_wait`.

mod concurrency;
mod load;
pub mod mcp;
mod memory;
mod resume;
mod scale;
mod setup;
mod tracing_cost;
mod write_ahead;

use std::time::{Duration, Instant};

use flotilla_bus::FollowUps;
use flotilla_protocol::ids::{JobId, SubagentType, TaskId};
use flotilla_protocol::{self as protocol, TaskMessage};
use futures::StreamExt;

use setup::Rig;

/// One row of the table: measure, result, target.
pub type Row = (String, String, String);

/// What to run, and how large (the flags of `flotilla bench`).
#[derive(Clone, Debug)]
pub struct Options {
    /// Tasks per overhead/throughput run.
    pub tasks: usize,
    /// Only these scenarios (all but scale and load when empty; scale and
    /// load run only when named here).
    pub only: Vec<String>,
    /// Tasks per job of the `scale` scenario.
    pub scale_sizes: Vec<usize>,
    /// Concurrent jobs of the `load` scenario.
    pub load_jobs: usize,
    /// Tasks per job of the `load` scenario.
    pub load_tasks: usize,
    /// Times the `load` scenario runs its jobs (memory is read after each).
    pub load_rounds: usize,
    /// Finished jobs in history when the `load` scenario times listings.
    pub load_history: Vec<usize>,
}

fn wanted(args: &Options, name: &str) -> bool {
    args.only.is_empty() || args.only.iter().any(|o| o == name)
}

/// Runs the selected scenarios; returns the rows of the table.
pub async fn run(args: &Options) -> anyhow::Result<Vec<Row>> {
    // Every scenario starts a nats-server of its own.
    flotilla_testkit::nats::check_program().map_err(|why| anyhow::anyhow!("flotilla bench: {why}"))?;
    let mut rows: Vec<Row> = Vec::new();
    if wanted(args, "overhead") {
        let finance_tools = write_ahead::server()?;
        let rig = Rig::start(1, 4, 0).await?;
        let before = rig.nats().sent_by_connection().await;
        let lat = overhead(&rig, args.tasks).await?;
        let after = rig.nats().sent_by_connection().await;
        let p50 = pct(&lat, 50.0);
        rows.push(("dispatch -> report, p50 (1 worker, sequential)".into(), ms(p50), "<= 0.5 ms".into()));
        rows.push(("dispatch -> report, p99".into(), ms(pct(&lat, 99.0)), String::new()));
        // What each process wrote to NATS, per task (warm-up tasks included).
        let tasks = (args.tasks + OVERHEAD_WARM_UP) as f64;
        let mut total = (0.0, 0.0);
        for (name, (msgs, bytes)) in &after {
            let (m0, b0) = before.get(name).copied().unwrap_or_default();
            let per = ((msgs - m0) as f64 / tasks, (bytes - b0) as f64 / tasks);
            total = (total.0 + per.0, total.1 + per.1);
            if per.0 >= 0.5 {
                rows.push((
                    format!("  written to NATS per task by {name}"),
                    format!("{:.1} msgs, {:.0} B", per.0, per.1),
                    String::new(),
                ));
            }
        }
        rows.push((
            "written to NATS per task, every connection".into(),
            format!("{:.1} msgs, {:.0} B", total.0, total.1),
            "<= 3 KB".into(),
        ));
        // The NATS floor of the same run, on the same server.
        let floor = flotilla_testkit::floor::measure(&rig.nats().url(), 300).await?;
        rows.push(("NATS floor: core request/reply, p50".into(), ms(floor.request_reply), String::new()));
        rows.push(("NATS floor: JetStream publish with ack, p50".into(), ms(floor.publish_ack), String::new()));
        rows.push(("NATS floor: KV put, p50".into(), ms(floor.kv_put), String::new()));
        rows.push(("NATS floor: Object Store put of 1 KiB, p50".into(), ms(floor.object_put), String::new()));
        rows.push((
            "dispatch -> report p50 / JetStream publish-ack p50".into(),
            format!("{:.1}x", p50.as_secs_f64() / floor.publish_ack.as_secs_f64()),
            "<= 5x".into(),
        ));
        rig.stop();
        // The same path with OTLP export of every span and metric on, beside
        // one without, their tasks alternating.
        let (off, on, requests) = tracing_cost::overhead_paired(args.tasks).await?;
        let (off, on) = (pct(&off, 50.0), pct(&on, 50.0));
        rows.push(("dispatch -> report, p50, OTLP export off (paired run)".into(), ms(off), String::new()));
        rows.push((
            format!("dispatch -> report, p50, OTLP export on (paired run, {requests} export requests taken)"),
            ms(on),
            String::new(),
        ));
        rows.push((
            "cost of OTLP export per task (p50 on / p50 off - 1)".into(),
            format!("{:+.1} %", (on.as_secs_f64() / off.as_secs_f64() - 1.0) * 100.0),
            "< 5 %".into(),
        ));
        // A task whose tool has effects, whose tool-calling turn is stored
        // before the call runs, beside the same task with the tool listed
        // read-only, their tasks alternating.
        let (awaited, listed) = write_ahead::measure(&finance_tools, args.tasks).await?;
        let (awaited, listed) = (pct(&awaited, 50.0), pct(&listed, 50.0));
        rows.push((
            "dispatch -> report, p50, MCP tool, its turn stored before the call (paired run)".into(),
            ms(awaited),
            String::new(),
        ));
        rows.push((
            "dispatch -> report, p50, MCP tool listed in read_only_tools (paired run)".into(),
            ms(listed),
            String::new(),
        ));
    }
    if wanted(args, "throughput") {
        for workers in [1, 2] {
            let rig = Rig::start(workers, 8, 0).await?;
            let tps = throughput(&rig, args.tasks).await?;
            rows.push((
                format!("throughput, {} tasks at once, {workers} worker(s) x 8 slots", args.tasks),
                format!("{tps:.0} tasks/s"),
                if workers == 1 { ">= 3000 tasks/s".into() } else { String::new() },
            ));
            rig.stop();
        }
    }
    if wanted(args, "fanout") {
        let rig = Rig::start(4, 5, 200).await?;
        let wall = rig.run_job(&setup::regions(20)).await?;
        rows.push((
            "job: 20 parallel tasks, 200 ms/model call, 4 workers (ideal 1.0 s)".into(),
            format!("{:.3} s", wall.as_secs_f64()),
            "<= 1.11 s".into(),
        ));
        rig.stop();
    }
    if wanted(args, "footprint") {
        let rig = Rig::start(1, 4, 0).await?;
        let (planner, subagent) = rig.first_call_tokens(&setup::regions(4)).await?;
        rows.push(("input tokens, first planner model call (demo job)".into(), planner.to_string(), "<= 800".into()));
        rows.push(("input tokens, first subagent model call".into(), subagent.to_string(), "<= 780".into()));
        rows.push((
            "worker RSS, scripted model (o200k tables built at start)".into(),
            format!("{:.1} MiB", rig.worker_rss_kib()? as f64 / 1024.0),
            String::new(),
        ));
        rig.stop();
        rows.extend(memory::measure().await?);
    }
    if wanted(args, "mcp") {
        let settings = flotilla_config::Settings::load(None)?;
        rows.extend(mcp::measure(&settings, 500).await?);
    }
    if args.only.iter().any(|o| o == "scale") {
        rows.extend(scale::measure(&args.scale_sizes).await?);
    }
    if args.only.iter().any(|o| o == "concurrency") {
        rows.extend(concurrency::measure().await?);
    }
    if args.only.iter().any(|o| o == "resume") {
        rows.extend(resume::measure().await?);
    }
    if args.only.iter().any(|o| o == "load") {
        rows.extend(load::measure(args.load_jobs, args.load_tasks, args.load_rounds, &args.load_history).await?);
    }
    Ok(rows)
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

/// Tasks of the overhead run that warm up connections and caches, not timed.
pub(crate) const OVERHEAD_WARM_UP: usize = 20;

/// Sequential dispatch -> report latencies, sorted.
async fn overhead(rig: &Rig, n: usize) -> anyhow::Result<Vec<Duration>> {
    let job = JobId::new();
    let ty = SubagentType::new("finance")?;
    let mut reports = Box::pin(rig.bus().reports().live_of_job(&Default::default(), &job).await?);
    let mut out = Vec::with_capacity(n);
    for i in 0..n + OVERHEAD_WARM_UP {
        let took = dispatch_to_report(rig, job, &ty, &mut reports).await?;
        if i >= OVERHEAD_WARM_UP {
            out.push(took); // the first ones warm up connections and caches
        }
    }
    out.sort();
    Ok(out)
}

/// Publishes one task of `job` to `rig` and waits for its report on
/// `reports` (the job's live reports): the time in between.
pub(crate) async fn dispatch_to_report<S>(
    rig: &Rig,
    job: JobId,
    ty: &SubagentType,
    reports: &mut std::pin::Pin<Box<S>>,
) -> anyhow::Result<Duration>
where
    S: futures::Stream,
{
    let t = task(job, ty);
    let started = Instant::now();
    rig.bus().tasks().publish(&t, FollowUps::None).await?;
    tokio::time::timeout(Duration::from_secs(30), reports.next())
        .await?
        .ok_or_else(|| anyhow::anyhow!("report stream ended"))?;
    Ok(started.elapsed())
}

/// Dispatch -> report latencies of `n` sequential tasks on two rigs at
/// once, their tasks alternating so both see the same moments of a noisy
/// machine: (on `a`, on `b`), each sorted.
pub(crate) async fn paired(a: &Rig, b: &Rig, n: usize) -> anyhow::Result<(Vec<Duration>, Vec<Duration>)> {
    let ty = SubagentType::new("finance")?;
    let (job_a, job_b) = (JobId::new(), JobId::new());
    let mut reports_a = Box::pin(a.bus().reports().live_of_job(&Default::default(), &job_a).await?);
    let mut reports_b = Box::pin(b.bus().reports().live_of_job(&Default::default(), &job_b).await?);
    let (mut lat_a, mut lat_b) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for i in 0..n + OVERHEAD_WARM_UP {
        for (rig, job, reports, out) in [(a, job_a, &mut reports_a, &mut lat_a), (b, job_b, &mut reports_b, &mut lat_b)]
        {
            let took = dispatch_to_report(rig, job, &ty, reports).await?;
            if i >= OVERHEAD_WARM_UP {
                out.push(took);
            }
        }
    }
    lat_a.sort();
    lat_b.sort();
    Ok((lat_a, lat_b))
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
        async move { queue.publish(&t, FollowUps::None).await }
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
