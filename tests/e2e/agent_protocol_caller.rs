//! A subagent type backed by a Synadia Agent Protocol agent
//! (`[subagents.<type>] agent = { name, owner }`, docs/PROTOCOLS.md), with
//! an agent built on the official host SDK (`synadia-ai-agent-service`,
//! tests/fixtures/agent_protocol_agent.py) as a real process beside a real
//! nats-server, orchestrator and worker:
//!
//! - the demo job's finance task is a prompt of that agent: its streamed
//!   chunks are the task's progress events, its query a question for a
//!   person (an approval request, answered with `flotilla approve`), and the
//!   joined chunks the report the planner consolidates;
//! - a task queued while no such agent is registered is not lost: the
//!   worker hands it back (the protocol delivers at most once; the task
//!   queue redelivers) and it completes once the agent registers, prompted
//!   once.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use flotilla_protocol::JobStatus;
use flotilla_testkit::{Deployment, EventLog, TIMEOUT, TempDir, TestConfig};
use serde_json::Value;

use crate::a2a_client::Agent;
use crate::agent_protocol::first_heartbeat;

const JOB: &str = "Compute the gross margin of region north: revenue 120, cost 75.";

/// Starts the SDK agent `margins` of owner `flotilla`, logging prompts to `log`.
async fn start_agent(d: &Deployment, log: &std::path::Path, ask: bool) -> Agent {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/agent_protocol_agent.py");
    let mut cmd = Command::new(crate::a2a::python());
    cmd.arg(script).args(["--url", &d.nats.url(), "--agent", "margins", "--owner", "flotilla"]);
    cmd.arg("--log").arg(log);
    if ask {
        cmd.arg("--ask");
    }
    let child = cmd.stdin(Stdio::null()).stdout(Stdio::null()).spawn().expect("start the SDK agent");
    let agent = Agent(child);
    let beat = first_heartbeat(&d.raw.client, "agents.hb.margins.flotilla.default").await;
    assert_eq!(beat["agent"], "margins", "{beat}");
    agent
}

fn config(url: &str) -> TestConfig {
    crate::a2a_client::remote_finance(url, "agent = { name = \"margins\", owner = \"flotilla\" }")
}

fn prompts(log: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["prompt"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_protocol_agent_runs_a_task_streams_it_and_asks_a_person_through_approvals() {
    let d = Deployment::start(1, config).await;
    let tmp = TempDir::new("protocol-agent");
    let prompt_log = tmp.path().join("prompts.jsonl");
    let _agent = start_agent(&d, &prompt_log, true).await;
    let mut events = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let job = d.submit(JOB).await;

    // The agent's query is an elicitation of the task: the first question
    // of the attempt, asked in the agent's name.
    let req = crate::approvals::request(&mut events).await;
    assert_eq!((req["job_id"].as_str(), req["kind"].as_str()), (Some(job.to_string().as_str()), Some("elicitation")));
    assert_eq!((req["call_id"].as_str(), req["server"].as_str()), (Some("remote-1-elicit"), Some("margins")), "{req}");
    assert_eq!(req["message"], "Is the cost net of rebates?", "{req}");
    let task = req["task_id"].as_str().unwrap().to_string();
    let answer = r#"{"answer": "yes, net"}"#;
    let call = ["approve", &job.to_string(), "remote-1-elicit", "--task", &task, "--content", answer];
    let (code, out, err) = crate::approvals::cli(&d, &call).await;
    assert_eq!(code, 0, "{out}{err}");

    let end = events.job_end(TIMEOUT).await;
    assert_eq!(end["event"], "completed", "{end}");
    events.drain();
    let rec = d.status(job).await;
    assert_eq!(rec.status, JobStatus::Completed);
    let report = rec.tasks.iter().find(|t| t.task_id.to_string() == task).expect("the task");
    assert_eq!(report.summary, "margin (yes, net) 0.375", "the joined chunks are the report");
    assert!(rec.answer.unwrap_or_default().contains("0.375"), "the planner consolidated it");

    // One prompt, the task's description; each chunk a progress event.
    let sent = prompts(&prompt_log);
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert!(sent[0].starts_with(JOB.trim_end_matches('.')), "{sent:?}");
    let deltas: Vec<&str> = events
        .seen
        .iter()
        .filter(|(s, v)| s.ends_with(&format!(".progress.{task}")) && v["event"] == "model_delta")
        .filter_map(|(_, v)| v["text"].as_str())
        .collect();
    assert_eq!(deltas.concat(), "margin (yes, net) 0.375", "{deltas:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_queued_before_its_agent_registers_completes_once_it_does() {
    let d = Deployment::start(1, |url| {
        let mut c = config(url);
        c.nats(2, 20);
        c
    })
    .await;
    let tmp = TempDir::new("protocol-agent");
    let prompt_log = tmp.path().join("prompts.jsonl");
    let mut events = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let job = d.submit(JOB).await;

    // The first attempt finds no agent and hands the task back: a second
    // attempt starts.
    events
        .until(TIMEOUT, "a second attempt", |s, v| {
            s.contains(".progress.") && v["event"] == "started" && v["attempt"].as_u64() >= Some(2)
        })
        .await;
    let worker_log = d.workers[0].log();
    assert!(worker_log.contains("no protocol agent margins of owner flotilla is registered"), "{worker_log}");
    let _agent = start_agent(&d, &prompt_log, false).await;

    let end = events.job_end(TIMEOUT).await;
    assert_eq!(end["event"], "completed", "{end}");
    let rec = d.status(job).await;
    assert_eq!(rec.tasks.len(), 1);
    assert_eq!(rec.tasks[0].summary, "margin 0.375");
    assert!(rec.tasks[0].attempt >= 2, "redelivered: attempt {}", rec.tasks[0].attempt);
    assert_eq!(prompts(&prompt_log).len(), 1, "prompted once the agent was there");
}
