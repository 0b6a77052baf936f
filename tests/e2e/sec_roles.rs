//! Replays of the role-permission attacks found in the security review
//! (docs/SECURITY.md), against the real `deploy/nats/roles.conf`:
//!
//! - a tenant reading another tenant's job events and progress with a raw
//!   NATS client (every job subject now carries the tenant, and a client may
//!   create event consumers only on its own tenant's filter);
//! - a worker writing an approval decision (decision keys are the
//!   orchestrator's alone) or another type's approval request;
//! - a worker purging or reconfiguring the job-files bucket (every tenant's
//!   files), or creating or reconfiguring a KV bucket (the cancellations of
//!   every tenant; workers only open the buckets the orchestrator declared).
//!
//! Each attempt must be refused by the server with a permission error, while
//! the legitimate path (a tenant's own `watch`) keeps working.

use std::future::IntoFuture;
use std::time::Duration;

use async_nats::jetstream::consumer::{DeliverPolicy, pull};
use flotilla_config::FilesConfig;
use flotilla_job_files::FilePath;
use flotilla_protocol::ids::{JobId, Tenant};
use flotilla_protocol::{Decision, DecisionRecord, JobStatus, SCHEMA_VERSION};
use flotilla_testkit::RawNats;
use flotilla_testkit::nats_conf::{ConfiguredNats, deploy_dir};
use flotilla_testkit::proc::run_cli;

use crate::security::{JOB, config, connect_as, finished, raw_as, refs, role_env, spawn_roles, submit};

/// Creates a named consumer on `stream` filtered on `filter`, as `bus`'s
/// credential would to read those messages; `Err` carries the server's answer.
pub(crate) async fn open_consumer(bus: &RawNats, stream: &str, filter: &str) -> Result<(), String> {
    let name = format!("probe-{}", uuid::Uuid::now_v7().simple());
    let api = format!("$JS.API.CONSUMER.CREATE.{stream}.{name}");
    let config = pull::Config {
        name: Some(name),
        filter_subject: filter.to_string(),
        deliver_policy: DeliverPolicy::All,
        inactive_threshold: Duration::from_secs(10),
        ..Default::default()
    };
    let create = bus.js.create_consumer_on_stream(config, stream);
    bus.guarded(format!("consumer on {filter}"), create, |d| d.subject.starts_with(&api))
        .await
        .map(|_| ())
        .map_err(|e| format!("{e:#}"))
}

fn assert_denied(r: Result<(), String>, what: &str) {
    let e = r.err().unwrap_or_else(|| panic!("{what}: the server allowed it"));
    assert!(e.contains("permission denied"), "{what}: {e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_cannot_read_each_others_jobs_and_workers_cannot_decide_or_purge() {
    let nats = ConfiguredNats::start("nats", &deploy_dir().join("nats/nats-local.conf"), &[]).await;
    let config = config(&nats.url());
    let path = config.write();
    let cfg = path.display().to_string();
    let _processes = spawn_roles(&cfg);
    let (acme_t, globex_t) = (Tenant::new("acme").unwrap(), Tenant::new("globex").unwrap());
    let acme = connect_as(&nats, "client-acme").await;
    let globex = connect_as(&nats, "client-globex").await;
    let acme_job = submit(&acme, &acme_t, JOB).await;
    let globex_job = submit(&globex, &globex_t, JOB).await;
    assert_eq!(finished(&acme, &acme_t, acme_job).await.status, JobStatus::Completed);
    assert_eq!(finished(&globex, &globex_t, globex_job).await.status, JobStatus::Completed);

    // globex, with a raw client, tries every way to read acme's events and progress.
    let globex = raw_as(&nats, "client-globex").await;
    let events = "FLOTILLA_EVENTS";
    assert_denied(open_consumer(&globex, events, &format!("flotilla.job.acme.{acme_job}.>")).await, "acme's job");
    assert_denied(open_consumer(&globex, events, "flotilla.job.>").await, "every job");
    assert_denied(open_consumer(&globex, events, &format!("flotilla.job.*.{acme_job}.>")).await, "any tenant's job");
    assert_denied(open_consumer(&globex, events, "").await, "an unfiltered consumer");
    assert_denied(open_consumer(&globex, "FLOTILLA_REPORTS", "flotilla.job.acme.>").await, "acme's reports");
    let info = globex.guarded("stream info", globex.js.get_stream(events), |d| d.subject.contains("STREAM.INFO"));
    assert_denied(info.await.map(|_| ()).map_err(|e| format!("{e:#}")), "the events stream's subjects");
    // Its own jobs stay readable, raw and through the CLI.
    open_consumer(&globex, events, &format!("flotilla.job.globex.{globex_job}.>")).await.expect("own job");
    let client_env = role_env("client-globex");
    let mut cli_env = refs(&client_env);
    cli_env.push(("FLOTILLA_TENANT", "globex"));
    let (code, out, err) = run_cli(&["watch", &globex_job.to_string(), "--json", "--config", &cfg], &cli_env);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("\"completed\"") && out.contains("task_dispatched"), "{out}");
    let (code, out, _) = run_cli(&["watch", &acme_job.to_string(), "--json", "--config", &cfg], &cli_env);
    assert_ne!(code, 0, "globex watched acme's job");
    // Under --json the error is an object on stdout: another tenant's job is not found.
    let e: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert!(e["error"]["kind"] == "not_found" && out.contains("no job"), "{out}");
    // A tenant never reads the OAuth credentials of `flotilla mcp login`.
    let read = "$JS.API.DIRECT.GET.KV_flotilla_mcp_tokens.$KV.flotilla_mcp_tokens.interactive";
    let get = globex.guarded("mcp tokens", globex.client.request(read, "".into()), |d| d.subject == read);
    assert_denied(get.await.map(|_| ()).map_err(|e| format!("{e:#}")), "a tenant reading MCP credentials");

    // The worker credential cannot decide an approval, nor ask for another type.
    let worker = connect_as(&nats, "worker-finance").await;
    let (job, task) = (JobId::new(), flotilla_protocol::ids::TaskId::new());
    let decision = DecisionRecord {
        v: SCHEMA_VERSION,
        round: 1,
        decision: Decision::Approve,
        by: Some("worker".into()),
        principal: None,
        decided_at: flotilla_protocol::now(),
    };
    for key in [format!("dec.finance.{job}.{task}.call_0_0.1"), format!("req.research.{job}.{task}.call_0_0")] {
        let subject = format!("$KV.flotilla_approvals.{key}");
        let r = worker.publish_durable(subject.clone(), &decision, None, None).await;
        assert_denied(r.map_err(|e| format!("{e:#}")), &subject);
    }
    // Nor wipe or reconfigure the job files of every tenant.
    let raw_worker = raw_as(&nats, "worker-finance").await;
    let files = raw_worker.js.get_stream("OBJ_flotilla_files").await.expect("workers may look the bucket up");
    let purge = raw_worker.guarded("purge", files.purge().into_future(), |d| d.subject.contains("STREAM.PURGE"));
    assert_denied(purge.await.map(|_| ()).map_err(|e| format!("{e:#}")), "purging job files");
    let mut changed = files.cached_info().config.clone();
    changed.max_age = Duration::from_secs(1);
    let update =
        raw_worker.guarded("update", raw_worker.js.update_stream(changed), |d| d.subject.contains("STREAM.UPDATE"));
    assert_denied(update.await.map(|_| ()).map_err(|e| format!("{e:#}")), "reconfiguring job files");
    // Nor create or reconfigure any KV bucket: it only opened those it uses
    // (the jobs above ran, so its cancel watch and heartbeats work without).
    worker_cannot_declare_buckets(&raw_worker).await;
    // Nor read the MCP credentials of a server its type does not use (the
    // template's finance type uses none: roles.conf lists them per type).
    let get = raw_worker.guarded("mcp tokens", raw_worker.client.request(read, "".into()), |d| d.subject == read);
    assert_denied(get.await.map(|_| ()).map_err(|e| format!("{e:#}")), "a worker reading MCP credentials");
    // Overwriting a file still works without the purge grant (the old
    // version's chunks go with the bucket's max_age).
    let files = worker.job_files(&FilesConfig::default()).await.expect("worker opens job files");
    let path = FilePath::parse("/out/a.txt").unwrap();
    assert!(files.write(&acme_job, &path, b"one").await.expect("first write"));
    assert!(!files.write(&acme_job, &path, b"two").await.expect("overwrite without the purge grant"));
    assert_eq!(files.read(&acme_job, &path).await.unwrap(), b"two");
}

/// Before the fix the worker role could `STREAM.CREATE` and `STREAM.UPDATE`
/// the cancellations and workers buckets: a worker could change how long every
/// tenant's cancellations are kept, or drop the heartbeats' TTL markers.
async fn worker_cannot_declare_buckets(worker: &RawNats) {
    for bucket in ["KV_flotilla_cancelled", "KV_flotilla_workers"] {
        let stream = worker.js.get_stream(bucket).await.unwrap_or_else(|e| panic!("workers may look {bucket} up: {e}"));
        let mut changed = stream.cached_info().config.clone();
        changed.max_age = Duration::from_secs(3600); // valid: only a permission can refuse it
        let update =
            worker.guarded("update", worker.js.update_stream(changed.clone()), |d| d.subject.contains("STREAM.UPDATE"));
        assert_denied(update.await.map(|_| ()).map_err(|e| format!("{e:#}")), &format!("STREAM.UPDATE of {bucket}"));
        let create =
            worker.guarded("create", worker.js.create_stream(changed), |d| d.subject.contains("STREAM.CREATE"));
        assert_denied(create.await.map(|_| ()).map_err(|e| format!("{e:#}")), &format!("STREAM.CREATE of {bucket}"));
        let kept = worker.js.get_stream(bucket).await.unwrap().cached_info().config.max_age;
        assert_eq!(kept, stream.cached_info().config.max_age, "{bucket} unchanged");
    }
}

/// With the bucket grants gone a worker cannot declare the cancellations
/// bucket: it opens it, and when it starts before the orchestrator it waits
/// until the orchestrator has declared it (shared/bus/src/buckets.rs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_started_first_opens_the_buckets_once_the_orchestrator_declares_them() {
    use flotilla_bus::Bus;
    use flotilla_config::NatsConfig;

    let nats = ConfiguredNats::start("nats", &deploy_dir().join("nats/nats-local.conf"), &[]).await;
    let connect = |user: &'static str, manage_topology: bool| {
        let config = NatsConfig {
            url: nats.url_as(user),
            inbox_prefix: format!("_INBOX.{user}"),
            manage_topology,
            ..Default::default()
        };
        async move {
            Bus::connect(&config, user, flotilla_testkit::TIMEOUT).await.unwrap_or_else(|e| panic!("{user}: {e:#}"))
        }
    };
    let worker = connect("worker-finance", false).await;
    let raw_worker = raw_as(&nats, "worker-finance").await;
    assert!(raw_worker.js.get_key_value("flotilla_cancelled").await.is_err(), "no bucket yet");
    let opening = tokio::spawn(async move { worker.cancellations().await.map(|_| ()) });
    let orchestrator = connect("orchestrator", true).await;
    orchestrator.ensure_topology().await.expect("the orchestrator declares the buckets");
    let opened = tokio::time::timeout(flotilla_testkit::TIMEOUT, opening).await.expect("opened in time").unwrap();
    opened.expect("the worker opens the bucket the orchestrator declared");
}
