//! Asynchronous delegation, end to end: a scripted planner
//! starts three tasks, checks them, messages one mid-run (its next model
//! request carries the message), cancels one (its running subagent aborts and
//! it ends `cancelled`), waits for the rest, and the job completes; a planner
//! that ends its turn while its tasks run is woken by their reports, also
//! after an orchestrator SIGKILL while it waited.
//!
//! Under the real deploy/nats/roles.conf, a worker credential follows a
//! task's follow-up messages and a client credential can neither read nor
//! write them.
//!
//! The planner is the scripted model; the subagents call an OpenAI-compatible
//! mock in this process (below) that records every request, so the test sees
//! exactly what each subagent's model received, and holds a task's model call
//! until the test lets it go.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use flotilla_protocol::{JobStatus, TaskStatus};
use flotilla_testkit::chat_endpoint::{Answer, ChatEndpoint, task_and_step, text_reply, tool_call_reply};
use flotilla_testkit::{EventLog, TestConfig};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::sync::watch;

use flotilla_testkit::{Deployment, TIMEOUT};

/// What a subagent reads first in a follow-up (workers/src/inbox.rs).
const HEADER: &str = "[message from the planner]";
const FOLLOW_UP: &str = "Also name the colour blue.";

/// An OpenAI-compatible chat endpoint whose answer depends on the task (the
/// first user message): `alpha` lists files until a request carries a
/// follow-up, then answers with it (its first call waits for `gate`);
/// `beta` never answers (it is cancelled); `gamma` lists files once, then
/// answers; `wake` answers once `gate` opens.
struct MockModel {
    /// Every request: (task description, messages).
    seen: Mutex<Vec<(String, Vec<Value>)>>,
    gate: watch::Sender<bool>,
}

impl MockModel {
    async fn start() -> (String, Arc<Self>) {
        let mock = Arc::new(Self { seen: Mutex::default(), gate: watch::Sender::new(false) });
        let m = mock.clone();
        let answer: Answer = Arc::new(move |body| {
            let m = m.clone();
            Box::pin(async move { m.answer(body).await.into() })
        });
        (ChatEndpoint::start(answer).await.url, mock)
    }

    async fn answer(&self, body: Value) -> Value {
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        let user = |m: &Value| (m["role"] == "user").then(|| m["content"].as_str().unwrap_or("").to_string());
        let (task, step) = task_and_step(&body);
        self.seen.lock().unwrap().push((task.clone(), messages.clone()));
        let follow_up = messages.iter().filter_map(user).find(|c| c.starts_with(HEADER));
        if task.contains("alpha") {
            if step == 0 {
                self.opened().await;
            }
            return match follow_up {
                Some(f) => text_reply(&format!("alpha done; noted: {}", f.trim_start_matches(HEADER).trim())),
                None => list_files(step),
            };
        }
        if task.contains("beta") {
            return std::future::pending().await;
        }
        if task.contains("wake") {
            self.opened().await;
            return text_reply(&format!("{task}: done"));
        }
        if step == 0 { list_files(step) } else { text_reply("gamma done") }
    }

    async fn opened(&self) {
        let mut rx = self.gate.subscribe();
        let _ = rx.wait_for(|open| *open).await;
    }

    fn requests_of(&self, word: &str) -> Vec<Vec<Value>> {
        let seen = self.seen.lock().unwrap();
        seen.iter().filter(|(t, _)| t.contains(word)).map(|(_, m)| m.clone()).collect()
    }
}

fn list_files(step: usize) -> Value {
    tool_call_reply(&format!("call_ls_{step}"), "ls", &json!({"path": "/"}))
}

/// The planner: start alpha, beta, gamma; check them; message alpha and
/// cancel beta; wait for alpha and gamma; answer. A sixth turn answers if
/// it is ever woken (it should not be: every outcome was shown).
const PLANNER: &str = r#"
[[turns]]
[[turns.calls]]
tool = "start_task"
args = '{"subagent_type": "analyst", "description": "alpha: list the job files"}'
[[turns.calls]]
tool = "start_task"
args = '{"subagent_type": "analyst", "description": "beta: a task that is cancelled"}'
[[turns.calls]]
tool = "start_task"
args = '{"subagent_type": "analyst", "description": "gamma: list the job files"}'

[[turns]]
[[turns.calls]]
tool = "check_tasks"
args = '{}'

[[turns]]
[[turns.calls]]
tool = "message_task"
args = '{"id": {{ results[0].value.task_id | tojson }}, "text": "Also name the colour blue."}'
[[turns.calls]]
tool = "cancel_task"
args = '{"id": {{ results[1].value.task_id | tojson }}, "reason": "not needed"}'

[[turns]]
[[turns.calls]]
tool = "wait_tasks"
args = '{"ids": [{{ results[0].value.task_id | tojson }}, {{ results[2].value.task_id | tojson }}], "all": true, "timeout_s": 60}'

[[turns]]
content = "finished: {{ last[0].value.ended | length }} ended, {{ last[0].value.running | length }} running"

[[turns]]
content = "woken"
"#;

/// The planner of the wake-up test: start two tasks, end the turn; when
/// woken (by one report or both), wait for the rest, then answer.
const WAKE_PLANNER: &str = r#"
[[turns]]
[[turns.calls]]
tool = "start_task"
args = '{"subagent_type": "analyst", "description": "wake north"}'
[[turns.calls]]
tool = "start_task"
args = '{"subagent_type": "analyst", "description": "wake south"}'

[[turns]]
content = "waiting for the regions"

[[turns]]
[[turns.calls]]
tool = "wait_tasks"
args = '{"timeout_s": 60, "all": true}'

[[turns]]
content = "all reported"
"#;

fn config(url: &str, planner: &str, model_url: &str) -> TestConfig {
    let mut c = TestConfig::new(url);
    // A worker stalled for seconds (seen on a loaded 2-core host) must keep
    // its task: a redelivery would replay the mock's held calls. ack_wait 30 s.
    c.nats(30, 5);
    // A second per planner turn, so the tasks it starts are running (not
    // still queued) when a later turn messages or cancels them.
    c.scripted_model("planner", &format!("latency_ms = 1000\n{planner}"));
    c.section("[planner]\nmodel = \"planner\"\ntask_timeout = 60\n");
    c.section(&format!(
        "[models.mock]\nprovider = \"openai\"\nbase_url = \"{model_url}\"\nmodel = \"mock\"\nmax_retries = 0\n\
         [subagents.analyst]\ndescription = \"Lists job files.\"\nmodel = \"mock\"\ntools = [\"ls\"]\n\
         concurrency = 2\nmax_steps = 40\n"
    ));
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_started_tasks_are_checked_messaged_cancelled_and_awaited() {
    let (model_url, mock) = MockModel::start().await;
    let d = Deployment::start(2, |url| config(url, PLANNER, &model_url)).await;
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    // Alpha's first model call waits until the follow-up is stored on the bus.
    let mut messages = d.raw.client.subscribe("flotilla.job.*.*.message.*.*").await.unwrap();
    let started = std::time::Instant::now();
    let job = d.submit("Run three analyses.").await;
    let stored = tokio::time::timeout(TIMEOUT, messages.next()).await.expect("a follow-up message").unwrap();
    let follow_up: Value = serde_json::from_slice(&stored.payload).unwrap();
    assert_eq!(follow_up["text"], FOLLOW_UP);
    mock.gate.send_replace(true);

    let end = log.job_end(TIMEOUT).await;
    assert_eq!(end["event"], "completed", "{end}");
    let elapsed = started.elapsed();
    let rec = d.status(job).await;
    assert_eq!(rec.status, JobStatus::Completed);
    assert_eq!(rec.answer.as_deref(), Some("finished: 2 ended, 0 running"), "never woken: every outcome was shown");
    // A task's own follow-up consumer, if it had one, goes with the task,
    // not after an expiry; what stays is each worker's one follower of the
    // type's messages.
    let stream = d.bus.subjects.task_messages_stream();
    flotilla_testkit::eventually(Duration::from_secs(5), "the tasks' follow-up consumers to be deleted", || async {
        let messages = d.raw.js.get_stream(&stream).await.ok()?;
        let names: Vec<String> = messages.consumer_names().filter_map(|n| async { n.ok() }).collect().await;
        let followers = names.iter().filter(|n| n.starts_with(flotilla_bus::MESSAGE_FOLLOWER_PREFIX)).count();
        (followers == names.len() && followers == 2).then_some(())
    })
    .await;

    // Alpha: the follow-up reached its subagent as a user message added right
    // before a model call (the newest message of that request), stayed in its
    // conversation, and the subagent answered with it.
    let alpha = mock.requests_of("alpha");
    let carries = |m: &Vec<Value>| m.iter().any(|m| m["content"] == format!("{HEADER}\n{FOLLOW_UP}"));
    let first =
        alpha.iter().position(carries).unwrap_or_else(|| panic!("no request carried the follow-up: {alpha:#?}"));
    let newest = alpha[first].last().unwrap();
    assert_eq!(
        (newest["role"].as_str(), newest["content"].as_str()),
        (Some("user"), Some(&*format!("{HEADER}\n{FOLLOW_UP}")))
    );
    assert!(alpha[first..].iter().all(carries), "it stays in the conversation");
    let by_desc: HashMap<&str, _> = rec.tasks.iter().map(|t| (t.description.split(':').next().unwrap(), t)).collect();
    let a = by_desc["alpha"];
    assert_eq!(a.status, Some(TaskStatus::Completed));
    assert!(a.summary.contains(&format!("noted: {FOLLOW_UP}")), "{}", a.summary);

    // Beta: it ended `cancelled` for the planner's reason, and its running
    // subagent was aborted: its worker reports `finished` `cancelled` (the
    // orchestrator reports on its behalf only when no worker did within 5 s).
    let b = by_desc["beta"];
    assert_eq!(b.status, Some(TaskStatus::Cancelled), "{b:?}");
    assert!(b.error.as_ref().unwrap().message.contains("not needed"), "{:?}", b.error);
    let beta_progress = format!(".progress.{}", b.task_id);
    let finished = log
        .until(TIMEOUT, "beta's worker to report its abort", |s, v| {
            s.ends_with(&beta_progress) && v["event"] == "finished"
        })
        .await;
    assert_eq!(finished["status"], "cancelled", "{finished}");
    // Usually beta is running when the cancel lands (the planner's turns take
    // a second each) and its subagent is aborted: its model call, if it got
    // that far, never answered. On a loaded host the cancel can land while
    // beta is still queued: then the worker that pulls it refuses it without
    // starting it. Either way it never runs to its end.
    let started = log.seen.iter().any(|(s, v)| s.ends_with(&beta_progress) && v["event"] == "started");
    assert!(mock.requests_of("beta").len() <= usize::from(started), "beta's model was never answered");
    if !started {
        eprintln!("beta was cancelled while still queued (refused when pulled)");
    }
    let g = by_desc["gamma"];
    assert_eq!((g.status, g.summary.as_str()), (Some(TaskStatus::Completed), "gamma done"));
    assert_eq!(log.events("task_dispatched").len(), 3, "each task dispatched once");
    println!(
        "figures: 3 async tasks; alpha made {} model requests, the follow-up first in request #{}; beta reported by {:?}; job {:.2} s wall",
        alpha.len(),
        first + 1,
        b.worker_id,
        elapsed.as_secs_f64()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planner_that_ended_its_turn_is_woken_by_the_reports_even_after_an_orchestrator_crash() {
    let (model_url, mock) = MockModel::start().await;
    let mut d = Deployment::start(1, |url| config(url, WAKE_PLANNER, &model_url)).await;
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let job = d.submit("Two regions.").await;
    // The planner started both tasks and ended its turn: it now waits.
    log.until_count(TIMEOUT, 2, "two planner steps", |s, v| s.ends_with(".event") && v["event"] == "planner_step")
        .await;
    log.until_count(TIMEOUT, 2, "both tasks started", |s, v| s.contains(".progress.") && v["event"] == "started").await;
    d.orchestrator.as_mut().unwrap().kill();
    let killed_at = log.seen.len();
    d.start_orchestrator();
    // Let the tasks answer only once the new orchestrator runs the job again.
    log.until_count(Duration::from_secs(120), 2, "the job running again", |s, v| {
        s.ends_with(".event") && v["event"] == "running"
    })
    .await;
    mock.gate.send_replace(true);

    let end = log.job_end(Duration::from_secs(120)).await;
    assert_eq!(end["event"], "completed", "{end}");
    let rec = d.status(job).await;
    assert_eq!(rec.answer.as_deref(), Some("all reported"));
    assert_eq!(rec.tasks.len(), 2);
    assert!(rec.tasks.iter().all(|t| t.status == Some(TaskStatus::Completed)), "{:?}", rec.tasks);
    // The resumed planner called its model only once woken by a report.
    let after: Vec<&str> = log.seen[killed_at..]
        .iter()
        .filter(|(s, _)| s.ends_with(".event"))
        .filter_map(|(_, v)| v["event"].as_str())
        .filter(|e| matches!(*e, "planner_step" | "task_reported"))
        .collect();
    assert_eq!(after.first(), Some(&"task_reported"), "{after:?}");
    assert_eq!(log.events("planner_step").len(), 4, "turns: start, end of turn, wait when woken, answer");
    assert_eq!(log.events("task_dispatched").len(), 2, "nothing dispatched again");
    assert_eq!(mock.requests_of("wake").len(), 2, "each task ran once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_the_roles_a_worker_reads_follow_ups_and_a_client_cannot_touch_them() {
    use flotilla_bus::Bus;
    use flotilla_config::NatsConfig;
    use flotilla_protocol::FollowUp;
    use flotilla_protocol::ids::{JobId, SubagentType, TaskId, Tenant};
    use flotilla_testkit::nats_conf::{ConfiguredNats, deploy_dir};

    let nats = ConfiguredNats::start("nats", &deploy_dir().join("nats/nats-local.conf"), &[]).await;
    let as_user = |user: &str, manage_topology: bool| NatsConfig {
        url: nats.url_as(user),
        inbox_prefix: format!("_INBOX.{user}"),
        manage_topology,
        ..Default::default()
    };
    let connect = |user: &'static str, manage| {
        let config = as_user(user, manage);
        async move { Bus::connect(&config, user, TIMEOUT).await.unwrap_or_else(|e| panic!("{user}: {e:#}")) }
    };
    let orchestrator = connect("orchestrator", true).await;
    orchestrator.ensure_topology().await.expect("the orchestrator declares the messages stream");
    let (worker, client) = (connect("worker-finance", false).await, connect("client-acme", false).await);
    let (acme, job, task) = (Tenant::new("acme").unwrap(), JobId::new(), TaskId::new());
    let finance = SubagentType::new("finance").unwrap();
    let msg = FollowUp {
        v: 1,
        id: format!("{job}.call_1"),
        job_id: job,
        task_id: task,
        subagent_type: finance.clone(),
        text: FOLLOW_UP.into(),
        sent_at: flotilla_protocol::now(),
    };

    orchestrator.task_messages().publish(&acme, &msg).await.expect("the orchestrator publishes");
    let inbox = worker.task_messages().follow(&acme, &job, &finance, task).await.expect("a worker follows a task");
    let mut inbox = std::pin::pin!(inbox);
    let got = tokio::time::timeout(TIMEOUT, inbox.next()).await.expect("the stored message is replayed");
    assert_eq!(got.map(|(_, m)| m), Some(msg.clone()));

    let read =
        client.task_messages().follow(&acme, &job, &finance, task).await.err().expect("a client reads follow-ups");
    assert!(format!("{read:#}").contains("ermission"), "{read:#}");
    let wrote = client.task_messages().publish(&acme, &msg).await.expect_err("a client writes follow-ups");
    assert!(format!("{wrote:#}").contains("ermission"), "{wrote:#}");
}

/// Queues a task of `ty` in `job` (default tenant) published with
/// `follow_ups`, with a follow-up ([`FOLLOW_UP`]) stored for it first.
async fn queue_with_follow_up(
    d: &Deployment,
    job: flotilla_protocol::ids::JobId,
    ty: &flotilla_protocol::ids::SubagentType,
    description: &str,
    follow_ups: flotilla_bus::FollowUps,
) {
    let tenant = flotilla_protocol::ids::Tenant::default();
    let task = flotilla_protocol::TaskMessage {
        v: flotilla_protocol::SCHEMA_VERSION,
        job_id: job,
        task_id: flotilla_protocol::ids::TaskId::new(),
        subagent_type: ty.clone(),
        description: description.into(),
        tenant: tenant.clone(),
        attempt: 1,
        deadline: None,
        traceparent: None,
        created_at: flotilla_protocol::now(),
    };
    let msg = flotilla_protocol::FollowUp {
        v: 1,
        id: format!("{job}.{}", task.task_id),
        job_id: job,
        task_id: task.task_id,
        subagent_type: ty.clone(),
        text: FOLLOW_UP.into(),
        sent_at: flotilla_protocol::now(),
    };
    d.bus.task_messages().publish(&tenant, &msg).await.unwrap();
    d.bus.tasks().publish(&task, follow_ups).await.unwrap();
}

/// A message stored while its task was still queued (no worker yet) is not
/// among those the worker's type-wide follower sees (it starts later); the
/// task finds it when it starts (workers/src/inbox.rs) and its first model
/// call reads it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_sent_while_the_task_was_queued_reaches_its_first_model_call() {
    use flotilla_protocol::ids::{JobId, SubagentType};

    let (model_url, mock) = MockModel::start().await;
    mock.gate.send_replace(true);
    let mut d = Deployment::start(0, |url| config(url, PLANNER, &model_url)).await;
    let (tenant, job, analyst) = (Default::default(), JobId::new(), SubagentType::new("analyst").unwrap());
    let mut reports = Box::pin(d.bus.reports().live_of_job(&tenant, &job).await.unwrap());
    queue_with_follow_up(&d, job, &analyst, "alpha: list the job files", flotilla_bus::FollowUps::Possible).await;
    d.add_worker("w1");

    let report = tokio::time::timeout(TIMEOUT, reports.next()).await.expect("the task's report").unwrap();
    assert_eq!(report.status, TaskStatus::Completed, "{report:?}");
    assert_eq!(report.summary, format!("alpha done; noted: {FOLLOW_UP}"));
    let calls = mock.requests_of("alpha");
    assert_eq!(calls.len(), 1, "the first model call had the message: {calls:?}");
}

/// A task its dispatcher published as one no follow-up can come for
/// (`FollowUps::None`: a `task` or `map_tasks` task) is neither looked up
/// nor followed: a message stored for it anyway never reaches its
/// subagent, while a task that may get follow-ups, started beside it, reads
/// the one stored for it in its first model call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_published_without_follow_ups_reads_none_and_one_with_them_reads_its_own() {
    use flotilla_bus::FollowUps;
    use flotilla_protocol::ids::{JobId, SubagentType};

    let (model_url, mock) = MockModel::start().await;
    mock.gate.send_replace(true);
    let mut d = Deployment::start(0, |url| config(url, PLANNER, &model_url)).await;
    let (tenant, job, analyst) = (Default::default(), JobId::new(), SubagentType::new("analyst").unwrap());
    let mut reports = Box::pin(d.bus.reports().live_of_job(&tenant, &job).await.unwrap());
    for (description, follow_ups) in
        [("delta: list the job files", FollowUps::None), ("epsilon: list them", FollowUps::Possible)]
    {
        queue_with_follow_up(&d, job, &analyst, description, follow_ups).await;
    }
    d.add_worker("w1");

    for _ in 0..2 {
        let report = tokio::time::timeout(TIMEOUT, reports.next()).await.expect("a task's report").unwrap();
        assert_eq!(report.status, TaskStatus::Completed, "{report:?}");
    }
    let follow_up_in = |request: &Vec<Value>| {
        request.iter().any(|m| m["role"] == "user" && m["content"].as_str().is_some_and(|c| c.starts_with(HEADER)))
    };
    let epsilon = mock.requests_of("epsilon");
    assert!(epsilon.first().is_some_and(follow_up_in), "the first model call had its message: {epsilon:?}");
    let delta = mock.requests_of("delta");
    assert_eq!(delta.len(), 2, "{delta:?}");
    assert!(!delta.iter().any(follow_up_in), "no follow-up reached the task published without them: {delta:?}");
}
