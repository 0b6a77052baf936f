//! A subagent type backed by a remote A2A agent (`[subagents.<type>] a2a =
//! { url }`, docs/PROTOCOLS.md "A2A v1.0"), the agent built on the official
//! A2A Python SDK (a2a-sdk server, tests/fixtures/a2a_agent.py) and run as a
//! real process beside a real nats-server, orchestrator and worker:
//!
//! - the demo job's finance task is one A2A task of that agent, in the
//!   context of the Flotilla task's id; its status messages are the task's
//!   progress and its artifact the report the planner consolidates;
//! - `TASK_STATE_INPUT_REQUIRED` is an elicitation a person answers with
//!   `flotilla approve`; the answer goes back into the same A2A task;
//! - cancelling the job sends `CancelTask` to the agent;
//! - a task whose worker dies while the agent works is redelivered, and the
//!   new attempt follows the same A2A task (`SubscribeToTask`) instead of
//!   sending the description again: the agent does the work once.
//!
//! Each runs twice: over the JSON-RPC binding and over HTTP+JSON, with an
//! agent that offers and serves only that one.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use flotilla_protocol::JobStatus;
use flotilla_protocol::ids::JobId;
use flotilla_testkit::config::demo_script;
use flotilla_testkit::{Deployment, EventLog, TIMEOUT, TempDir, TestConfig, eventually, free_port};
use serde_json::Value;

/// An agent process; killed on drop.
pub(crate) struct Agent(pub(crate) Child);

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The a2a-sdk agent on `port`, serving (and offering on its card) only
/// `binding`: `JSONRPC` or `HTTP+JSON`.
async fn start_agent(port: u16, log: &Path, binding: &str) -> Agent {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/a2a_agent.py");
    let child = Command::new(crate::a2a::python())
        .arg(script)
        .arg(port.to_string())
        .arg(log)
        .arg(binding)
        .stdin(Stdio::null())
        .spawn()
        .expect("start the a2a-sdk agent");
    let agent = Agent(child);
    flotilla_config::tls::install_crypto_provider();
    let card = format!("http://127.0.0.1:{port}/.well-known/agent-card.json");
    eventually(TIMEOUT, "the agent card to be served", || async {
        reqwest::get(&card).await.ok().filter(|r| r.status().is_success()).map(|_| ())
    })
    .await;
    agent
}

fn logged(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log).unwrap_or_default().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// The demo planner with a `finance` type whose tasks `backend` (an
/// `agent` or `a2a` key) runs elsewhere.
pub(crate) fn remote_finance(url: &str, backend: &str) -> TestConfig {
    let mut c = TestConfig::new(url);
    c.scripted_model("planner", &demo_script("planner.toml"));
    c.section("[planner]\nmodel = \"planner\"\ntask_timeout = 120\n");
    c.section(&format!("[subagents.finance]\ndescription = \"Computes gross margins.\"\n{backend}\nconcurrency = 2\n"));
    c
}

/// Waits for `job`'s terminal event (the log holds earlier jobs' too).
async fn end_of(events: &mut EventLog, job: JobId) -> Value {
    let id = job.to_string();
    events
        .until(TIMEOUT, "the job to end", |s, v| {
            s.ends_with(".event")
                && v["job_id"] == id.as_str()
                && matches!(v["event"].as_str(), Some("completed" | "failed" | "cancelled"))
        })
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_a2a_sdk_agent_runs_tasks_asks_a_person_and_is_cancelled() {
    runs_tasks_asks_a_person_and_is_cancelled("JSONRPC").await;
}

/// The same over the HTTP+JSON binding: the agent offers and serves no
/// JSON-RPC, so every call above must go as `POST /message:stream`,
/// `POST /tasks/{id}:cancel`, ...
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http_json_an_a2a_sdk_agent_runs_tasks_asks_a_person_and_is_cancelled() {
    runs_tasks_asks_a_person_and_is_cancelled("HTTP+JSON").await;
}

async fn runs_tasks_asks_a_person_and_is_cancelled(binding: &str) {
    let port = free_port();
    let tmp = TempDir::new("a2a-agent");
    let agent_log = tmp.path().join("agent.jsonl");
    let _agent = start_agent(port, &agent_log, binding).await;
    let backend = format!("a2a = {{ url = \"http://127.0.0.1:{port}\" }}");
    let d = Deployment::start(1, |url| remote_finance(url, &backend)).await;
    let mut events = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;

    // 1. The demo job: one A2A task in the context of the Flotilla task.
    let job = d.submit("Compute the gross margin of region north: revenue 120, cost 75.").await;
    let end = end_of(&mut events, job).await;
    assert_eq!(end["event"], "completed", "{end}");
    events.drain();
    let rec = d.status(job).await;
    assert!(rec.answer.clone().unwrap_or_default().contains("0.375"), "{:?}", rec.answer);
    let task = rec.tasks[0].task_id.to_string();
    assert_eq!(rec.tasks[0].summary, "gross margin 0.375", "the artifact is the report");
    let sent = logged(&agent_log);
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0]["contextId"], task.as_str(), "the context is the Flotilla task: {sent:?}");
    let progress: String = events
        .seen
        .iter()
        .filter(|(s, v)| s.ends_with(&format!(".progress.{task}")) && v["event"] == "model_delta")
        .filter_map(|(_, v)| v["text"].as_str())
        .collect();
    assert!(progress.contains("computing the margin"), "status messages are progress: {progress:?}");

    // 2. Input required: a person answers, the same A2A task goes on.
    let job = d.submit("Compute the gross margin of region ask: revenue 120, cost 75.").await;
    let req = crate::approvals::request(&mut events).await;
    assert_eq!((req["kind"].as_str(), req["message"].as_str()), (Some("elicitation"), Some("Which region?")), "{req}");
    let task = req["task_id"].as_str().unwrap().to_string();
    let call = req["call_id"].as_str().unwrap().to_string();
    let answer = ["approve", &job.to_string(), &call, "--task", &task, "--content", r#"{"answer": "north"}"#];
    let (code, out, err) = crate::approvals::cli(&d, &answer).await;
    assert_eq!(code, 0, "{out}{err}");
    let end = end_of(&mut events, job).await;
    assert_eq!(end["event"], "completed", "{end}");
    let rec = d.status(job).await;
    assert_eq!(rec.tasks[0].summary, "gross margin of north: 0.375");
    let all = logged(&agent_log);
    let asked = &all[1..];
    assert_eq!(asked.len(), 2, "the question's answer went to the agent: {asked:?}");
    assert_eq!(asked[1]["text"], "north");
    assert_eq!(asked[1]["taskId"], asked[0]["taskId"], "into the same A2A task: {asked:?}");
    assert_eq!(asked[1]["resumed"], true);

    // 3. Cancelling the job cancels the A2A task.
    let job = d.submit("Compute the gross margin of region hang: revenue 120, cost 75.").await;
    events
        .until(TIMEOUT, "the agent at work", |s, v| {
            s.contains(&format!(".{job}.progress.")) && v["event"] == "model_delta"
        })
        .await;
    let (code, out, err) = crate::approvals::cli(&d, &["cancel", &job.to_string(), "--reason", "not needed"]).await;
    assert_eq!(code, 0, "{out}{err}");
    let cancelled = eventually(TIMEOUT, "CancelTask to reach the agent", || async {
        logged(&agent_log).into_iter().find(|e| e["event"] == "cancel")
    })
    .await;
    let hanging = logged(&agent_log).into_iter().find(|e| e["event"] == "hanging").expect("the agent was at work");
    assert_eq!(cancelled["taskId"], hanging["taskId"], "{cancelled} {hanging}");
    assert_eq!(end_of(&mut events, job).await["event"], "cancelled");
    assert_eq!(d.status(job).await.status, JobStatus::Cancelled);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redelivered_task_follows_the_a2a_task_its_dead_worker_started() {
    follows_the_a2a_task_its_dead_worker_started("JSONRPC").await;
}

/// The same over HTTP+JSON: `GET /tasks?contextId=`, `GET /tasks/{id}`,
/// `GET /tasks/{id}:subscribe`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http_json_a_redelivered_task_follows_the_a2a_task_its_dead_worker_started() {
    follows_the_a2a_task_its_dead_worker_started("HTTP+JSON").await;
}

/// The A2A task ends between the new attempt's `GetTask` (still working)
/// and its `SubscribeToTask`, which the agent then refuses (a task in a
/// terminal state): the attempt takes the task's final state, without
/// sending the description again. The agent fixture holds its `GetTask`
/// answer until the task is stored completed (tests/fixtures/a2a_agent.py,
/// `LOG.release-on-get`), so the race happens every run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http_json_a_redelivered_task_whose_a2a_task_ends_before_it_is_followed_takes_its_answer() {
    follows_the_a2a_task_its_dead_worker_started_with("HTTP+JSON", true).await;
}

async fn follows_the_a2a_task_its_dead_worker_started(binding: &str) {
    follows_the_a2a_task_its_dead_worker_started_with(binding, false).await;
}

async fn follows_the_a2a_task_its_dead_worker_started_with(binding: &str, ends_before_followed: bool) {
    let port = free_port();
    let tmp = TempDir::new("a2a-agent");
    let agent_log = tmp.path().join("agent.jsonl");
    let _agent = start_agent(port, &agent_log, binding).await;
    let backend = format!("a2a = {{ url = \"http://127.0.0.1:{port}\" }}");
    let mut d = Deployment::start(1, |url| {
        let mut c = remote_finance(url, &backend);
        c.nats(2, 5);
        c
    })
    .await;
    let mut events = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let job = d.submit("Compute the gross margin of region slow: revenue 120, cost 75.").await;
    let id = job.to_string();
    events
        .until(TIMEOUT, "the agent at work", |s, v| {
            s.contains(&format!(".{id}.progress.")) && v["event"] == "model_delta"
        })
        .await;

    // The worker dies mid-task; another one gets the redelivered task.
    if ends_before_followed {
        std::fs::write(format!("{}.release-on-get", agent_log.display()), b"").unwrap();
    }
    d.workers[0].kill();
    d.add_worker("w2");
    events
        .until(TIMEOUT, "the second attempt", |s, v| {
            s.contains(".progress.") && v["event"] == "started" && v["attempt"].as_u64() >= Some(2)
        })
        .await;
    if !ends_before_followed {
        std::fs::write(format!("{}.release", agent_log.display()), b"").unwrap();
    }

    let end = end_of(&mut events, job).await;
    assert_eq!(end["event"], "completed", "{end}");
    let rec = d.status(job).await;
    assert_eq!(rec.tasks[0].summary, "gross margin 0.375");
    assert!(rec.tasks[0].attempt >= 2, "redelivered: attempt {}", rec.tasks[0].attempt);
    let messages: Vec<Value> = logged(&agent_log).into_iter().filter(|e| e["event"] == "message").collect();
    assert_eq!(messages.len(), 1, "the description went to the agent once: {messages:?}");
    assert_eq!(messages[0]["contextId"], rec.tasks[0].task_id.to_string().as_str());
    if ends_before_followed {
        let held = logged(&agent_log).into_iter().any(|e| e["event"] == "get_task_held");
        assert!(held, "the agent held a GetTask until its task completed");
    }
}
