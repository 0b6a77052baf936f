//! A worker credential reaches only its own subagent type (docs/SECURITY.md,
//! "Worker scope"): replays, with the `worker-finance` credential of the
//! real `deploy/nats/roles.conf`, of what it could do to a task of another
//! type (`research`) of the same job before the fix:
//!
//! - read that task's follow-up messages (`message_task`): the messages
//!   subject now carries the type, and a worker may only create consumers
//!   on its own type's subjects;
//! - claim in a heartbeat to serve `research`, or to be another worker:
//!   the workers bucket is keyed `<type>.<worker>`, writable per type, and
//!   readers drop an entry whose body does not match its key;
//! - report on that task: the report subject carries the type, writable per
//!   type, and the orchestrator takes a report only of its task's type;
//! - store `/reports/<task>.md` with a valid sha256 (the Object Store cannot
//!   be scoped per type): the orchestrator reads a report file against the
//!   report it consolidated, so neither a file for a task that has not
//!   reported nor an overwritten one of a finished task is served.
//!
//! - read or forge the step journal of that task (tool arguments and
//!   results a resumed attempt would fold): the journal subject carries the
//!   type, and a tenant may read no journal at all.
//!
//! Each attempt is refused, while the same job's `finance` task runs, reports
//! and has its report file read as before.

use flotilla_bus::Bus;
use flotilla_config::FilesConfig;
use flotilla_job_files::report_path;
use flotilla_protocol::ids::{JobId, SubagentType, TaskId, Tenant};
use flotilla_protocol::{
    ApiReply, CancelRequest, FollowUp, JobRecord, SCHEMA_VERSION, TaskReport, TaskStatus, TypeLoad, Usage,
    WorkerHeartbeat,
};
use flotilla_testkit::nats_conf::{ConfiguredNats, deploy_dir};
use flotilla_testkit::proc::run_cli;
use flotilla_testkit::{Proc, RawNats, TestConfig, eventually};

use crate::security::{FINANCE, connect_as, raw_as, refs, role_env, spawn_roles, status, submit};
use flotilla_testkit::TIMEOUT;

/// One finance task (served) and one research task (no worker serves it)
/// in parallel; the job is cancelled by the test once the attacks are done.
const PLANNER: &str = r#"
[[turns]]
[[turns.calls]]
tool = "task"
args = '''{"subagent_type": "finance", "description": "Region north: revenue 120, cost 75"}'''
[[turns.calls]]
tool = "task"
args = '''{"subagent_type": "research", "description": "Read the filings."}'''
[[turns]]
content = "{% for r in results %}{{ r.value }};{% endfor %}"
"#;

const FORGED: &str = "FORGED by worker-finance";

fn config(url: &str) -> TestConfig {
    let mut c = TestConfig::new(url);
    c.scripted_model("planner", PLANNER).scripted_model("finance", FINANCE).section(
        r#"[planner]
model = "planner"
task_timeout = 600
no_worker_timeout = 600
[subagents.finance]
description = "Computes gross margins."
model = "finance"
tools = ["calculate_margin"]
[subagents.research]
description = "Reads filings."
model = "finance"
tools = []
"#,
    );
    c
}

fn assert_denied<T>(r: Result<T, String>, what: &str) {
    let e = r.err().unwrap_or_else(|| panic!("{what}: the server allowed it"));
    assert!(e.contains("permission denied"), "{what}: {e}");
}

/// Creates a consumer on the follow-up messages stream filtered on `filter`.
async fn follow_ups(bus: &RawNats, filter: &str) -> Result<(), String> {
    crate::sec_roles::open_consumer(bus, "FLOTILLA_MESSAGES", filter).await
}

/// Publishes `body` on `subject` and waits for a stream's ack.
async fn publish(bus: &Bus, subject: String, body: &impl flotilla_protocol::Message) -> Result<(), String> {
    bus.publish_durable(subject, body, None, None).await.map_err(|e| format!("{e:#}"))
}

/// Publishes a report body as written: a version 1 body, which names its
/// job, task and type, or a version 2 one, which leaves them to the subject.
async fn publish_report(bus: &Bus, subject: String, report: &TaskReport, v1: bool) -> Result<(), String> {
    let body = if v1 { serde_json::to_vec(report).unwrap() } else { report.encode() };
    bus.publish_durable_bytes(subject, body, "task report", None, None).await.map_err(|e| format!("{e:#}"))
}

fn heartbeat(worker: &str, ty: &SubagentType) -> WorkerHeartbeat {
    let load = TypeLoad {
        subagent_type: ty.clone(),
        capacity: 64,
        in_flight: 0,
        completed: 0,
        failed: 0,
        cancelled: 0,
        busy_ms: 0,
    };
    WorkerHeartbeat {
        v: SCHEMA_VERSION,
        worker_id: worker.into(),
        host: "h".into(),
        pid: 1,
        version: "0".into(),
        state: Default::default(),
        types: vec![load],
        mcp_servers: vec![],
        metrics_url: None,
        rss_bytes: None,
        started_at: flotilla_protocol::now(),
        at: flotilla_protocol::now(),
        interval_ms: 60_000,
    }
}

fn forged_report(job: JobId, task: TaskId, ty: &SubagentType) -> TaskReport {
    let now = flotilla_protocol::now();
    TaskReport {
        v: SCHEMA_VERSION,
        job_id: job,
        task_id: task,
        subagent_type: ty.clone(),
        status: TaskStatus::Completed,
        summary: FORGED.into(),
        summary_file: None,
        error: None,
        usage: Usage::default(),
        worker_id: "w-evil".into(),
        attempt: 1,
        resumed_from_step: None,
        started_at: now,
        finished_at: now,
        duration_ms: 1,
    }
}

/// Waits until `proc` has logged `line`.
async fn logged(proc: &Proc, line: &str) {
    eventually(TIMEOUT, line, || async move { proc.log().contains(line).then_some(()) }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_credential_cannot_read_beat_report_or_file_for_another_type() {
    let nats = ConfiguredNats::start("nats", &deploy_dir().join("nats/nats-local.conf"), &[]).await;
    let config = config(&nats.url());
    let path = config.write();
    let cfg = path.display().to_string();
    let (orchestrator_proc, _worker_proc) = spawn_roles(&cfg);
    let (finance, research) = (SubagentType::new("finance").unwrap(), SubagentType::new("research").unwrap());
    let acme_t = Tenant::new("acme").unwrap();
    let acme = connect_as(&nats, "client-acme").await;
    let job = submit(&acme, &acme_t, "margins and filings").await;
    // The finance task reports; the research task is published and waits.
    let rec = eventually(TIMEOUT, "finance reported, research dispatched", || {
        let (acme, t) = (acme.clone(), acme_t.clone());
        async move {
            let rec = status(&acme, &t, job).await.ok()?;
            let done = rec.tasks.iter().any(|e| e.subagent_type.as_str() == "finance" && e.status.is_some());
            let waits = rec.tasks.iter().any(|e| e.subagent_type.as_str() == "research" && e.published);
            (done && waits).then_some(rec)
        }
    })
    .await;
    let of = |ty: &SubagentType| rec.tasks.iter().find(|e| &e.subagent_type == ty).unwrap().task_id;
    let (fin_task, res_task) = (of(&finance), of(&research));
    assert_eq!(rec.tasks.iter().find(|e| e.task_id == fin_task).unwrap().status, Some(TaskStatus::Completed));

    let orchestrator = connect_as(&nats, "orchestrator").await;
    let worker = connect_as(&nats, "worker-finance").await;
    let raw_worker = raw_as(&nats, "worker-finance").await;

    // 1. Follow-ups: the planner's message to the research task stays unread.
    let msg = FollowUp {
        v: SCHEMA_VERSION,
        id: format!("{job}.call_9"),
        job_id: job,
        task_id: res_task,
        subagent_type: research.clone(),
        text: "the secret instructions".into(),
        sent_at: flotilla_protocol::now(),
    };
    orchestrator.task_messages().publish(&acme_t, &msg).await.expect("the orchestrator stores a follow-up");
    for filter in [
        format!("flotilla.job.acme.{job}.message.research.{res_task}"),
        format!("flotilla.job.acme.{job}.message.{res_task}"), // the type-less subject of before
        "flotilla.job.*.*.message.*.*".into(),
        "flotilla.job.*.*.message.>".into(),
        format!("flotilla.job.acme.{job}.>"),
    ] {
        assert_denied(follow_ups(&raw_worker, &filter).await, &format!("a finance worker following {filter}"));
    }
    let read = worker.task_messages().follow(&acme_t, &job, &research, res_task).await.err();
    assert!(format!("{:#}", read.expect("followed a research task")).contains("ermission"));
    follow_ups(&raw_worker, &format!("flotilla.job.acme.{job}.message.finance.{fin_task}"))
        .await
        .expect("its own type's follow-ups stay readable");
    // The type-wide follower and the per-task look-up a worker starts with
    // are scoped the same way: research's are refused, its own allowed.
    let looked = worker.task_messages().last_for(&acme_t, &job, &research, &res_task).await.err();
    assert!(format!("{:#}", looked.expect("looked up a research task's messages")).contains("ermission"));
    let followed = worker.task_messages().follow_type(&research).await.err();
    assert!(format!("{:#}", followed.expect("followed research's messages")).contains("ermission"));
    let finance = SubagentType::new("finance").unwrap();
    let own = worker.task_messages().last_for(&acme_t, &job, &finance, &fin_task).await;
    assert_eq!(own.expect("its own type's look-up is allowed"), None, "no message was stored for the finance task");
    let _own = worker.task_messages().follow_type(&finance).await.expect("its own type's messages stay followable");

    // 2. Heartbeats: it cannot claim research, nor speak for another worker.
    let evil = heartbeat("w-evil", &research);
    for subject in ["$KV.flotilla_workers.research.w-evil", "$KV.flotilla_workers.w-evil"] {
        assert_denied(publish(&worker, subject.into(), &evil).await, subject);
    }
    let beat = "flotilla.worker.heartbeat.research.w-evil";
    let core = raw_worker.guarded(beat, raw_worker.client.request(beat, "{}".into()), |d| d.subject == beat);
    assert_denied(core.await.map_err(|e| format!("{e:#}")), beat);
    // Under its own type's keys the server stores it; readers drop it.
    publish(&worker, "$KV.flotilla_workers.finance.w-evil".into(), &evil).await.expect("its own type's key");
    let other = heartbeat("w-other", &finance);
    publish(&worker, "$KV.flotilla_workers.finance.w-evil2".into(), &other).await.expect("its own type's key");
    let live = orchestrator.live_workers().await.expect("the orchestrator reads the workers");
    assert!(live.iter().all(|w| !w.serves(&research)), "a forged beat serves research: {live:?}");
    let ids: Vec<&str> = live.iter().map(|w| w.worker_id.as_str()).collect();
    assert_eq!(ids, ["w-finance"], "only the real worker, whose beats still land");
    assert!(live[0].serves(&finance));

    // 3. Reports: none of the ways to report on the research task is taken.
    let as_research = forged_report(job, res_task, &research);
    let as_finance = forged_report(job, res_task, &finance);
    for subject in [
        format!("flotilla.job.acme.{job}.report.research.{res_task}"),
        format!("flotilla.job.acme.{job}.report.{res_task}"), // the type-less subject of before
    ] {
        assert_denied(publish_report(&worker, subject.clone(), &as_research, false).await, &subject);
    }
    // On its own type's subject: stored, but refused by the orchestrator,
    // whether a version 1 body claims research (body and subject disagree)
    // or another task, or a version 2 body leaves the ids to the subject
    // (finance, but the task is research's).
    let own = format!("flotilla.job.acme.{job}.report.finance.{res_task}");
    publish_report(&worker, own.clone(), &as_research, true).await.expect("its own type's report subject");
    logged(&orchestrator_proc, "report refused: its body names another subagent type than its subject").await;
    let elsewhere = forged_report(job, TaskId::new(), &finance);
    publish_report(&worker, own.clone(), &elsewhere, true).await.expect("its own type's report subject");
    logged(&orchestrator_proc, "report refused: its body names another task than its subject").await;
    publish_report(&worker, own, &as_finance, false).await.expect("its own type's report subject");
    logged(&orchestrator_proc, "report refused: the task is of another subagent type").await;
    let rec = status(&acme, &acme_t, job).await.expect("status");
    let entry = rec.tasks.iter().find(|e| e.task_id == res_task).unwrap();
    assert_eq!(entry.status, None, "a forged report was consolidated: {entry:?}");

    // 4. Report files, stored with a valid sha256 through the Object Store.
    let client_env = role_env("client-acme");
    let mut cli_env = refs(&client_env);
    cli_env.push(("FLOTILLA_TENANT", "acme"));
    let get = |task: TaskId| {
        let path = report_path(&task).as_str().to_string();
        run_cli(&["files", "get", &job.to_string(), &path, "--config", &cfg], &cli_env)
    };
    let (code, real, err) = get(fin_task);
    assert_eq!(code, 0, "the finance task's real report is served: {err}");
    assert!(real.contains("0.375"), "{real}");
    let files = worker.job_files(&FilesConfig::default()).await.expect("worker opens job files");
    for task in [res_task, fin_task] {
        files.write_reserved(&job, &report_path(&task), FORGED.as_bytes()).await.expect("the bucket takes it");
        let (code, out, err) = get(task);
        assert_ne!(code, 0, "the forged report of {task} was served: {out}");
        assert!(!out.contains(FORGED) && err.contains("integrity check"), "{out}\n{err}");
    }
    let (_, _, err) = get(res_task);
    assert!(err.contains("has not reported yet"), "{err}");

    // 5. Step journals: research's stays unread and unforged, tenants read none.
    let res_journal = format!("flotilla.journal.research.acme.{job}.{res_task}");
    let fin_journal = format!("flotilla.journal.finance.acme.{job}.{fin_task}");
    for filter in [res_journal.clone(), "flotilla.journal.>".into(), format!("flotilla.journal.*.acme.{job}.>")] {
        let r = crate::sec_roles::open_consumer(&raw_worker, "FLOTILLA_JOURNAL", &filter).await;
        assert_denied(r, &format!("a finance worker reading journal {filter}"));
    }
    assert_denied(
        publish_report(&worker, res_journal.clone(), &as_research, true).await,
        "forging a research journal step",
    );
    assert_denied(
        publish_report(&worker, format!("{res_journal}.snapshot"), &as_research, true).await,
        "forging its snapshot",
    );
    let raw_client = raw_as(&nats, "client-acme").await;
    let r = crate::sec_roles::open_consumer(&raw_client, "FLOTILLA_JOURNAL", &fin_journal).await;
    assert_denied(r, "a tenant reading its task's journal");
    crate::sec_roles::open_consumer(&raw_worker, "FLOTILLA_JOURNAL", &fin_journal)
        .await
        .expect("its own type's journals stay readable");

    // The job ends as cancelled, with no forged result anywhere.
    let req = CancelRequest { v: SCHEMA_VERSION, job_id: job, reason: Some("test over".into()) };
    let r: ApiReply<serde_json::Value> = acme.request(&acme_t, "cancel", &req, TIMEOUT).await.expect("cancel");
    r.into_result().expect("cancel accepted");
    let rec: JobRecord = crate::security::finished(&acme, &acme_t, job).await;
    assert!(!format!("{rec:?}").contains(FORGED), "{rec:?}");
    assert_ne!(rec.tasks.iter().find(|e| e.task_id == res_task).unwrap().status, Some(TaskStatus::Completed));
}
