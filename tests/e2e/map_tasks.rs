//! `map_tasks` end to end, with real processes: a map of
//! 20 000 items uploaded with `submit --file` completes and its results file
//! (read back with `flotilla files get`) has one line per item; an
//! orchestrator SIGKILLed mid-map resumes it with no task started twice; bad
//! items are refused before any task is dispatched.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flotilla_protocol::JobStatus;
use flotilla_protocol::ids::JobId;
use flotilla_testkit::scripts::{MAP_PLANNER, finance_margin, region_items};
use flotilla_testkit::{EventLog, TestConfig, eventually, proc::run_cli};
use futures::StreamExt;
use serde_json::Value;

use flotilla_testkit::{Deployment, TIMEOUT};

fn config(url: &str, latency_ms: u64, max_in_flight: usize) -> TestConfig {
    let mut c = TestConfig::new(url);
    c.scripted_model("planner", MAP_PLANNER);
    c.scripted_model("finance", &finance_margin(latency_ms));
    c.section(&format!("[planner]\nmodel = \"planner\"\ntask_timeout = 900\nmax_in_flight = {max_in_flight}\n"));
    c.section(
        "[subagents.finance]\ndescription = \"Computes gross margins.\"\nmodel = \"finance\"\n\
         tools = [\"calculate_margin\"]\nconcurrency = 16\n",
    );
    c
}

/// Submits a map job with `items` uploaded as `/inputs/regions.jsonl` by `flotilla submit --file`.
async fn submit(d: &Deployment, items: &str) -> JobId {
    let local = d.config.dir().join("regions.jsonl");
    std::fs::write(&local, items).unwrap();
    let file = format!("{}:/inputs/regions.jsonl", local.display());
    let input = "Gross margin of every region in /inputs/regions.jsonl";
    let config = d.config_arg();
    let args = ["--config", config.as_str(), "submit", input, "--file", file.as_str(), "--json"];
    // Retried only while the orchestrator starts.
    let out = eventually(TIMEOUT, "the orchestrator to accept the job", || async {
        let (code, out, err) = run_cli(&args, &[]);
        // Under --json the error is an object on stdout (docs/OPERATIONS.md, "Scripting with --json").
        assert!(code == 0 || out.contains("no orchestrator is listening"), "submit failed: {out}{err}");
        (code == 0).then_some(out)
    })
    .await;
    let reply: Value = serde_json::from_str(&out).expect("submit --json");
    reply["job_id"].as_str().unwrap().parse().unwrap()
}

/// A job file's text through `flotilla files get`.
fn files_get(d: &Deployment, job: JobId, path: &str) -> String {
    let (code, out, err) = run_cli(&["--config", &d.config_arg(), "files", "get", &job.to_string(), path], &[]);
    assert_eq!(code, 0, "{err}");
    out
}

/// The job's answer: the map's aggregate result (the API may be restarting).
async fn aggregate_of(d: &Deployment, job: JobId) -> Value {
    let rec = eventually(TIMEOUT, "the job's status", || async { d.status_opt(job).await }).await;
    assert_eq!(rec.status, JobStatus::Completed, "{:?}", rec.error);
    let answer = rec.answer.unwrap();
    serde_json::from_str(&answer).unwrap_or_else(|_| panic!("not an aggregate: {answer}"))
}

fn is_started(s: &str, v: &Value) -> bool {
    s.contains(".progress.") && v["event"] == "started"
}

/// Checks the results file of an `n`-item map: one completed line per item,
/// in order, each with its own task and the item's margin.
fn check_results(text: &str, n: usize) -> HashSet<String> {
    let lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect();
    assert_eq!(lines.len(), n, "one line per item");
    let mut tasks = HashSet::new();
    for (i, l) in lines.iter().enumerate() {
        assert_eq!(l["index"], i, "item order");
        assert_eq!(l["item"]["region"], format!("r{i}"));
        assert_eq!(l["status"], "completed", "{l}");
        tasks.insert(l["task_id"].as_str().unwrap().to_string());
    }
    assert_eq!(lines[0]["summary"], "0.5", "r0: revenue 100, cost 50");
    assert_eq!(lines[150]["summary"], "0.2", "r150: revenue 250, cost 200");
    assert_eq!(tasks.len(), n, "a task of its own per item");
    tasks
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_map_of_20000_items_completes_with_one_results_line_per_item() {
    let d = Deployment::start(2, |url| config(url, 0, 256)).await;
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.*.*.event").await;
    let started = Instant::now();
    let job = submit(&d, &region_items(20_000)).await;

    let end = log.job_end(Duration::from_secs(900)).await;
    assert_eq!(end["event"], "completed", "{end}");
    let out = aggregate_of(&d, job).await;

    assert_eq!(
        (out["total"].clone(), out["completed"].clone(), out["failed"].clone()),
        (20_000.into(), 20_000.into(), 0.into())
    );
    let path = out["results"].as_str().unwrap();
    assert!(path.starts_with("/maps/") && path.ends_with(".jsonl"), "{path}");
    check_results(&files_get(&d, job, path), 20_000);
    log.drain();
    assert_eq!(log.events("task_reported").len(), 20_000, "each report consolidated once");
    eprintln!(
        "figures: map of 20 000 items, 2 workers x 16 slots, debug build: job {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

/// What a map's job has shown on the bus so far: `started` progress events
/// per task, dispatched task ids, the terminal job event. Counted as messages
/// arrive (an [`EventLog`] rescans everything it saw on every message, too
/// slow for tens of thousands of progress events).
#[derive(Default)]
struct Tally {
    starts: HashMap<String, usize>,
    dispatched: HashSet<String>,
    end: Option<Value>,
}

struct Watcher {
    tally: Arc<Mutex<Tally>>,
    changed: tokio::sync::watch::Receiver<()>,
}

impl Watcher {
    async fn subscribe(client: &async_nats::Client) -> Self {
        let mut sub = client.subscribe("flotilla.job.>").await.unwrap();
        client.flush().await.unwrap();
        let tally = Arc::new(Mutex::new(Tally::default()));
        let (tx, changed) = tokio::sync::watch::channel(());
        let t = tally.clone();
        tokio::spawn(async move {
            while let Some(m) = sub.next().await {
                let v: Value = serde_json::from_slice(&m.payload).unwrap_or(Value::Null);
                let task = flotilla_testkit::events::task_of(&m.subject, &v);
                let mut t = t.lock().unwrap();
                match v["event"].as_str() {
                    Some("started") if m.subject.contains(".progress.") => *t.starts.entry(task).or_default() += 1,
                    Some("task_dispatched") => drop(t.dispatched.insert(task)),
                    Some("completed" | "failed" | "cancelled") if m.subject.ends_with(".event") => t.end = Some(v),
                    _ => continue,
                }
                drop(t);
                tx.send_replace(());
            }
        });
        Self { tally, changed }
    }

    /// Waits until `pred` holds of the tally.
    async fn until(&mut self, timeout: Duration, what: &str, pred: impl Fn(&Tally) -> bool) {
        let deadline = tokio::time::Instant::now() + timeout;
        while !pred(&self.tally.lock().unwrap()) {
            match tokio::time::timeout_at(deadline, self.changed.changed()).await {
                Ok(r) => r.expect("subscription ended"),
                Err(_) => panic!("timed out after {timeout:?} waiting for {what}"),
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orchestrator_killed_mid_map_resumes_it_and_starts_no_task_twice() {
    // 50 ms per model call and 64 in flight: the map is well under way, not done, at the kill.
    let mut d = Deployment::start(2, |url| {
        let mut c = config(url, 50, 64);
        c.nats(30, 5); // no redelivery of a slow task while it runs
        c
    })
    .await;
    let mut watch = Watcher::subscribe(&d.raw.client).await;
    let job = submit(&d, &region_items(3_000)).await;
    watch.until(Duration::from_secs(300), "1 200 task starts", |t| t.starts.len() >= 1_200).await;
    d.orchestrator.as_mut().unwrap().kill();
    let (dispatched_before, ended_before) = {
        let t = watch.tally.lock().unwrap();
        (t.dispatched.len(), t.end.is_some())
    };
    assert!(!ended_before && dispatched_before < 3_000, "the kill came mid-map ({dispatched_before} dispatched)");
    d.start_orchestrator();

    watch.until(Duration::from_secs(600), "the job to end", |t| t.end.is_some()).await;
    let out = aggregate_of(&d, job).await;

    assert_eq!((out["total"].clone(), out["completed"].clone()), (3_000.into(), 3_000.into()));
    let tasks = check_results(&files_get(&d, job, out["results"].as_str().unwrap()), 3_000);
    let t = watch.tally.lock().unwrap();
    let twice: Vec<_> = t.starts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "tasks started more than once: {twice:?}");
    assert_eq!(t.starts.len(), 3_000, "every item's task started");
    assert!(t.starts.keys().all(|id| tasks.contains(id)), "only the results' tasks ran");
    // No task beyond the results' was ever dispatched (a dispatch event lost
    // with the killed process is no second task).
    let extra = t.dispatched.difference(&tasks).count();
    assert_eq!(extra, 0, "{extra} dispatched tasks are not in the results ({dispatched_before} before the kill)");
    eprintln!(
        "figures: map of 3 000 items, orchestrator SIGKILLed after {dispatched_before} dispatches; every task started once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_items_are_a_validation_error_before_any_dispatch() {
    let d = Deployment::start(1, |url| config(url, 0, 256)).await;
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let mut items = region_items(10);
    items.push_str("{\"region\": \"r10\", \"revenue\": \n");
    items.push_str("{\"region\": \"r11\", \"revenue\": 5}\n");
    let job = submit(&d, &items).await;

    let end = log.job_end(Duration::from_secs(60)).await;

    assert_eq!(end["event"], "completed", "{end}");
    let answer = d.status(job).await.answer.unwrap();
    assert!(answer.starts_with("map failed: "), "{answer}");
    assert!(answer.contains("line 11 is not a JSON value"), "{answer}");
    assert!(answer.contains("line 12: ") && answer.contains("undefined"), "{answer}");
    assert!(answer.contains("nothing was dispatched"), "{answer}");
    log.drain();
    assert!(log.events("task_dispatched").is_empty(), "no task for a bad map");
    assert!(!log.seen.iter().any(|(s, v)| is_started(s, v)));
}
