//! A2A v1.0 against a real orchestrator and real workers, with the official
//! Python SDK (`a2a-sdk` 1.3.0, `scripts/install-deps --test`) as the client
//! (docs/PROTOCOLS.md, "A2A v1.0"): the card, the demo job streamed to its
//! answer artifact, the same task over HTTP+JSON, a cancel, a webhook's
//! notifications at a local receiver, and another tenant's token seeing
//! none of it.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use flotilla_testkit::{Deployment, Proc, TestConfig, free_port};
use serde_json::Value;

const ADMIN_TOKEN: &str = "e2e-a2a-admin-token-0123456789";
const ACME_TOKEN: &str = "e2e-a2a-acme-token-0123456789ab";
const GLOBEX_TOKEN: &str = "e2e-a2a-globex-token-0123456789";
const JOB: &str = "Compute the gross margin of region north: revenue 120, cost 75.";

/// The venv with `a2a-sdk` 1.3.0.
pub(crate) fn python() -> PathBuf {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.flotilla/test-deps/agents/bin/python");
    assert!(p.exists(), "{} is missing: run `scripts/install-deps --test` (installs a2a-sdk)", p.display());
    p
}

/// The demo deployment with the dashboard and A2A on `port`, admin, acme
/// and globex tokens, webhooks to loopback allowed (the test's receiver).
async fn deployment(port: u16) -> Deployment {
    let section = format!(
        "[dashboard]\nlisten = \"127.0.0.1:{port}\"\ntoken_env = \"E2E_ADMIN_TOKEN\"\n\
         [dashboard.tenants.acme]\ntoken_env = \"E2E_ACME_TOKEN\"\n\
         [dashboard.tenants.globex]\ntoken_env = \"E2E_GLOBEX_TOKEN\"\n\
         [a2a]\nenabled = true\n[a2a.push]\nallow_private = true\n"
    );
    let mut d = Deployment::start(1, |url| {
        let mut c = TestConfig::demo(url, 2, 1500);
        c.section(&section);
        c
    })
    .await;
    // The harness starts the orchestrator without the tokens: start it again with them.
    d.orchestrator.as_mut().expect("orchestrator").kill();
    let cfg = d.config_arg();
    let env = [("E2E_ADMIN_TOKEN", ADMIN_TOKEN), ("E2E_ACME_TOKEN", ACME_TOKEN), ("E2E_GLOBEX_TOKEN", GLOBEX_TOKEN)];
    d.orchestrator = Some(Proc::spawn("orchestrator-a2a", "flotilla", &["orchestrator", "--config", &cfg], &env));
    d.orchestrator_ready().await;
    d
}

fn states(v: &Value) -> Vec<&str> {
    v.as_array().into_iter().flatten().filter_map(Value::as_str).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_a2a_sdk_streams_the_demo_job_cancels_another_and_another_tenant_sees_nothing() {
    let port = free_port();
    let _d = deployment(port).await;
    let base = format!("http://127.0.0.1:{port}");
    let hook_port = free_port().to_string();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/a2a_client.py");
    let args: Vec<String> =
        [base.as_str(), ACME_TOKEN, GLOBEX_TOKEN, hook_port.as_str(), JOB, JOB].map(String::from).into();
    let started = std::time::Instant::now();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(python()).arg(script).args(args).stdin(Stdio::null()).output().expect("run python")
    })
    .await
    .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "a2a client failed: {stderr}\n{stdout}");
    let r: Value = serde_json::from_str(stdout.trim().lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("no JSON ({e}): {stdout}\n{stderr}"));
    eprintln!("a2a-sdk client run: {:?}", started.elapsed());

    // The card, read without a token: both bindings, skills, the bearer scheme.
    let card = &r["card"];
    let bindings: Vec<&str> =
        card["supportedInterfaces"].as_array().unwrap().iter().filter_map(|i| i["protocolBinding"].as_str()).collect();
    assert_eq!(bindings, ["JSONRPC", "HTTP+JSON"], "{card}");
    assert_eq!(card["supportedInterfaces"][0]["url"], format!("{base}/a2a"));
    let skills: Vec<&str> = card["skills"].as_array().unwrap().iter().filter_map(|s| s["id"].as_str()).collect();
    assert_eq!(skills, ["planner", "finance"], "{card}");
    assert_eq!(card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"], "Bearer", "{card}");
    assert_eq!(card["capabilities"]["streaming"], true);

    // The demo job, streamed: submitted first, completed last, the answer artifact before it.
    let streamed = &r["streamed"];
    let seen = states(&streamed["states"]);
    assert_eq!(seen.first(), Some(&"TASK_STATE_SUBMITTED"), "{streamed}");
    assert_eq!(seen.last(), Some(&"TASK_STATE_COMPLETED"), "{streamed}");
    assert!(seen.contains(&"TASK_STATE_WORKING"), "{streamed}");
    let answer = streamed["artifacts"].as_array().unwrap().iter().find(|a| a["id"] == "answer").expect("answer");
    assert!(answer["text"].as_str().unwrap().contains("0.375"), "{streamed}");
    assert!(
        streamed["artifacts"].as_array().unwrap().iter().any(|a| a["name"].as_str().unwrap().starts_with("/reports/")),
        "each task's report is an artifact: {streamed}"
    );
    let task_id = streamed["task_id"].as_str().unwrap();

    // GetTask over JSON-RPC and over HTTP+JSON: the same completed task.
    for got in [&r["got"], &r["rest_got"]] {
        assert_eq!(got["id"], task_id);
        assert_eq!(got["contextId"], task_id, "the context is the job");
        assert_eq!(got["status"]["state"], "TASK_STATE_COMPLETED", "{got}");
        assert!(got["artifacts"][0]["parts"][0]["text"].as_str().unwrap().contains("0.375"), "{got}");
        assert_eq!(got["history"][0]["role"], "ROLE_USER");
        assert_eq!(got["metadata"]["flotillaTenant"], "acme");
    }

    // The slow job was cancelled; cancelling it again is refused as not cancelable.
    assert_eq!(r["cancelled"]["state"], "TASK_STATE_CANCELED", "{}", r["cancelled"]);
    assert_eq!(r["cancel_again"], "TaskNotCancelableError");

    // The webhook got the task's updates with its token, ending with the final status.
    let received = r["pushed"]["received"].as_array().unwrap();
    assert!(!received.is_empty(), "no notification reached the webhook");
    assert!(received.iter().all(|n| n["token"] == "hook-secret-1"), "{received:?}");
    assert!(received[0]["body"]["task"]["id"] == r["pushed"]["id"], "the first notification is the task: {received:?}");
    let pushed_states: Vec<&str> =
        received.iter().filter_map(|n| n["body"]["statusUpdate"]["status"]["state"].as_str()).collect();
    assert_eq!(pushed_states.last(), Some(&"TASK_STATE_COMPLETED"), "{pushed_states:?}");
    assert!(
        received.iter().any(|n| n["body"]["artifactUpdate"]["artifact"]["artifactId"] == "answer"),
        "the answer artifact was pushed too"
    );

    // globex's token: none of acme's tasks exist for it.
    let g = &r["globex"];
    for call in ["get", "cancel", "subscribe"] {
        assert_eq!(g[call], "TaskNotFoundError", "globex {call}: {g}");
    }
    assert_eq!(g["list"], Value::Array(vec![]), "{g}");
    assert_eq!(g["list_context"], Value::Array(vec![]), "{g}");

    // acme lists its three tasks, newest first, two a page.
    let l = &r["acme_list"];
    assert_eq!(l["page1"].as_array().unwrap().len(), 2, "{l}");
    assert_eq!(l["page2"].as_array().unwrap().len(), 1, "{l}");
    assert_eq!(l["page2"][0][0], task_id, "the oldest is the first job: {l}");
    assert_eq!(l["next2"], "", "{l}");
}

/// The agent card needs no token but sits behind the dashboard's Host
/// check: a request under a name the listener does not have (a rebound DNS
/// name, a forged Host) is refused, instead of getting a card whose URLs
/// point at that name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_card_is_refused_under_a_host_the_dashboard_does_not_have() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let port = free_port();
    let _d = deployment(port).await;
    let fetch = |host: &'static str| async move {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.expect("connect");
        let req = format!("GET /.well-known/agent-card.json HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    };
    let forged = fetch("evil.example").await;
    assert!(forged.starts_with("HTTP/1.1 421"), "{forged}");
    assert!(!forged.contains("http://evil.example"), "no card naming the forged host: {forged}");
    let own = fetch("127.0.0.1").await;
    assert!(own.starts_with("HTTP/1.1 200"), "{own}");
    assert!(own.contains("http://127.0.0.1/a2a"), "{own}");
}
