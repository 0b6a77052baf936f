//! Several orchestrators share one prefix; each job is
//! planned by the holder of its lease, and a dead orchestrator's jobs are
//! taken over by another within `[planner] lease_ttl`, resumed from their
//! checkpoints with no task dispatched or started twice.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use flotilla_protocol::ids::JobId;
use flotilla_protocol::{JobStatus, TaskStatus};
use flotilla_testkit::{EventLog, Proc, TestConfig, eventually};
use serde_json::Value;

use crate::durability::regions;
use flotilla_testkit::{Deployment, TIMEOUT};

/// Lease TTL of these tests, seconds.
const TTL: u64 = 3;

fn config(url: &str, slots: usize, latency_ms: u64) -> TestConfig {
    let mut c = TestConfig::demo(url, slots, latency_ms);
    c.section_replace("task_timeout = 60\n", &format!("task_timeout = 60\nlease_ttl = {TTL}\n"));
    c
}

fn orchestrator(d: &Deployment, name: &str) -> Proc {
    Proc::spawn(name, "flotilla", &["orchestrator", "--config", &d.config_arg()], &[])
}

/// `started` progress events per task id.
fn starts(log: &EventLog) -> HashMap<String, usize> {
    let mut m = HashMap::new();
    for (s, v) in &log.seen {
        if s.contains(".progress.") && v["event"] == "started" {
            *m.entry(flotilla_testkit::events::task_of(s, v)).or_default() += 1;
        }
    }
    m
}

fn dispatched(s: &str, v: &Value) -> bool {
    s.ends_with(".event") && v["event"] == "task_dispatched"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_orchestrators_job_is_taken_over_within_the_lease_ttl() {
    // Three tasks of about 3 s (two model calls of 1.5 s each).
    let mut d = Deployment::start(2, |url| config(url, 4, 1500)).await;
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let job = d.submit(&regions(3)).await;
    log.until_count(TIMEOUT, 3, "three dispatches", dispatched).await;
    // A rolling update: B starts while A runs the job; B does not plan it.
    let b = orchestrator(&d, "orchestrator-b");
    let leases = d.bus.leases().await.unwrap();
    let owner_a = leases.owner(&job).await.unwrap().expect("the running job has a lease");
    // B is up and has looked at the unfinished jobs; A still holds this one.
    eventually(TIMEOUT, "orchestrator B to be ready", || async {
        b.log().contains("orchestrator ready").then_some(())
    })
    .await;
    assert_eq!(leases.owner(&job).await.unwrap().as_ref(), Some(&owner_a), "B took A's job");
    let a = d.orchestrator.as_mut().unwrap();
    a.kill();
    let killed = Instant::now();
    let end = log.job_end(TIMEOUT).await;
    let took = killed.elapsed();
    assert_eq!(end["event"], "completed", "{end}");
    assert!(b.log().contains("taking the job over"), "{}", b.log());
    log.drain();
    let rec = d.status(job).await;
    assert_eq!(rec.tasks.len(), 3, "no task dispatched twice: {:?}", rec.tasks);
    assert!(rec.tasks.iter().all(|t| t.status == Some(TaskStatus::Completed)));
    let starts = starts(&log);
    assert!(starts.len() == 3 && starts.values().all(|n| *n == 1), "each task started once: {starts:?}");
    assert!(rec.answer.unwrap().contains("| r2 | 102 | 52 |"));
    // The demo plan is 4 planner turns; the new owner replays at most one.
    let calls = rec.planner_usage.model_calls;
    assert!((4..=5).contains(&calls), "planner model calls: {calls}");
    eprintln!(
        "figures: lease_ttl {TTL} s; job completed {:.1} s after its orchestrator was SIGKILLed; \
         {calls} planner model calls for a 4-turn plan",
        took.as_secs_f64()
    );
}

/// A direct job (one task, no planner) whose orchestrator dies while its
/// task runs: the next owner re-attaches to that task under its fixed
/// dispatch key, so the task runs once and its report is the answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_orchestrators_direct_job_reattaches_to_its_one_task() {
    let mut d = Deployment::start(1, |url| config(url, 1, 1500)).await;
    d.orchestrator_ready().await;
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let description = "Compute the gross margin of region east: revenue 200, cost 50.";
    let ty = flotilla_protocol::ids::SubagentType::new("finance").unwrap();
    let job = d.client().submit_task(ty, description.into(), Vec::new()).await.unwrap();
    log.until_count(TIMEOUT, 1, "the task started", |s, v| s.contains(".progress.") && v["event"] == "started").await;
    let b = orchestrator(&d, "orchestrator-b");
    eventually(TIMEOUT, "orchestrator B to be ready", || async {
        b.log().contains("orchestrator ready").then_some(())
    })
    .await;
    d.orchestrator.as_mut().unwrap().kill();
    let end = log.job_end(TIMEOUT).await;
    assert_eq!(end["event"], "completed", "{end}");
    assert!(b.log().contains("taking the job over"), "{}", b.log());
    log.drain();
    let rec = d.status(job).await;
    assert_eq!(rec.tasks.len(), 1, "no second task dispatched: {:?}", rec.tasks);
    assert_eq!(rec.tasks[0].status, Some(TaskStatus::Completed));
    let starts = starts(&log);
    assert_eq!(starts.values().copied().collect::<Vec<_>>(), [1], "the task started once: {starts:?}");
    assert_eq!(rec.answer.as_deref().map(str::trim), Some("0.75"));
    assert_eq!(rec.planner_usage.model_calls, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_orchestrators_killed_in_turn_complete_every_job_once() {
    let mut d = Deployment::start(3, |url| config(url, 4, 150)).await;
    let mut orchestrators = [d.orchestrator.take().unwrap(), orchestrator(&d, "o2"), orchestrator(&d, "o3")];
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let mut jobs: Vec<JobId> = Vec::new();
    for _ in 0..20 {
        jobs.push(d.submit(&regions(15)).await);
    }
    // Kill each orchestrator in turn, a while into the run, and restart it.
    for (i, at) in [40, 120, 200].into_iter().enumerate() {
        log.until_count(TIMEOUT, at, "dispatches", dispatched).await;
        orchestrators[i].kill();
        orchestrators[i] = orchestrator(&d, &format!("o{}-restarted", i + 1));
    }
    for job in &jobs {
        let rec = eventually(Duration::from_secs(120), "every job to end", || async {
            let r = d.status_opt(*job).await?;
            r.status.is_terminal().then_some(r)
        })
        .await;
        assert_eq!(rec.status, JobStatus::Completed, "{job}: {:?}", rec.error);
        assert_eq!(rec.tasks.len(), 15, "{job}: planned once, never by two owners: {:?}", rec.tasks.len());
        assert!(rec.tasks.iter().all(|t| t.status == Some(TaskStatus::Completed)), "{job}");
    }
    log.drain();
    let starts = starts(&log);
    assert_eq!(starts.len(), 300, "every task started");
    let twice: Vec<_> = starts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "no worker was killed, so no task starts twice: {twice:?}");
    let takeovers: usize = orchestrators.iter().map(|o| o.log().matches("taking the job over").count()).sum();
    eprintln!(
        "figures: 3 orchestrators, 3 workers, 20 jobs x 15 tasks, 3 orchestrator SIGKILLs: {takeovers} takeovers by surviving or restarted orchestrators, 300 tasks each started once"
    );
}

/// The lease contract itself, against a real nats-server: one holder at a
/// time, renewals keep it, a holder that stops renewing loses it after the
/// TTL (by the server's clock), a released lease is free at once, and a
/// holder whose lease was taken is told so on its next renewal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_has_one_holder_until_it_expires_or_is_released() {
    let nats = flotilla_testkit::NatsServer::start().await;
    let config = flotilla_config::NatsConfig { url: nats.url(), ..Default::default() };
    let bus = flotilla_bus::Bus::connect(&config, "lease-test", Duration::from_secs(10)).await.unwrap();
    let leases = bus.leases().await.unwrap();
    let (job, ttl) = (JobId::new(), Duration::from_secs(TTL));
    let mut a = leases.acquire(&job, "a", ttl).await.unwrap().expect("a free lease is taken");
    assert!(leases.acquire(&job, "b", ttl).await.unwrap().is_none(), "one holder");
    // Renewed for twice its TTL, it stays a's.
    for _ in 0..6 {
        tokio::time::sleep(ttl / 3).await;
        assert!(leases.renew(&mut a, ttl).await.unwrap(), "renewed");
        assert!(leases.acquire(&job, "b", ttl).await.unwrap().is_none(), "still a's");
    }
    assert_eq!(leases.owner(&job).await.unwrap().as_deref(), Some("a"));
    // a stops renewing: b gets it once the TTL has passed, not before.
    let stopped = Instant::now();
    let b = eventually(Duration::from_secs(TTL * 4), "the lease to expire", || async {
        leases.acquire(&job, "b", ttl).await.unwrap()
    })
    .await;
    assert!(stopped.elapsed() >= Duration::from_secs(TTL - 1), "not before the TTL: {:?}", stopped.elapsed());
    assert!(!leases.renew(&mut a, ttl).await.unwrap(), "a is fenced on its next renewal");
    // Released, it is free at once.
    leases.release(&b).await.unwrap();
    assert!(leases.acquire(&job, "c", ttl).await.unwrap().is_some());
}

/// Draining, orchestrator side: a stopped orchestrator (SIGTERM) stops
/// its planners at a step boundary and gives its leases back, so another
/// takes its job at once, not after the lease TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_orchestrator_hands_its_job_over_at_once() {
    let mut d = Deployment::start(2, |url| {
        let mut c = TestConfig::demo(url, 4, 1500);
        // A TTL far longer than the test: only a release can move the job in time.
        c.section_replace("task_timeout = 60\n", "task_timeout = 60\nlease_ttl = 120\n");
        c
    })
    .await;
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let job = d.submit(&regions(3)).await;
    log.until_count(TIMEOUT, 3, "three dispatches", dispatched).await;
    let b = orchestrator(&d, "orchestrator-b");
    eventually(TIMEOUT, "orchestrator B to be ready", || async {
        b.log().contains("orchestrator ready").then_some(())
    })
    .await;
    let stopped = Instant::now();
    assert_eq!(d.orchestrator.as_mut().unwrap().terminate(), Some(0));
    let end = log.job_end(TIMEOUT).await;
    assert_eq!(end["event"], "completed", "{end}");
    assert!(stopped.elapsed() < Duration::from_secs(60), "moved long before the 120 s TTL");
    assert!(b.log().contains("taking the job over"), "{}", b.log());
    log.drain();
    let starts = starts(&log);
    assert!(starts.len() == 3 && starts.values().all(|n| *n == 1), "each task started once: {starts:?}");
    assert_eq!(d.status(job).await.tasks.len(), 3);
}

/// A job goes to whichever orchestrator has a free planning slot: submitted to
/// a full orchestrator, it waits unowned and another one, with a slot free,
/// plans it while the first is still busy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_submitted_to_a_full_orchestrator_is_planned_by_one_with_a_free_slot() {
    let d = Deployment::start(2, |url| {
        let mut c = TestConfig::demo(url, 4, 1500);
        c.section_replace("task_timeout = 60\n", &format!("task_timeout = 60\nlease_ttl = {TTL}\nconcurrency = 1\n"));
        c
    })
    .await;
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let first = d.submit(&regions(3)).await;
    log.until_count(TIMEOUT, 3, "the first job's dispatches", dispatched).await;
    // The only orchestrator is busy with the first job: the second waits.
    let second = d.submit(&regions(2)).await;
    let b = orchestrator(&d, "orchestrator-b");
    let of = |job: JobId| move |s: &str, v: &Value| s.contains(&job.to_string()) && v["event"] == "task_dispatched";
    log.until(TIMEOUT, "the second job's first dispatch", of(second)).await;
    let first_ended = log
        .seen
        .iter()
        .any(|(s, v)| s.contains(&first.to_string()) && s.ends_with(".event") && v["event"] == "completed");
    assert!(!first_ended, "the second job did not wait for the first one's slot");
    assert!(b.log().contains("starting a waiting job"), "{}", b.log());
    for job in [first, second] {
        let rec = eventually(TIMEOUT, "both jobs to end", || async {
            let r = d.status_opt(job).await?;
            r.status.is_terminal().then_some(r)
        })
        .await;
        assert_eq!(rec.status, JobStatus::Completed, "{job}");
    }
}
