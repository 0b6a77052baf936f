//! `flotilla mcp serve`, Flotilla's job API as an MCP server
//! (docs/MCP.md, "Use Flotilla from an MCP host"), against a real
//! nats-server, orchestrator and worker (the scripted model stands in for a
//! paid API). The host is the official Python SDK's client
//! (tests/fixtures/mcp_serve_client.py, `pip install "mcp<2"` from
//! `scripts/install-deps --test`), over Streamable HTTP with the bearer
//! token and over stdio.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Instant;

use flotilla_testkit::proc::run_cli;
use flotilla_testkit::{Proc, TestConfig, bin, eventually, free_port};
use serde_json::{Value, json};

use flotilla_testkit::{Deployment, TIMEOUT};

const JOB: &str = "Compute the gross margin of region north: revenue 120, cost 75.";
const TOKEN: &str = "e2e-mcp-serve-token-0123456789";
/// Acts for tenant `acme` (`--tenant-token acme=VAR`).
const ACME_TOKEN: &str = "e2e-mcp-serve-acme-token-98765";
const TOOLS: [&str; 4] = ["cancel_job", "job_status", "list_jobs", "submit_job"];

/// The test venv's Python, with the official `mcp<2` SDK.
pub(crate) fn python() -> PathBuf {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.flotilla/test-deps/venv/bin/python");
    assert!(p.exists(), "{} is missing: run `scripts/install-deps --test` (installs mcp<2)", p.display());
    p
}

/// Runs the Python MCP client with `args`; returns its JSON report.
async fn client(args: Vec<String>, env: Vec<(&'static str, String)>) -> Value {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/mcp_serve_client.py");
    let out = tokio::task::spawn_blocking(move || {
        Command::new(python()).arg(script).args(args).envs(env).stdin(Stdio::null()).output().expect("run python")
    })
    .await
    .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "client failed: {stderr}\n{stdout}");
    serde_json::from_str(stdout.trim().lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("client printed no JSON ({e}): {stdout}\n{stderr}"))
}

/// The tools a client listed: names sorted, each with an object output schema.
fn check_tools(report: &Value) {
    let tools = report["tools"].as_array().expect("tools");
    let mut names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    names.sort_unstable();
    assert_eq!(names, TOOLS, "{report}");
    for t in tools {
        assert_eq!(t["output_schema"]["type"], "object", "{} declares an output schema: {t}", t["name"]);
    }
    let submit = tools.iter().find(|t| t["name"] == "submit_job").unwrap();
    assert_eq!(submit["input_schema"]["required"], json!(["input"]), "{submit}");
}

/// A raw `initialize` POST, to see what the HTTP layer answers.
async fn initialize(url: &str, headers: &[(&str, &str)]) -> reqwest::Response {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "e2e", "version": "1"}}});
    let mut req = reqwest::Client::new()
        .post(url)
        .header("Accept", "application/json, text/event-stream")
        .header("Content-Type", "application/json");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.body(body.to_string()).send().await.expect("POST /mcp")
}

/// The revision without `initialize` or sessions.
const MODERN: &str = "2026-07-28";

/// The `_meta` a 2026-07-28 request carries instead of a session.
fn modern_meta(capabilities: Value) -> Value {
    json!({"io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientInfo": {"name": "e2e-modern", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": capabilities})
}

/// The headers a 2026-07-28 client sends with `method` (SEP-2243): the
/// revision, the method, the name the body's params carry, and the
/// `Mcp-Param-Job-Id` mirror of a `job_id` argument.
fn modern_headers(method: &str, params: &Value) -> Vec<(String, String)> {
    let mut h = vec![("MCP-Protocol-Version".to_string(), MODERN.to_string()), ("Mcp-Method".into(), method.into())];
    let name = match method {
        "tools/call" => params["name"].as_str(),
        "resources/read" => params["uri"].as_str(),
        "tasks/get" | "tasks/cancel" => params["taskId"].as_str(),
        _ => None,
    };
    if let Some(n) = name {
        h.push(("Mcp-Name".into(), n.into()));
    }
    if let Some(job) = params["arguments"]["job_id"].as_str() {
        h.push(("Mcp-Param-Job-Id".into(), job.into()));
    }
    h
}

/// What a stateless request got: its HTTP status and headers, and the
/// JSON-RPC response (from a JSON body or the SSE stream).
struct Answer {
    status: u16,
    headers: reqwest::header::HeaderMap,
    reply: Value,
}

/// One stateless 2026-07-28 request: `_meta` declaring `capabilities` goes
/// into `params`, with `headers` (usually [`modern_headers`] and a token).
async fn modern(
    url: &str,
    method: &str,
    mut params: Value,
    capabilities: Value,
    headers: &[(String, String)],
) -> Answer {
    params["_meta"] = modern_meta(capabilities);
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params});
    let mut req = reqwest::Client::new()
        .post(url)
        .header("Accept", "application/json, text/event-stream")
        .header("Content-Type", "application/json");
    for (k, v) in headers {
        req = req.header(k.as_str(), v.as_str());
    }
    let resp = req.body(body.to_string()).send().await.expect("POST /mcp");
    let (status, headers) = (resp.status().as_u16(), resp.headers().clone());
    let text = resp.text().await.unwrap();
    let reply = text
        .lines()
        .map(|l| l.strip_prefix("data:").unwrap_or(l).trim())
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|m| m.get("id").is_some() && (m.get("result").is_some() || m.get("error").is_some()))
        .unwrap_or(Value::Null);
    Answer { status, headers, reply }
}

/// [`modern_headers`] for `method` with `params`, plus `Authorization: Bearer <token>`.
fn with_token(method: &str, params: &Value, token: &str) -> Vec<(String, String)> {
    let mut h = modern_headers(method, params);
    h.push(("Authorization".into(), format!("Bearer {token}")));
    h
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_host_submits_the_demo_job_and_reads_the_answer_over_http_and_lists_tools_over_stdio() {
    // Each model call takes 300 ms, so a job runs long enough to be waited for.
    let d = Deployment::start(1, |url| TestConfig::demo(url, 1, 300)).await;
    d.orchestrator_ready().await;
    let cfg = d.config_arg();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let serve_args = [
        "--config",
        &cfg,
        "mcp",
        "serve",
        "--listen",
        &listen,
        "--token-env",
        "E2E_MCP_TOKEN",
        "--allowed-host",
        "flotilla.test",
        "--tenant-token",
        "acme=E2E_MCP_ACME_TOKEN",
    ];
    let env = [("E2E_MCP_TOKEN", TOKEN), ("E2E_MCP_ACME_TOKEN", ACME_TOKEN)];
    let server = Proc::spawn("mcp-serve", "flotilla", &serve_args, &env);
    eventually(TIMEOUT, "mcp serve to listen", || async { server.log().contains("MCP on http://").then_some(()) })
        .await;
    let url = format!("http://{listen}/mcp");

    // Auth and DNS rebinding, at the HTTP layer.
    flotilla_config::tls::install_crypto_provider();
    let none = initialize(&url, &[]).await;
    assert_eq!(none.status(), 401);
    assert_eq!(none.headers()["www-authenticate"], "Bearer");
    let bearer = format!("Bearer {TOKEN}");
    let wrong = initialize(&url, &[("Authorization", "Bearer not-the-token-at-all-000")]).await;
    assert_eq!(wrong.status(), 401);
    let rebound = initialize(&url, &[("Authorization", &bearer), ("Host", &format!("evil.example:{port}"))]).await;
    assert_eq!(rebound.status(), 403, "a rebound Host is refused");
    let origin = initialize(&url, &[("Authorization", &bearer), ("Origin", "http://evil.example")]).await;
    assert_eq!(origin.status(), 403, "a foreign Origin is refused");
    let legacy = initialize(&url, &[("Authorization", &bearer)]).await;
    assert_eq!(legacy.status(), 200);
    assert!(legacy.headers().contains_key("mcp-session-id"), "a 2025-06-18 host gets a session");
    let legacy = legacy.text().await.unwrap();
    assert!(legacy.contains(r#""protocolVersion":"2025-06-18""#), "initialize keeps the host's 2025-06-18: {legacy}");
    let named = [("Authorization", bearer.as_str()), ("Host", "flotilla.test"), ("Origin", "https://flotilla.test")];
    assert_eq!(initialize(&url, &named).await.status(), 200, "an --allowed-host is answered");

    // The Python SDK over Streamable HTTP: tools, the demo job to its answer.
    let started = Instant::now();
    let report = client(vec!["http".into(), url.clone(), JOB.into()], vec![("MCP_TOKEN", TOKEN.into())]).await;
    let http_time = started.elapsed();
    check_tools(&report);
    let job = &report["job"];
    let id = job["submitted"]["job_id"].as_str().expect("a job id").to_string();
    assert_eq!(job["submitted"]["files"], json!(["/inputs/notes.txt"]), "{job}");
    let last = &job["final"];
    assert_eq!((last["status"].as_str(), last["job_id"].as_str()), (Some("completed"), Some(id.as_str())), "{job}");
    assert!(last["answer"].as_str().unwrap_or_default().contains("0.375"), "{job}");
    assert_eq!((job["submitted"]["v"].as_u64(), last["v"].as_u64()), (Some(1), Some(1)), "results are versioned");
    assert!(last["task_counts"]["completed"].as_u64() >= Some(1), "{job}");
    assert_eq!(job["unknown"]["is_error"], true, "{job}");
    assert!(job["unknown"]["text"].as_str().unwrap().contains("no job"), "the job API's message: {job}");
    assert_eq!(job["templates"], json!(["flotilla://jobs/{job_id}/files/{+path}"]), "{job}");
    assert_eq!(job["resource"][0]["text"], "north: revenue 120, cost 75\n", "the file as a resource: {job}");
    let missing = job["missing_resource"].as_str().unwrap();
    assert!(missing.contains("missing.txt") && missing != "read", "a missing file is an error: {missing}");
    assert_eq!(job["cancel_ended"]["is_error"], true, "{job}");
    let refused = job["cancel_ended"]["text"].as_str().unwrap();
    assert!(refused.contains("already completed; nothing to cancel"), "the job API's message: {refused}");
    assert!(job["listed"]["jobs"].as_array().unwrap().iter().any(|j| j["job_id"] == id.as_str()), "{job}");
    // Waiting in one call: progress notifications, one per job event, the last the end.
    let waited = &job["waited"];
    let (final_, notes) = (&waited["final"], waited["progress"].as_array().unwrap());
    assert_eq!((final_["status"].as_str(), final_["done"].as_bool()), (Some("completed"), Some(true)), "{waited}");
    assert!(final_["answer"].as_str().unwrap_or_default().contains("0.375"), "{waited}");
    assert!(final_["events_waited"].as_u64() >= Some(2), "the call waited through the job's events: {waited}");
    assert_eq!(notes.len() as u64, final_["events_waited"].as_u64().unwrap(), "one notification per event: {waited}");
    assert!(notes.last().unwrap()["message"].as_str().unwrap().contains("completed"), "{waited}");
    // The uploaded file is in the job's files, byte for byte.
    let (code, out, err) = run_cli(&["--config", &cfg, "files", "get", &id, "/inputs/notes.txt"], &[]);
    assert_eq!((code, out.as_str()), (0, "north: revenue 120, cost 75\n"), "files get: {err}");
    // The same job through the bus: the tool reported what the job API holds.
    let rec = d.status(id.parse().unwrap()).await;
    assert_eq!(rec.answer.as_deref(), last["answer"].as_str());
    assert_eq!(rec.input, JOB);
    eprintln!(
        "figures: python client run over HTTP (connect, two jobs, probes): {http_time:?}, {} job_status polls; unknown id: {}; missing file: {}; \
         waited {} s through {} events",
        job["polls"],
        job["unknown"]["text"],
        job["missing_resource"],
        job["waited"]["seconds"],
        notes.len()
    );

    // The same server at 2026-07-28: stateless requests with no session and no
    // initialize before them, each checked exactly as a session's are.
    let bare = modern_headers("server/discover", &json!({}));
    let none = modern(&url, "server/discover", json!({}), json!({}), &bare).await;
    assert_eq!((none.status, none.headers["www-authenticate"].to_str().unwrap()), (401, "Bearer"), "no token: 401");
    let wrong = with_token("server/discover", &json!({}), "not-the-token-at-all-000");
    assert_eq!(modern(&url, "server/discover", json!({}), json!({}), &wrong).await.status, 401);
    let listed = json!({});
    let no_token = modern(&url, "tools/list", listed.clone(), json!({}), &modern_headers("tools/list", &listed)).await;
    assert_eq!(no_token.status, 401, "a stateless tools/list without the token is refused");
    let mut rebound = with_token("server/discover", &json!({}), TOKEN);
    rebound.push(("Host".into(), format!("evil.example:{port}")));
    assert_eq!(modern(&url, "server/discover", json!({}), json!({}), &rebound).await.status, 403, "a rebound Host");
    let mut foreign = with_token("server/discover", &json!({}), TOKEN);
    foreign.push(("Origin".into(), "http://evil.example".into()));
    assert_eq!(modern(&url, "server/discover", json!({}), json!({}), &foreign).await.status, 403, "a foreign Origin");
    let found =
        modern(&url, "server/discover", json!({}), json!({}), &with_token("server/discover", &json!({}), TOKEN)).await;
    assert_eq!(found.status, 200, "{}", found.reply);
    assert!(!found.headers.contains_key("mcp-session-id"), "no session at 2026-07-28");
    let info = &found.reply["result"];
    assert_eq!(
        info["supportedVersions"],
        json!(["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", MODERN]),
        "{info}"
    );
    assert_eq!(info["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], "flotilla", "{info}");
    assert!(info["capabilities"]["extensions"]["io.modelcontextprotocol/tasks"].is_object(), "{info}");
    let tools = modern(&url, "tools/list", listed.clone(), json!({}), &with_token("tools/list", &listed, TOKEN)).await;
    let tools = &tools.reply["result"];
    let mut names: Vec<&str> = tools["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    names.sort_unstable();
    assert_eq!(names, TOOLS, "{tools}");
    assert_eq!((tools["ttlMs"].as_u64(), tools["cacheScope"].as_str()), (Some(0), Some("private")), "caching hints");
    let tool = |name: &str| tools["tools"].as_array().unwrap().iter().find(|t| t["name"] == name).unwrap().clone();
    let input = tool("submit_job")["inputSchema"].clone();
    assert_eq!(input["$schema"], "https://json-schema.org/draft/2020-12/schema", "JSON Schema 2020-12 kept: {input}");
    assert_eq!(input["properties"]["files"]["items"]["$ref"], "#/$defs/InputFile", "{input}");
    assert_eq!(input["$defs"]["InputFile"]["required"], json!(["path", "content"]), "$defs kept: {input}");
    assert_eq!(tool("job_status")["inputSchema"]["properties"]["job_id"]["x-mcp-header"], "Job-Id");
    let status = json!({"name": "job_status", "arguments": {"job_id": id}});
    let got = modern(&url, "tools/call", status.clone(), json!({}), &with_token("tools/call", &status, TOKEN)).await;
    let sc = &got.reply["result"]["structuredContent"];
    assert_eq!((got.status, sc["status"].as_str()), (200, Some("completed")), "{}", got.reply);
    assert_eq!(sc["answer"], last["answer"], "the same answer over 2026-07-28");
    let mut unmirrored = with_token("tools/call", &status, TOKEN);
    unmirrored.retain(|(k, _)| k != "Mcp-Param-Job-Id");
    let refused = modern(&url, "tools/call", status.clone(), json!({}), &unmirrored).await;
    assert_eq!((refused.status, &refused.reply["error"]["code"]), (400, &json!(-32020)), "{}", refused.reply);
    let acme_sees =
        modern(&url, "tools/call", status.clone(), json!({}), &with_token("tools/call", &status, ACME_TOKEN)).await;
    let r = &acme_sees.reply["result"];
    assert_eq!(r["isError"], true, "the acme token acts for acme at 2026-07-28 too: {r}");
    assert!(r["content"][0]["text"].as_str().unwrap_or_default().contains("not_found"), "{r}");
    let file = json!({"uri": format!("flotilla://jobs/{id}/files/inputs/notes.txt")});
    let read =
        modern(&url, "resources/read", file.clone(), json!({}), &with_token("resources/read", &file, TOKEN)).await;
    let r = &read.reply["result"];
    assert_eq!(r["contents"][0]["text"], "north: revenue 120, cost 75\n", "{r}");
    assert_eq!(r["cacheScope"], "private", "a tenant's file is never marked shareable: {r}");
    let gone = json!({"uri": format!("flotilla://jobs/{id}/files/inputs/missing.txt")});
    let missing =
        modern(&url, "resources/read", gone.clone(), json!({}), &with_token("resources/read", &gone, TOKEN)).await;
    let e = &missing.reply["error"];
    assert_eq!((&e["code"], &e["data"]["uri"]), (&json!(-32602), &gone["uri"]), "SEP-2164 not found: {e}");
    let task = json!({"taskId": id});
    let untasked = modern(&url, "tasks/get", task.clone(), json!({}), &with_token("tasks/get", &task, TOKEN)).await;
    assert_eq!((untasked.status, &untasked.reply["error"]["code"]), (400, &json!(-32021)), "{}", untasked.reply);

    // The acme token acts for acme: it sees none of the default tenant's jobs.
    let acme = client(vec!["peek".into(), url.clone(), id.clone()], vec![("MCP_TOKEN", ACME_TOKEN.into())]).await;
    assert_eq!(acme["peek"]["listed"]["jobs"], json!([]), "acme lists only its own jobs: {acme}");
    let status = &acme["peek"]["status"];
    assert_eq!(status["is_error"], true, "{acme}");
    assert!(status["text"].as_str().unwrap().contains("not_found"), "another tenant's job is not found: {acme}");
    let own = client(vec!["peek".into(), url.clone(), id.clone()], vec![("MCP_TOKEN", TOKEN.into())]).await;
    assert_eq!(own["peek"]["status"]["result"]["status"], "completed", "the default token sees it: {own}");

    // Over stdio the same client lists the same tools.
    let flotilla = bin("flotilla").display().to_string();
    let stdio =
        vec!["stdio".into(), flotilla, "--config".into(), cfg.clone(), "mcp".into(), "serve".into(), "--stdio".into()];
    check_tools(&client(stdio, vec![]).await);
    drop(server);

    // Off loopback without a token, it refuses to start and says what to pass.
    let (code, _, err) = run_cli(&["--config", &cfg, "mcp", "serve", "--listen", "0.0.0.0:0"], &[]);
    assert_ne!(code, 0);
    assert!(err.contains("--token-env"), "{err}");
}

/// The client capabilities that declare the tasks extension (SEP-2663, the
/// shape rmcp 3.11 serves; docs/MCP.md, "Use Flotilla from an MCP host").
fn tasks_extension() -> Value {
    json!({"extensions": {"io.modelcontextprotocol/tasks": {}}})
}

/// A bare JSON-RPC session over Streamable HTTP: the Python SDK (`mcp<2`)
/// speaks the 2025-11-25 task shape (a `task` field, `tasks/result`), not the
/// tasks extension, so this host is written out.
struct RawHost {
    http: reqwest::Client,
    url: String,
    session: String,
    /// The bearer token sent with every request, if any.
    token: Option<String>,
    next: std::sync::atomic::AtomicU64,
    /// The server's `initialize` result.
    init: Value,
}

impl RawHost {
    async fn open(url: &str, capabilities: Value) -> Self {
        Self::open_with(url, capabilities, None).await
    }

    async fn open_with(url: &str, capabilities: Value, token: Option<&str>) -> Self {
        flotilla_config::tls::install_crypto_provider();
        let mut host = Self {
            http: reqwest::Client::new(),
            url: url.to_string(),
            session: String::new(),
            token: token.map(str::to_string),
            next: 1.into(),
            init: Value::Null,
        };
        let params = json!({"protocolVersion": "2025-11-25", "capabilities": capabilities,
            "clientInfo": {"name": "e2e-tasks", "version": "1"}});
        let (reply, session) =
            host.post(json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params})).await;
        host.session = session.expect("an Mcp-Session-Id");
        host.init = reply["result"].clone();
        host.post(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
        host
    }

    /// The JSON-RPC response to `method` (its `result` or `error`).
    async fn rpc(&self, method: &str, params: Value) -> Value {
        let id = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.post(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})).await.0
    }

    /// POSTs one message; the response message with an id (from JSON or the
    /// SSE stream), and the session id header.
    async fn post(&self, msg: Value) -> (Value, Option<String>) {
        let mut req = self
            .http
            .post(&self.url)
            .header("Accept", "application/json, text/event-stream")
            .header("Content-Type", "application/json");
        if let Some(token) = &self.token {
            req = req.bearer_auth(token);
        }
        if !self.session.is_empty() {
            req = req.header("Mcp-Session-Id", &self.session).header("MCP-Protocol-Version", "2025-11-25");
        }
        let resp = req.body(msg.to_string()).send().await.expect("POST /mcp");
        assert!(resp.status().is_success(), "{msg}: HTTP {}", resp.status());
        let session = resp.headers().get("mcp-session-id").map(|v| v.to_str().unwrap().to_string());
        let body = resp.text().await.unwrap();
        let reply = body
            .lines()
            .map(|l| l.strip_prefix("data:").unwrap_or(l).trim())
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|m| m.get("id").is_some() && (m.get("result").is_some() || m.get("error").is_some()))
            .unwrap_or(Value::Null);
        (reply, session)
    }
}

/// `mcp serve` on `listen`, once it listens.
async fn serve(cfg: &str, listen: &str) -> Proc {
    let server = Proc::spawn("mcp-serve", "flotilla", &["--config", cfg, "mcp", "serve", "--listen", listen], &[]);
    eventually(TIMEOUT, "mcp serve to listen", || async { server.log().contains("MCP on http://").then_some(()) })
        .await;
    server
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_job_as_a_task_survives_a_restart_of_mcp_serve_completes_with_the_answer_and_cancels_the_job() {
    let d = Deployment::start(1, |url| TestConfig::demo(url, 1, 300)).await;
    d.orchestrator_ready().await;
    let cfg = d.config_arg();
    let listen = format!("127.0.0.1:{}", free_port());
    let url = format!("http://{listen}/mcp");
    let mut server = serve(&cfg, &listen).await;

    let host = RawHost::open(&url, tasks_extension()).await;
    assert!(
        host.init["capabilities"]["extensions"]["io.modelcontextprotocol/tasks"].is_object(),
        "the server declares the tasks extension: {}",
        host.init
    );
    let submit = json!({"name": "submit_job", "arguments": {"input": JOB}});
    let created = host.rpc("tools/call", submit.clone()).await;
    let task = &created["result"];
    assert_eq!((task["resultType"].as_str(), task["status"].as_str()), (Some("task"), Some("working")), "{created}");
    let id = task["taskId"].as_str().expect("a task id").to_string();
    let job: flotilla_protocol::ids::JobId = id.parse().expect("the task id is the job id");

    // The task lives in the job, not in the server: a new process answers for it.
    server.kill();
    let _server = serve(&cfg, &listen).await;
    let host = RawHost::open(&url, tasks_extension()).await;
    let polls = std::sync::atomic::AtomicU32::new(0);
    let started = Instant::now();
    let done = eventually(TIMEOUT, "the task to end", || async {
        polls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let got = host.rpc("tasks/get", json!({"taskId": id})).await;
        (got["result"]["status"] != "working").then_some(got)
    })
    .await;
    let result = &done["result"];
    assert_eq!(
        (result["status"].as_str(), result["taskId"].as_str()),
        (Some("completed"), Some(id.as_str())),
        "{done}"
    );
    let answer = &result["result"]["structuredContent"];
    assert_eq!(
        (answer["status"].as_str(), answer["job_id"].as_str()),
        (Some("completed"), Some(id.as_str())),
        "{done}"
    );
    assert!(answer["answer"].as_str().unwrap_or_default().contains("0.375"), "job_status's answer inlined: {done}");
    assert_eq!(d.status(job).await.answer.as_deref(), answer["answer"].as_str(), "the job API's answer");
    eprintln!(
        "figures: task polled to completion after a restart in {:?} with {} tasks/get calls (poll hint {} ms)",
        started.elapsed(),
        polls.load(std::sync::atomic::Ordering::Relaxed),
        task["pollIntervalMs"]
    );

    // tasks/cancel cancels the job; a second one is refused with the job API's reason.
    let created = host.rpc("tools/call", submit.clone()).await;
    let long = created["result"]["taskId"].as_str().expect("a task id").to_string();
    let cancelled = host.rpc("tasks/cancel", json!({"taskId": long})).await;
    assert!(cancelled.get("error").is_none(), "{cancelled}");
    let got = host.rpc("tasks/get", json!({"taskId": long})).await;
    assert_eq!(got["result"]["status"], "cancelled", "{got}");
    assert_eq!(d.status(long.parse().unwrap()).await.status, flotilla_protocol::JobStatus::Cancelled);
    let again = host.rpc("tasks/cancel", json!({"taskId": long})).await;
    assert!(again["error"]["message"].as_str().unwrap_or_default().contains("nothing to cancel"), "{again}");
    let unknown = host.rpc("tasks/get", json!({"taskId": "not-a-job"})).await;
    assert_eq!(unknown["error"]["code"], -32602, "an unknown task is invalid params: {unknown}");

    // Without the extension, submit_job answers with the job id at once, and
    // tasks/* need the capability (-32021).
    let plain = RawHost::open(&url, json!({})).await;
    let r = plain.rpc("tools/call", submit).await;
    let sc = &r["result"]["structuredContent"];
    assert!(r["result"].get("resultType").is_none_or(|t| t != "task"), "{r}");
    assert_eq!(sc["status"], "submitted", "{r}");
    let refused = plain.rpc("tasks/get", json!({"taskId": sc["job_id"]})).await;
    assert_eq!(refused["error"]["code"], -32021, "{refused}");
}

/// An access token from the test AS (tests/fixtures/oauth_as.py) for
/// `client`, issued for `resource`.
async fn access_token(issuer: &str, client: &str, resource: &str) -> String {
    token_request(issuer, client, resource, None).await
}

/// The same, bound to the key in `dpop`'s header (the fixture binds without
/// checking the signature; `mcp serve` checks every proof).
async fn token_request(issuer: &str, client: &str, resource: &str, dpop: Option<&str>) -> String {
    let mut form = reqwest::Url::parse("http://form.invalid/").unwrap();
    form.query_pairs_mut().append_pair("grant_type", "client_credentials").append_pair("resource", resource);
    let mut request = reqwest::Client::new()
        .post(format!("{issuer}/token"))
        .basic_auth(client, Some(format!("{client}-secret")))
        .header("Content-Type", "application/x-www-form-urlencoded");
    if let Some(proof) = dpop {
        request = request.header("DPoP", proof);
    }
    let reply: Value = request
        .body(form.query().unwrap().to_string())
        .send()
        .await
        .expect("POST /token")
        .json()
        .await
        .expect("a token response");
    reply["access_token"].as_str().unwrap_or_else(|| panic!("no token for {client}: {reply}")).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oauth_resource_server_mode_acts_for_the_tenant_of_an_introspected_token_issued_for_it_and_refuses_others() {
    flotilla_config::tls::install_crypto_provider();
    let d = Deployment::start(0, |url| TestConfig::demo(url, 1, 0)).await;
    d.orchestrator_ready().await;
    let (cfg, as_port, port) = (d.config_arg(), free_port(), free_port());
    let (issuer, listen) = (format!("http://127.0.0.1:{as_port}"), format!("127.0.0.1:{port}"));
    let resource = format!("http://{listen}/mcp");
    let registered = |scope: &str, claims: Value| json!({"scope": scope, "claims": claims});
    let mut clients = json!({
        "acme-host": registered("flotilla:jobs", json!({"flotilla_tenant": "acme"})),
        "default-host": registered("flotilla:jobs", json!({"flotilla_tenant": "default"})),
        "reader": registered("other:read", json!({"flotilla_tenant": "acme"})),
        "globex-host": registered("flotilla:jobs", json!({"flotilla_tenant": "globex"})),
        "no-tenant": registered("flotilla:jobs", json!({})),
        "stale-host": {"scope": "flotilla:jobs", "ttl": -5, "claims": {"flotilla_tenant": "acme"}},
    });
    for (id, c) in clients.as_object_mut().unwrap() {
        c["secret"] = json!(format!("{id}-secret"));
    }
    const RS_SECRET: &str = "e2e-introspection-secret-42";
    let conf = json!({"clients": clients, "introspector": {"id": "flotilla-mcp", "secret": RS_SECRET}});
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/oauth_as.py");
    let mut authz = tokio::process::Command::new(python())
        .arg(&script)
        .arg(as_port.to_string())
        .env("FIXTURE_AS", conf.to_string())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("python runs");
    let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(authz.stdout.take().unwrap()));
    assert_eq!(lines.next_line().await.unwrap().as_deref(), Some("READY"));
    let as_log = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let kept = as_log.clone();
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            kept.lock().unwrap().push(line);
        }
    });

    // The introspection endpoint is found in the AS's metadata.
    let args = [
        "--config",
        &cfg,
        "mcp",
        "serve",
        "--listen",
        &listen,
        "--oauth-issuer",
        &issuer,
        "--oauth-resource",
        &resource,
        "--oauth-scope",
        "flotilla:jobs",
        "--oauth-tenant",
        "acme",
    ];
    let env = [("FLOTILLA_MCP_OAUTH_CLIENT_ID", "flotilla-mcp"), ("FLOTILLA_MCP_OAUTH_CLIENT_SECRET", RS_SECRET)];
    let server = Proc::spawn("mcp-serve", "flotilla", &args, &env);
    eventually(TIMEOUT, "mcp serve to listen", || async { server.log().contains("MCP on http://").then_some(()) })
        .await;

    // No token: 401 pointing at the RFC 9728 metadata, which names the AS.
    let none = initialize(&resource, &[]).await;
    assert_eq!(none.status(), 401);
    let challenge = none.headers()["www-authenticate"].to_str().unwrap().to_string();
    let meta_url = format!("http://{listen}/.well-known/oauth-protected-resource/mcp");
    assert!(challenge.contains(&format!("resource_metadata=\"{meta_url}\"")), "{challenge}");
    for url in [meta_url.clone(), format!("http://{listen}/.well-known/oauth-protected-resource")] {
        let doc: Value = reqwest::get(&url).await.unwrap().json().await.unwrap();
        assert_eq!(doc["resource"], resource.as_str(), "{url}: {doc}");
        assert_eq!(
            (&doc["authorization_servers"], &doc["scopes_supported"]),
            (&json!([issuer]), &json!(["flotilla:jobs"]))
        );
    }

    // A valid token acts for the tenant its claim names.
    let acme = access_token(&issuer, "acme-host", &resource).await;
    let host = RawHost::open_with(&resource, json!({}), Some(&acme)).await;
    let tools = host.rpc("tools/list", json!({})).await;
    let mut names: Vec<&str> =
        tools["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    names.sort_unstable();
    assert_eq!(names, TOOLS, "{tools}");
    let submitted = host.rpc("tools/call", json!({"name": "submit_job", "arguments": {"input": JOB}})).await;
    let id = submitted["result"]["structuredContent"]["job_id"].as_str().expect("a job id").to_string();
    let listed = host.rpc("tools/call", json!({"name": "list_jobs", "arguments": {}})).await;
    assert_eq!(listed["result"]["structuredContent"]["jobs"][0]["job_id"], id.as_str(), "acme sees its job: {listed}");
    let default = access_token(&issuer, "default-host", &resource).await;
    let other = RawHost::open_with(&resource, tasks_extension(), Some(&default)).await;
    let status = other.rpc("tools/call", json!({"name": "job_status", "arguments": {"job_id": id}})).await;
    assert_eq!(status["result"]["isError"], true, "the default tenant does not see acme's job: {status}");
    assert!(d.status_opt(id.parse().unwrap()).await.is_none(), "the job is not the default tenant's");
    let task = other.rpc("tasks/get", json!({"taskId": id})).await;
    assert_eq!(task["error"]["code"], -32602, "nor is its task: {task}");
    let mine = host.rpc("tools/call", json!({"name": "job_status", "arguments": {"job_id": id}})).await;
    assert_eq!(mine["result"]["structuredContent"]["job_id"], id.as_str(), "acme sees it: {mine}");
    // Stateless 2026-07-28 requests: the same introspection, the same tenant rule.
    let status = json!({"name": "job_status", "arguments": {"job_id": id}});
    let bare = modern(&resource, "tools/call", status.clone(), json!({}), &modern_headers("tools/call", &status)).await;
    assert_eq!(bare.status, 401, "no token at 2026-07-28");
    let c = bare.headers["www-authenticate"].to_str().unwrap();
    assert!(c.contains(&format!("resource_metadata=\"{meta_url}\"")), "{c}");
    let modern_acme =
        modern(&resource, "tools/call", status.clone(), json!({}), &with_token("tools/call", &status, &acme)).await;
    let sc = &modern_acme.reply["result"]["structuredContent"];
    assert_eq!(sc["job_id"], id.as_str(), "acme's token sees its job at 2026-07-28: {}", modern_acme.reply);
    let modern_default =
        modern(&resource, "tools/call", status.clone(), json!({}), &with_token("tools/call", &status, &default)).await;
    assert_eq!(
        modern_default.reply["result"]["isError"], true,
        "the default tenant does not: {}",
        modern_default.reply
    );

    // Refused: a token for another resource, an expired one, one without the
    // scope, one for a tenant this server does not act for, one naming none.
    let bearer = |t: &str| format!("Bearer {t}");
    let elsewhere = access_token(&issuer, "acme-host", "http://other.example/mcp").await;
    let stale = access_token(&issuer, "stale-host", &resource).await;
    for (what, token) in [("another resource", &elsewhere), ("expired", &stale)] {
        let r = initialize(&resource, &[("Authorization", &bearer(token))]).await;
        assert_eq!(r.status(), 401, "{what}");
        let c = r.headers()["www-authenticate"].to_str().unwrap();
        assert!(c.contains("error=\"invalid_token\"") && c.contains(&meta_url), "{what}: {c}");
    }
    let reader = access_token(&issuer, "reader", &resource).await;
    let r = initialize(&resource, &[("Authorization", &bearer(&reader))]).await;
    assert_eq!(r.status(), 403);
    let c = r.headers()["www-authenticate"].to_str().unwrap();
    assert!(c.contains("error=\"insufficient_scope\"") && c.contains("scope=\"flotilla:jobs\""), "{c}");
    for (client, why) in
        [("globex-host", "does not act for tenant \"globex\""), ("no-tenant", "no flotilla_tenant claim")]
    {
        let t = access_token(&issuer, client, &resource).await;
        let r = initialize(&resource, &[("Authorization", &bearer(&t))]).await;
        assert_eq!(r.status(), 403, "{client}");
        let body = r.text().await.unwrap();
        assert!(body.contains(why), "{client}: {body}");
    }
    // The Python SDK's OAuth client finds all of it from the 401 alone.
    let sdk = vec!["oauth".into(), resource.clone(), issuer.clone(), "acme-host".into()];
    let found = client(sdk, vec![("MCP_CLIENT_SECRET", "acme-host-secret".into())]).await;
    check_tools(&found);
    assert_eq!(found["listed"]["jobs"][0]["job_id"], id.as_str(), "the SDK's token acts for acme: {found}");

    // DPoP (RFC 9449): Flotilla's own MCP client with `dpop = true` gets a
    // token bound to its session's key and proves it on every request.
    let dpop_cfg = format!("{cfg}.dpop.toml");
    let section = format!(
        "\n[mcp_servers.fleet]\nurl = \"{resource}\"\n\n[mcp_servers.fleet.oauth]\ngrant = \"client_credentials\"\n\
         client_id = \"acme-host\"\nclient_secret_env = \"ACME_HOST_SECRET\"\ndpop = true\n"
    );
    std::fs::write(&dpop_cfg, std::fs::read_to_string(&cfg).unwrap() + &section).unwrap();
    let (code, out, err) = tokio::task::spawn_blocking(move || {
        let args = ["--config", &dpop_cfg, "mcp", "call", "fleet", "list_jobs", "{}"];
        run_cli(&args, &[("ACME_HOST_SECRET", "acme-host-secret")])
    })
    .await
    .unwrap();
    assert_eq!(code, 0, "mcp call through DPoP: {out}\n{err}");
    assert!(out.contains(&id), "the bound token acts for acme: {out}");
    let issued = as_log.lock().unwrap().clone();
    assert!(issued.iter().any(|l| l == &format!("token: issued to acme-host for {resource} (DPoP)")), "{issued:?}");
    // The bound token without its key: as a bearer token, without a proof,
    // with a proof its key did not sign.
    let b64 = |v: Value| {
        use base64::Engine;
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
    };
    let point = "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU";
    let jwk = json!({"kty": "EC", "crv": "P-256", "x": point, "y": "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"});
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let claims = json!({"jti": "e2e-1", "htm": "POST", "htu": resource, "iat": now});
    let forged = format!("{}.{}.{}", b64(json!({"typ": "dpop+jwt", "alg": "ES256", "jwk": jwk})), b64(claims), point);
    let bound = token_request(&issuer, "acme-host", &resource, Some(&forged)).await;
    let r = initialize(&resource, &[("Authorization", &bearer(&bound))]).await;
    assert_eq!(r.status(), 401, "a bound token as a bearer token");
    let c = r.headers()["www-authenticate"].to_str().unwrap().to_string();
    assert!(c.contains("error=\"invalid_token\"") && c.contains("DPoP-bound"), "{c}");
    let scheme = format!("DPoP {bound}");
    for (what, headers) in [
        ("no proof", vec![("Authorization", scheme.as_str())]),
        ("a forged proof", vec![("Authorization", scheme.as_str()), ("DPoP", forged.as_str())]),
    ] {
        let r = initialize(&resource, &headers).await;
        assert_eq!(r.status(), 401, "{what}");
        let c = r.headers()["www-authenticate"].to_str().unwrap();
        assert!(c.starts_with("DPoP error=\"invalid_dpop_proof\""), "{what}: {c}");
    }
    let meta: Value = reqwest::get(&meta_url).await.unwrap().json().await.unwrap();
    assert_eq!(meta["dpop_bound_access_tokens_required"], false, "{meta}");

    let log = server.log();
    let tokens = [&acme, &default, &reader, &stale, &bound];
    assert!(!tokens.iter().any(|t| log.contains(t.as_str())), "no token in the log");
    assert!(!log.contains(RS_SECRET), "no client secret in the log");
}

/// Flotilla's own MCP client (`flotilla_mcp`, rmcp's `Auto` lifecycle)
/// against `mcp serve`: both sides speak 2026-07-28, so the session is
/// stateless over HTTP and over stdio, and the client's `Mcp-Param-Job-Id`
/// mirror of `job_id` is the one the server's schema asks for (a missing or
/// different one would be refused with 400 before the tool ran).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flotillas_own_mcp_client_opens_mcp_serve_at_2026_07_28_over_http_and_stdio() {
    let d = Deployment::start(0, |url| TestConfig::demo(url, 1, 0)).await;
    d.orchestrator_ready().await;
    let cfg = d.config_arg();
    let listen = format!("127.0.0.1:{}", free_port());
    let _server = serve(&cfg, &listen).await;
    let http = flotilla_mcp::config::RawMcpServer { url: Some(format!("http://{listen}/mcp")), ..Default::default() };
    let flotilla = bin("flotilla").display().to_string();
    let args = ["--config", &cfg, "mcp", "serve", "--stdio"].map(str::to_string).to_vec();
    let stdio = flotilla_mcp::config::RawMcpServer { command: Some(flotilla), args, ..Default::default() };
    let timeout = std::time::Duration::from_secs(30);
    for (name, raw) in [("http", http), ("stdio", stdio)] {
        let s = flotilla_mcp::config::validate("flotilla", raw, std::path::Path::new("."))
            .unwrap_or_else(|p| panic!("{name}: {}: {}", p.key, p.message));
        let session = flotilla_mcp::session::Session::open(&s).await.unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(session.protocol_version().as_deref(), Some("2026-07-28"), "{name}");
        let mut names: Vec<String> =
            session.list_tools(&s, timeout).await.unwrap().iter().map(|t| t.name.to_string()).collect();
        names.sort_unstable();
        assert_eq!(names, TOOLS, "{name}");
        let args = |v: Value| v.as_object().unwrap().clone();
        let listed = session.call_tool(&s, "list_jobs", args(json!({})), Default::default(), timeout, None).await;
        let listed = listed.unwrap_or_else(|e| panic!("{name}: list_jobs: {e}"));
        assert_eq!(listed.structured_content.as_ref().map(|c| &c["jobs"]), Some(&json!([])), "{name}: {listed:?}");
        let unknown = json!({"job_id": "0195f3a2-7c1e-7b3d-9a4f-2c8e1d0b6a57"});
        let status = session.call_tool(&s, "job_status", args(unknown), Default::default(), timeout, None).await;
        let status = status.unwrap_or_else(|e| panic!("{name}: job_status passes the header check: {e}"));
        assert_eq!(status.is_error, Some(true), "{name}: an unknown job is a tool error: {status:?}");
        session.close().await;
    }
}
