//! Durable subagent steps (docs/RELIABILITY.md, "Step journal"): a task
//! whose worker is SIGKILLed, drained past its grace or handed back resumes
//! on another worker at its next step. Counted against a metering model
//! endpoint (OpenAI wire format; it bills an answer the client read,
//! tests/kit/src/metered.rs) and an MCP server that records every execution
//! (tests/fixtures/counting_tools.py): no completed turn is billed twice, no
//! completed tool call runs twice, and the answer is the one a run without
//! faults gives.
//!
//! Kills fall between steps: the endpoint holds new requests, the test waits
//! until every task of the victim waits on it, then kills. A kill between a
//! billed answer and its journal write would bill that turn again, the one
//! window no journal closes (docs/RELIABILITY.md says so); killing there
//! would make the count depend on timing instead of on the journal.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use flotilla_config::NatsConfig;
use flotilla_protocol::ids::{JobId, Tenant};
use flotilla_protocol::{FollowUp, JobStatus, SCHEMA_VERSION};
use flotilla_testkit::chat_endpoint::{task_and_step, text_reply, tool_call_reply};
use flotilla_testkit::metered::{Answer, MeteredEndpoint};
use flotilla_testkit::planner_script::delegate_all;
use flotilla_testkit::{Deployment, EventLog, Proc, TIMEOUT, TempDir, TestConfig, eventually};
use serde_json::{Value, json};

/// The task (its description) and the model turns it already holds.
fn key(body: &Value) -> (String, usize) {
    if is_planner(body) { ("planner".into(), task_and_step(body).1) } else { task_and_step(body) }
}

fn is_planner(body: &Value) -> bool {
    body["tools"].as_array().is_some_and(|t| t.iter().any(|t| t["function"]["name"] == "task"))
}

/// A subagent of `steps` model turns: every turn but the last calls one
/// tool (`first_tool` on the first, `counting_record` after), the last
/// answers with the receipts it holds.
fn subagent(body: &Value, steps: usize, first_tool: &str) -> Value {
    let (task, n) = task_and_step(body);
    if n + 1 < steps {
        let tool = if n == 0 { first_tool } else { "counting_record" };
        return tool_call_reply(&format!("call_{}", n + 1), tool, &json!({"task": task, "step": n + 1}));
    }
    let receipts = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool" && m["content"].as_str().is_some_and(|c| c.contains("receipt")))
        .count();
    text_reply(&format!("{task}: {receipts} receipts"))
}

/// A planner that delegates `tasks` in one turn and answers with their results.
fn planner(body: &Value, tasks: &[String]) -> Value {
    let messages = body["messages"].as_array().unwrap();
    let results: Vec<&str> =
        messages.iter().filter(|m| m["role"] == "tool").filter_map(|m| m["content"].as_str()).collect();
    if !results.is_empty() {
        return text_reply(&results.join("\n"));
    }
    let calls: Vec<Value> = tasks
        .iter()
        .enumerate()
        .map(|(i, t)| {
            json!({"id": format!("call_{i}"), "type": "function", "function": {"name": "task",
                   "arguments": json!({"subagent_type": "steps", "description": t}).to_string()}})
        })
        .collect();
    json!({"choices": [{"index": 0, "finish_reason": "tool_calls",
           "message": {"role": "assistant", "content": null, "tool_calls": calls}}],
           "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}})
}

/// One deployment of type `steps` (model on `endpoint`, the counting MCP
/// server) with the product's default `ack_wait`.
struct Setup {
    count: TempDir,
}

impl Setup {
    fn new() -> Self {
        Self { count: TempDir::new("count") }
    }

    fn count_file(&self) -> PathBuf {
        self.count.path().join("executions.txt")
    }

    /// `(tool, task, step)` -> executions.
    fn executions(&self) -> HashMap<(String, String, usize), usize> {
        let text = std::fs::read_to_string(self.count_file()).unwrap_or_default();
        let mut m = HashMap::new();
        for line in text.lines() {
            let parts: Vec<&str> = line.split(' ').collect();
            let k = (parts[0].to_string(), parts[1].to_string(), parts[2].parse().unwrap());
            *m.entry(k).or_default() += 1;
        }
        m
    }

    fn config(&self, nats: &str, endpoint: &str, concurrency: usize, extra: &str) -> TestConfig {
        let mut c = TestConfig::new(nats);
        c.nats(NatsConfig::default().ack_wait, 5);
        c.section(&format!(
            r#"[models.metered]
provider = "openai"
base_url = "{endpoint}"
model = "m"
max_retries = 0
[mcp_servers.counting]
command = "{}"
args = ["{}"]
init_timeout = 30
[mcp_servers.counting.env]
COUNT_FILE = "{}"
[subagents.steps]
description = "Takes steps."
model = "metered"
tools = ["mcp:counting/record", "mcp:counting/send"]
concurrency = {concurrency}
max_steps = 20
{extra}
"#,
            crate::mcp_serve::python().display(),
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/counting_tools.py").display(),
            self.count_file().display(),
        ));
        c
    }
}

/// A scripted planner delegating `tasks` to `steps`.
fn scripted_planner(c: &mut TestConfig, script: &str) {
    c.scripted_model("planner", script);
    c.section("[planner]\nmodel = \"planner\"\ntask_timeout = 300\n");
}

/// The scripted planner delegating `tasks` to `steps` with `task` calls.
fn delegating(tasks: &[String]) -> String {
    let pairs: Vec<(&str, &str)> = tasks.iter().map(|t| ("steps", t.as_str())).collect();
    delegate_all(&pairs)
}

/// The scripted planner starting `task` on `steps` with `start_task` (only
/// such a task can get follow-up messages), then waiting for it and
/// answering with what the wait returned.
fn starting(task: &str) -> String {
    let args = json!({"subagent_type": "steps", "description": task}).to_string();
    format!(
        "[[turns]]\n[[turns.calls]]\ntool = \"start_task\"\nargs = '{args}'\n\n\
         [[turns]]\n[[turns.calls]]\ntool = \"wait_tasks\"\nargs = '{{\"timeout_s\": 290, \"all\": true}}'\n\n\
         [[turns]]\ncontent = \"{{{{ last[0].value | string }}}}\"\n"
    )
}

fn worker(d: &Deployment, id: &str, grace: &str) -> Proc {
    let cfg = d.config_arg();
    Proc::spawn(id, "flotilla-worker", &["--config", &cfg, "--id", id, "--grace", grace], &[])
}

/// What a test of the scripted planner's `tasks` runs on.
struct Run {
    setup: Setup,
    ep: MeteredEndpoint,
    d: Deployment,
    log: EventLog,
}

/// The scripted `planner`, whose tasks go to `steps`: each a subagent of
/// `turns` model turns (first calling `first_tool`) taking `latency` on the
/// metering endpoint, served by one worker `w1` with `slots` and `grace`;
/// `extra` is more TOML of the type.
async fn start(
    planner: &str,
    turns: usize,
    first_tool: &'static str,
    latency: Duration,
    slots: usize,
    grace: &str,
    extra: &str,
) -> Run {
    let setup = Setup::new();
    let answer: Answer = Arc::new(move |b| subagent(b, turns, first_tool));
    let ep = MeteredEndpoint::start(latency, answer).await;
    let mut d = Deployment::start(0, |url| {
        let mut c = setup.config(url, &ep.url, slots, extra);
        scripted_planner(&mut c, planner);
        c
    })
    .await;
    d.workers.push(worker(&d, "w1", grace));
    let log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    Run { setup, ep, d, log }
}

/// The tasks (ids) on `worker`: started there last, and neither finished
/// there (the worker's own `finished` event) nor reported to the planner.
/// `finished` counts too: the orchestrator's `task_reported` of a report it
/// stored just before an orchestrator SIGKILL is never published, and such a
/// task would wait on the model forever in the eyes of this test.
fn running_on(log: &EventLog, worker: &str) -> HashSet<String> {
    let mut owner: HashMap<String, String> = HashMap::new();
    for (s, v) in &log.seen {
        let task = flotilla_testkit::events::task_of(s, v);
        match v["event"].as_str() {
            Some("started") if s.contains(".progress.") => {
                owner.insert(task, v["worker_id"].as_str().unwrap_or_default().to_string());
            }
            Some("task_reported") if s.ends_with(".event") => {
                owner.remove(&task);
            }
            Some("finished") if s.contains(".progress.") => {
                owner.remove(&task);
            }
            _ => {}
        }
    }
    owner.into_iter().filter(|(_, w)| w == worker).map(|(t, _)| t).collect()
}

/// Task id -> description, once every task of `job` is dispatched.
async fn descriptions(d: &Deployment, job: JobId, n: usize) -> HashMap<String, String> {
    eventually(TIMEOUT, "every task dispatched", || async move {
        let rec = d.status_opt(job).await?;
        (rec.tasks.len() == n)
            .then(|| rec.tasks.iter().map(|t| (t.task_id.to_string(), t.description.clone())).collect())
    })
    .await
}

/// Holds the endpoint, waits until every task of `victim` waits on it,
/// SIGKILLs it, waits until its requests are abandoned, releases. Returns
/// when the kill happened and which tasks (descriptions) it had.
async fn kill_between_steps(
    ep: &MeteredEndpoint,
    log: &mut EventLog,
    names: &HashMap<String, String>,
    victim: &mut Proc,
) -> (std::time::Instant, HashSet<String>) {
    ep.hold();
    let name = victim.name.clone();
    let mut had = HashSet::new();
    eventually(TIMEOUT, "every task of the victim to wait on the model", || {
        log.drain();
        let waiting: HashSet<String> = ep.meter().waiting.iter().map(|b| key(b).0).collect();
        let on: HashSet<String> = running_on(log, &name).iter().filter_map(|t| names.get(t).cloned()).collect();
        let ready = on.iter().all(|t| waiting.contains(t));
        had = on;
        async move { ready.then_some(()) }
    })
    .await;
    victim.kill();
    let at = std::time::Instant::now();
    eventually(TIMEOUT, "the victim's requests to be abandoned", || {
        let left = ep.meter().waiting.iter().any(|b| had.contains(&key(b).0));
        async move { (!left).then_some(()) }
    })
    .await;
    ep.release();
    (at, had)
}

/// Every model turn billed once, every tool call executed once.
fn assert_counted_once(ep: &MeteredEndpoint, setup: &Setup, turns: usize, calls: usize) {
    let billed = ep.billed_by(key);
    let twice: Vec<_> = billed.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "turns billed more than once: {twice:?}");
    assert_eq!(billed.len(), turns, "distinct billed turns: {billed:?}");
    let runs = setup.executions();
    let again: Vec<_> = runs.iter().filter(|(_, n)| **n > 1).collect();
    assert!(again.is_empty(), "tool calls executed more than once: {again:?}");
    assert_eq!(runs.len(), calls, "distinct tool calls: {runs:?}");
}

fn resumed(log: &EventLog) -> Vec<&Value> {
    log.events("resumed")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkilled_workers_tasks_resume_elsewhere_with_no_turn_billed_and_no_tool_run_twice() {
    // 4 tasks x 8 turns of 300 ms, one MCP call a turn, on one worker.
    let tasks: Vec<String> = (0..4).map(|i| format!("t{i}")).collect();
    let Run { setup, ep, mut d, mut log } =
        start(&delegating(&tasks), 8, "counting_record", Duration::from_millis(300), 4, "2", "").await;
    let job = d.submit("four long tasks").await;
    let names = descriptions(&d, job, 4).await;
    eventually(TIMEOUT, "every task past step 3", || {
        let done = ep.billed_by(key);
        let past = tasks.iter().all(|t| done.contains_key(&(t.clone(), 3)));
        async move { past.then_some(()) }
    })
    .await;
    let mut w1 = d.workers.remove(0);
    let (killed_at, had) = kill_between_steps(&ep, &mut log, &names, &mut w1).await;
    assert_eq!(had.len(), 4, "all four ran on the victim");
    d.workers.push(worker(&d, "w2", "2"));
    // Attempt 2 of every task within 15 s of the kill.
    let within = Duration::from_secs(15).saturating_sub(killed_at.elapsed());
    log.until_count(within, 4, "resumed events", |s, v| s.contains(".progress.") && v["event"] == "resumed").await;
    let resumed_after = killed_at.elapsed().as_secs_f64();
    let end = log.job_end(Duration::from_secs(120)).await;
    assert_eq!(end["event"], "completed", "{end}");
    log.drain();
    let rec = d.status(job).await;
    assert_eq!(rec.status, JobStatus::Completed);
    let answer = rec.answer.unwrap_or_default();
    for t in &tasks {
        assert!(answer.contains(&format!("{t}: 7 receipts")), "{t} in {answer}");
    }
    assert_counted_once(&ep, &setup, 4 * 8, 4 * 7);
    for t in &rec.tasks {
        assert!(t.resumed_from_step.is_some_and(|s| s >= 4), "the record says it resumed: {t:?}");
    }
    let resumes = resumed(&log);
    assert_eq!(resumes.len(), 4, "{resumes:?}");
    for r in &resumes {
        assert_eq!((r["attempt"].as_u64(), r["worker_id"].as_str()), (Some(2), Some("w2")), "{r}");
        assert_eq!(r["reason"], "worker_lost");
        assert!(r["from_step"].as_u64().unwrap() >= 4, "resumed after the steps done: {r}");
    }
    eprintln!(
        "figures: 4 tasks x 8 turns, SIGKILL past step 3, default ack_wait {} s: all 4 resumed on w2 within \
         {resumed_after:.1} s of the kill; 32 turns billed once each, 28 tool calls executed once each",
        NatsConfig::default().ack_wait,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_handed_back_after_the_grace_resumes_on_another_worker_with_no_turn_billed_twice() {
    // One task of 8 turns of 1.5 s; its worker gets 1 s of grace after 2 turns.
    let tasks = vec!["t0".to_string()];
    let Run { setup, ep, mut d, mut log } =
        start(&delegating(&tasks), 8, "counting_record", Duration::from_millis(1500), 2, "1", "").await;
    let job = d.submit("one long task").await;
    eventually(TIMEOUT, "two turns done", || {
        let two = ep.billed_by(key).contains_key(&("t0".to_string(), 1));
        async move { two.then_some(()) }
    })
    .await;
    // The third turn is held: the grace runs out while the task waits on it.
    ep.hold();
    eventually(TIMEOUT, "the task to wait on the model", || {
        let waiting = !ep.meter().waiting.is_empty();
        async move { waiting.then_some(()) }
    })
    .await;
    let mut w1 = d.workers.remove(0);
    let (code, w1) = tokio::task::spawn_blocking(move || (w1.terminate(), w1)).await.unwrap();
    assert_eq!(code, Some(0), "{}", w1.log());
    assert!(w1.log().contains("handing the running tasks back"), "{}", w1.log());
    assert_eq!(ep.meter().abandoned, 1, "the turn in flight was dropped, not billed");
    ep.release();
    d.workers.push(worker(&d, "w2", "2"));
    let end = log.job_end(Duration::from_secs(120)).await;
    assert_eq!(end["event"], "completed", "{end}");
    log.drain();
    let rec = d.status(job).await;
    assert!(rec.answer.unwrap_or_default().contains("t0: 7 receipts"));
    assert_eq!(rec.tasks[0].worker_id.as_deref(), Some("w2"));
    assert_counted_once(&ep, &setup, 8, 7);
    let r = resumed(&log);
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!((r[0]["worker_id"].as_str(), r[0]["reason"].as_str()), (Some("w2"), Some("drained")), "{}", r[0]);
    assert_eq!(r[0]["from_step"], 2, "{}", r[0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_handed_back_after_a_transient_model_error_resumes_at_its_next_step() {
    // 6 turns of 100 ms; the provider refuses one request mid-task (503).
    let tasks = vec!["t0".to_string()];
    let Run { setup, ep, d, mut log } =
        start(&delegating(&tasks), 6, "counting_record", Duration::from_millis(100), 2, "2", "").await;
    let job = d.submit("one task through an outage").await;
    eventually(TIMEOUT, "two turns done", || {
        let two = ep.billed_by(key).contains_key(&("t0".to_string(), 1));
        async move { two.then_some(()) }
    })
    .await;
    ep.refuse_next(1);
    let end = log.job_end(Duration::from_secs(60)).await;
    assert_eq!(end["event"], "completed", "{end}");
    // The refused call is on the task's timeline: which step, why, after how long.
    let failed = log
        .until(TIMEOUT, "the refused call's model_failed", |s, v| {
            s.contains(".progress.") && v["event"] == "model_failed"
        })
        .await;
    log.drain();
    assert_eq!(ep.meter().refused, 1);
    // The first attempt's: a progress body leaves out `attempt` 1.
    assert_eq!((failed.get("attempt"), failed["error_kind"].as_str()), (None, Some("transient")), "{failed}");
    assert!(failed["latency_ms"].is_u64(), "{failed}");
    assert!(failed["step"].as_u64().unwrap() >= 3, "the refused request came after two turns: {failed}");
    assert!(failed.get("usage").is_none(), "a refused call reports no tokens: {failed}");
    assert_eq!(log.events("model_failed").len(), 1, "one call failed");
    let r = resumed(&log);
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!((r[0]["attempt"].as_u64(), r[0]["reason"].as_str()), (Some(2), Some("transient_error")), "{}", r[0]);
    assert!(r[0]["from_step"].as_u64().unwrap() >= 2, "{}", r[0]);
    assert_counted_once(&ep, &setup, 6, 5);
    assert!(d.status(job).await.answer.unwrap_or_default().contains("t0: 5 receipts"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_decided_and_a_message_read_before_a_crash_are_not_asked_or_read_again() {
    // 6 turns of 200 ms: `send` (approved by a person) first, then `record`.
    let extra = "[subagents.steps.interrupt_on.counting_send]\ndecisions = [\"approve\", \"reject\"]\n";
    // Started with `start_task`: follow-ups reach only such a task.
    let planner = starting("t0");
    let Run { setup, ep, mut d, mut log } =
        start(&planner, 6, "counting_send", Duration::from_millis(200), 2, "2", extra).await;
    let job = d.submit("one approved task").await;
    let names = descriptions(&d, job, 1).await;
    let asked = log
        .until(TIMEOUT, "the approval request", |s, v| s.contains(".progress.") && v["event"] == "approval_requested")
        .await;
    let subject = log.seen.iter().find(|(_, v)| *v == asked).map(|(s, _)| s.clone()).unwrap();
    let task = flotilla_testkit::events::task_of(&subject, &asked);
    let (call, task) = (asked["call_id"].as_str().unwrap(), task.as_str());
    let approve = ["--config", &d.config_arg(), "approve", &job.to_string(), call, "--task", task, "--approve"];
    let (code, out, err) = flotilla_testkit::proc::run_cli(&approve, &[]);
    assert_eq!(code, 0, "{out}{err}");
    // A follow-up the subagent reads at its third turn.
    let note = "also mention the deadline";
    let msg = FollowUp {
        v: SCHEMA_VERSION,
        id: format!("{job}.m1"),
        job_id: job,
        task_id: task.parse().unwrap(),
        subagent_type: flotilla_protocol::ids::SubagentType::new("steps").unwrap(),
        text: note.into(),
        sent_at: flotilla_protocol::now(),
    };
    d.bus.task_messages().publish(&Tenant::default(), &msg).await.expect("follow-up stored");
    let read = |b: &Value| {
        b["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] == "user" && m["content"].as_str().unwrap_or("").contains(note))
            .count()
    };
    eventually(TIMEOUT, "a billed turn that read the follow-up, at step 3 or later", || {
        let m = ep.meter();
        let seen = m.billed.iter().any(|b| read(b) == 1 && task_and_step(b).1 >= 2);
        async move { seen.then_some(()) }
    })
    .await;
    let mut w1 = d.workers.remove(0);
    kill_between_steps(&ep, &mut log, &names, &mut w1).await;
    d.workers.push(worker(&d, "w2", "2"));
    let end = log.job_end(Duration::from_secs(120)).await;
    assert_eq!(end["event"], "completed", "{end}");
    log.drain();
    assert_eq!(resumed(&log).len(), 1, "the task resumed once");
    let asks = log.events("approval_requested");
    assert_eq!(asks.len(), 1, "the decided approval was asked again: {asks:?}");
    assert_counted_once(&ep, &setup, 6, 5);
    let last = ep.meter().billed.into_iter().rfind(|b| task_and_step(b).1 == 5).expect("the last turn");
    assert_eq!(read(&last), 1, "the follow-up is in the resumed conversation exactly once");
    let rec = d.status(job).await;
    assert!(rec.answer.unwrap_or_default().contains("t0: 5 receipts"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_twenty_tasks_of_ten_steps_survive_worker_and_orchestrator_sigkills_counted_once() {
    // 20 tasks x 10 turns of 100 ms on 3 workers x 8 slots; the planner too
    // is a metered model. Three worker SIGKILLs and one orchestrator SIGKILL
    // at random moments of the run.
    let setup = Setup::new();
    let tasks: Vec<String> = (0..20).map(|i| format!("t{i:02}")).collect();
    let planned = tasks.clone();
    let answer: Answer =
        Arc::new(move |b| if is_planner(b) { planner(b, &planned) } else { subagent(b, 10, "counting_record") });
    let ep = MeteredEndpoint::start(Duration::from_millis(100), answer).await;
    let mut d = Deployment::start(0, |url| {
        let mut c = setup.config(url, &ep.url, 8, "");
        c.section("[planner]\nmodel = \"metered\"\ntask_timeout = 300\n");
        c
    })
    .await;
    for i in 1..=3 {
        d.workers.push(worker(&d, &format!("w{i}"), "2"));
    }
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let job = d.submit("twenty tasks").await;
    let names = descriptions(&d, job, 20).await;
    // Moments, as subagent turns billed so far (of 200): 3 worker kills, 1 orchestrator kill.
    let mut moments: Vec<(usize, bool)> = (0..3).map(|_| (fastrand::usize(10..150), false)).collect();
    moments.push((fastrand::usize(10..150), true));
    moments.sort_unstable();
    let mut victims = Vec::new();
    for (i, (at, orchestrator)) in moments.iter().copied().enumerate() {
        eventually(TIMEOUT, "the next kill moment", || {
            let billed = ep.meter().billed.iter().filter(|b| !is_planner(b)).count();
            async move { (billed >= at).then_some(()) }
        })
        .await;
        if orchestrator {
            d.orchestrator.as_mut().unwrap().kill();
            d.start_orchestrator();
            victims.push("orchestrator".to_string());
            continue;
        }
        let mut w = d.workers.remove(fastrand::usize(..d.workers.len()));
        let (_, had) = kill_between_steps(&ep, &mut log, &names, &mut w).await;
        victims.push(format!("{} ({} tasks)", w.name, had.len()));
        d.workers.push(worker(&d, &format!("r{i}"), "2"));
    }
    let end = log.job_end(Duration::from_secs(180)).await;
    assert_eq!(end["event"], "completed", "{end}");
    log.drain();
    let rec = d.status(job).await;
    assert_eq!(rec.tasks.len(), 20, "no task dispatched twice");
    let answer = rec.answer.unwrap_or_default();
    for t in &tasks {
        assert!(answer.contains(&format!("{t}: 9 receipts")), "{t} in {answer}");
    }
    // 200 subagent turns and the planner's 2, each billed once.
    assert_counted_once(&ep, &setup, 20 * 10 + 2, 20 * 9);
    eprintln!(
        "figures: 20 tasks x 10 turns, 3 workers x 8 slots, kills at billed turns {moments:?} ({victims:?}): {} \
         resumes, 202 turns billed once each, 180 tool calls executed once each, {} requests abandoned",
        resumed(&log).len(),
        ep.meter().abandoned
    );
}
