//! The asynchronous tools and the wake-up loop over the in-memory fakes of
//! orchestrator/src/fakes.rs (plus a fake [`TaskControl`]): start, check,
//! wait, message, cancel (running and still queued), waking a planner that
//! ended its turn, and resuming after a restart.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use flotilla_agent::agent::{Agent, Conversation, Limits, NoObserver, RunContext};
use flotilla_agent::model::{ChatMessage, ChatModel, ModelError, ModelRequest, ModelResponse, ToolCall};
use flotilla_agent::tool::{ToolContext, ToolSet};
use flotilla_bus::BusError;
use flotilla_protocol::ids::{JobId, SubagentType, TaskId, Tenant};
use flotilla_protocol::{self as protocol, ErrorKind, FollowUp, JobRecord, TaskEntry, TaskMessage, TaskReport};
use flotilla_protocol::{TaskStatus, Usage};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::{AsyncTasks, TaskControl, WAKE_HEADER};
use crate::fakes::{FakeJobs, FakeQueue, FakeReports};
use crate::jobs::JobStore;
use crate::planner::dispatch::Dispatcher;
use crate::reports::ReportRouter;

/// Records cancels and messages; a report it is asked to store reaches the
/// router as the reports stream would deliver it.
struct FakeControl {
    router: ReportRouter,
    cancels: watch::Sender<Vec<(TaskId, String)>>,
    messages: Mutex<Vec<FollowUp>>,
    reports: Mutex<Vec<TaskReport>>,
}

#[async_trait]
impl TaskControl for FakeControl {
    async fn cancel(&self, _job: &JobId, task: &TaskId, reason: &str) -> Result<(), BusError> {
        self.cancels.send_modify(|c| c.push((*task, reason.to_string())));
        Ok(())
    }
    async fn message(&self, _tenant: &Tenant, msg: &FollowUp) -> Result<(), BusError> {
        self.messages.lock().unwrap().push(msg.clone());
        Ok(())
    }
    async fn report(&self, _tenant: &Tenant, report: &TaskReport) -> Result<(), BusError> {
        self.reports.lock().unwrap().push(report.clone());
        self.router.route(report.clone());
        Ok(())
    }
}

struct Rig {
    tasks: Arc<AsyncTasks>,
    tools: Arc<ToolSet>,
    queue: Arc<FakeQueue>,
    control: Arc<FakeControl>,
    router: ReportRouter,
    job: JobId,
    tenant: Tenant,
    cancel: CancellationToken,
}

async fn rig(backend: Option<Arc<FakeJobs>>, job: JobId) -> Rig {
    let (queue, stored) = (Arc::new(FakeQueue::default()), Arc::new(FakeReports::default()));
    let tenant = Tenant::new("acme").unwrap();
    let fresh = backend.is_none();
    let jobs = JobStore::with_backend(backend.unwrap_or_default());
    if fresh {
        jobs.insert(JobRecord::new(job, tenant.clone(), "revenue by region".into())).await.unwrap();
    }
    let router = ReportRouter::new(stored);
    let types = BTreeMap::from([(SubagentType::new("finance").unwrap(), "numbers".into())]);
    let secs = Duration::from_secs(3600);
    let dispatcher = Dispatcher::new(queue.clone(), jobs, router.clone(), types, secs, secs);
    let control = Arc::new(FakeControl {
        router: router.clone(),
        cancels: watch::Sender::new(Vec::new()),
        messages: Mutex::default(),
        reports: Mutex::default(),
    });
    // The grace under test is how long a cancelled task may take to report itself.
    let tasks = AsyncTasks::with_control(dispatcher, control.clone(), Duration::from_millis(50));
    let mut tools = ToolSet::new(Duration::from_secs(60));
    tasks.register(&mut tools).unwrap();
    Rig { tasks, tools: Arc::new(tools), queue, control, router, job, tenant, cancel: CancellationToken::new() }
}

fn report(msg: &TaskMessage, status: TaskStatus, summary: &str) -> TaskReport {
    TaskReport {
        v: protocol::SCHEMA_VERSION,
        job_id: msg.job_id,
        task_id: msg.task_id,
        subagent_type: msg.subagent_type.clone(),
        status,
        summary: summary.into(),
        summary_file: None,
        error: (status != TaskStatus::Completed)
            .then(|| protocol::ErrorInfo::new(ErrorKind::Cancelled, "the task was cancelled: x")),
        usage: Usage::default(),
        worker_id: "w-1".into(),
        attempt: 1,
        resumed_from_step: None,
        started_at: protocol::now(),
        finished_at: protocol::now(),
        duration_ms: 1,
    }
}

impl Rig {
    async fn call(&self, call_id: &str, tool: &str, args: Value) -> Result<Value, (ErrorKind, String)> {
        let ctx = ToolContext {
            job_id: self.job,
            task_id: None,
            tenant: self.tenant.clone(),
            call_id: call_id.into(),
            idempotency_key: format!("{}:{call_id}", self.job),
            traceparent: None,
            cancel: self.cancel.child_token(),
            approvals: None,
        };
        let outcome = self.tools.invoke(&ctx, tool, &args).await;
        outcome.result.map_err(|e| (e.kind, e.message))
    }

    async fn start(&self, call_id: &str, what: &str) -> TaskId {
        let r = self.call(call_id, "start_task", json!({"description": what, "subagent_type": "finance"})).await;
        r.unwrap()["task_id"].as_str().unwrap().parse().unwrap()
    }

    fn published(&self, task: TaskId) -> TaskMessage {
        self.queue.published().into_iter().find(|m| m.task_id == task).expect("published")
    }
}

#[tokio::test]
async fn started_tasks_run_in_the_background_and_check_and_wait_show_how_they_end() {
    let rig = rig(None, JobId::new()).await;
    let a = rig.start("c1", "north").await;
    let b = rig.start("c2", "south").await;
    let c = rig.start("c3", "east").await;
    assert_eq!(rig.start("c1", "north").await, a, "a replayed call is the same task");
    assert_eq!(rig.queue.published().len(), 3);
    // `message_task` may follow up on each: their workers follow their messages.
    assert_eq!(rig.queue.follow_ups(), [flotilla_bus::FollowUps::Possible; 3]);

    let checked = rig.call("c4", "check_tasks", json!({})).await.unwrap();
    assert_eq!((checked["running"].clone(), checked["ended"].clone()), (json!(3), json!(0)));

    // A wait for any: it returns once b reports, with b's result.
    let waiting = rig.call("c5", "wait_tasks", json!({"timeout_s": 60}));
    let (waited, ()) = tokio::join!(waiting, async {
        rig.router.route(report(&rig.published(b), TaskStatus::Completed, "south: 80"));
    });
    let waited = waited.unwrap();
    assert_eq!(waited["ended"][0]["task_id"], json!(b));
    assert_eq!(waited["ended"][0]["summary"], json!("south: 80"));
    assert_eq!(waited["running"], json!([a, c]));
    assert_eq!(waited["timed_out"], json!(false));

    // Nothing else ends: a wait for all of a and c times out, saying what still runs.
    let timed_out = rig.call("c6", "wait_tasks", json!({"ids": [a, c], "all": true, "timeout_s": 1})).await.unwrap();
    assert_eq!((timed_out["timed_out"].clone(), timed_out["running"].clone()), (json!(true), json!([a, c])));
    let checked = rig.call("c7", "check_tasks", json!({"ids": [b]})).await.unwrap();
    assert_eq!(checked["tasks"][0]["status"], json!("completed"));
}

#[tokio::test]
async fn bad_arguments_and_unknown_ids_are_refused_with_what_is_wrong() {
    let rig = rig(None, JobId::new()).await;
    let err = rig.call("c1", "start_task", json!({"description": "x", "subagent_type": "legal"})).await.unwrap_err();
    assert_eq!(err.0, ErrorKind::Validation);
    assert!(err.1.contains("valid types: finance"), "{}", err.1);
    let err = rig.call("c2", "check_tasks", json!({"ids": [TaskId::new()]})).await.unwrap_err();
    assert_eq!(err.0, ErrorKind::NotFound);
    let err = rig.call("c3", "wait_tasks", json!({"ids": ["nope"], "timeout_s": 1})).await.unwrap_err();
    assert!(err.1.contains("not a task id"), "{}", err.1);
    let err = rig.call("c4", "wait_tasks", json!({"timeout_s": 0})).await.unwrap_err();
    assert_eq!(err.0, ErrorKind::Validation);
    assert!(rig.queue.published().is_empty());
}

#[tokio::test]
async fn a_message_reaches_only_a_live_task_and_is_size_checked() {
    let rig = rig(None, JobId::new()).await;
    let a = rig.start("c1", "north").await;

    let sent = rig.call("c2", "message_task", json!({"id": a, "text": "also cover Q3"})).await.unwrap();
    assert_eq!(sent["status"], json!("running"));
    let stored = rig.control.messages.lock().unwrap().clone();
    assert_eq!(stored.len(), 1);
    assert_eq!((stored[0].task_id, stored[0].job_id, stored[0].text.as_str()), (a, rig.job, "also cover Q3"));
    assert_eq!(stored[0].id, format!("{}.c2", rig.job), "the call id makes a replay a duplicate");

    let big = "x".repeat(protocol::MAX_FOLLOW_UP_BYTES + 1);
    let err = rig.call("c3", "message_task", json!({"id": a, "text": big})).await.unwrap_err();
    assert_eq!(err.0, ErrorKind::Validation);
    assert!(err.1.contains("byte limit"), "{}", err.1);

    rig.router.route(report(&rig.published(a), TaskStatus::Completed, "north: 120"));
    rig.call("c4", "wait_tasks", json!({"timeout_s": 60})).await.unwrap();
    let err = rig.call("c5", "message_task", json!({"id": a, "text": "too late"})).await.unwrap_err();
    assert_eq!(err.0, ErrorKind::Business);
    assert!(err.1.contains("has ended (completed)"), "{}", err.1);
    assert_eq!(rig.control.messages.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn cancelling_a_running_task_ends_it_with_the_workers_cancelled_report() {
    let rig = rig(None, JobId::new()).await;
    let (a, b) = (rig.start("c1", "north").await, rig.start("c2", "south").await);
    // The worker running `a` sees the cancel key and reports `cancelled`.
    let worker = async {
        let mut rx = rig.control.cancels.subscribe();
        rx.wait_for(|c| !c.is_empty()).await.unwrap();
        rig.router.route(report(&rig.published(a), TaskStatus::Cancelled, ""));
    };
    let (cancelled, ()) = tokio::join!(rig.call("c3", "cancel_task", json!({"id": a, "reason": "not needed"})), worker);

    let cancelled = cancelled.unwrap();
    assert_eq!((cancelled["task_id"].clone(), cancelled["status"].clone()), (json!(a), json!("cancelled")));
    assert_eq!(rig.control.cancels.borrow().clone(), vec![(a, "not needed".to_string())]);
    assert!(rig.control.reports.lock().unwrap().is_empty(), "the worker reported; the orchestrator did not");
    let checked = rig.call("c4", "check_tasks", json!({"ids": [b]})).await.unwrap();
    assert_eq!(checked["tasks"][0]["status"], json!("running"), "the other task goes on");
    let err = rig.call("c5", "cancel_task", json!({"id": a})).await.unwrap_err();
    assert!(err.1.contains("already ended (cancelled)"), "{}", err.1);
}

#[tokio::test]
async fn cancelling_a_queued_task_reports_it_cancelled_on_its_behalf() {
    let rig = rig(None, JobId::new()).await;
    let a = rig.start("c1", "north").await;

    // No worker runs it: after the grace the orchestrator stores the report.
    let cancelled = rig.call("c2", "cancel_task", json!({"id": a})).await.unwrap();

    assert_eq!(cancelled["status"], json!("cancelled"));
    assert!(cancelled["error"]["message"].as_str().unwrap().contains("cancelled by the planner"), "{cancelled}");
    let reports = rig.control.reports.lock().unwrap().clone();
    assert_eq!((reports.len(), reports[0].task_id, reports[0].worker_id.as_str()), (1, a, "orchestrator"));
}

/// A model that starts two tasks, ends its turn, then answers from the
/// wake-up note; it records every request's last message.
struct Planner {
    seen: Mutex<Vec<ChatMessage>>,
}

#[async_trait]
impl ChatModel for Planner {
    async fn complete(&self, request: ModelRequest<'_>) -> Result<ModelResponse, ModelError> {
        let last = request.messages.last().cloned().unwrap();
        let step = {
            let mut seen = self.seen.lock().unwrap();
            seen.push(last.clone());
            seen.len()
        };
        let call = |id: &str, what: &str| ToolCall {
            id: id.into(),
            name: "start_task".into(),
            arguments: json!({"description": what, "subagent_type": "finance"}),
        };
        let (content, tool_calls) = match step {
            1 => (None, vec![call("s1", "north"), call("s2", "south")]),
            2 => (Some("waiting for the regions".to_string()), vec![]),
            _ => match &last {
                ChatMessage::User { content } if content.starts_with(WAKE_HEADER) => {
                    (Some(format!("done: {content}")), vec![])
                }
                other => panic!("woken without a note: {other:?}"),
            },
        };
        Ok(ModelResponse { content, tool_calls, usage: Usage::default() })
    }
}

fn agent(rig: &Rig, model: Arc<dyn ChatModel>) -> Agent {
    let limits = Limits { max_steps: 10, timeout: Duration::from_secs(60), max_tokens: None, context: None };
    Agent { model, tools: rig.tools.clone(), limits, policy: Default::default(), output: None }
}

fn run_ctx(rig: &Rig) -> RunContext {
    RunContext {
        job_id: rig.job,
        task_id: None,
        tenant: rig.tenant.clone(),
        traceparent: None,
        cancel: rig.cancel.clone(),
        approvals: None,
        inbox: None,
        span: tracing::Span::none(),
    }
}

#[tokio::test]
async fn a_planner_that_ends_its_turn_with_tasks_running_is_woken_by_their_reports() {
    let rig = rig(None, JobId::new()).await;
    let model = Arc::new(Planner { seen: Mutex::default() });
    let agent = agent(&rig, model.clone());
    let mut conv = Conversation::new("plan", "revenue by region");
    let ctx = run_ctx(&rig);

    let reports = async {
        let (north, south) = (rig.queue.nth_published(1).await, rig.queue.nth_published(2).await);
        rig.router.route(report(&north, TaskStatus::Completed, "north: 120"));
        rig.router.route(report(&south, TaskStatus::Completed, "south: 80"));
    };
    let (answer, ()) = tokio::join!(rig.tasks.run(&agent, &mut conv, &ctx, &NoObserver), reports);

    let answer = answer.unwrap();
    assert!(answer.starts_with("done: "), "{answer}");
    // Every outcome was shown, in one note or two, and nothing was left running.
    let notes = wake_notes(&conv);
    let all = notes.join("\n");
    assert!(all.contains("north: 120") && all.contains("south: 80"), "{all}");
    assert!(notes.last().unwrap().contains("\"running\":[]"), "{notes:?}");
    assert!(rig.tasks.jobs.is_empty(), "the job's registry is closed when its run ends");
}

#[tokio::test]
async fn a_restarted_planner_whose_turn_had_ended_waits_again_and_is_told_only_what_it_did_not_see() {
    let job = JobId::new();
    let backend = Arc::new(FakeJobs::default());
    let tenant = Tenant::new("acme").unwrap();
    let ty = SubagentType::new("finance").unwrap();
    // What the previous orchestrator left: three async tasks, two ended (one
    // of them shown to the planner by check_tasks), one still running.
    let (seen, unseen, running) = (TaskId::new(), TaskId::new(), TaskId::new());
    let mut rec = JobRecord::new(job, tenant.clone(), "revenue by region".into());
    for (id, key, status) in [
        (seen, "async:s1", Some(TaskStatus::Completed)),
        (unseen, "async:s2", Some(TaskStatus::Failed)),
        (running, "async:s3", None),
    ] {
        let mut e = TaskEntry::dispatched(id, ty.clone(), "x".into(), key.into());
        (e.published, e.status) = (true, status);
        rec.tasks.push(e);
    }
    rec.tasks.push(TaskEntry::dispatched(TaskId::new(), ty.clone(), "blocking".into(), "s0".into()));
    JobStore::with_backend(backend.clone()).insert(rec).await.unwrap();
    let rig = rig(Some(backend), job).await;
    let mut conv = Conversation::new("plan", "revenue by region");
    for (call, task) in [("s1", seen), ("s2", unseen), ("s3", running)] {
        conv.messages.push(ChatMessage::Tool {
            tool_call_id: call.into(),
            name: "start_task".into(),
            content: json!({"task_id": task, "status": "running"}).to_string(),
            is_error: false,
        });
    }
    conv.messages.push(ChatMessage::Tool {
        tool_call_id: "c1".into(),
        name: "check_tasks".into(),
        content:
            json!({"tasks": [{"task_id": seen, "status": "completed"}, {"task_id": running, "status": "running"}]})
                .to_string(),
        is_error: false,
    });
    conv.messages.push(ChatMessage::Assistant { content: Some("waiting".into()), tool_calls: vec![] });
    // Its next request must carry the note: the model answers with it.
    let model = Arc::new(Planner { seen: Mutex::new(vec![conv.messages[0].clone(), conv.messages[0].clone()]) });
    let agent = agent(&rig, model.clone());

    let late = TaskMessage {
        v: 1,
        job_id: job,
        task_id: running,
        subagent_type: ty,
        description: "x".into(),
        tenant,
        attempt: 1,
        deadline: None,
        traceparent: None,
        created_at: protocol::now(),
    };
    let worker = async {
        // The follower re-registered for the running task after the restart.
        while rig.router.waiting() == 0 {
            tokio::task::yield_now().await;
        }
        rig.router.route(report(&late, TaskStatus::Completed, "east: 95"));
    };
    let ctx = run_ctx(&rig);
    let (answer, ()) = tokio::join!(rig.tasks.run(&agent, &mut conv, &ctx, &NoObserver), worker);

    assert!(answer.unwrap().contains("east: 95"));
    let notes = wake_notes(&conv).join("\n");
    assert!(!notes.contains(&seen.to_string()), "an outcome already shown is not repeated: {notes}");
    assert!(notes.contains(&unseen.to_string()) && notes.contains("east: 95"), "{notes}");
    // The model answered the resumed run only from wake-up notes (it panics otherwise).
    assert!(model.seen.lock().unwrap().len() > 2);
    assert!(rig.queue.published().is_empty(), "nothing dispatched again");
}

fn wake_notes(conv: &Conversation) -> Vec<String> {
    let note = |m: &ChatMessage| match m {
        ChatMessage::User { content } if content.starts_with(WAKE_HEADER) => Some(content.clone()),
        _ => None,
    };
    conv.messages.iter().filter_map(note).collect()
}

#[tokio::test]
async fn a_task_the_conversation_no_longer_shows_is_recognised_by_its_dispatch_key() {
    // After a compaction and a restart the registry is empty, but the job's
    // records still hold the task under its asynchronous dispatch key.
    let job = JobId::new();
    let backend = Arc::new(FakeJobs::default());
    let ty = SubagentType::new("finance").unwrap();
    let (started, blocking) = (TaskId::new(), TaskId::new());
    let mut rec = JobRecord::new(job, Tenant::new("acme").unwrap(), "revenue by region".into());
    for (id, key) in [(started, "async:s1"), (blocking, "t1")] {
        let mut e = TaskEntry::dispatched(id, ty.clone(), "x".into(), key.into());
        e.published = true;
        rec.tasks.push(e);
    }
    JobStore::with_backend(backend.clone()).insert(rec).await.unwrap();
    let rig = rig(Some(backend), job).await;

    let checked = rig.call("c1", "check_tasks", json!({"ids": [started]})).await.unwrap();
    assert_eq!(checked["tasks"][0]["status"], json!("running"));
    let listed = rig.call("c2", "check_tasks", json!({})).await.unwrap();
    assert_eq!(listed["tasks"].as_array().unwrap().len(), 1, "followed from now on");
    let err = rig.call("c3", "cancel_task", json!({"id": blocking})).await.unwrap_err();
    assert_eq!(err.0, ErrorKind::NotFound, "a `task` call's task is not an asynchronous one");
}
