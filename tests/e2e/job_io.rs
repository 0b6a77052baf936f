//! A job's inputs and outputs as job files, end to end with
//! real processes (nats-server, orchestrator, workers, the `flotilla` CLI).
//!
//! - `submit --file` uploads a JSONL file over 1 MiB (parts of 512 KiB,
//!   shared/protocol/src/files_api.rs) and a small CSV before the planner
//!   starts; planner and subagent read them with their file tools.
//! - `files ls|get|put` on the finished job; `get` returns the same bytes
//!   (sha256); a client cannot overwrite a task's report; another tenant gets
//!   `not_found`.
//! - A failed upload starts no job (client-side and orchestrator-side refusals).
//! - `/reports/<task>.md` holds the full report while the planner saw a
//!   summary capped at `[planner] report_tokens` (orchestrator/src/reports.rs).

use std::time::Duration;

use flotilla_protocol::digest::sha256_hex;
use flotilla_protocol::ids::Tenant;
use flotilla_protocol::{ApiReply, JobRecord, ListReply, ListRequest, SCHEMA_VERSION};
use flotilla_testkit::proc::run_cli;
use flotilla_testkit::{TempDir, TestConfig};
use serde_json::Value;

use flotilla_testkit::{Deployment, TIMEOUT};

/// Items of the JSONL input: 20 000 lines, about 1.5 MB.
const ITEMS: usize = 20_000;
/// `[planner] report_tokens` of this test: far below the subagent's report.
const REPORT_TOKENS: usize = 100;

/// Reads the last item of the big input, then answers a long report.
const READER: &str = r#"
[[turns]]
[[turns.calls]]
tool = "read_file"
args = '{"path": "/inputs/items.jsonl", "offset": 19999, "limit": 1}'

[[turns]]
content = "last item: {{ last[0].value | trim }}\n{% for i in range(1500) %}finding {{ i }}: revenue up, cost down\n{% endfor %}"
"#;

/// Reads the CSV, greps the JSONL, delegates once, and reports what it saw.
const PLANNER: &str = r#"
[[turns]]
[[turns.calls]]
tool = "read_file"
args = '{"path": "/inputs/sales.csv"}'
[[turns.calls]]
tool = "grep"
args = '{"pattern": "\"i\": 12345,", "path": "/inputs/items.jsonl", "output_mode": "content"}'
[[turns.calls]]
tool = "task"
args = '{"subagent_type": "reader", "description": "report on the last item of /inputs/items.jsonl"}'

[[turns]]
content = "{{ {'csv': results[0].value, 'grep': results[1].value.matches[0], 'task': results[2].value} | tojson }}"
"#;

fn config(url: &str) -> TestConfig {
    let mut c = TestConfig::new(url);
    c.scripted_model("planner", PLANNER).scripted_model("reader", READER);
    c.section(&format!(
        r#"[planner]
model = "planner"
task_timeout = 60
report_tokens = {REPORT_TOKENS}
[subagents.reader]
description = "Reads job files."
model = "reader"
tools = ["read_file"]
"#
    ));
    c
}

fn item(i: usize) -> String {
    format!("{{\"i\": {i}, \"region\": \"region-{i}\", \"revenue\": {}, \"cost\": {}}}\n", 1000 + i, 500 + i % 97)
}

/// Runs `flotilla --config <cfg> [--tenant t] <args>`; returns (code, stdout, stderr).
fn cli(d: &Deployment, tenant: &str, args: &[&str]) -> (i32, String, String) {
    let cfg = d.config_arg();
    let mut all = vec!["--config", &cfg, "--tenant", tenant];
    all.extend_from_slice(args);
    run_cli(&all, &[])
}

async fn jobs_of_default_tenant(d: &Deployment) -> usize {
    let req = ListRequest { v: SCHEMA_VERSION, status: None, limit: Some(1000), ..Default::default() };
    let r: ApiReply<ListReply> =
        d.bus.request(&Tenant::default(), "list", &req, Duration::from_secs(10)).await.expect("list");
    r.into_result().expect("list refused").jobs.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submitted_files_reach_the_agents_and_files_round_trip() {
    let d = Deployment::start(1, config).await;
    let tmp = TempDir::new("job-io");
    let csv = tmp.path().join("sales.csv");
    std::fs::write(&csv, "region,revenue,cost\nnorth,120,75\n").unwrap();
    let jsonl = tmp.path().join("items.jsonl");
    let items: String = (1..=ITEMS).map(item).collect();
    assert!(items.len() > 1024 * 1024, "over one NATS message: {} bytes", items.len());
    std::fs::write(&jsonl, &items).unwrap();
    flotilla_testkit::eventually(TIMEOUT, "the orchestrator to answer", || async {
        let req = ListRequest { v: SCHEMA_VERSION, status: None, limit: Some(1), ..Default::default() };
        let r: Result<ApiReply<ListReply>, _> =
            d.bus.request(&Tenant::default(), "list", &req, Duration::from_secs(2)).await;
        r.ok()
    })
    .await;

    // Submit with both files; the CSV takes its default path /inputs/sales.csv.
    let jsonl_arg = format!("{}:/inputs/items.jsonl", jsonl.display());
    let csv_arg = csv.display().to_string();
    let args = ["submit", "--wait", "--json", "--file", &csv_arg, "--file", &jsonl_arg, "analyse the inputs"];
    let started = std::time::Instant::now();
    let (code, out, err) = cli(&d, "default", &args);
    eprintln!("submit --file ({} bytes) --wait: {:?}", items.len() + 33, started.elapsed());
    assert_eq!(code, 0, "submit: {out}\n{err}");
    let rec: JobRecord = serde_json::from_str(&out).expect("the final job record");
    let job = rec.id.to_string();
    let answer: Value = serde_json::from_str(rec.answer.as_deref().unwrap()).expect("the planner's JSON answer");

    // The planner read the CSV and found an item deep inside the JSONL.
    assert!(answer["csv"].as_str().unwrap().contains("north,120,75"), "{answer}");
    assert_eq!(answer["grep"]["text"].as_str(), Some(item(12345).trim_end()), "{answer}");
    assert_eq!(answer["grep"]["line"], 12345, "{answer}");

    // The subagent's full report is /reports/<task>.md, and it read the last item.
    let task = rec.tasks[0].task_id;
    let report_path = format!("/reports/{task}.md");
    let (code, full, err) = cli(&d, "default", &["files", "get", &job, &report_path]);
    assert_eq!(code, 0, "files get report: {err}");
    assert!(full.starts_with(&format!("last item: {}\t{}", ITEMS, item(ITEMS).trim_end())), "{}", &full[..200]);
    assert_eq!(full.lines().count(), 1501, "the whole report, every line");
    // The same report named by the task's short id as `status` displays it.
    let shown = task.to_string()[28..].to_string();
    let (code, by_short, err) = cli(&d, "default", &["files", "get", &job, &format!("/reports/{shown}.md")]);
    assert_eq!(code, 0, "files get /reports/{shown}.md: {err}");
    assert_eq!(by_short, full, "the short id names the same report");

    // ls: the inputs with their sizes, and the report.
    let (code, out, err) = cli(&d, "default", &["files", "ls", &job, "--json"]);
    assert_eq!(code, 0, "files ls: {err}");
    let ls: Value = serde_json::from_str(&out).unwrap();
    let size_of = |p: &str| ls["files"].as_array().unwrap().iter().find(|f| f["path"] == p).map(|f| f["size"].clone());
    assert_eq!(size_of("/inputs/items.jsonl"), Some(items.len().into()), "{ls}");
    assert_eq!(size_of("/inputs/sales.csv"), Some(33.into()), "{ls}");
    assert_eq!(size_of(&report_path), Some(full.len().into()), "{ls}");
    let (_, only, _) = cli(&d, "default", &["files", "ls", &job, "/inputs/"]);
    assert!(only.starts_with("   SIZE") || only.trim_start().starts_with("SIZE"), "a header row: {only}");
    assert_eq!(only.lines().skip(1).count(), 2, "the prefix filters: {only}");

    // get of the JSONL (3 parts): the same bytes.
    let copy = tmp.path().join("copy.jsonl");
    let copy_arg = copy.display().to_string();
    let started = std::time::Instant::now();
    let (code, out, err) =
        cli(&d, "default", &["files", "get", &job, "/inputs/items.jsonl", "-o", &copy_arg, "--json"]);
    eprintln!("files get ({} bytes): {:?}", items.len(), started.elapsed());
    assert_eq!(code, 0, "files get: {err}");
    let got: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(got["sha256"], sha256_hex(items.as_bytes()));
    assert_eq!(sha256_hex(&std::fs::read(&copy).unwrap()), sha256_hex(items.as_bytes()));

    // put on the finished job, then get it back.
    let started = std::time::Instant::now();
    let (code, _, err) =
        cli(&d, "default", &["files", "put", &job, &jsonl.display().to_string(), "/outputs/again.jsonl"]);
    eprintln!("files put ({} bytes): {:?}", items.len(), started.elapsed());
    assert_eq!(code, 0, "files put: {err}");
    let (_, back, _) = cli(&d, "default", &["files", "get", &job, "/outputs/again.jsonl"]);
    assert_eq!(sha256_hex(back.as_bytes()), sha256_hex(items.as_bytes()));

    // A client cannot overwrite a task's report: refused, report unchanged.
    let (code, _, err) = cli(&d, "default", &["files", "put", &job, &csv_arg, &report_path]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("permission") && err.contains("reserved"), "{err}");
    let (_, still, _) = cli(&d, "default", &["files", "get", &job, &report_path]);
    assert_eq!(still, full);

    // Another tenant sees no such job, for every operation.
    for args in [
        vec!["files", "ls", &job],
        vec!["files", "get", &job, "/inputs/sales.csv"],
        vec!["files", "put", &job, &csv_arg, "/inputs/evil.csv"],
    ] {
        let (code, out, err) = cli(&d, "globex", &args);
        assert_eq!(code, 2, "{args:?}: {out}");
        assert!(err.contains("not_found"), "{args:?}: {err}");
    }
    let (_, names, _) = cli(&d, "default", &["files", "ls", &job, "/inputs/"]);
    assert!(!names.contains("evil"), "{names}");

    // The planner saw a summary capped at report_tokens, plus that path.
    let seen = &answer["task"];
    let shown: String = seen.to_string().chars().take(300).collect();
    assert_eq!(seen["report_file"]["path"], report_path, "the planner saw: {shown}");
    assert_eq!(seen["truncated"], true, "the planner saw: {shown}");
    let summary = seen["summary"].as_str().unwrap();
    assert!(full.starts_with(summary), "the summary is the report's beginning");
    let tokens = flotilla_agent::tokens::count(summary);
    assert!(tokens <= REPORT_TOKENS && summary.len() * 20 < full.len(), "{tokens} tokens, {} bytes", summary.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_upload_starts_no_job() {
    let d = Deployment::start(0, config).await;
    d.submit("warm up").await;
    let before = jobs_of_default_tenant(&d).await;
    let tmp = TempDir::new("job-io-fail");
    let small = tmp.path().join("a.csv");
    std::fs::write(&small, "x\n".repeat(1000)).unwrap();
    let small = small.display().to_string();

    // A local file that cannot be read: refused before anything is sent.
    let (code, _, err) = cli(&d, "default", &["submit", "--file", "/no/such/file.csv", "go"]);
    assert_eq!(code, 2);
    assert!(err.contains("reading /no/such/file.csv"), "{err}");

    // Over [files] max_upload_bytes: refused by the client with the key's name.
    let cfg = d.config_arg();
    let args = ["--config", &cfg, "submit", "--file", &small, "go"];
    let (code, _, err) = run_cli(&args, &[("FLOTILLA_FILES__MAX_UPLOAD_BYTES", "100")]);
    assert_eq!(code, 2);
    assert!(err.contains("max_upload_bytes (100 bytes)"), "{err}");

    // Refused by the orchestrator after the parts arrived (a reserved path).
    let reserved = format!("{small}:/reports/{}.md", flotilla_protocol::ids::TaskId::new());
    let (code, _, err) = cli(&d, "default", &["submit", "--file", &small, "--file", &reserved, "go"]);
    assert_eq!(code, 2);
    assert!(err.contains("files not stored, job not started") && err.contains("reserved"), "{err}");

    assert_eq!(jobs_of_default_tenant(&d).await, before, "no job was created");
}

/// With the real roles of deploy/nats/roles.conf: a tenant's client
/// credential, which has no Object Store grant at all, uploads and reads job
/// files through the job API alone; another tenant's credential gets
/// `not_found` for the same job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenant_credentials_reach_files_only_through_the_api() {
    use crate::security::{JOB, refs, role_env, spawn_roles};
    use flotilla_testkit::nats_conf::{ConfiguredNats, deploy_dir};

    let nats = ConfiguredNats::start("nats", &deploy_dir().join("nats/nats-local.conf"), &[]).await;
    let config = crate::security::config(&nats.url());
    let path = config.write();
    let cfg = path.display().to_string();
    let _processes = spawn_roles(&cfg);
    let tmp = TempDir::new("job-io-roles");
    let jsonl = tmp.path().join("items.jsonl");
    let items: String = (1..=ITEMS).map(item).collect();
    std::fs::write(&jsonl, &items).unwrap();
    let acme_env = role_env("client-acme");
    let mut acme = refs(&acme_env);
    acme.push(("FLOTILLA_TENANT", "acme"));
    let globex_env = role_env("client-globex");
    let mut globex = refs(&globex_env);
    globex.push(("FLOTILLA_TENANT", "globex"));

    // The CLI does not wait for an orchestrator: retry until one answers.
    let file_arg = jsonl.display().to_string();
    let submit = ["--config", &cfg, "submit", "--wait", "--json", "--file", &file_arg, JOB];
    let out = flotilla_testkit::eventually(TIMEOUT, "a submit with files to succeed", || {
        let (code, out, _) = run_cli(&submit, &acme);
        async move { (code == 0).then_some(out) }
    })
    .await;
    let rec: JobRecord = serde_json::from_str(&out).expect("the final job record");
    let job = rec.id.to_string();

    let (code, out, err) = run_cli(&["--config", &cfg, "files", "ls", &job, "--json"], &acme);
    assert_eq!(code, 0, "{err}");
    let ls: Value = serde_json::from_str(&out).unwrap();
    let paths: Vec<&str> = ls["files"].as_array().unwrap().iter().map(|f| f["path"].as_str().unwrap()).collect();
    assert!(paths.contains(&"/inputs/items.jsonl"), "{paths:?}");
    assert_eq!(paths.iter().filter(|p| p.starts_with("/reports/")).count(), 3, "one report per task: {paths:?}");
    let (code, got, err) = run_cli(&["--config", &cfg, "files", "get", &job, "/inputs/items.jsonl"], &acme);
    assert_eq!(code, 0, "{err}");
    assert_eq!(sha256_hex(got.as_bytes()), sha256_hex(items.as_bytes()));

    let (code, _, err) = run_cli(&["--config", &cfg, "files", "ls", &job], &globex);
    assert_eq!(code, 2);
    assert!(err.contains("not_found"), "{err}");
    let log = nats.log();
    let refused: Vec<&str> = log.lines().filter(|l| l.contains("Violation") && l.contains("client-acme")).collect();
    assert!(refused.is_empty(), "the client needed no other permission: {refused:?}");
}
