//! Flotilla's HTTP servers (the dashboard + HTTP API, `flotilla mcp serve`)
//! against slow, many, oversized and misdirected clients, replayed against
//! the real processes (docs/SECURITY.md, "HTTP servers"): half-sent headers
//! and a connection flood (shared/http-serve), an upload that never
//! ends and one upload too many (orchestrator/dashboard/src/api.rs), a login link
//! carrying another tenant's token (orchestrator/dashboard/src/login.rs), an OAuth
//! introspection URL with secrets in it (orchestrator/mcp-server/src/oauth.rs), an MCP
//! session used by another tenant's token (orchestrator/mcp-server/src/sessions.rs)
//! and a reviewer naming someone else (orchestrator/src/approvals.rs).
//!
//! Raw TCP is used where a client library would hide what is tested: a
//! request cut off in its headers, a body that does not end, the
//! `100 Continue` that tells the client the server started reading.

use std::time::Duration;

use flotilla_testkit::{EventLog, Proc, TestConfig, eventually, free_port};
use reqwest::StatusCode;
use reqwest::header::{AUTHORIZATION, LOCATION, ORIGIN, SET_COOKIE};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use flotilla_testkit::{Deployment, TIMEOUT};

const ADMIN_TOKEN: &str = "e2e-sec-http-admin-0123456789abcdef";
const ACME_TOKEN: &str = "e2e-sec-http-acme-0123456789abcdef";
const JOB: &str = "Compute the gross margin of region north: revenue 120, cost 75.";

fn client() -> reqwest::Client {
    flotilla_config::tls::install_crypto_provider();
    let redirects = reqwest::redirect::Policy::none();
    reqwest::Client::builder().timeout(Duration::from_secs(20)).redirect(redirects).build().expect("http client")
}

/// Everything the server sends until it closes the connection (a reset
/// counts as a close too); fails the test if it never does.
async fn until_closed(s: &mut TcpStream, what: &str) -> String {
    let mut out = Vec::new();
    match tokio::time::timeout(TIMEOUT, s.read_to_end(&mut out)).await {
        Ok(_) => String::from_utf8_lossy(&out).into_owned(),
        Err(_) => panic!("{what}: the server kept the connection open ({} bytes read)", out.len()),
    }
}

/// One `GET path` on a connection of its own, read to its close.
async fn get_once(addr: &str, path: &str, headers: &str) -> String {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    let req = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n{headers}\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    until_closed(&mut s, path).await
}

/// The demo deployment with `dashboard` (TOML lines after `[dashboard]`)
/// and `extra` sections, and the admin and acme tokens in the
/// orchestrator's environment; returns once the dashboard answers.
async fn dashboard(port: u16, dashboard: &str, extra: &str) -> Deployment {
    let section = format!("[dashboard]\nlisten = \"127.0.0.1:{port}\"\n{dashboard}\n{extra}");
    let mut d = Deployment::start(1, |url| {
        let mut c = TestConfig::demo(url, 1, 0);
        c.section(&section);
        c
    })
    .await;
    if section.contains("token_env") {
        d.orchestrator.as_mut().expect("orchestrator").kill();
        let cfg = d.config_arg();
        let env = [("E2E_ADMIN_TOKEN", ADMIN_TOKEN), ("E2E_ACME_TOKEN", ACME_TOKEN)];
        let args = ["orchestrator", "--config", cfg.as_str()];
        d.orchestrator = Some(Proc::spawn("orchestrator-tokens", "flotilla", &args, &env));
    }
    d.orchestrator_ready().await;
    let addr = format!("127.0.0.1:{port}");
    let auth = format!("Authorization: Bearer {ADMIN_TOKEN}\r\n");
    // Each probe's connection is closed before the next step (it would
    // otherwise hold a slot of the connection cap).
    eventually(TIMEOUT, "the dashboard to answer", || {
        let (addr, auth) = (addr.clone(), auth.clone());
        async move { get_once(&addr, "/api/jobs", &auth).await.starts_with("HTTP/1.1 200").then_some(()) }
    })
    .await;
    d
}

const TOKENS: &str = "token_env = \"E2E_ADMIN_TOKEN\"\n[dashboard.tenants.acme]\ntoken_env = \"E2E_ACME_TOKEN\"";

/// `cap` connections that send half a request's headers and stop; then one
/// more, which is refused at once; then the half-sent ones, closed by the
/// server's header timeout; then a whole request, answered.
async fn replay_slowloris(addr: &str, cap: usize, key: &str, whole: &str) {
    let mut slow = Vec::new();
    for _ in 0..cap {
        let mut s = TcpStream::connect(addr).await.expect("connect");
        s.write_all(b"GET /api/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: 1\r\n").await.unwrap();
        slow.push(s);
    }
    let mut over = TcpStream::connect(addr).await.expect("connect");
    let refused = until_closed(&mut over, "the connection over the cap").await;
    assert!(refused.starts_with("HTTP/1.1 503"), "one connection over the cap is refused: {refused:?}");
    assert!(refused.contains("retry-after: 1") || refused.contains("Retry-After: 1"), "{refused}");
    assert!(refused.contains(key), "the refusal names {key}: {refused}");
    for (i, s) in slow.iter_mut().enumerate() {
        let sent = until_closed(s, &format!("half-sent headers {i}")).await;
        assert!(!sent.contains("HTTP/1.1 200"), "nothing was answered to half a request: {sent}");
    }
    let ok = get_once(addr, "/api/jobs", whole).await;
    assert!(ok.starts_with("HTTP/1.1 200"), "a whole request is answered afterwards: {ok}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_closes_half_sent_headers_and_refuses_connections_past_its_cap() {
    let port = free_port();
    let limits = "header_timeout_secs = 3\nmax_connections = 3\n";
    let _d = dashboard(port, limits, "").await;
    replay_slowloris(&format!("127.0.0.1:{port}"), 3, "[dashboard] max_connections", "").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_serve_closes_half_sent_headers_and_refuses_connections_past_its_cap() {
    let d = Deployment::start(0, |url| TestConfig::demo(url, 1, 0)).await;
    let cfg = d.config_arg();
    let listen = format!("127.0.0.1:{}", free_port());
    let args =
        ["--config", &cfg, "mcp", "serve", "--listen", &listen, "--header-timeout-secs", "3", "--max-connections", "2"];
    let server = Proc::spawn("mcp-serve", "flotilla", &args, &[]);
    eventually(TIMEOUT, "mcp serve to listen", || async { server.log().contains("MCP on http://").then_some(()) })
        .await;
    // `/api/jobs` is not an MCP route: a whole request is answered 404.
    let mut slow = Vec::new();
    for _ in 0..2 {
        let mut s = TcpStream::connect(&listen).await.expect("connect");
        s.write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n").await.unwrap();
        slow.push(s);
    }
    let mut over = TcpStream::connect(&listen).await.expect("connect");
    let refused = until_closed(&mut over, "the connection over the cap").await;
    assert!(refused.starts_with("HTTP/1.1 503") && refused.contains("--max-connections"), "{refused}");
    for s in &mut slow {
        until_closed(s, "half-sent headers").await;
    }
    let ok = get_once(&listen, "/not-mcp", "").await;
    assert!(ok.starts_with("HTTP/1.1 404"), "a whole request is answered afterwards: {ok}");
}

/// Writes a chunked JSON body that would never end (up to `max` bytes) and
/// reads the answer; returns the answer and how many bytes were written
/// before the server closed the connection.
async fn endless_upload(addr: &str, max: usize) -> (String, usize) {
    let s = TcpStream::connect(addr).await.expect("connect");
    let (mut rx, mut tx) = s.into_split();
    let head = format!(
        "POST /api/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {ADMIN_TOKEN}\r\n\
         Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    );
    let writer = tokio::spawn(async move {
        let mut written = 0;
        let chunk = vec![b'A'; 64 * 1024];
        let mut frame = format!("{:x}\r\n", chunk.len()).into_bytes();
        frame.extend_from_slice(&chunk);
        frame.extend_from_slice(b"\r\n");
        let start = "{\"input\": \"x\", \"files\": [";
        let start = format!("{head}{:x}\r\n{start}\r\n", start.len());
        if tx.write_all(start.as_bytes()).await.is_err() {
            return written;
        }
        while written < max {
            if tx.write_all(&frame).await.is_err() {
                break;
            }
            written += chunk.len();
        }
        written
    });
    let mut out = Vec::new();
    let read = tokio::time::timeout(TIMEOUT, rx.read_to_end(&mut out)).await;
    assert!(read.is_ok(), "the server kept reading an endless upload ({} bytes answered)", out.len());
    let written = writer.await.unwrap();
    (String::from_utf8_lossy(&out).into_owned(), written)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_over_the_limit_is_refused_while_it_is_read_and_one_upload_too_many_waits() {
    let port = free_port();
    let extra = "[files]\nmax_upload_bytes = 65536\nmax_file_bytes = 32768\n";
    let _d = dashboard(port, &format!("max_concurrent_uploads = 1\n{TOKENS}"), extra).await;
    let addr = format!("127.0.0.1:{port}");
    let base = format!("http://{addr}");
    let http = client();
    let admin = format!("Bearer {ADMIN_TOKEN}");

    // A body that never ends: 413 naming the limit, the connection closed,
    // and far less than the body read (the limit is 65536 * 4/3 + 1 MiB).
    let max = 64 << 20;
    let (answer, written) = endless_upload(&addr, max).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("[files] max_upload_bytes (65536 bytes)"), "the 413 names the limit: {answer}");
    assert!(written < max, "the server closed the connection instead of reading all {max} bytes");

    // One file over [files] max_file_bytes, in a body under the request limit.
    let big = "QUFB".repeat(40 * 1024 / 3);
    let body = json!({"input": JOB, "files": [{"path": "/inputs/big.txt", "content_base64": big}]});
    let r = http.post(format!("{base}/api/jobs")).header(AUTHORIZATION, &admin).json(&body).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let text = r.text().await.unwrap();
    assert!(text.contains("[files] max_file_bytes (32768 bytes)"), "{text}");

    // An upload the server has started to read (it answered `100 Continue`)
    // holds the one upload slot: another upload is told to come back later.
    let small = json!({"input": JOB}).to_string();
    let mut first = TcpStream::connect(&addr).await.unwrap();
    let head = format!(
        "POST /api/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {ADMIN_TOKEN}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n",
        small.len()
    );
    first.write_all(head.as_bytes()).await.unwrap();
    let mut buf = [0u8; 25];
    tokio::time::timeout(TIMEOUT, first.read_exact(&mut buf)).await.expect("100 Continue").unwrap();
    assert_eq!(&buf, b"HTTP/1.1 100 Continue\r\n\r\n");
    let r = http.post(format!("{base}/api/jobs")).header(AUTHORIZATION, &admin).json(&json!({"input": JOB}));
    let r = r.send().await.unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(r.headers()["retry-after"], "5");
    let text = r.text().await.unwrap();
    assert!(text.contains("[dashboard] max_concurrent_uploads"), "{text}");

    // The first upload goes through; then the slot is free again.
    first.write_all(small.as_bytes()).await.unwrap();
    let answer = until_closed(&mut first, "the first upload").await;
    assert!(answer.contains("HTTP/1.1 201"), "{answer}");
    let r = http.post(format!("{base}/api/jobs")).header(AUTHORIZATION, &admin).json(&json!({"input": JOB}));
    assert_eq!(r.send().await.unwrap().status(), StatusCode::CREATED);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_with_a_token_sets_no_cookie_and_only_a_same_origin_sign_in_does() {
    let port = free_port();
    let _d = dashboard(port, TOKENS, "").await;
    let base = format!("http://127.0.0.1:{port}");
    let http = client();

    // The attack: a link carrying acme's token, opened by a browser.
    let r = http.get(format!("{base}/?token={ACME_TOKEN}")).header("accept", "text/html").send().await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "a ?token= link signs nobody in");
    assert!(r.headers().get(SET_COOKIE).is_none(), "and sets no cookie");
    assert!(r.text().await.unwrap().contains("id=\"login-form\""), "the browser gets the sign-in form");
    // The same through another site's auto-submitting form.
    let form = format!("token={ACME_TOKEN}&next=%2F");
    let login = |origin: &str| {
        http.post(format!("{base}/login"))
            .header(ORIGIN, origin)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form.clone())
    };
    let r = login("http://evil.example").send().await.unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN, "a cross-site sign-in is refused");
    assert!(r.headers().get(SET_COOKIE).is_none());

    // The dashboard's own form: the cookie, and back to the page asked for.
    let r = login(&base).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(r.headers()[LOCATION], "/");
    let set = r.headers()[SET_COOKIE].to_str().unwrap().to_string();
    assert!(set.contains("HttpOnly") && set.contains("SameSite=Strict") && !set.contains(ACME_TOKEN), "{set}");
    let cookie = set.split(';').next().unwrap().to_string();
    let page = http.get(format!("{base}/")).header("cookie", &cookie).send().await.unwrap().text().await.unwrap();
    assert!(page.contains("as tenant acme"), "the cookie acts for acme: {page}");
    let r = http
        .post(format!("{base}/login"))
        .header(ORIGIN, &base)
        .header("content-type", "application/x-www-form-urlencoded")
        .body("token=not-a-token-of-this-dashboard&next=%2F")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert!(r.headers().get(SET_COOKIE).is_none());
}

/// Starts `mcp serve` with `args` after the common ones; its process.
fn mcp_serve(cfg: &str, listen: &str, args: &[&str], env: &[(&str, &str)]) -> Proc {
    let mut all = vec!["--config", cfg, "mcp", "serve", "--listen", listen];
    all.extend_from_slice(args);
    Proc::spawn("mcp-serve", "flotilla", &all, env)
}

const RS_SECRET: &str = "e2e-rs-client-secret-Hq3v";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oauth_outage_tells_the_caller_nothing_and_a_url_with_credentials_does_not_start() {
    let d = Deployment::start(0, |url| TestConfig::demo(url, 1, 0)).await;
    let cfg = d.config_arg();
    let listen = format!("127.0.0.1:{}", free_port());
    let resource = format!("http://{listen}/mcp");
    let closed = free_port();
    let env = [("FLOTILLA_MCP_OAUTH_CLIENT_ID", "flotilla-mcp"), ("FLOTILLA_MCP_OAUTH_CLIENT_SECRET", RS_SECRET)];
    let issuer = format!("http://127.0.0.1:{closed}");

    // Credentials in the introspection URL: refused at start, not echoed.
    let with_userinfo = format!("http://rs:PASSWORD-IN-URL@127.0.0.1:{closed}/introspect");
    let flags = ["--oauth-issuer", &issuer, "--oauth-resource", &resource, "--oauth-introspection-url"];
    let mut refused = mcp_serve(&cfg, &listen, &[&flags[..], &[with_userinfo.as_str()]].concat(), &env);
    eventually(TIMEOUT, "mcp serve to refuse to start", || {
        let gone = !refused.running();
        async move { gone.then_some(()) }
    })
    .await;
    let log = refused.log();
    assert!(log.contains("carries credentials (user:pass@)") && log.contains("--oauth-client-secret-env"), "{log}");
    assert!(!log.contains("PASSWORD-IN-URL"), "the password is not echoed: {log}");

    // The AS unreachable at a URL with a secret in its path and query: the
    // unauthenticated caller gets a generic 503, the log the redacted URL.
    let secret_url = format!("http://127.0.0.1:{closed}/t/SECRET-PATH/introspect?api_key=SECRET-QUERY");
    let server = mcp_serve(&cfg, &listen, &[&flags[..], &[secret_url.as_str()]].concat(), &env);
    eventually(TIMEOUT, "mcp serve to listen", || async { server.log().contains("MCP on http://").then_some(()) })
        .await;
    let r = client().post(&resource).bearer_auth("any-token-at-all").body("{}").send().await.unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    let body = r.text().await.unwrap();
    assert!(!body.contains("SECRET") && !body.contains(&closed.to_string()), "nothing of the URL: {body}");
    assert!(body.contains("retry"), "{body}");
    let log = eventually(TIMEOUT, "the outage in the log", || async {
        let log = server.log();
        log.contains("token introspection at").then_some(log)
    })
    .await;
    assert!(!log.contains("SECRET-PATH") && !log.contains("SECRET-QUERY"), "the log is redacted: {log}");
}

/// One JSON-RPC POST to `/mcp` with `token` (and `session`): status, session header, body.
async fn mcp_post(url: &str, token: &str, session: Option<&str>, msg: Value) -> (StatusCode, Option<String>, String) {
    let mut req = client()
        .post(url)
        .bearer_auth(token)
        .header("Accept", "application/json, text/event-stream")
        .header("Content-Type", "application/json");
    if let Some(s) = session {
        req = req.header("Mcp-Session-Id", s).header("MCP-Protocol-Version", "2025-06-18");
    }
    let r = req.body(msg.to_string()).send().await.expect("POST /mcp");
    let session = r.headers().get("mcp-session-id").map(|v| v.to_str().unwrap().to_string());
    (r.status(), session, r.text().await.unwrap_or_default())
}

async fn mcp_delete(url: &str, token: &str, session: &str) -> StatusCode {
    let r = client()
        .delete(url)
        .bearer_auth(token)
        .header("Mcp-Session-Id", session)
        .header("MCP-Protocol-Version", "2025-06-18");
    r.send().await.expect("DELETE /mcp").status()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_session_answers_only_the_credential_that_opened_it() {
    let d = Deployment::start(0, |url| TestConfig::demo(url, 1, 0)).await;
    let cfg = d.config_arg();
    let listen = format!("127.0.0.1:{}", free_port());
    let url = format!("http://{listen}/mcp");
    let args = ["--token-env", "E2E_MCP_TOKEN", "--tenant-token", "acme=E2E_MCP_ACME_TOKEN"];
    let server = mcp_serve(&cfg, &listen, &args, &[("E2E_MCP_TOKEN", ADMIN_TOKEN), ("E2E_MCP_ACME_TOKEN", ACME_TOKEN)]);
    eventually(TIMEOUT, "mcp serve to listen", || async { server.log().contains("MCP on http://").then_some(()) })
        .await;
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "e2e", "version": "1"}}});
    let (status, session, body) = mcp_post(&url, ADMIN_TOKEN, None, init).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let session = session.expect("an Mcp-Session-Id");
    let ready = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let (status, _, _) = mcp_post(&url, ADMIN_TOKEN, Some(&session), ready).await;
    assert!(status.is_success(), "{status}");
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}});

    // acme's token, which learnt the id: the session does not exist for it.
    let (status, _, body) = mcp_post(&url, ACME_TOKEN, Some(&session), list.clone()).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "another tenant's token cannot use the session: {body}");
    assert!(!body.contains("submit_job"), "{body}");
    assert_eq!(mcp_delete(&url, ACME_TOKEN, &session).await, StatusCode::NOT_FOUND, "nor end it");
    let (status, _, body) = mcp_post(&url, ACME_TOKEN, Some("no-such-session"), list.clone()).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "the same answer as for no session: {body}");

    // The owner's session is intact, and only the owner ends it.
    let (status, _, body) = mcp_post(&url, ADMIN_TOKEN, Some(&session), list.clone()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.contains("submit_job"), "{body}");
    assert!(mcp_delete(&url, ADMIN_TOKEN, &session).await.is_success());
    let (status, _, _) = mcp_post(&url, ADMIN_TOKEN, Some(&session), list).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "ended");
}

/// A finance subagent whose `calculate_margin` calls need approval, and the
/// dashboard on `port` with `tokens` (TOML lines of `[dashboard]`).
fn approvals_config(url: &str, port: u16, tokens: &str) -> TestConfig {
    let mut c = crate::approvals::config(url, r#"["approve", "reject", "edit"]"#, 120);
    c.section(&format!("[dashboard]\nlisten = \"127.0.0.1:{port}\"\n{tokens}\n"));
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_records_the_authenticated_principal_whatever_the_reviewer_calls_itself() {
    let port = free_port();
    let mut d = Deployment::start(1, |url| approvals_config(url, port, TOKENS)).await;
    d.orchestrator.as_mut().expect("orchestrator").kill();
    let cfg = d.config_arg();
    let env = [("E2E_ADMIN_TOKEN", ADMIN_TOKEN), ("E2E_ACME_TOKEN", ACME_TOKEN)];
    d.orchestrator = Some(Proc::spawn("orchestrator-tokens", "flotilla", &["orchestrator", "--config", &cfg], &env));
    d.orchestrator_ready().await;
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let base = format!("http://127.0.0.1:{port}");
    let http = client();
    let acme = format!("Bearer {ACME_TOKEN}");
    let created: Value = eventually(TIMEOUT, "acme's job submitted", || async {
        let r =
            http.post(format!("{base}/api/jobs")).header(AUTHORIZATION, &acme).json(&json!({"input": "one margin"}));
        let r = r.send().await.ok()?;
        (r.status() == StatusCode::CREATED).then_some(())?;
        r.json().await.ok()
    })
    .await;
    let job = created["job_id"].as_str().unwrap().to_string();
    let req = log.until(TIMEOUT, "an approval request", |s, v| s.contains(".approval.") && v["job_id"] == job).await;
    let call = req["call_id"].as_str().unwrap();

    // acme's token calls itself the admin, in `by` and in the job API's
    // own field: neither decides the principal.
    let body = json!({"job_id": job, "decision": "edit", "args": {"revenue": 200, "cost": 50},
                      "by": "dashboard admin token", "authenticated_as": "dashboard admin token"});
    let r = http.post(format!("{base}/api/approvals/{call}")).header(AUTHORIZATION, &acme).json(&body);
    let r = r.send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let decided: Value = r.json().await.unwrap();
    let state = &decided["record"]["state"];
    assert_eq!(state["by"], "dashboard admin token", "the display name is kept as given: {decided}");
    assert_eq!(
        state["principal"], "tenant acme via dashboard token of tenant acme",
        "the principal is the credential's: {decided}"
    );
    // The stored decision itself says so too (the worker reads this one).
    let kv = d.raw.js.get_key_value("flotilla_approvals").await.expect("the approvals bucket");
    let keys: Vec<String> = futures::TryStreamExt::try_collect(kv.keys().await.unwrap()).await.unwrap();
    let key = keys.iter().find(|k| k.starts_with("dec.") && k.contains(&job)).expect("the decision key");
    let stored: Value = serde_json::from_slice(&kv.get(key).await.unwrap().expect("the decision")).unwrap();
    assert_eq!(stored["principal"], "tenant acme via dashboard token of tenant acme", "{stored}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_through_the_job_api_records_the_tenant_of_its_subject() {
    let port = free_port();
    let d = Deployment::start(1, |url| approvals_config(url, port, "")).await;
    d.orchestrator_ready().await;
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let job = d.submit("one margin").await.to_string();
    let req = log.until(TIMEOUT, "an approval request", |s, v| s.contains(".approval.") && v["job_id"] == job).await;
    let call = req["call_id"].as_str().unwrap();
    let (code, out, err) =
        crate::approvals::cli(&d, &["--json", "approve", &job, call, "--approve", "--by", "dashboard admin token"])
            .await;
    assert_eq!(code, 0, "{err}");
    let reply: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let state = &reply["record"]["state"];
    assert_eq!(state["by"], "dashboard admin token", "{reply}");
    assert_eq!(state["principal"], "tenant default via job API", "{reply}");
}
