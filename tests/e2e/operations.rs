//! What an operator sees. Event order and content of the demo job
//! through `watch --json`, token and cost totals against the model calls,
//! traceparent continuity from the planner's log to the workers' logs,
//! Prometheus endpoints, the live worker set, and the dashboard in headless
//! Chromium.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use flotilla_protocol::{JobStatus, WorkerHeartbeat, WorkerState};
use flotilla_testkit::proc::run_cli;
use flotilla_testkit::{EventLog, Proc, TempDir, TestConfig, eventually, free_port};
use serde_json::Value;

use flotilla_testkit::{Deployment, TIMEOUT};

const DEMO_JOB: &str = "Compute the gross margin of each region and consolidate them into one table: \
                        north: revenue 120, cost 75; south: revenue 0, cost 30; east: revenue 250, cost 190; \
                        west: revenue 80, cost 20.";

/// Dollars per million tokens in the test config.
const PLANNER_PRICE: (f64, f64) = (3.0, 15.0);
const FINANCE_PRICE: (f64, f64) = (0.15, 0.6);

/// The demo config with prices on both models, one-second heartbeats and
/// an orchestrator metrics endpoint (plus whatever `extra` adds).
fn priced_demo(url: &str, latency_ms: u64, extra: &str) -> TestConfig {
    let mut c = TestConfig::demo(url, 2, latency_ms);
    c.section_replace(
        "script = \"planner.toml\"\n",
        &format!(
            "script = \"planner.toml\"\nprice_input_per_mtok = {}\nprice_output_per_mtok = {}\n",
            PLANNER_PRICE.0, PLANNER_PRICE.1
        ),
    );
    c.section_replace(
        "script = \"finance.toml\"\n",
        &format!(
            "script = \"finance.toml\"\nprice_input_per_mtok = {}\nprice_output_per_mtok = {}\n",
            FINANCE_PRICE.0, FINANCE_PRICE.1
        ),
    );
    c.section(&format!("[worker]\nheartbeat = 1\n{extra}"));
    c
}

fn http() -> reqwest::Client {
    flotilla_config::tls::install_crypto_provider();
    reqwest::Client::builder().timeout(Duration::from_secs(10)).build().expect("http client")
}

async fn get(url: &str) -> String {
    let r = http().get(url).send().await.unwrap_or_else(|e| panic!("GET {url}: {e}"));
    assert!(r.status().is_success(), "GET {url}: {}", r.status());
    r.text().await.expect("body")
}

/// Parses Prometheus/OpenMetrics text into `name{labels}` -> value.
fn parse_metrics(text: &str) -> HashMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}

fn metric(m: &HashMap<String, f64>, key: &str) -> f64 {
    *m.get(key).unwrap_or_else(|| {
        let mut keys: Vec<_> = m.keys().collect();
        keys.sort();
        panic!("no metric {key}; have:\n{keys:#?}")
    })
}

fn json_lines(log: &str) -> Vec<Value> {
    log.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).collect()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_job_is_observable_end_to_end() {
    let metrics_port = free_port();
    let mut d = Deployment::start(0, |url| {
        priced_demo(url, 50, &format!("[metrics]\norchestrator = \"127.0.0.1:{metrics_port}\"\n"))
    })
    .await;
    // JSON logs everywhere, so log lines can be matched by trace id.
    let cfg = d.config_arg();
    d.orchestrator =
        Some(Proc::spawn("orchestrator", "flotilla", &["orchestrator", "--config", &cfg, "--log-format", "json"], &[]));
    for id in ["w1", "w2"] {
        d.add_worker_with(id, &["--log-format", "json", "--metrics-addr", "127.0.0.1:0"]);
    }
    let job = d.submit(DEMO_JOB).await;

    // `watch --json` follows the job from its first event to its end.
    let (code, out, err) = run_cli(&["--config", &cfg, "watch", &job.to_string(), "--json"], &[]);
    assert_eq!(code, 0, "watch exits 0 for a completed job\n{out}\n{err}");
    let events: Vec<Value> =
        out.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect();
    // Progress events are at version 2 (docs/PROTOCOL.md), written whole here.
    let progress = ["started", "heartbeat", "model_delta", "model_call", "tool_call", "tool_result", "finished"];
    let version = |e: &Value| if progress.contains(&e["event"].as_str().unwrap_or_default()) { 2 } else { 1 };
    assert!(events.iter().all(|e| e["v"] == version(e) && e["job_id"] == job.to_string()), "versioned, this job's");
    let kinds: Vec<&str> = events.iter().map(|e| e["event"].as_str().unwrap()).collect();
    let first = |k: &str| kinds.iter().position(|x| *x == k).unwrap_or_else(|| panic!("no {k} in {kinds:?}"));
    assert_eq!(kinds[0], "submitted");
    assert_eq!(kinds.last(), Some(&"completed"));
    assert!(first("running") < first("planner_step"));
    assert!(first("planner_step") < first("todos_changed"));
    assert!(first("todos_changed") < first("task_dispatched"));
    let dispatched: Vec<&Value> = events.iter().filter(|e| e["event"] == "task_dispatched").collect();
    assert_eq!(dispatched.len(), 4, "one task per region");
    for t in &dispatched {
        assert_eq!(t["subagent_type"], "finance");
        let id = t["task_id"].as_str().unwrap();
        // The worker's events in order; the planner's dispatch event races the
        // worker's start (both follow the publish), its report event comes last.
        let worker_kinds = ["started", "model_call", "tool_call", "tool_result", "finished"];
        let of_task: Vec<(usize, &Value)> = events
            .iter()
            .enumerate()
            .filter(|(_, e)| e["task_id"] == id && worker_kinds.contains(&e["event"].as_str().unwrap()))
            .collect();
        let order: Vec<&str> = of_task.iter().map(|(_, e)| e["event"].as_str().unwrap()).collect();
        assert_eq!(order, ["started", "model_call", "tool_call", "tool_result", "model_call", "finished"], "task {id}");
        let pos = |k: &str| events.iter().position(|e| e["task_id"] == id && e["event"] == k).unwrap();
        assert!(pos("task_dispatched") < pos("finished") && pos("finished") < pos("task_reported"));
        let started = of_task[0].1;
        assert!(["w1", "w2"].contains(&started["worker_id"].as_str().unwrap()), "{started}");
        assert_eq!(started["attempt"], 1);
        let call = of_task[2].1;
        assert!(!call["tool"].as_str().unwrap().is_empty());
        let digest = call["args_sha256"].as_str().unwrap();
        assert!(digest.len() == 64 && digest.bytes().all(|b| b.is_ascii_hexdigit()), "{call}");
        assert!(of_task[3].1["size"].as_u64().unwrap() > 0);
    }
    let todos = events.iter().rev().find(|e| e["event"] == "todos_changed").unwrap();
    assert!(todos["todos"].as_array().unwrap().iter().all(|t| t["status"] == "completed"), "{todos}");

    // Token and cost totals equal the sum of the model calls' usage.
    let rec = d.status(job).await;
    assert_eq!(rec.status, JobStatus::Completed);
    let calls: Vec<&Value> =
        events.iter().filter(|e| matches!(e["event"].as_str(), Some("model_call" | "planner_step"))).collect();
    let sum = |field: &str| calls.iter().map(|e| e["usage"][field].as_u64().unwrap()).sum::<u64>();
    assert_eq!(rec.usage.input_tokens, sum("input_tokens"));
    assert_eq!(rec.usage.output_tokens, sum("output_tokens"));
    assert_eq!(rec.usage.model_calls, calls.len() as u64);
    let cost_sum: f64 = calls.iter().map(|e| e["usage"]["cost_usd"].as_f64().unwrap()).sum();
    assert!(close(rec.usage.cost_usd, cost_sum), "{} vs {cost_sum}", rec.usage.cost_usd);
    let expect = |u: &flotilla_protocol::Usage, p: (f64, f64)| {
        (u.input_tokens as f64 * p.0 + u.output_tokens as f64 * p.1) / 1e6
    };
    assert!(
        close(rec.planner_usage.cost_usd, expect(&rec.planner_usage, PLANNER_PRICE)),
        "planner priced by its model"
    );
    let finance = &rec.usage_by_type[&"finance".parse().unwrap()];
    assert!(close(finance.cost_usd, expect(finance, FINANCE_PRICE)), "finance priced by its model");
    let tasks_in: u64 = rec.tasks.iter().map(|t| t.usage.input_tokens).sum();
    assert_eq!(finance.input_tokens, tasks_in, "per-type usage sums its tasks");
    assert!(rec.tasks.iter().all(|t| t.started_at.is_some() && t.finished_at.is_some() && t.dispatched_at.is_some()));
    // `status` shows the spend and every report.
    let (code, text, _) = run_cli(&["--config", &cfg, "status", &job.to_string()], &[]);
    assert_eq!(code, 0);
    assert!(text.contains(&format!("${:.6}", rec.usage.cost_usd)), "{text}");
    assert!(text.contains("  finance ") && text.contains("reports\n"), "{text}");
    assert!(text.contains("0.375") && text.contains("revenue must be greater than zero"), "{text}");

    // Trace continuity: the planner's dispatch line and every worker line of that task share one trace id.
    let orch = json_lines(&d.orchestrator.as_ref().unwrap().log());
    let worker_lines: Vec<Value> = d.workers.iter().flat_map(|w| json_lines(&w.log())).collect();
    for t in &rec.tasks {
        let id = t.task_id.to_string();
        let dispatch = orch
            .iter()
            .find(|l| l["message"] == "task dispatched" && l["task_id"] == id)
            .unwrap_or_else(|| panic!("no dispatch log line for {id}"));
        let trace = dispatch["span"]["trace_id"]
            .as_str()
            .unwrap_or_else(|| panic!("dispatch line carries the trace id: {dispatch}"));
        assert_eq!(trace.len(), 32);
        assert_eq!(dispatch["span"]["job_id"], job.to_string());
        let lines: Vec<&Value> = worker_lines.iter().filter(|l| l["span"]["task_id"] == id).collect();
        assert!(lines.iter().any(|l| l["message"] == "task started"), "worker logged the task start");
        assert!(lines.iter().any(|l| l["message"] == "task finished"), "worker logged the task end");
        for l in &lines {
            assert_eq!(l["span"]["trace_id"], trace, "worker line of {id} keeps the planner's trace: {l}");
            assert_eq!(l["span"]["job_id"], job.to_string());
        }
    }

    // Metrics: the orchestrator's counters, queue depth and fleet; each worker's tasks and tool latency.
    let m = parse_metrics(&get(&format!("http://127.0.0.1:{metrics_port}/metrics")).await);
    assert_eq!(metric(&m, "flotilla_jobs_total{status=\"completed\"}"), 1.0);
    assert_eq!(metric(&m, "flotilla_tasks_dispatched_total{subagent_type=\"finance\"}"), 4.0);
    assert_eq!(metric(&m, "flotilla_task_reports_total{status=\"completed\"}"), 4.0);
    assert_eq!(metric(&m, "flotilla_task_queue_pending{subagent_type=\"finance\"}"), 0.0);
    assert_eq!(metric(&m, "flotilla_jobs_running"), 0.0);
    assert_eq!(metric(&m, "flotilla_workers_live"), 2.0);
    assert_eq!(metric(&m, "flotilla_worker_slots{subagent_type=\"finance\"}"), 4.0);
    assert_eq!(
        metric(&m, "flotilla_model_tokens_total{agent=\"planner\",direction=\"input\"}"),
        rec.planner_usage.input_tokens as f64
    );
    // The GenAI convention's histogram, labelled with the planner's provider and model.
    let genai = "gen_ai_client_token_usage_sum{gen_ai_operation_name=\"chat\",gen_ai_provider_name=\"flotilla.scripted\",\
                 gen_ai_request_model=\"planner\",flotilla_agent=\"planner\",gen_ai_token_type=\"input\"}";
    assert_eq!(metric(&m, genai), rec.planner_usage.input_tokens as f64);
    let workers = d.bus.live_workers().await.unwrap();
    let (mut completed, mut tools, mut tokens) = (0.0, 0.0, 0.0);
    for w in &workers {
        let url = w.metrics_url.as_deref().expect("workers advertise their metrics URL");
        let wm = parse_metrics(&get(url).await);
        completed +=
            wm.get("flotilla_worker_tasks_total{subagent_type=\"finance\",status=\"completed\"}").unwrap_or(&0.0);
        tools += wm
            .iter()
            .filter(|(k, _)| k.starts_with("flotilla_tool_call_duration_seconds_count{agent=\"finance\""))
            .map(|(_, v)| v)
            .sum::<f64>();
        tokens += wm.get("flotilla_model_tokens_total{agent=\"finance\",direction=\"input\"}").unwrap_or(&0.0);
        assert_eq!(metric(&wm, "flotilla_worker_tasks_in_flight{subagent_type=\"finance\"}"), 0.0);
    }
    assert_eq!(completed, 4.0, "every task reported by some worker");
    assert_eq!(tools, 4.0, "one tool call per task");
    assert_eq!(tokens, finance.input_tokens as f64, "worker token counters match the job's finance usage");
}

fn heartbeat_of<'a>(workers: &'a [WorkerHeartbeat], id: &str) -> Option<&'a WorkerHeartbeat> {
    workers.iter().find(|w| w.worker_id == id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_view_follows_started_killed_and_stopped_workers() {
    let mut d = Deployment::start(0, |url| priced_demo(url, 0, "")).await;
    let cfg = d.config_arg();
    let mut beats = EventLog::subscribe(&d.raw.client, "flotilla.worker.heartbeat.*.*").await;
    d.add_worker("w1");
    d.add_worker("w2");
    // `workers --json` prints `{"workers": [...]}` (docs/OPERATIONS.md, "Scripting with --json").
    let listed = |out: &str| -> Vec<Value> {
        let v: Value = serde_json::from_str(out).unwrap_or_else(|e| panic!("{e}: {out}"));
        v["workers"].as_array().unwrap_or_else(|| panic!("no workers list: {out}")).clone()
    };

    let both = eventually(TIMEOUT, "both workers in `flotilla workers --json`", || {
        let cfg = cfg.clone();
        async move {
            let (code, out, _) = run_cli(&["--config", &cfg, "workers", "--json"], &[]);
            (code == 0 && listed(&out).len() == 2).then_some(out)
        }
    })
    .await;
    let ws = listed(&both);
    assert_eq!(ws.iter().map(|w| w["worker_id"].as_str().unwrap()).collect::<Vec<_>>(), ["w1", "w2"]);
    for w in &ws {
        assert_eq!(w["state"], "running");
        assert_eq!(w["pid"].as_u64().unwrap() as u32, d.workers[if w["worker_id"] == "w1" { 0 } else { 1 }].pid());
        assert_eq!(w["types"][0]["subagent_type"], "finance");
        assert_eq!(w["types"][0]["capacity"], 2);
        assert_eq!(w["types"][0]["in_flight"], 0);
        assert_eq!(w["interval_ms"], 1000);
    }
    let (code, table, _) = run_cli(&["--config", &cfg, "workers"], &[]);
    assert_eq!(code, 0);
    assert!(table.contains("w1") && table.contains("finance") && table.contains("0/2"), "{table}");

    // SIGKILL: no goodbye; the entry expires within three intervals.
    d.workers[1].kill();
    let gone = std::time::Instant::now();
    eventually(TIMEOUT, "the killed worker to drop out", || async {
        let ws = d.bus.live_workers().await.unwrap();
        (heartbeat_of(&ws, "w2").is_none() && heartbeat_of(&ws, "w1").is_some()).then_some(())
    })
    .await;
    assert!(gone.elapsed() < Duration::from_secs(8), "expired after {:?}", gone.elapsed());

    // SIGTERM: a `stopping` heartbeat, then the entry is removed at once.
    assert_eq!(d.workers[0].terminate(), Some(0));
    beats.until(TIMEOUT, "w1's stopping heartbeat", |s, v| s.ends_with(".w1") && v["state"] == "stopping").await;
    let ws = d.bus.live_workers().await.unwrap();
    assert!(ws.is_empty(), "a cleanly stopped worker leaves the set: {ws:?}");
    let (_, out, _) = run_cli(&["--config", &cfg, "workers"], &[]);
    assert!(out.contains("no live workers"), "{out}");
}

fn chromium() -> String {
    let bin = std::env::var("CHROMIUM").unwrap_or_else(|_| "chromium".into());
    assert!(
        Command::new(&bin).arg("--version").output().is_ok_and(|o| o.status.success()),
        "{bin} not found: run scripts/install-deps --test (installs Debian's chromium) or set CHROMIUM"
    );
    bin
}

/// Runs headless Chromium with a fresh profile; returns stdout.
fn headless(bin: &str, profile: &TempDir, args: &[&str]) -> String {
    let out = Command::new(bin)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--disable-dev-shm-usage",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(args)
        .output()
        .expect("run chromium");
    assert!(out.status.success(), "chromium failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_a_running_job_live_in_chromium() {
    let bin = chromium();
    let port = free_port();
    // 1.5 s per subagent model call: the job runs long enough to be seen running.
    let d =
        Deployment::start(2, |url| priced_demo(url, 1500, &format!("[dashboard]\nlisten = \"127.0.0.1:{port}\"\n")))
            .await;
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let job = d.submit(DEMO_JOB).await;
    log.until_count(TIMEOUT, 4, "four tasks started", |_, v| v["event"] == "started").await;
    let base = format!("http://127.0.0.1:{port}");

    // Server side: the SSE stream replays the job's events.
    let mut sse = http().get(format!("{base}/jobs/{job}/events")).send().await.expect("sse");
    assert_eq!(sse.headers()["content-type"], "text/event-stream");
    let mut seen = String::new();
    while !seen.contains("event: progress") {
        let chunk = tokio::time::timeout(TIMEOUT, sse.chunk()).await.expect("sse chunk in time").unwrap().unwrap();
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(seen.starts_with("event: job\ndata: {"), "{seen}");
    assert!(seen.contains("\"event\":\"submitted\""), "{seen}");

    // The browser, as served: the running job's todos and tasks.
    let profile = TempDir::new("chromium");
    let url = format!("{base}/jobs/{job}");
    let dom = headless(&bin, &profile, &["--dump-dom", &url]);
    assert!(dom.contains("id=\"job\" data-status=\"running\""), "job shown running:\n{dom}");
    assert_eq!(dom.matches("class=\"todo t-in_progress\"").count(), 4, "four todos in progress:\n{dom}");
    assert_eq!(dom.matches("class=\"task\"").count(), 4, "four task rows:\n{dom}");
    assert_eq!(dom.matches("data-status=\"running\"").count(), 5, "job and its four tasks running:\n{dom}");
    let shot = std::env::var_os("FLOTILLA_SCREENSHOT")
        .map(PathBuf::from)
        .unwrap_or_else(|| profile.path().join("dashboard.png"));
    headless(&bin, &profile, &["--window-size=1280,1000", &format!("--screenshot={}", shot.display()), &url]);
    let png = std::fs::read(&shot).expect("screenshot written");
    assert!(png.starts_with(b"\x89PNG") && png.len() > 20_000, "a real screenshot ({} bytes)", png.len());

    // Live: a page opened while the job runs follows its events (SSE) until the
    // job ends, then re-renders itself completed without a reload. Virtual
    // time only runs out once the page's event stream has ended with the job.
    let dom = headless(&bin, &profile, &["--virtual-time-budget=5000", "--dump-dom", &url]);
    assert!(dom.contains("id=\"job\" data-status=\"completed\""), "re-rendered completed:\n{dom}");
    for ev in
        ["submitted", "todos_changed", "task_dispatched", "started", "model_call", "tool_call", "finished", "completed"]
    {
        assert!(dom.contains(&format!("class=\"ev ev-{ev}\"")), "the script logged a live {ev} event:\n{dom}");
    }
    assert!(dom.contains("id=\"live\" class=\"ended\""), "the event source closed with the job:\n{dom}");
    assert_eq!(log.job_end(TIMEOUT).await["event"], "completed");
    assert!(dom.contains("id=\"answer\"") && dom.contains("| north | 120 | 75 | 0.375 |"), "{dom}");
    // Each task's report summary sits in its row; the whole report is on the task's page.
    assert_eq!(dom.matches("<td class=\"summary\">").count(), 4, "{dom}");
    assert!(dom.contains("<td class=\"summary\">0.375</td>"), "north's summary in its row: {dom}");
    let list = headless(&bin, &profile, &["--dump-dom", &format!("{base}/")]);
    assert!(list.contains(&format!("href=\"/jobs/{job}\"")) && list.contains("s-completed"), "{list}");
    let api: Value = serde_json::from_str(&get(&format!("{base}/api/jobs/{job}")).await).unwrap();
    assert_eq!(api["status"], "completed");
    let workers: Vec<WorkerHeartbeat> = serde_json::from_str(&get(&format!("{base}/api/workers")).await).unwrap();
    let ids: HashSet<&str> = workers.iter().map(|w| w.worker_id.as_str()).collect();
    assert_eq!(ids, HashSet::from(["w1", "w2"]));
    assert!(workers.iter().all(|w| w.state == WorkerState::Running));
}
