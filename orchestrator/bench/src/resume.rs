//! `resume`: durable subagent steps (docs/RELIABILITY.md, "Step journal").
//! Three figures on a fresh deployment each:
//!
//! - the step journal on a job without faults: 20 tasks of 10 model turns
//!   (9 tool calls, then the answer) at 200 ms a turn on 4 workers x 5
//!   slots, published straight to the queue; its wall time against the
//!   ideal (10 x 200 ms), and the journal's entries and bytes per step, read
//!   from the stream afterwards;
//! - the cost of one step's journal write, the one ack a step waits for: an
//!   entry of the measured mean size appended and acked on the same server,
//!   p50/p99 over 500, and as a share of the 200 ms job's wall time;
//! - keep-alive traffic: bytes clients send NATS per running task per
//!   second (in-progress acks every `ack_wait / 3`, heartbeat events),
//!   8 tasks each inside one 30 s model call, against the same deployment
//!   idle, over 2 x `ack_wait` each (the server's `/varz` `in_bytes`);
//! - takeover: 8 tasks of 10 turns at 500 ms on one worker, SIGKILLed once
//!   every task is past step 3 with a second worker waiting; kill -> each
//!   task's `resumed` event, p50/p99 over two rounds (16 tasks), with the
//!   default `ack_wait`.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use flotilla_bus::{FollowUps, Journal};
use flotilla_client::events::{self, Event, Scope};
use flotilla_config::NatsConfig;
use flotilla_protocol::ids::{JobId, SubagentType, TaskId};
use flotilla_protocol::{Message, ProgressKind};
use futures::StreamExt;
use serde::{Deserialize, Serialize};

use crate::setup::{self, FinanceModel, Rig};
use crate::{Row, ms, pct, task};

/// Model turns per task.
const STEPS: usize = 10;

/// A finance model of `STEPS` turns taking `latency_ms` each: a margin
/// calculation per turn (distinct arguments, so no loop detection), then
/// the last margin as the answer.
fn steps_script(latency_ms: u64) -> String {
    let mut s = format!("latency_ms = {latency_ms}\n");
    for i in 1..STEPS {
        s.push_str(&format!(
            "[[turns]]\n[[turns.calls]]\ntool = \"calculate_margin\"\nargs = '{{\"revenue\": {}, \"cost\": 50}}'\n",
            100 + i
        ));
    }
    s.push_str("[[turns]]\ncontent = \"{{ last[0].value.margin }}\"\n");
    s
}

async fn rig(workers: usize, slots: usize, latency_ms: u64) -> anyhow::Result<Rig> {
    let (planner, finance) = (setup::planner(0), steps_script(latency_ms));
    Rig::launch(workers, |url| setup::config_with(url, &planner, FinanceModel::Scripted(&finance), slots, "")).await
}

/// Publishes `n` tasks of one job at once and waits for their reports;
/// returns the wall time.
async fn run_tasks(rig: &Rig, n: usize) -> anyhow::Result<Duration> {
    let job = JobId::new();
    let ty = SubagentType::new("finance")?;
    let mut reports = Box::pin(rig.bus().reports().live_of_job(&Default::default(), &job).await?);
    let tasks: Vec<_> = (0..n).map(|_| task(job, &ty)).collect();
    let started = Instant::now();
    for t in &tasks {
        rig.bus().tasks().publish(t, FollowUps::None).await?;
    }
    for _ in 0..n {
        tokio::time::timeout(Duration::from_secs(120), reports.next())
            .await?
            .ok_or_else(|| anyhow::anyhow!("report stream ended"))?;
    }
    Ok(started.elapsed())
}

/// A journal entry of a given size, for timing appends.
#[derive(Serialize, Deserialize)]
struct Filler {
    v: u32,
    pad: String,
}

impl Message for Filler {
    const NAME: &'static str = "bench journal entry";
}

/// Appends of `bytes`-sized entries, each awaited, sorted.
async fn appends(journal: &Journal, bytes: usize, n: usize) -> anyhow::Result<Vec<Duration>> {
    let key = journal.key(&SubagentType::new("bench")?, &Default::default(), &JobId::new(), &TaskId::new());
    let entry = Filler { v: 1, pad: "x".repeat(bytes.saturating_sub(20)) };
    let mut out = Vec::with_capacity(n);
    for i in 0..n + 20 {
        let started = Instant::now();
        journal.append(&key, &entry, false, None).await?.stored().await?;
        if i >= 20 {
            out.push(started.elapsed());
        }
    }
    out.sort();
    Ok(out)
}

/// Bytes per second clients send NATS per running task, from the in-progress
/// acks and heartbeat events of 8 tasks waiting in one long model call,
/// less the same deployment's idle traffic.
async fn keepalive_bytes_per_task_second() -> anyhow::Result<f64> {
    let rig = Rig::launch(1, |url| {
        let finance = flotilla_testkit::scripts::finance_margin(30_000);
        setup::config_with(url, &setup::planner(0), FinanceModel::Scripted(&finance), 8, "")
    })
    .await?;
    let window = Duration::from_secs(2 * NatsConfig::default().ack_wait);
    let idle = {
        let before = rig.nats().bytes_received().await;
        tokio::time::sleep(window).await;
        rig.nats().bytes_received().await - before
    };
    let mut events = Box::pin(events::follow(rig.bus(), Scope::All, true).await?);
    let job = JobId::new();
    let ty = SubagentType::new("finance")?;
    for _ in 0..8 {
        rig.bus().tasks().publish(&task(job, &ty), FollowUps::None).await?;
    }
    let mut started = HashSet::new();
    while started.len() < 8 {
        if let Event::Progress(p) = next(&mut events).await?
            && matches!(p.kind, ProgressKind::Started)
        {
            started.insert(p.task_id);
        }
    }
    drop(events);
    let before = rig.nats().bytes_received().await;
    tokio::time::sleep(window).await;
    let busy = rig.nats().bytes_received().await - before;
    rig.stop();
    Ok(busy.saturating_sub(idle) as f64 / 8.0 / window.as_secs_f64())
}

/// Kill -> `resumed` of each of 8 tasks running on the killed worker.
async fn takeover_round() -> anyhow::Result<Vec<Duration>> {
    let mut rig = rig(1, 8, 500).await?;
    let mut events = Box::pin(events::follow(rig.bus(), Scope::All, true).await?);
    let job = JobId::new();
    let ty = SubagentType::new("finance")?;
    let tasks: Vec<_> = (0..8).map(|_| task(job, &ty)).collect();
    for t in &tasks {
        rig.bus().tasks().publish(t, FollowUps::None).await?;
    }
    let mut past: HashSet<TaskId> = HashSet::new();
    while past.len() < tasks.len() {
        if let Event::Progress(p) = next(&mut events).await?
            && matches!(p.kind, ProgressKind::ModelCall { step, .. } if step >= 3)
        {
            past.insert(p.task_id);
        }
    }
    rig.add_worker("worker-2").await?;
    rig.kill_worker("worker-1")?;
    let killed = Instant::now();
    let mut resumed: HashMap<TaskId, Duration> = HashMap::new();
    while resumed.len() < tasks.len() {
        if let Event::Progress(p) = next(&mut events).await?
            && matches!(p.kind, ProgressKind::Resumed { .. })
        {
            resumed.entry(p.task_id).or_insert_with(|| killed.elapsed());
        }
    }
    rig.stop();
    Ok(resumed.into_values().collect())
}

async fn next(events: &mut (impl futures::Stream<Item = anyhow::Result<Event>> + Unpin)) -> anyhow::Result<Event> {
    tokio::time::timeout(Duration::from_secs(60), events.next())
        .await?
        .ok_or_else(|| anyhow::anyhow!("event stream ended"))?
}

/// The rows of the `resume` scenario.
pub async fn measure() -> anyhow::Result<Vec<Row>> {
    let mut rows = Vec::new();
    let rig = rig(4, 5, 200).await?;
    let wall = run_tasks(&rig, 20).await?;
    let journal = rig.bus().journal();
    let (entries, bytes) = journal.usage().await?;
    let steps = (20 * STEPS) as u64;
    let mean = bytes / entries.max(1);
    rows.push((
        format!("job: 20 tasks x {STEPS} turns, 200 ms/turn, 4 workers x 5 (ideal {:.1} s)", STEPS as f64 * 0.2),
        format!("{:.3} s", wall.as_secs_f64()),
        String::new(),
    ));
    rows.push((
        "step journal, per model turn (entries; bytes stored)".into(),
        format!("{:.2}; {} B", entries as f64 / steps as f64, bytes / steps),
        String::new(),
    ));
    let lat = appends(&journal, mean as usize, 500).await?;
    let p50 = pct(&lat, 50.0);
    let per_step = p50.as_secs_f64() * entries as f64 / steps as f64;
    rows.push((format!("journal append of one {mean}-byte entry, p50"), ms(p50), "< 1 ms per step".into()));
    rows.push(("journal append, p99".into(), ms(pct(&lat, 99.0)), String::new()));
    rows.push((
        "journal writes, share of a 200 ms turn (as if each were awaited)".into(),
        format!("{:.2} %", per_step / 0.2 * 100.0),
        "< 5 %".into(),
    ));
    rig.stop();
    rows.push((
        format!("keep-alive traffic per running task (ack_wait {} s)", NatsConfig::default().ack_wait),
        format!("{:.0} B/s", keepalive_bytes_per_task_second().await?),
        String::new(),
    ));
    let mut takeover = takeover_round().await?;
    takeover.extend(takeover_round().await?);
    takeover.sort();
    let ack_wait = NatsConfig::default().ack_wait;
    rows.push((
        format!("resume after SIGKILL, p50 (16 tasks, ack_wait {ack_wait} s)"),
        format!("{:.2} s", pct(&takeover, 50.0).as_secs_f64()),
        "<= 10 s".into(),
    ));
    rows.push((
        "resume after SIGKILL, p99".into(),
        format!("{:.2} s", pct(&takeover, 99.0).as_secs_f64()),
        String::new(),
    ));
    Ok(rows)
}
