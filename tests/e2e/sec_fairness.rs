//! Replays of the tenant-fairness and consumer attacks of the security
//! review (docs/SECURITY.md "Tenant quotas and fairness"), against real
//! nats-server, orchestrator and worker processes:
//!
//! - tenant acme floods the deployment with jobs of many tasks; tenant
//!   globex's demo-like job still gets a planning slot at once and its tasks
//!   start while acme's backlog is far from drained, never more than the
//!   caps behind acme's (the time ratio is printed, not asserted: the figure
//!   in docs/SECURITY.md comes from this test);
//! - acme floods the job API and piles up jobs: refused with `limit` errors
//!   that name the key and say when to retry, while globex is answered;
//! - one `map_tasks` call over more items than `[tenants] max_map_items`
//!   is refused before any task is dispatched;
//! - a client credential (deploy/nats/roles.conf) creating durable consumers
//!   on the events stream: each gets the stream's inactive threshold and
//!   disappears unread, and creating more than the stream holds is refused.

use std::time::{Duration, Instant};

use async_nats::jetstream::consumer::{DeliverPolicy, pull};
use flotilla_bus::Bus;
use flotilla_protocol::ids::{JobId, Tenant};
use flotilla_protocol::{
    ApiReply, ErrorInfo, ErrorKind, ListReply, ListRequest, SCHEMA_VERSION, SubmitReply, SubmitRequest,
};
use flotilla_testkit::nats_conf::{ConfiguredNats, deploy_dir};
use flotilla_testkit::{EventLog, RawNats, TestConfig, eventually, proc::run_cli};
use serde_json::Value;

use crate::durability::regions;
use crate::security::{raw_as, spawn_roles};
use flotilla_testkit::{Deployment, TIMEOUT};

/// Tasks of one tenant in flight (`[tenants] max_tasks_in_flight`).
const IN_FLIGHT: usize = 2;
/// Milliseconds of each finance model call (two calls a task).
const LATENCY_MS: u64 = 200;

fn tenant(name: &str) -> Tenant {
    Tenant::new(name).unwrap()
}

/// The demo setup with one worker of 4 finance slots, 2 planning slots, and
/// `tenants` as the `[tenants]` section.
fn demo(url: &str, latency_ms: u64, tenants: &str) -> TestConfig {
    let mut c = TestConfig::demo(url, 4, latency_ms);
    c.section_replace("[planner]\nmodel = \"planner\"\n", "[planner]\nmodel = \"planner\"\nconcurrency = 2\n");
    c.section(&format!("[tenants]\n{tenants}"));
    c
}

async fn submit_as(bus: &Bus, tenant: &Tenant, input: &str) -> Result<JobId, ErrorInfo> {
    let req = SubmitRequest { v: SCHEMA_VERSION, input: input.into(), files: vec![], subagent_type: None };
    let reply = eventually(TIMEOUT, "the orchestrator to answer a submit", || {
        let req = req.clone();
        async move { bus.request::<_, ApiReply<SubmitReply>>(tenant, "submit", &req, Duration::from_secs(5)).await.ok() }
    })
    .await;
    reply.into_result().map(|r| r.job_id)
}

/// The tenant and job of a `flotilla.job.<tenant>.<job>.…` subject.
fn job_of(subject: &str) -> (&str, &str) {
    let mut t = subject.split('.').skip(2);
    (t.next().unwrap_or_default(), t.next().unwrap_or_default())
}

fn is_event(s: &str, v: &Value, job: &JobId, event: &str) -> bool {
    s.ends_with(".event") && job_of(s).1 == job.to_string() && v["event"] == event
}

fn is_started(s: &str, v: &Value) -> bool {
    s.contains(".progress.") && v["event"] == "started"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flooding_tenant_cannot_hold_back_another_tenants_demo_job() {
    let d = Deployment::start(1, |url| {
        demo(url, LATENCY_MS, &format!("max_running_jobs = 1\nmax_tasks_in_flight = {IN_FLIGHT}\n"))
    })
    .await;
    let (acme, globex) = (tenant("acme"), tenant("globex"));
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let demo_job = regions(4);

    // globex's demo job alone: the reference time.
    let t = Instant::now();
    let alone = submit_as(&d.bus, &globex, &demo_job).await.expect("submit");
    log.until(TIMEOUT, "globex's job alone", |s, v| is_event(s, v, &alone, "completed")).await;
    let time_alone = t.elapsed();

    // acme floods: three jobs of twelve tasks each, more than both planning
    // slots and every worker slot; globex submits once acme's tasks run.
    let mut flood = Vec::new();
    for _ in 0..3 {
        flood.push(submit_as(&d.bus, &acme, &regions(12)).await.expect("acme's submit"));
    }
    log.until(TIMEOUT, "acme's first task to start", |s, v| is_started(s, v) && job_of(s).0 == "acme").await;
    let t = Instant::now();
    let job = submit_as(&d.bus, &globex, &demo_job).await.expect("submit");
    let end = log
        .until(Duration::from_secs(120), "globex's job to end", |s, v| {
            s.ends_with(".event")
                && job_of(s).1 == job.to_string()
                && matches!(v["event"].as_str(), Some("completed" | "failed"))
        })
        .await;
    let time_flooded = t.elapsed();
    assert_eq!(end["event"], "completed", "{end}");
    let answer = end["answer"].as_str().unwrap_or_default();
    assert!(answer.contains("| r3 |") && !answer.contains("failed:"), "{answer}");
    log.drain();
    eprintln!(
        "fairness: globex's demo job alone {time_alone:?}, under acme's flood {time_flooded:?}: {:.2}x",
        time_flooded.as_secs_f64() / time_alone.as_secs_f64()
    );

    let seen = &log.seen;
    let position = |pred: &dyn Fn(&str, &Value) -> bool| seen.iter().position(|(s, v)| pred(s, v));
    // Planning: globex's job took a slot without waiting for acme's jobs to
    // end (acme plans one job at a time, and globex's turn comes first).
    let running = position(&|s, v| is_event(s, v, &job, "running")).expect("globex's job ran");
    let acme_done_before =
        seen[..running].iter().filter(|(s, v)| flood.iter().any(|f| is_event(s, v, f, "completed"))).count();
    assert_eq!(acme_done_before, 0, "globex's job waited for {acme_done_before} of acme's jobs to end");
    // Tasks: between globex's first dispatch and its last start, only the
    // tasks acme had in flight (its cap) can start ahead of globex's.
    let ours = |s: &str| job_of(s).1 == job.to_string();
    let first = position(&|s, v| is_event(s, v, &job, "task_dispatched")).expect("globex's tasks dispatched");
    let last = seen.iter().rposition(|(s, v)| is_started(s, v) && ours(s)).expect("globex's tasks started");
    let acme_started = seen[first..last].iter().filter(|(s, v)| is_started(s, v) && job_of(s).0 == "acme").count();
    assert!(
        acme_started <= 2 * IN_FLIGHT,
        "{acme_started} of acme's tasks started while globex's {} waited (cap {IN_FLIGHT})",
        demo_job.matches("revenue").count()
    );
    // And acme's backlog was far from drained when globex's job ended.
    let acme_ended = seen.iter().filter(|(s, v)| flood.iter().any(|f| is_event(s, v, f, "completed"))).count();
    assert!(acme_ended < flood.len(), "acme's whole flood ended before globex's job");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_over_its_api_rate_or_job_quota_is_refused_with_a_limit_and_others_are_answered() {
    // Slow tasks keep the jobs unfinished while the test runs.
    let d = Deployment::start(1, |url| demo(url, 5_000, "max_queued_jobs = 2\napi_rate = 2\napi_burst = 6\n")).await;
    let (acme, globex) = (tenant("acme"), tenant("globex"));

    submit_as(&d.bus, &acme, &regions(1)).await.expect("acme's first job");
    submit_as(&d.bus, &acme, &regions(1)).await.expect("acme's second job");
    let refused = submit_as(&d.bus, &acme, &regions(1)).await.expect_err("a third unfinished job");
    assert_eq!(refused.kind, ErrorKind::Limit, "{refused:?}");
    assert!(refused.message.contains("max_queued_jobs = 2"), "{}", refused.message);
    submit_as(&d.bus, &globex, &regions(1)).await.expect("globex's quota is its own");

    // acme floods `list`: past its burst, requests are refused with when to retry.
    let req = ListRequest { v: SCHEMA_VERSION, status: None, limit: Some(10), ..Default::default() };
    let list = |t: Tenant| {
        let (bus, req) = (d.bus.clone(), req.clone());
        async move {
            let r: ApiReply<ListReply> =
                bus.request(&t, "list", &req, Duration::from_secs(10)).await.expect("answered");
            r.into_result()
        }
    };
    let replies = futures::future::join_all((0..40).map(|_| list(acme.clone()))).await;
    let limited: Vec<&ErrorInfo> = replies.iter().filter_map(|r| r.as_ref().err()).collect();
    assert!(limited.len() >= 30, "{} of 40 refused", limited.len());
    for e in &limited {
        assert_eq!(e.kind, ErrorKind::Limit, "{e:?}");
        assert!(e.retryable && e.message.contains("api_rate = 2/s") && e.message.contains("retry in"), "{e:?}");
    }
    list(globex.clone()).await.expect("globex is answered while acme is refused");
}

/// One `map_tasks` call over `/inputs/regions.jsonl` (as tests/e2e/map_tasks.rs).
const MAP_PLANNER: &str = r#"
[[turns]]
[[turns.calls]]
tool = "map_tasks"
args = '''{"subagent_type": "finance", "items": "/inputs/regions.jsonl", "description": "{% raw %}Margin of {{ item.region }}{% endraw %}"}'''
[[turns]]
content = "{% if last[0].ok %}{{ last[0].value | tojson }}{% else %}map failed: {{ last[0].error.kind }}: {{ last[0].error.message }}{% endif %}"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_map_over_more_items_than_the_tenant_may_map_dispatches_nothing() {
    let d = Deployment::start(1, |url| {
        let mut c = demo(url, 0, "max_map_items = 5\n");
        c.script("planner.toml", MAP_PLANNER);
        c
    })
    .await;
    d.orchestrator_ready().await;
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let local = d.config.dir().join("regions.jsonl");
    std::fs::write(&local, (0..6).map(|i| format!("{{\"region\":\"r{i}\"}}\n")).collect::<String>()).unwrap();
    let file = format!("{}:/inputs/regions.jsonl", local.display());
    let (code, out, err) =
        run_cli(&["--config", &d.config_arg(), "submit", "map the regions", "--file", &file, "--json"], &[]);
    assert_eq!(code, 0, "{out}{err}");

    let end = log.job_end(TIMEOUT).await;

    assert_eq!(end["event"], "completed", "{end}");
    let answer = end["answer"].as_str().unwrap_or_default();
    assert!(answer.starts_with("map failed: limit: "), "{answer}");
    assert!(answer.contains("holds 6 items") && answer.contains("max_map_items"), "{answer}");
    log.drain();
    assert!(log.events("task_dispatched").is_empty(), "no task for a map over the limit");
}

/// Creates consumer `name` on the events stream as `bus`'s credential,
/// filtered on acme's jobs; durable when `durable`, with no inactive
/// threshold of its own.
async fn acme_consumer(
    bus: &RawNats,
    name: &str,
    durable: bool,
) -> Result<async_nats::jetstream::consumer::Config, String> {
    let config = pull::Config {
        name: Some(name.to_string()),
        durable_name: durable.then(|| name.to_string()),
        filter_subject: "flotilla.job.acme.>".into(),
        deliver_policy: DeliverPolicy::All,
        ..Default::default()
    };
    let api = format!("$JS.API.CONSUMER.CREATE.FLOTILLA_EVENTS.{name}");
    let create = bus.js.create_consumer_on_stream(config, "FLOTILLA_EVENTS");
    let consumer = bus.guarded(format!("consumer {name}"), create, |d| d.subject.starts_with(&api)).await;
    consumer.map(|c| c.cached_info().config.clone()).map_err(|e| format!("{e:#}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clients_consumers_expire_unread_and_are_capped_per_stream() {
    const MAX: usize = 4;
    let nats = ConfiguredNats::start("nats", &deploy_dir().join("nats/nats-local.conf"), &[]).await;
    let mut config = crate::security::config(&nats.url());
    config.section(&format!("[nats.consumers]\ninactive_secs = 30\nmax_per_stream = {MAX}\n"));
    let path = config.write();
    let _processes = spawn_roles(&path.display().to_string());
    let admin = raw_as(&nats, "orchestrator").await;
    let events = eventually(TIMEOUT, "the orchestrator to declare the events stream", || async {
        admin.js.get_stream("FLOTILLA_EVENTS").await.ok().map(|_| ())
    });
    events.await;
    let acme = raw_as(&nats, "client-acme").await;

    // A durable consumer asking for no expiry gets the stream's threshold.
    let durable = format!("hoard-{}", uuid::Uuid::now_v7().simple());
    let config = acme_consumer(&acme, &durable, true).await.expect("acme may follow its own jobs");
    assert_eq!(config.inactive_threshold, Duration::from_secs(30), "{config:?}");
    // Past the stream's consumer limit, creating one more is refused.
    let mut created = 1;
    let refused = loop {
        match acme_consumer(&acme, &format!("hoard-{}", uuid::Uuid::now_v7().simple()), true).await {
            Ok(_) => created += 1,
            Err(e) => break e,
        }
        assert!(created <= MAX, "{created} consumers created, the stream holds {MAX}");
    };
    assert!(refused.contains("maximum consumers limit reached"), "{refused}");
    // Unread, the durable disappears (the server checks about every threshold).
    let stream = admin.js.get_stream("FLOTILLA_EVENTS").await.expect("events stream");
    eventually(Duration::from_secs(120), "the unread durable consumer to be deleted", || async {
        stream.consumer_info(&durable).await.is_err().then_some(())
    })
    .await;
    acme_consumer(&acme, &format!("later-{}", uuid::Uuid::now_v7().simple()), false)
        .await
        .expect("expired consumers free their places");
}
