//! Least privilege with the real role config of `deploy/nats/roles.conf`: a
//! job runs end to end with each process holding only its role's
//! permissions, every tool call lands in the audit stream, and every step
//! outside a role is refused by the server with an error the caller sees.

use std::time::Duration;

use flotilla_bus::Bus;
use flotilla_config::NatsConfig;
use flotilla_protocol::ids::{JobId, SubagentType, Tenant};
use flotilla_protocol::{
    ApiReply, AuditAction, AuditOutcome, ErrorKind, JobRecord, JobStatus, ListReply, ListRequest, SCHEMA_VERSION,
    StatusRequest, SubmitReply, SubmitRequest,
};
use flotilla_testkit::nats_conf::{ConfiguredNats, deploy_dir, password};
use flotilla_testkit::proc::run_cli;
use flotilla_testkit::{Proc, RawNats, TestConfig};
use futures::StreamExt;

const T: Duration = Duration::from_secs(10);

/// Planner: one todo list, one finance task per region in parallel, a table.
pub const PLANNER: &str = r#"
[vars]
regions = "captures(input, '([A-Za-z]+): revenue ([0-9]+), cost ([0-9]+)')"
[[turns]]
[[turns.calls]]
tool = "write_todos"
args = '''{"todos": [{"content": "margins", "status": "in_progress"}]}'''
[[turns]]
[[turns.calls]]
tool = "task"
for_each = "regions"
args = '''{"subagent_type": "finance", "description": {{ ("Region " ~ item[1] ~ ": revenue " ~ item[2] ~ ", cost " ~ item[3]) | tojson }}}'''
[[turns]]
content = "{% for r in results %}{{ r.value }};{% endfor %}"
"#;

/// Finance subagent: one calculate_margin call, then the value.
pub const FINANCE: &str = r#"
[vars]
nums = "captures(input, 'revenue ([0-9]+), cost ([0-9]+)')"
[[turns]]
[[turns.calls]]
tool = "calculate_margin"
args = '{"revenue": {{ nums[0][1] }}, "cost": {{ nums[0][2] }}}'
[[turns]]
content = "{{ last[0].value }}"
"#;

pub const JOB: &str = "north: revenue 120, cost 75; east: revenue 250, cost 190; west: revenue 80, cost 20";

/// A config for `url` with the scripted planner and finance subagent.
pub fn config(url: &str) -> TestConfig {
    let mut c = TestConfig::new(url);
    c.scripted_model("planner", PLANNER).scripted_model("finance", FINANCE).section(
        r#"[planner]
model = "planner"
task_timeout = 60
[subagents.finance]
description = "Computes gross margins."
model = "finance"
tools = ["calculate_margin"]
"#,
    );
    c
}

/// Environment that makes a process authenticate as `user` through
/// `[nats.auth]` (password from an environment variable) with its own inbox.
pub fn role_env(user: &str) -> Vec<(String, String)> {
    let mut env = vec![
        ("FLOTILLA_NATS__AUTH__USER".to_string(), user.to_string()),
        ("FLOTILLA_NATS__AUTH__PASSWORD_ENV".to_string(), "ROLE_PASSWORD".to_string()),
        ("ROLE_PASSWORD".to_string(), password(user).to_string()),
        ("FLOTILLA_NATS__INBOX_PREFIX".to_string(), format!("_INBOX.{user}")),
    ];
    if user.starts_with("worker-") {
        env.push(("FLOTILLA_NATS__MANAGE_TOPOLOGY".to_string(), "false".to_string()));
    }
    env
}

/// The orchestrator and a finance worker on config `cfg`, each with only its
/// role's credential.
pub fn spawn_roles(cfg: &str) -> (Proc, Proc) {
    let orch_env = role_env("orchestrator");
    let orchestrator = Proc::spawn("orchestrator", "flotilla", &["orchestrator", "--config", cfg], &refs(&orch_env));
    let worker_env = role_env("worker-finance");
    let worker = Proc::spawn(
        "worker",
        "flotilla-worker",
        &["--config", cfg, "--id", "w-finance", "--types", "finance", "--grace", "1"],
        &refs(&worker_env),
    );
    (orchestrator, worker)
}

pub fn refs(env: &[(String, String)]) -> Vec<(&str, &str)> {
    env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

/// An in-process connection as a role user (credentials in the URL).
pub async fn connect_as(nats: &ConfiguredNats, user: &str) -> Bus {
    let config = config_as(nats, user);
    Bus::connect(&config, &format!("test {user}"), T).await.unwrap_or_else(|e| panic!("connect as {user}: {e:#}"))
}

/// A plain NATS client with `user`'s credential, for attempts no Flotilla
/// process would make (tests/kit/src/raw.rs).
pub async fn raw_as(nats: &ConfiguredNats, user: &str) -> RawNats {
    RawNats::connect(&config_as(nats, user)).await
}

fn config_as(nats: &ConfiguredNats, user: &str) -> NatsConfig {
    NatsConfig {
        url: nats.url_as(user),
        inbox_prefix: format!("_INBOX.{user}"),
        manage_topology: false,
        ..Default::default()
    }
}

pub async fn submit(bus: &Bus, tenant: &Tenant, input: &str) -> JobId {
    let req = SubmitRequest { v: SCHEMA_VERSION, input: input.into(), files: vec![], subagent_type: None };
    flotilla_testkit::eventually(Duration::from_secs(120), "the orchestrator to accept a job", || {
        let req = req.clone();
        async move {
            let r: Result<ApiReply<SubmitReply>, _> = bus.request(tenant, "submit", &req, Duration::from_secs(5)).await;
            r.ok().map(|r| r.into_result().expect("submit refused").job_id)
        }
    })
    .await
}

pub async fn status(bus: &Bus, tenant: &Tenant, job: JobId) -> Result<JobRecord, flotilla_protocol::ErrorInfo> {
    let req =
        StatusRequest { v: SCHEMA_VERSION, job_id: job, tasks_limit: None, tasks_after: None, tasks_filter: None };
    let r: ApiReply<JobRecord> = bus.request(tenant, "status", &req, T).await.expect("status");
    r.into_result()
}

pub async fn finished(bus: &Bus, tenant: &Tenant, job: JobId) -> JobRecord {
    flotilla_testkit::eventually(Duration::from_secs(120), "the job to finish", || async move {
        // A request may fail while a cluster node is down: ask again.
        let req =
            StatusRequest { v: SCHEMA_VERSION, job_id: job, tasks_limit: None, tasks_after: None, tasks_filter: None };
        let r: ApiReply<JobRecord> = bus.request(tenant, "status", &req, T).await.ok()?;
        r.into_result().ok().filter(|r| r.status.is_terminal())
    })
    .await
}

async fn list(bus: &Bus, tenant: &Tenant) -> Vec<JobId> {
    let req = ListRequest { v: SCHEMA_VERSION, status: None, limit: Some(100), ..Default::default() };
    let r: ApiReply<ListReply> = bus.request(tenant, "list", &req, T).await.expect("list");
    r.into_result().expect("list refused").jobs.into_iter().map(|j| j.id).collect()
}

fn violations(log: &str, user: &str) -> Vec<String> {
    log.lines()
        .filter(|l| l.contains("Violation") && l.contains(&format!("user:{user}\"")))
        .map(str::to_string)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roles_confine_every_process_and_audit_every_tool_call() {
    let nats = ConfiguredNats::start("nats", &deploy_dir().join("nats/nats-local.conf"), &[]).await;
    let config = config(&nats.url());
    let path = config.write();
    let cfg = path.display().to_string();
    let _processes = spawn_roles(&cfg);

    // The job runs with each process holding only its role's permissions.
    let acme_tenant = Tenant::new("acme").unwrap();
    let globex_tenant = Tenant::new("globex").unwrap();
    let acme = connect_as(&nats, "client-acme").await;
    let job = submit(&acme, &acme_tenant, JOB).await;
    let rec = finished(&acme, &acme_tenant, job).await;
    assert_eq!(rec.status, JobStatus::Completed, "{rec:?}");
    assert_eq!(rec.tenant, acme_tenant);
    let answer = rec.answer.clone().unwrap_or_default();
    assert!(answer.contains("0.375") && answer.contains("0.24") && answer.contains("0.75"), "{answer}");
    let log = nats.log();
    for user in ["orchestrator", "worker-finance", "client-acme"] {
        let v = violations(&log, user);
        assert!(v.is_empty(), "role {user} lacks permissions the job needed:\n{}", v.join("\n"));
    }

    // N tool calls -> N audit records: planner 1 write_todos + 3 task, workers 3 calculate_margin.
    let records = flotilla_testkit::eventually(Duration::from_secs(10), "7 audit records", || {
        let acme = acme.clone();
        let t = acme_tenant.clone();
        async move { flotilla_bus::audit::read(&acme, &t, &job).await.ok().filter(|r| r.len() >= 7) }
    })
    .await;
    assert_eq!(records.len(), 7, "{records:#?}");
    let count = |agent: &str, tool: &str| records.iter().filter(|r| r.agent == agent && r.tool == tool).count();
    assert_eq!(count("planner", "write_todos"), 1);
    assert_eq!(count("planner", "task"), 3);
    assert_eq!(count("finance", "calculate_margin"), 3);
    let trace = records[0].trace_id.clone().expect("trace id");
    for r in &records {
        assert_eq!(
            (r.action, r.outcome, &r.tenant, r.job_id),
            (AuditAction::ToolCall, AuditOutcome::Ok, &acme_tenant, job)
        );
        assert_eq!(r.trace_id.as_ref(), Some(&trace), "one trace across planner and workers");
        assert_eq!(r.args_sha256.len(), 64);
        if r.agent == "finance" {
            assert_eq!(r.worker, "w-finance");
            assert!(r.task_id.is_some());
        } else {
            assert!(r.task_id.is_none());
        }
    }
    let north = flotilla_agent::audit::args_digest(&serde_json::json!({"revenue": 120, "cost": 75}));
    assert!(records.iter().any(|r| r.tool == "calculate_margin" && r.args_sha256 == north), "digest of north's args");

    // The CLI reads the same trail with the tenant's credential.
    let client_env = role_env("client-acme");
    let mut cli_env = refs(&client_env);
    cli_env.push(("FLOTILLA_TENANT", "acme"));
    let job_arg = job.to_string();
    let (code, out, err) = run_cli(&["audit", &job_arg, "--json", "--config", &cfg], &cli_env);
    assert_eq!(code, 0, "{err}");
    let trail: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(trail["records"].as_array().map(Vec::len), Some(7), "{out}");
    let (code, out, _) = run_cli(&["audit", &job_arg, "--config", &cfg], &cli_env);
    assert_eq!(code, 0);
    assert!(out.contains("calculate_margin") && out.contains(&trace), "{out}");

    // Tenants: another tenant's job reads as not found and is not listed...
    let globex = connect_as(&nats, "client-globex").await;
    let e = status(&globex, &globex_tenant, job).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotFound, "{e:?}");
    assert!(!list(&globex, &globex_tenant).await.contains(&job));
    assert!(list(&acme, &acme_tenant).await.contains(&job));
    // ...and a credential cannot even ask on another tenant's API subject.
    for op in ["submit", "status", "list"] {
        let req =
            StatusRequest { v: SCHEMA_VERSION, job_id: job, tasks_limit: None, tasks_after: None, tasks_filter: None };
        let e = acme.request::<_, ApiReply<JobRecord>>(&globex_tenant, op, &req, T).await.unwrap_err();
        let msg = format!("{e:#}");
        assert!(msg.contains("permission denied") && msg.contains("flotilla.api.globex"), "{msg}");
    }
    let (code, _, err) = run_cli(&["submit", "--config", &cfg, "--tenant", "globex", "hello"], &refs(&client_env));
    assert_ne!(code, 0);
    assert!(err.contains("permission denied") && err.contains("flotilla.api.globex.submit"), "{err}");
    // Its audit trail too: the consumer filter names the tenant.
    let e = flotilla_bus::audit::read(&acme, &globex_tenant, &job).await.unwrap_err();
    assert!(format!("{e:#}").contains("permission denied"), "{e:#}");

    // The worker credential: no job API, no other type's queue, no raw task subjects.
    let worker = connect_as(&nats, "worker-finance").await;
    let req = SubmitRequest { v: SCHEMA_VERSION, input: "x".into(), files: vec![], subagent_type: None };
    let e = worker.request::<_, ApiReply<SubmitReply>>(&acme_tenant, "submit", &req, T).await.unwrap_err();
    assert!(format!("{e:#}").contains("permission denied"), "{e:#}");
    let research = SubagentType::new("research").unwrap();
    let e = worker.tasks().consumer(&research).await.map(|_| ()).expect_err("other type's queue refused");
    let msg = format!("{e:#}");
    assert!(msg.contains("permission denied") && msg.contains("flotilla-task-research"), "{msg}");
    assert_subscription_denied(&raw_as(&nats, "worker-finance").await, "flotilla.task.>").await;
    let e = worker.publish_durable(format!("flotilla.task.finance.{job}"), &req, None, None).await.unwrap_err();
    assert!(format!("{e:#}").contains("permission denied"), "{e:#}");

    // The client credential: no task queue, no task subjects.
    let finance = SubagentType::new("finance").unwrap();
    let e = acme.tasks().consumer(&finance).await.map(|_| ()).expect_err("client cannot consume tasks");
    assert!(format!("{e:#}").contains("permission denied"), "{e:#}");
    assert_subscription_denied(&raw_as(&nats, "client-acme").await, "flotilla.task.>").await;
    let e = acme.publish_durable(format!("flotilla.task.finance.{job}"), &req, None, None).await.unwrap_err();
    assert!(format!("{e:#}").contains("permission denied"), "{e:#}");
}

/// Subscribes to `subject` and expects the server's refusal to surface as a
/// permission error (instead of a subscription that silently never delivers).
async fn assert_subscription_denied(bus: &RawNats, subject: &str) {
    // Subscribing inside the guarded future: the guard listens before the server can answer.
    let wait = async {
        let mut sub = bus.client.subscribe(subject.to_string()).await.map_err(std::io::Error::other)?;
        let _ = tokio::time::timeout(T, sub.next()).await;
        Ok::<_, std::io::Error>(())
    };
    let e = bus.guarded(format!("subscribe to {subject}"), wait, |d| d.subject == subject).await.unwrap_err();
    assert!(format!("{e:#}").contains("permission denied"), "{e:#}");
}

/// The dashboard's writes (docs/HTTP_API.md) are job API requests made with
/// the orchestrator's own credential: under the real roles a job submitted
/// over HTTP is accepted and runs, with no permission violation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_api_submits_under_the_orchestrator_role() {
    let nats = ConfiguredNats::start("nats", &deploy_dir().join("nats/nats-local.conf"), &[]).await;
    let port = flotilla_testkit::free_port();
    let mut config = config(&nats.url());
    config.section(&format!(
        "[dashboard]\nlisten = \"127.0.0.1:{port}\"\n[dashboard.tenants.acme]\ntoken_env = \"E2E_ACME_TOKEN\"\n"
    ));
    let cfg = config.write().display().to_string();
    let token = "e2e-acme-token-under-roles-0123456789";
    let mut env = role_env("orchestrator");
    env.push(("E2E_ACME_TOKEN".into(), token.into()));
    let _orchestrator = Proc::spawn("orchestrator", "flotilla", &["orchestrator", "--config", &cfg], &refs(&env));
    let worker_env = role_env("worker-finance");
    let _worker =
        Proc::spawn("worker", "flotilla-worker", &["--config", &cfg, "--types", "finance"], &refs(&worker_env));

    flotilla_config::tls::install_crypto_provider();
    let http = reqwest::Client::builder().timeout(T).build().expect("http client");
    let url = format!("http://127.0.0.1:{port}/api/jobs");
    let created: serde_json::Value = flotilla_testkit::eventually(Duration::from_secs(60), "an HTTP submit", || {
        let req = http.post(&url).bearer_auth(token).json(&serde_json::json!({"input": JOB}));
        async move {
            let r = req.send().await.ok()?;
            (r.status() == reqwest::StatusCode::CREATED).then_some(())?;
            r.json().await.ok()
        }
    })
    .await;
    let job: JobId = serde_json::from_value(created["job_id"].clone()).expect("the new job's id");
    let acme = connect_as(&nats, "client-acme").await;
    let rec = finished(&acme, &Tenant::new("acme").unwrap(), job).await;
    assert_eq!(rec.status, JobStatus::Completed, "{rec:?}");
    let v = violations(&nats.log(), "orchestrator");
    assert!(v.is_empty(), "the orchestrator role lacks what the HTTP API needs:\n{}", v.join("\n"));
}
