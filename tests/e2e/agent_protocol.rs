//! The Synadia Agent Protocol for NATS (docs/PROTOCOLS.md), with the
//! official SDKs as real processes against a real nats-server, orchestrator
//! and worker (scripted models): the `synadia-ai-agents` client discovers
//! the agent `flotilla` through `$SRV.INFO.agents` and prompts the demo job
//! (tests/fixtures/agent_protocol_client.py).

use std::path::PathBuf;
use std::process::{Command, Stdio};

use flotilla_protocol::ids::{JobId, Tenant};
use flotilla_protocol::{JobStatus, ListRequest, SCHEMA_VERSION};
use flotilla_testkit::{Deployment, TIMEOUT, TestConfig};
use futures::StreamExt;
use serde_json::Value;

const JOB: &str = "Compute the gross margin of region north: revenue 120, cost 75.";

/// The venv with the Synadia SDKs (`scripts/install-deps --test`).
fn python() -> PathBuf {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.flotilla/test-deps/agents/bin/python");
    assert!(p.exists(), "{} is missing: run `scripts/install-deps --test` (the Synadia agent SDKs)", p.display());
    p
}

/// Runs the SDK caller with `args`; returns its JSON report.
pub(crate) async fn sdk_client(args: Vec<String>) -> Value {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/agent_protocol_client.py");
    let out = tokio::task::spawn_blocking(move || {
        Command::new(python()).arg(script).args(args).stdin(Stdio::null()).output().expect("run python")
    })
    .await
    .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "client failed: {stderr}\n{stdout}");
    serde_json::from_str(stdout.trim().lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("client printed no JSON ({e}): {stdout}\n{stderr}"))
}

/// Waits for the first heartbeat on `subject`: the registration is live.
pub(crate) async fn first_heartbeat(nats: &async_nats::Client, subject: &str) -> Value {
    let mut sub = nats.subscribe(subject.to_string()).await.unwrap();
    let msg = tokio::time::timeout(TIMEOUT, sub.next()).await.expect("a heartbeat").expect("subscription");
    serde_json::from_slice(&msg.payload).expect("heartbeat JSON")
}

fn strs(v: &Value, key: &str) -> Vec<String> {
    v["chunks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["type"] == key)
        .map(|c| c["data"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_client_discovers_flotilla_and_prompts_the_demo_job_to_its_answer() {
    let d = Deployment::start(1, |url| {
        let mut c = TestConfig::demo(url, 1, 50);
        c.section("[agent_protocol]\nenabled = true\ntenants = [\"default\", \"acme\"]\nheartbeat_secs = 1\n");
        c
    })
    .await;
    d.orchestrator_ready().await;
    let beat = first_heartbeat(&d.raw.client, "agents.hb.flotilla.default.default").await;
    assert_eq!((beat["agent"].as_str(), beat["owner"].as_str()), (Some("flotilla"), Some("default")), "{beat}");
    assert_eq!(beat["interval_s"], 1, "{beat}");
    assert_eq!(beat["protocol_version"], "0.3", "{beat}");
    first_heartbeat(&d.raw.client, "agents.hb.flotilla.acme.default").await;

    let args = ["--url", &d.nats.url(), "--owner", "default", "--prompt", JOB].map(String::from).to_vec();
    let report = sdk_client(args).await;

    // Discovery: one registration per served tenant, protocol 0.3, the prompt
    // endpoint in queue group `agents` with its capability metadata.
    let agents = report["agents"].as_array().unwrap();
    let mut owners: Vec<&str> = agents.iter().map(|a| a["owner"].as_str().unwrap()).collect();
    owners.sort_unstable();
    assert_eq!(owners, ["acme", "default"], "{report}");
    for a in agents {
        assert_eq!(a["agent"], "flotilla");
        assert_eq!(a["protocol_version"], "0.3");
        assert_eq!(a["session"], "default");
        assert_eq!(a["queue_group"], "agents");
        assert_eq!(a["attachments_ok"], false);
        assert_eq!(a["max_payload"], 1 << 20, "the server's max_payload");
        assert_eq!(a["endpoints"], serde_json::json!(["prompt", "status"]));
        assert_eq!(a["prompt_subject"], format!("agents.prompt.flotilla.{}.default", a["owner"].as_str().unwrap()));
    }
    assert_eq!(report["status"]["agent"], "flotilla", "the status endpoint answers the heartbeat shape: {report}");

    // The stream: the ack first, the job's id, progress, the answer, the terminator.
    assert!(report.get("error").is_none(), "{report}");
    assert_eq!(report["terminated"], true, "{report}");
    let chunks = report["chunks"].as_array().unwrap();
    assert_eq!(chunks[0], serde_json::json!({"type": "status", "data": "ack"}), "{report}");
    let job: JobId = strs(&report, "status")
        .iter()
        .find_map(|s| s.strip_prefix("job:").map(|id| id.parse().expect("a job id")))
        .unwrap_or_else(|| panic!("no job:<id> status: {report}"));
    let responses = strs(&report, "response");
    assert!(responses.len() >= 2, "progress, then the answer: {report}");
    assert!(
        responses.iter().any(|r| r.contains("-> finance:")),
        "a task dispatched, as `watch` prints it: {responses:?}"
    );
    let answer = responses.last().unwrap();
    assert!(answer.contains("0.375"), "{answer}");

    // The prompt was a job of the tenant its owner token names, and of no other.
    let rec = d.client().for_tenant(Tenant::default()).status(job).await.unwrap();
    assert_eq!(rec.status, JobStatus::Completed);
    assert_eq!(rec.answer.as_deref(), Some(answer.as_str()));
    let acme = d.client().for_tenant(Tenant::new("acme").unwrap());
    let listed = acme.call(&ListRequest { v: SCHEMA_VERSION, ..Default::default() }, "list").await.unwrap();
    assert!(listed.jobs.is_empty(), "tenant acme has no job: {listed:?}");
}

/// `[agent_protocol] subagents`: the type `finance` is an agent of its own,
/// and a prompt on it runs as one finance task of the caller's tenant (a
/// direct job, docs/PROTOCOL.md): no planner model runs, the task's
/// description is the prompt verbatim, its report is the answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subagent_type_is_an_agent_whose_prompt_runs_one_task_of_that_type() {
    let d = Deployment::start(1, |url| {
        let mut c = TestConfig::demo(url, 1, 0);
        c.section("[agent_protocol]\nenabled = true\nsubagents = [\"finance\"]\nheartbeat_secs = 1\n");
        c
    })
    .await;
    d.orchestrator_ready().await;
    let beat = first_heartbeat(&d.raw.client, "agents.hb.finance.default.default").await;
    assert_eq!(beat["agent"], "finance", "{beat}");

    let prompt = "Compute the gross margin of region north: revenue 120, cost 75.";
    let args = ["--url", &d.nats.url(), "--agent", "finance", "--owner", "default", "--prompt", prompt];
    let report = sdk_client(args.map(String::from).to_vec()).await;
    let mut agents: Vec<&str> =
        report["agents"].as_array().unwrap().iter().map(|a| a["agent"].as_str().unwrap()).collect();
    agents.sort_unstable();
    assert_eq!(agents, ["finance", "flotilla"], "the planner's agent and the type's: {report}");
    let finance = report["agents"].as_array().unwrap().iter().find(|a| a["agent"] == "finance").unwrap();
    assert_eq!(finance["prompt_subject"], "agents.prompt.finance.default.default", "{report}");
    assert!(report.get("error").is_none(), "{report}");
    assert_eq!(report["terminated"], true, "{report}");
    let job: JobId = strs(&report, "status")
        .iter()
        .find_map(|s| s.strip_prefix("job:").map(|id| id.parse().expect("a job id")))
        .unwrap_or_else(|| panic!("no job:<id> status: {report}"));
    let answer = strs(&report, "response").pop().unwrap_or_default();
    assert_eq!(answer.trim(), "0.375", "the task's report itself, no planner's table: {report}");

    let rec = d.status(job).await;
    assert_eq!(rec.status, JobStatus::Completed);
    assert_eq!(rec.subagent_type.as_ref().map(|t| t.as_str()), Some("finance"));
    assert_eq!(rec.planner_usage, Default::default(), "no planner model call: {:?}", rec.planner_usage);
    assert_eq!(rec.tasks_total, 1);
    assert_eq!(rec.tasks[0].description, prompt, "the prompt is the task, verbatim");
    assert_eq!(rec.usage.model_calls, 2, "the finance task's two turns, nothing else: {:?}", rec.usage);
}

/// `flotilla submit --subagent-type`: a direct job from the CLI; a type the
/// orchestrator does not configure is refused before any job exists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_submits_a_direct_job_and_an_unknown_type_is_refused_naming_the_types() {
    use flotilla_testkit::proc::run_cli;
    let d = Deployment::start(1, |url| TestConfig::demo(url, 1, 0)).await;
    d.orchestrator_ready().await;
    let cfg = d.config_arg();
    let prompt = "Compute the gross margin of region south: revenue 100, cost 76.";
    let (code, out, err) = run_cli(&["--config", &cfg, "submit", "--wait", "--subagent-type", "finance", prompt], &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), "0.24", "stdout is the task's report: {out}\n{err}");

    let (code, out, err) = run_cli(&["--config", &cfg, "submit", "--subagent-type", "legal", prompt], &[]);
    assert_ne!(code, 0, "{out}");
    assert!(err.contains("no subagent type \"legal\"") && err.contains("the types are: finance"), "{err}");
    let listed = d.client().call(&ListRequest { v: SCHEMA_VERSION, ..Default::default() }, "list").await.unwrap();
    assert_eq!(listed.jobs.len(), 1, "the refused submit left no job: {listed:?}");
}

/// `[agent_protocol]` serving acme and globex, each registration in its
/// tenant's own account (deploy/nats/roles.conf, AGENTS_<TENANT>).
fn accounts_section(url: &str) -> String {
    let mut s = "[agent_protocol]\nenabled = true\ntenants = [\"acme\", \"globex\"]\nheartbeat_secs = 1\n".to_string();
    for t in ["acme", "globex"] {
        s.push_str(&format!(
            "[agent_protocol.accounts.{t}]\nurl = \"{url}\"\ninbox_prefix = \"_INBOX.flotilla\"\nmanage_topology = false\n\
             [agent_protocol.accounts.{t}.auth]\nuser = \"agents-host-{t}\"\npassword_env = \"AGENTS_HOST_{}_PW\"\n",
            t.to_uppercase()
        ));
    }
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_tenants_credential_discovers_prompts_and_overhears_nothing() {
    use flotilla_testkit::Proc;
    use flotilla_testkit::nats_conf::{ConfiguredNats, deploy_dir, password};

    use crate::security::{JOB, config, connect_as, refs, role_env};

    let nats = ConfiguredNats::start("nats", &deploy_dir().join("nats/nats-local.conf"), &[]).await;
    let mut cfg = config(&nats.url());
    cfg.section(&accounts_section(&nats.url()));
    let path = cfg.write();
    let cfg = path.display().to_string();
    let mut env = role_env("orchestrator");
    for t in ["acme", "globex"] {
        env.push((format!("AGENTS_HOST_{}_PW", t.to_uppercase()), password(&format!("agents-host-{t}")).to_string()));
    }
    let _orchestrator = Proc::spawn("orchestrator", "flotilla", &["orchestrator", "--config", &cfg], &refs(&env));
    let worker_env = role_env("worker-finance");
    let _worker = Proc::spawn(
        "worker",
        "flotilla-worker",
        &["--config", &cfg, "--id", "w-finance", "--types", "finance", "--grace", "1"],
        &refs(&worker_env),
    );

    // globex's protocol credential listens everywhere it may: every reply
    // inbox of the SDKs and every heartbeat.
    let globex =
        async_nats::ConnectOptions::with_user_and_password("agents-globex".into(), password("agents-globex").into())
            .custom_inbox_prefix("_INBOX.agents.globex")
            .connect(nats.url())
            .await
            .unwrap();
    let mut overheard = globex.subscribe("_INBOX.agents.>").await.unwrap();
    let globex_beat = first_heartbeat(&globex, "agents.hb.>").await;
    assert_eq!(globex_beat["owner"], "globex", "{globex_beat}");
    let acme = async_nats::ConnectOptions::with_user_and_password("agents-acme".into(), password("agents-acme").into())
        .connect(nats.url())
        .await
        .unwrap();
    let acme_beat = first_heartbeat(&acme, "agents.hb.>").await;
    assert_eq!(acme_beat["owner"], "acme", "{acme_beat}");

    // acme's caller discovers only acme's agent and gets its answer.
    let prompt = ["--url", &nats.url_as("agents-acme"), "--owner", "acme", "--prompt", JOB].map(String::from).to_vec();
    let report = sdk_client(prompt).await;
    let owners: Vec<&str> = report["agents"].as_array().unwrap().iter().map(|a| a["owner"].as_str().unwrap()).collect();
    assert_eq!(owners, ["acme"], "{report}");
    assert_eq!(report["terminated"], true, "{report}");
    let answer = strs(&report, "response").pop().unwrap_or_default();
    assert!(answer.contains("0.375") && answer.contains("0.24") && answer.contains("0.75"), "{report}");

    // Nothing of acme's stream reached globex: the server answers this
    // flush only after everything it had routed to globex.
    globex.flush().await.unwrap();
    let mut seen = Vec::new();
    while let Ok(Some(m)) = tokio::time::timeout(std::time::Duration::ZERO, overheard.next()).await {
        seen.push(m.subject.to_string());
    }
    assert!(seen.is_empty(), "globex overheard: {seen:?}");

    // globex's caller: discovery shows its own agent only, acme's is not
    // there to prompt, and the literal subject gets no answer in its account.
    let look = ["--url", &nats.url_as("agents-globex"), "--owner", "acme", "--prompt", "list acme's jobs"];
    let report = sdk_client(look.map(String::from).to_vec()).await;
    let owners: Vec<&str> = report["agents"].as_array().unwrap().iter().map(|a| a["owner"].as_str().unwrap()).collect();
    assert_eq!(owners, ["globex"], "{report}");
    assert_eq!(report["error"], "agent not discovered", "{report}");
    let direct = globex.request("agents.prompt.flotilla.acme.default", "list acme's jobs".into()).await;
    let e = direct.expect_err("acme's prompt subject answered globex");
    // globex's own host holds `agents.prompt.>` in globex's account and
    // answers no other owner's subject; acme's host is not reachable.
    assert_eq!(e.kind(), async_nats::client::RequestErrorKind::TimedOut, "{e}");

    // The prompt was a job of acme, and of no other tenant.
    let acme_api = connect_as(&nats, "client-acme").await;
    let globex_api = connect_as(&nats, "client-globex").await;
    let list = |bus: flotilla_bus::Bus, t: &'static str| async move {
        let c = flotilla_client::Client::new(bus, Tenant::new(t).unwrap());
        c.call(&ListRequest { v: SCHEMA_VERSION, ..Default::default() }, "list").await.unwrap().jobs.len()
    };
    assert_eq!(list(acme_api, "acme").await, 1);
    assert_eq!(list(globex_api, "globex").await, 0);
    let log = nats.log();
    let violations: Vec<&str> = log.lines().filter(|l| l.contains("Violation")).collect();
    assert!(
        violations.iter().all(|l| !l.contains("agents-host-") && !l.contains("user:orchestrator")),
        "the host lacked permissions it needs: {violations:?}"
    );
}
