//! A config is checked before anything runs on it.
//! `flotilla config check [--connect]` names each problem with its config key
//! and fix (exit 2) and passes a good config (exit 0); `flotilla demo` with
//! its MCP server binary missing fails naming the binary before it starts a
//! single process (it used to exit 0 around "unknown tool" rows); `flotilla
//! up` says "is up" only once the orchestrator answers and every worker has
//! sent a heartbeat. Real processes: the `flotilla` binary, nats-server, the
//! finance-tools MCP server, orchestrator and workers
//! (orchestrator/cli/src/commands/config_check.rs, orchestrator/cli/src/commands/up.rs).

use std::time::Duration;

use flotilla_bus::Bus;
use flotilla_config::NatsConfig;
use flotilla_testkit::proc::run_cli;
use flotilla_testkit::{NatsServer, Proc, TempDir, TestConfig, free_port};
use serde_json::Value;

use flotilla_testkit::TIMEOUT;

/// `flotilla --config <path> <args>`.
fn check(config: &std::path::Path, args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let path = config.display().to_string();
    let mut all = vec!["--config", &path];
    all.extend_from_slice(args);
    run_cli(&all, env)
}

/// The `--json` report's problems: (key, message, fix).
fn problems(json: &str) -> Vec<(String, String, String)> {
    let report: Value = serde_json::from_str(json).unwrap_or_else(|e| panic!("not JSON ({e}): {json}"));
    assert_eq!(report["v"], 1, "{report}");
    let checks = report["checks"].as_array().expect("checks");
    assert_eq!(report["ok"], checks.iter().all(|c| c["ok"] == true), "{report}");
    checks
        .iter()
        .filter(|c| c["ok"] == false)
        .map(|c| {
            let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
            (s("key"), s("message"), s("fix"))
        })
        .collect()
}

/// A `tools` entry naming a tool its MCP server does not list, and a
/// built-in name with a typo: exit 2, each named with its key and the tool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_tool_in_a_subagent_type_is_named_with_its_key() {
    let mut config = TestConfig::demo("nats://127.0.0.1:4222", 1, 0);
    config.section_replace("mcp:finance/gross_margin", "mcp:finance/gross_margn");
    let (code, out, err) = check(&config.write(), &["config", "check"], &[]);
    assert_eq!(code, 2, "stdout: {out}\nstderr: {err}");
    let line =
        out.lines().find(|l| l.starts_with("problem subagents.finance.tools:")).unwrap_or_else(|| panic!("{out}"));
    assert!(line.contains("gross_margn") && line.contains("it offers: add, gross_margin, multiply"), "{line}");
    assert!(out.contains("ok      mcp_servers.finance: started; lists 3 tools"), "{out}");
    assert!(out.ends_with("1 problems\n"), "{out}");

    config.section_replace("mcp:finance/gross_margn", "read_fle");
    let (code, out, _) = check(&config.write(), &["--json", "config", "check"], &[]);
    assert_eq!(code, 2, "{out}");
    let found = problems(&out);
    assert_eq!(found.len(), 1, "{found:?}");
    let (key, message, _) = &found[0];
    assert_eq!(key, "subagents.finance.tools[0]");
    assert!(message.contains("unknown tool \"read_fle\""), "{message}");

    // App-controlled context naming a server that is not configured.
    config.section_replace("read_fle", "mcp:finance/gross_margin");
    config.section_replace("concurrency = 1\n", "concurrency = 1\nmcp_resources = [\"ledger/ledger://rules\"]\n");
    let (code, out, _) = check(&config.write(), &["--json", "config", "check"], &[]);
    assert_eq!(code, 2, "{out}");
    let found = problems(&out);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, "subagents.finance.mcp_resources");
    assert!(found[0].1.contains("ledger"), "{found:?}");
}

/// What a worker checks only as it builds a type, checked before any worker
/// starts: a `stop_at_tools` entry naming no tool of the type, an
/// `output_schema` that is no JSON Schema, and a server's `read_only_tools`
/// naming a tool it does not offer, each named with its key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_a_worker_makes_at_start_is_made_before_it_starts() {
    let mut config = TestConfig::demo("nats://127.0.0.1:4222", 1, 0);
    let typo = "stop_at_tools = [\"finance_gross_margn\"]\n";
    config.section_replace("concurrency = 1\n", &format!("concurrency = 1\n{typo}"));
    let (code, out, _) = check(&config.write(), &["--json", "config", "check"], &[]);
    assert_eq!(code, 2, "{out}");
    let found = problems(&out);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, "subagents.finance.stop_at_tools");
    assert!(found[0].1.contains("finance_gross_margn") && found[0].1.contains("finance_gross_margin"), "{found:?}");

    config.section_replace(typo, "output_schema = { type = 42 }\n");
    let (code, out, _) = check(&config.write(), &["--json", "config", "check"], &[]);
    assert_eq!(code, 2, "{out}");
    let found = problems(&out);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, "subagents.finance.output_schema");
    assert!(found[0].1.starts_with("not a JSON Schema"), "{found:?}");

    // A read-only listing naming a tool the server does not offer (the
    // model's name, with the prefix, instead of the server's).
    config.section_replace("output_schema = { type = 42 }\n", "");
    config.section_replace(
        "[mcp_servers.finance]\n",
        "[mcp_servers.finance]\nread_only_tools = [\"finance_gross_margin\"]\n",
    );
    let (code, out, _) = check(&config.write(), &["--json", "config", "check"], &[]);
    assert_eq!(code, 2, "{out}");
    let found = problems(&out);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, "mcp_servers.finance.read_only_tools");
    assert!(
        found[0].1.contains("names finance_gross_margin") && found[0].1.contains("offers: add, gross_margin"),
        "{found:?}"
    );
    config.section_replace("read_only_tools = [\"finance_gross_margin\"]", "read_only_tools = [\"gross_margin\"]");
    let (code, out, _) = check(&config.write(), &["config", "check"], &[]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains(
            "ok      mcp_servers.finance.read_only_tools: journaled without waiting for the ack: gross_margin"
        ),
        "{out}"
    );
    // `flotilla mcp tools` shows which tools the listing covers.
    let (code, out, err) = check(&config.write(), &["mcp", "tools", "finance"], &[]);
    assert_eq!(code, 0, "{err}");
    let line = |name: &str| out.lines().find(|l| l.starts_with(&format!("{name}  "))).unwrap_or_default().to_string();
    assert!(line("gross_margin").ends_with("read-only: listed in read_only_tools"), "{out}");
    assert!(!line("add").contains("read-only") && !line("add").is_empty(), "{out}");
}

/// A stdio MCP server whose command is not there: named with the path and
/// the fix, and the entries using it are reported unresolved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_mcp_command_is_named_with_its_fix() {
    let gone = TempDir::new("no-build");
    let missing = gone.path().join("target/debug/finance-tools");
    let mut config = TestConfig::demo("nats://127.0.0.1:4222", 1, 0);
    config
        .section_replace(&flotilla_testkit::bin("finance-tools").display().to_string(), &missing.display().to_string());
    let (code, out, err) = check(&config.write(), &["config", "check", "--json"], &[]);
    assert_eq!(code, 2, "stdout: {out}\nstderr: {err}");
    let found = problems(&out);
    let (key, message, fix) = found.iter().find(|p| p.0.starts_with("mcp_servers.")).expect("the server's problem");
    assert_eq!(key, "mcp_servers.finance.command");
    assert_eq!(message, &format!("mcp server finance: command {} not found", missing.display()));
    assert!(fix.starts_with("run `cargo build --bins`"), "{fix}");
    assert!(
        found.iter().any(|p| p.0 == "subagents.finance.tools" && p.1.contains("mcp:finance/gross_margin")),
        "{found:?}"
    );
}

/// The demo config plus a sandboxed type passes (bubblewrap really runs a
/// command), and `--connect` reaches a real nats-server; the same config
/// pointed at a dead port fails naming the URL, and with a missing `bwrap`
/// names the sandbox key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_good_config_passes_and_connect_names_a_dead_nats_url() {
    let nats = NatsServer::start().await;
    let mut dir = TestConfig::demo(&nats.url(), 1, 0);
    dir.section(SHELL_TYPE);
    let config = dir.write();
    let (code, out, err) = check(&config, &["config", "check"], &[]);
    assert_eq!(code, 0, "stdout: {out}\nstderr: {err}");
    assert!(out.contains("ok      subagents.finance.tools: 1 tools: finance_gross_margin"), "{out}");
    assert!(out.contains("ok      subagents.shell.sandbox: bubblewrap runs a command"), "{out}");
    assert!(!out.contains("nats.url"), "no network without --connect: {out}");

    let (code, out, err) = check(&config, &["config", "check", "--connect"], &[]);
    assert_eq!(code, 0, "stdout: {out}\nstderr: {err}");
    let line = out.lines().find(|l| l.starts_with("ok      nats.url:")).unwrap_or_else(|| panic!("{out}"));
    assert!(line.contains(&nats.url()) && line.contains("JetStream on"), "{line}");

    let dead = format!("nats://127.0.0.1:{}", free_port());
    let (code, out, _) = check(&config, &["config", "check", "--connect"], &[("FLOTILLA_NATS__URL", &dead)]);
    assert_eq!(code, 2, "{out}");
    let line = out.lines().find(|l| l.starts_with("problem nats.url:")).unwrap_or_else(|| panic!("{out}"));
    assert!(line.contains(&dead), "{line}");

    // A sandbox whose bubblewrap is not there: `execute` could not work.
    dir.section_replace("bwrap = \"bwrap\"", "bwrap = \"/nonexistent/bwrap\"");
    let (code, out, _) = check(&dir.write(), &["config", "check"], &[]);
    assert_eq!(code, 2, "{out}");
    let line =
        out.lines().find(|l| l.starts_with("problem subagents.shell.sandbox:")).unwrap_or_else(|| panic!("{out}"));
    assert!(line.contains("/nonexistent/bwrap"), "{line}");
}

/// A subagent type with `execute` in a sandbox.
const SHELL_TYPE: &str = "[subagents.shell]
description = \"Runs commands.\"
model = \"finance\"
tools = [\"execute\"]
[subagents.shell.sandbox]
bwrap = \"bwrap\"
";

/// `flotilla demo` whose MCP server binary is missing exits non-zero naming
/// the binary and the fix, before it starts anything: no nats-server, no
/// worker, not even the state dir's logs directory the supervisor creates
/// first (orchestrator/local/src/lib.rs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_with_its_mcp_binary_missing_fails_naming_it() {
    let gone = TempDir::new("no-build");
    let missing = gone.path().join("target/debug/finance-tools");
    let port = free_port();
    let mut config = TestConfig::demo(&format!("nats://127.0.0.1:{port}"), 1, 0);
    config
        .section_replace(&flotilla_testkit::bin("finance-tools").display().to_string(), &missing.display().to_string());
    config.section("[local]\nstate_dir = \"state\"\n");
    let path = config.write();
    let (code, out, err) = check(&path, &["demo"], &[]);
    assert_ne!(code, 0, "stdout: {out}\nstderr: {err}");
    assert!(err.contains(&format!("command {} not found", missing.display())), "{err}");
    assert!(err.contains("cargo build --bins"), "{err}");
    assert!(!out.contains("submitted job"), "{out}");
    assert!(!config.dir().join("state/logs").exists(), "the supervisor started: {out}");
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err(), "a nats-server was started");
}

/// `flotilla up` prints "flotilla is up" only when a job could run: at that
/// moment both workers' heartbeats are in the workers bucket and the job API
/// answers. Each child logs to `<state_dir>/logs/<name>.log`, without colour
/// codes (a file is no terminal), and `up`'s own output is its lines alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn up_says_it_is_up_once_every_worker_heartbeats() {
    let nats = NatsServer::start().await;
    let mut config = TestConfig::demo(&nats.url(), 1, 0);
    config.section("[local]\nworkers = 2\nstate_dir = \"state\"\n");
    let path = config.write().display().to_string();
    let mut up = Proc::spawn("up", "flotilla", &["--config", &path, "up"], &[]);
    flotilla_testkit::eventually(TIMEOUT, "flotilla is up", || {
        let log = up.log();
        async move { log.contains("flotilla is up").then_some(()) }
    })
    .await;
    let bus = Bus::connect(&NatsConfig { url: nats.url(), ..Default::default() }, "e2e-test", Duration::from_secs(5))
        .await
        .expect("connect");
    let mut live: Vec<String> = bus.live_workers().await.expect("workers").into_iter().map(|w| w.worker_id).collect();
    live.sort();
    assert_eq!(live, ["local-1", "local-2"], "workers with a heartbeat when `up` said it was up");
    let logs = std::fs::canonicalize(config.dir().join("state/logs")).expect("the log dir");
    let own = up.log();
    assert!(own.contains(&format!("(logs in {})", logs.display())), "up names its log dir: {own}");
    assert!(
        !own.contains("orchestrator ready") && !own.contains("worker ready"),
        "children's lines on up's output: {own}"
    );
    for (file, ready) in [
        ("orchestrator.log", "orchestrator ready"),
        ("worker-1.log", "worker ready worker_id=local-1"),
        ("worker-2.log", "worker ready worker_id=local-2"),
    ] {
        let log = std::fs::read_to_string(logs.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert!(log.contains(ready), "no {ready:?} in {file}:\n{log}");
        assert!(!log.contains('\u{1b}'), "colour codes in {file}:\n{log}");
    }
    let (code, out, err) = run_cli(&["--config", &path, "jobs"], &[]);
    assert_eq!(code, 0, "the job API answers: {out}{err}");
    assert_eq!(up.terminate(), Some(0), "{}", up.log());
}
