//! A worker uses a Streamable HTTP MCP server protected by
//! OAuth 2.1 (docs/MCP.md "OAuth"), all real: nats-server, orchestrator,
//! worker, and `tests/fixtures/oauth_finance.py` (the Python SDK's FastMCP as
//! resource server with protected-resource metadata and 401 challenges, and
//! a client-credentials authorization server on the same origin). The worker
//! discovers the authorization server from the 401, gets a token for the
//! server's URL (RFC 8707) with its secret from an environment variable, and
//! computes the demo's margin through the protected tool. A second server
//! entry with a wrong secret fails its task with an error naming the server,
//! and the secret appears in no answer or log; a third, `authorization_code`
//! with no stored credentials, fails at once naming `flotilla mcp login`.

use std::path::PathBuf;
use std::process::Stdio;

use flotilla_protocol::JobStatus;
use flotilla_testkit::config::demo_script;
use flotilla_testkit::{EventLog, Proc, TestConfig, free_port};
use tokio::io::AsyncBufReadExt;

use flotilla_testkit::{Deployment, TIMEOUT};

const SECRET: &str = "e2e-oauth-client-secret-Zq9w";
const WRONG: &str = "e2e-oauth-wrong-secret-Kx7v";

/// One task per type, then each outcome.
const PLANNER: &str = r#"
[[turns]]
[[turns.calls]]
tool = "task"
args = '{"subagent_type": "finance", "description": "north: revenue 120, cost 75"}'
[[turns.calls]]
tool = "task"
args = '{"subagent_type": "denied", "description": "north: revenue 120, cost 75"}'
[[turns.calls]]
tool = "task"
args = '{"subagent_type": "interactive", "description": "north: revenue 120, cost 75"}'

[[turns]]
content = '''{% for r in last %}=== {{ loop.index }} {% if r.ok %}OK {{ r.value }}{% else %}FAILED {{ r.error.kind }}: {{ r.error.message }}{% endif %}
{% endfor %}'''
"#;

const ECHO: &str = r#"
[[turns]]
content = "should not run"
"#;

/// `tests/fixtures/oauth_finance.py` listening on a free port, its client
/// `flotilla-workers` holding `secret`: the child (killed on drop), the port,
/// and the authorization server's log lines as they come.
pub(crate) async fn start_fixture(
    secret: &str,
) -> (tokio::process::Child, u16, tokio::sync::mpsc::UnboundedReceiver<String>) {
    let python = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.flotilla/test-deps/venv/bin/python");
    assert!(python.exists(), "{} is missing: run `scripts/install-deps --test`", python.display());
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/oauth_finance.py");
    let port = free_port();
    let mut server = tokio::process::Command::new(&python)
        .arg(&script)
        .args([&port.to_string(), "flotilla-workers"])
        .env("FIXTURE_CLIENT_SECRET", secret)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("python runs");
    let mut lines = tokio::io::BufReader::new(server.stdout.take().unwrap()).lines();
    assert_eq!(lines.next_line().await.unwrap().as_deref(), Some("READY"));
    let (tx, log) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok(Some(l)) = lines.next_line().await {
            let _ = tx.send(l);
        }
    });
    flotilla_testkit::eventually(TIMEOUT, "the OAuth fixture to listen", || async move {
        tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ok().map(|_| ())
    })
    .await;
    (server, port, log)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_uses_an_oauth_protected_mcp_server_and_a_wrong_secret_fails_its_task_clearly() {
    // The token endpoint's log lines, collected as they come.
    let (_server, port, mut token_log) = start_fixture(SECRET).await;

    let url = format!("http://127.0.0.1:{port}/mcp");
    let mut d = Deployment::start(0, |nats| {
        let mut c = TestConfig::new(nats);
        c.nats(5, 1);
        c.scripted_model("planner", PLANNER)
            .scripted_model("finance", &demo_script("finance.toml"))
            .scripted_model("echo", ECHO);
        c.section(&format!(
            r#"[planner]
model = "planner"
task_timeout = 60
[mcp_servers.finance]
url = "{url}"
[mcp_servers.finance.oauth]
client_id = "flotilla-workers"
client_secret_env = "FINANCE_MCP_SECRET"
[mcp_servers.denied]
url = "{url}"
init_timeout = 10
[mcp_servers.denied.oauth]
client_id = "flotilla-workers"
client_secret_env = "DENIED_MCP_SECRET"
[mcp_servers.interactive]
url = "{url}"
init_timeout = 10
[mcp_servers.interactive.oauth]
grant = "authorization_code"
[subagents.finance]
description = "Computes gross margins."
model = "finance"
tools = ["mcp:finance/gross_margin"]
[subagents.denied]
description = "Reads the rules from a server it holds a wrong secret for."
model = "echo"
system_prompt = "static"
mcp_resources = ["denied/finance://rules/gross-margin"]
[subagents.interactive]
description = "Reads the rules from a server that needs a person to sign in."
model = "echo"
system_prompt = "static"
mcp_resources = ["interactive/finance://rules/gross-margin"]
"#
        ));
        c
    })
    .await;
    let cfg = d.config_arg();
    d.workers.push(Proc::spawn(
        "w1",
        "flotilla-worker",
        &["--config", &cfg, "--id", "w1", "--grace", "2"],
        &[("FINANCE_MCP_SECRET", SECRET), ("DENIED_MCP_SECRET", WRONG)],
    ));

    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let job = d.submit("Margins of north through the protected server.").await;
    let end = log.job_end(TIMEOUT).await;
    assert_eq!(end["event"], "completed", "{end}");
    let rec = d.status(job).await;
    assert_eq!(rec.status, JobStatus::Completed, "{rec:?}");
    let answer = rec.answer.clone().unwrap_or_default();
    let parts: Vec<&str> = answer.split("=== ").skip(1).collect();
    assert_eq!(parts.len(), 3, "{answer}");

    // The protected tool answered with the demo's figure.
    assert!(parts[0].starts_with("1 OK 0.375"), "{answer}");
    // The wrong secret: the task fails, naming the server and why.
    let denied = parts[1];
    assert!(denied.starts_with("2 FAILED "), "{denied}");
    assert!(
        denied.contains(
            "from server `denied`: MCP server `denied` is unavailable: OAuth client credentials grant failed"
        ) && denied.contains("invalid_client"),
        "{denied}"
    );

    // authorization_code without stored credentials: a worker never waits
    // for a browser; the error says what a person has to run.
    let interactive = parts[2];
    assert!(
        interactive.starts_with("3 FAILED ")
            && interactive.contains(
                "MCP server `interactive` is unavailable: OAuth authorization_code needs a person to sign in once: \
                 run `flotilla mcp login interactive`"
            ),
        "{interactive}"
    );

    // What the authorization server saw: a token for the server's URL
    // (RFC 8707 resource) for the right secret, invalid_client for the wrong one.
    let mut seen = Vec::new();
    while let Ok(l) = token_log.try_recv() {
        seen.push(l);
    }
    assert!(seen.iter().any(|l| l == &format!("TOKEN client=flotilla-workers issued resource={url}")), "{seen:?}");
    assert!(seen.iter().any(|l| l == "TOKEN client=flotilla-workers refused=invalid_client"), "{seen:?}");

    // Secrets appear nowhere: not in the answer, the worker's or the orchestrator's log.
    let worker = d.workers[0].log();
    let orchestrator = d.orchestrator.as_ref().unwrap().log();
    for text in [&answer, &worker, &orchestrator] {
        assert!(!text.contains(SECRET) && !text.contains(WRONG), "a secret leaked:\n{text}");
        assert!(!text.contains("access_token"), "a token response leaked:\n{text}");
    }
    assert!(worker.contains("denied"), "{worker}");
}
