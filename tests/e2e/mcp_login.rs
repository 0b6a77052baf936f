//! `flotilla mcp login` (docs/MCP.md "OAuth"), all real:
//! nats-server, orchestrator, worker, the `flotilla` CLI as a process, and
//! `tests/fixtures/oauth_finance.py`, whose authorization server serves the
//! authorization-code grant with PKCE and redirects at once (no person).
//! The CLI prints the authorization URL; the test follows it like a browser
//! to the CLI's loopback callback; the CLI stores the credentials in
//! `<prefix>_mcp_tokens`; then a worker, which has no browser, computes the
//! demo's margin through the server with them, renewing the (aged) access
//! token with the refresh token and saving it back. No access or refresh token
//! appears in the CLI's output or any log. Exit 2 for a client-credentials
//! server, a redirect URI off loopback, and a sign-in that never comes
//! within `--timeout`.

use std::process::Stdio;

use flotilla_protocol::JobStatus;
use flotilla_testkit::config::demo_script;
use flotilla_testkit::proc::run_cli;
use flotilla_testkit::{EventLog, Proc, TestConfig, bin, free_port};
use tokio::io::{AsyncBufReadExt, AsyncReadExt};

use flotilla_testkit::{Deployment, TIMEOUT};

const PLANNER: &str = r#"
[[turns]]
[[turns.calls]]
tool = "task"
args = '{"subagent_type": "interactive", "description": "north: revenue 120, cost 75"}'

[[turns]]
content = '''{% for r in last %}{% if r.ok %}OK {{ r.value }}{% else %}FAILED {{ r.error.message }}{% endif %}{% endfor %}'''
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_signs_in_once_with_mcp_login_and_a_worker_uses_the_stored_credentials() {
    let (_server, port, mut as_log) = crate::mcp_oauth::start_fixture("unused-in-this-test").await;

    let url = format!("http://127.0.0.1:{port}/mcp");
    let callback = format!("http://127.0.0.1:{}/callback", free_port());
    let mut d = Deployment::start(0, |nats| {
        let mut c = TestConfig::new(nats);
        c.nats(5, 1);
        // The demo's finance script, calling the tool under this server's prefix.
        let finance = demo_script("finance.toml").replace("finance_gross_margin", "interactive_gross_margin");
        c.scripted_model("planner", PLANNER).scripted_model("finance", &finance);
        c.section(&format!(
            r#"[planner]
model = "planner"
task_timeout = 60
[mcp_servers.interactive]
url = "{url}"
init_timeout = 10
[mcp_servers.interactive.oauth]
grant = "authorization_code"
client_id = "flotilla-login"
redirect_uri = "{callback}"
[mcp_servers.remote]
url = "{url}"
[mcp_servers.remote.oauth]
grant = "authorization_code"
client_id = "flotilla-login"
redirect_uri = "http://10.1.2.3:8976/callback"
[mcp_servers.machine]
url = "{url}"
[mcp_servers.machine.oauth]
client_id = "flotilla-workers"
client_secret_env = "MACHINE_MCP_SECRET"
[subagents.interactive]
description = "Computes gross margins through a server a person signed in to."
model = "finance"
tools = ["mcp:interactive/gross_margin"]
"#
        ));
        c
    })
    .await;
    let cfg = d.config_arg();

    // A client-credentials server needs no sign-in: refused, exit 2, saying why.
    let (code, out, err) = run_cli(&["--config", &cfg, "mcp", "login", "machine"], &[]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        err.contains(
            "MCP server `machine` does not use grant = \"authorization_code\" (mcp_servers.machine.oauth.grant)"
        ),
        "{err}"
    );

    // A redirect URI off this host would hand the code to the network: refused.
    let (code, out, err) = run_cli(&["--config", &cfg, "mcp", "login", "remote"], &[]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("mcp_servers.remote.oauth.redirect_uri must be http on a loopback address"), "{err}");
    // Nobody follows the URL: the CLI gives up after --timeout, storing nothing.
    let (code, out, err) = run_cli(&["--config", &cfg, "mcp", "login", "interactive", "--timeout", "1"], &[]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(out.contains("/authorize?") && err.contains("nobody signed in within 1s (--timeout)"), "{out}{err}");

    // The login: the CLI prints the URL and waits on the loopback callback.
    flotilla_config::tls::install_crypto_provider();
    let (code, printed, stderr) = login(&cfg, port, &callback, false).await;
    assert_eq!(code, Some(0), "{printed}{stderr}");
    assert!(
        printed.contains(
            "Signed in to MCP server `interactive`; credentials stored in KV bucket flotilla_mcp_tokens (key interactive)."
        ) && printed.contains("client: flotilla-login")
            && printed.contains("scopes: finance:read")
            && printed.contains("refresh token: stored"),
        "{printed}"
    );

    // The record: rmcp's StoredCredentials, with the refresh token.
    let bucket = d.raw.js.get_key_value("flotilla_mcp_tokens").await.unwrap();
    let record: serde_json::Value =
        serde_json::from_slice(&bucket.get("interactive").await.unwrap().expect("a stored record")).unwrap();
    let access = record["token_response"]["access_token"].as_str().unwrap().to_string();
    let refresh = record["token_response"]["refresh_token"].as_str().unwrap().to_string();
    assert_eq!(record["client_id"], "flotilla-login");
    // Time passes: the access token is an hour old, so the worker must renew
    // it with the refresh token (rmcp refreshes a token about to expire) and
    // save the renewed credentials back to the bucket.
    let mut aged = record.clone();
    aged["token_received_at"] = serde_json::json!(record["token_received_at"].as_u64().unwrap() - 3600);
    bucket.put("interactive", serde_json::to_vec(&aged).unwrap().into()).await.unwrap();

    // A worker, with no browser, uses the stored credentials.
    d.workers.push(Proc::spawn("w1", "flotilla-worker", &["--config", &cfg, "--id", "w1", "--grace", "2"], &[]));
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let job = d.submit("Margin of north through the server a person signed in to.").await;
    let end = log.job_end(TIMEOUT).await;
    assert_eq!(end["event"], "completed", "{end}");
    let rec = d.status(job).await;
    assert_eq!(rec.status, JobStatus::Completed, "{rec:?}");
    let answer = rec.answer.clone().unwrap_or_default();
    assert_eq!(answer.trim(), "OK 0.375", "{answer}");

    // The renewed credentials are back in the bucket, for the other workers.
    let renewed: serde_json::Value =
        serde_json::from_slice(&bucket.get("interactive").await.unwrap().expect("a stored record")).unwrap();
    let renewed_access = renewed["token_response"]["access_token"].as_str().unwrap().to_string();
    assert_ne!(renewed_access, access);
    assert_eq!(renewed["token_response"]["refresh_token"].as_str(), Some(refresh.as_str()));
    assert!(renewed["token_received_at"].as_u64() > aged["token_received_at"].as_u64(), "{renewed}");

    // The authorization server saw one code exchange (PKCE checked), then the worker's refresh.
    let mut seen = Vec::new();
    while let Ok(l) = as_log.try_recv() {
        if l.starts_with("AUTHORIZE ") || l.starts_with("TOKEN ") {
            seen.push(l);
        }
    }
    assert_eq!(
        seen,
        [
            format!("AUTHORIZE client=flotilla-login redirect={callback}"),
            format!("TOKEN client=flotilla-login issued code resource={url}"),
            "TOKEN client=flotilla-login refreshed".to_string(),
        ],
        "{seen:?}"
    );

    // No token in the CLI's output or any process's log.
    let worker = d.workers[0].log();
    let orchestrator = d.orchestrator.as_ref().unwrap().log();
    for text in [&printed, &stderr, &answer, &worker, &orchestrator] {
        for token in [&access, &refresh, &renewed_access] {
            assert!(!text.contains(token.as_str()), "a token leaked:\n{text}");
        }
    }

    // Again under --json: the URL goes to stderr, stdout is one object
    // describing the new record, still without a token.
    let (code, printed, stderr) = login(&cfg, port, &callback, true).await;
    assert_eq!(code, Some(0), "{printed}{stderr}");
    let v: serde_json::Value = serde_json::from_str(&printed).unwrap_or_else(|e| panic!("{e}: {printed}"));
    assert_eq!(
        (&v["server"], &v["bucket"], &v["client_id"], &v["scopes"], &v["refresh_token"]),
        (
            &serde_json::json!("interactive"),
            &serde_json::json!("flotilla_mcp_tokens"),
            &serde_json::json!("flotilla-login"),
            &serde_json::json!(["finance:read"]),
            &serde_json::json!(true)
        ),
        "{v}"
    );
    assert!(v["expires_at"].as_str().is_some_and(|t| t.ends_with('Z')), "{v}");
    let latest: serde_json::Value =
        serde_json::from_slice(&bucket.get("interactive").await.unwrap().expect("a stored record")).unwrap();
    for token in ["access_token", "refresh_token"].map(|k| latest["token_response"][k].as_str().unwrap()) {
        assert!(!printed.contains(token) && !stderr.contains(token), "a token leaked:\n{printed}{stderr}");
    }
}

/// Runs `flotilla mcp login interactive` (`--json` when `json`), follows the
/// authorization URL it prints like a browser would (the fixture redirects
/// at once to `callback`), and returns the CLI's exit code, stdout and stderr.
async fn login(cfg: &str, port: u16, callback: &str, json: bool) -> (Option<i32>, String, String) {
    let mut args = vec!["--config", cfg, "mcp", "login", "interactive", "--timeout", "60"];
    if json {
        args.push("--json");
    }
    let mut cli = tokio::process::Command::new(bin("flotilla"))
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("flotilla runs");
    type Stream = Box<dyn tokio::io::AsyncRead + Unpin + Send>;
    let (stdout, stderr): (Stream, Stream) =
        (Box::new(cli.stdout.take().unwrap()), Box::new(cli.stderr.take().unwrap()));
    // The URL is on stdout for a person, on stderr under --json.
    let (prompt, other) = if json { (stderr, stdout) } else { (stdout, stderr) };
    let mut prompt = tokio::io::BufReader::new(prompt);
    let mut prompted = String::new();
    let authorize = tokio::time::timeout(TIMEOUT, async {
        loop {
            let mut line = String::new();
            assert!(prompt.read_line(&mut line).await.unwrap() > 0, "the CLI ended before printing a URL: {prompted}");
            prompted.push_str(&line);
            if line.starts_with(&format!("http://127.0.0.1:{port}/authorize?")) {
                return line.trim().to_string();
            }
        }
    })
    .await
    .expect("the authorization URL within the timeout");
    assert!(authorize.contains("code_challenge_method=S256"), "{authorize}");
    let page = reqwest::get(&authorize).await.expect("the redirect chain completes");
    assert_eq!(page.url().as_str().split('?').next(), Some(callback));
    assert!(page.text().await.unwrap().contains("you can close this window"));
    let status = tokio::time::timeout(TIMEOUT, cli.wait()).await.expect("the CLI ends").unwrap();
    prompt.read_to_string(&mut prompted).await.unwrap();
    let mut rest = String::new();
    tokio::io::BufReader::new(other).read_to_string(&mut rest).await.unwrap();
    let (out, err) = if json { (rest, prompted) } else { (prompted, rest) };
    (status.code(), out, err)
}
