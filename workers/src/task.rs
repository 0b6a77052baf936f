//! Runs one task message from receipt to acknowledgement:
//! decode -> start in-progress acks -> fresh subagent -> report -> ack.
//!
//! Ordering gives at-least-once delivery: the report is stored in JetStream
//! before the task is acked, so a crash in between redelivers the task and the
//! planner, which consolidates each task once, ignores the second report.

use std::sync::Arc;
use std::time::{Duration, Instant};

use flotilla_agent::agent::{Agent, Conversation, RunContext};
use flotilla_agent::remote::{RemoteAgent, RemoteTask};
use flotilla_bus::{Bus, FollowUps, TaskDelivery, retry};
use flotilla_protocol::{
    self as protocol, ErrorInfo, ErrorKind, ProgressKind, TaskMessage, TaskReport, TaskStatus, Usage,
};
use flotilla_retry::Backoff;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::approval::BusApprovalGate;
use crate::cancel::CancelWatch;
use crate::journal::{Record, StepJournal};
use crate::metrics::{HANDED_BACK, WorkerMetrics};
use crate::progress::ProgressPublisher;
use crate::runtime::{Backend, SubagentRuntime};

/// Shared by every task a worker runs.
pub struct WorkerContext {
    /// The bus.
    pub bus: Bus,
    /// This worker's id, in reports and progress.
    pub worker_id: String,
    /// Fires when the worker is told to stop (SIGTERM): it pulls no more
    /// tasks; running ones go on (docs/RELIABILITY.md, draining).
    pub shutdown: CancellationToken,
    /// Fires when the drain grace runs out: running tasks stop and are
    /// handed back (nak) for another worker.
    pub hand_back: CancellationToken,
    /// Task, model and tool metrics (also the source of heartbeat load figures).
    pub metrics: Arc<WorkerMetrics>,
    /// Cancelled jobs; aborts their running subagents.
    pub cancels: Arc<CancelWatch>,
    /// Whether journal entries carry their step's progress event
    /// (workers/src/journal.rs), kept current by
    /// [`crate::journal::follow_carries_progress`].
    pub journal_carries_progress: Arc<std::sync::atomic::AtomicBool>,
}

/// What a resumed subagent with a sandbox reads before its next model call:
/// `/scratch` is per attempt (docs/RELIABILITY.md, "Sandbox state").
pub const FRESH_SCRATCH: &str = "[worker] This task was interrupted and resumed, possibly on another machine. Your \
     conversation so far is intact, but the sandbox's /scratch directory is new and empty: files earlier `execute` \
     calls wrote there are gone. Job files (read_file, write_file) are kept. Recreate what you still need.";

/// What a run came to: the answer, or the error, with the usage spent either way.
type Outcome = Result<(String, Usage), (ErrorInfo, Usage)>;

/// Handles one delivery, holding `slot` (one of its type's `concurrency`)
/// while the subagent runs: storing the report gives it back first, so the
/// consume loop asks for the next task while the report's ack travels.
/// Never panics on bad input: malformed messages are dead-lettered with
/// their reason and terminated.
pub async fn handle(
    ctx: Arc<WorkerContext>,
    rt: Arc<SubagentRuntime>,
    delivery: TaskDelivery,
    slot: tokio::sync::OwnedSemaphorePermit,
) {
    let attempt = delivery.attempt();
    let task: TaskMessage = match protocol::decode(delivery.payload()) {
        Ok(t) => t,
        Err(e) => {
            tracing::warn!(subject = %delivery.subject(), error = %e, "malformed task message dead-lettered");
            ctx.metrics.task_ended(&rt.ty, "dead_lettered", None);
            let _ = delivery.dead_letter(&e.to_string()).await;
            return;
        }
    };
    if task.subagent_type != rt.ty {
        let reason = format!(
            "task {} names subagent_type {:?} but was queued for {:?}",
            task.task_id,
            task.subagent_type.as_str(),
            rt.ty.as_str()
        );
        tracing::warn!(%reason, "task dead-lettered");
        let _ = delivery.dead_letter(&reason).await;
        return;
    }
    let traceparent = delivery.traceparent().or_else(|| task.traceparent.clone());
    let span = tracing::info_span!(
        "task",
        job_id = %task.job_id,
        task_id = %task.task_id,
        subagent_type = %task.subagent_type,
        attempt,
        trace_id = traceparent.as_deref().and_then(flotilla_protocol::trace::trace_id).unwrap_or("-"),
    );
    let agent = flotilla_agent::spans::invoke_agent(
        task.subagent_type.as_str(),
        rt.backend.identity(),
        &task.job_id,
        task.tenant.as_str(),
        Some(&task.task_id),
    );
    agent.record("flotilla.attempt", i64::from(attempt));
    agent.record("flotilla.worker.id", ctx.worker_id.as_str());
    // The span of the planner's tool call that dispatched the task.
    if let Some(parent) = &traceparent {
        flotilla_telemetry::trace::set_parent(&agent, parent);
    }
    run(ctx, rt, delivery, task, traceparent, agent, slot).instrument(span).await
}

/// One attempt of a decoded task: start (progress, cancel registration,
/// keep-alive), run the subagent, then hand the task back or report and ack.
async fn run(
    ctx: Arc<WorkerContext>,
    rt: Arc<SubagentRuntime>,
    delivery: TaskDelivery,
    task: TaskMessage,
    traceparent: Option<String>,
    agent: tracing::Span,
    slot: tokio::sync::OwnedSemaphorePermit,
) {
    let attempt = delivery.attempt();
    let started_at = protocol::now();
    let started = Instant::now();
    let in_flight = ctx.metrics.task_started(&rt.ty);
    if attempt > 1 {
        ctx.metrics.redelivered(&rt.ty);
    }
    let progress = progress_publisher(&ctx, &rt, &task, attempt);
    let cancel = ctx.hand_back.child_token();
    let _registration = ctx.cancels.register(task.job_id, task.task_id, cancel.clone());
    // A task of an already cancelled job reports `cancelled` without starting.
    let job_cancelled = cancel.is_cancelled() && !ctx.hand_back.is_cancelled();
    if !job_cancelled {
        tracing::info!("task started");
        progress.emit(ProgressKind::Started).await;
    }
    let keepalive = keep_alive(&ctx, &delivery, Some(&progress), cancel.clone());
    let outcome = if job_cancelled {
        Err((ErrorInfo::new(ErrorKind::Cancelled, cancelled_before_start(&ctx, &task)), Default::default()))
    } else {
        let run = Subagent {
            ctx: &ctx,
            rt: &rt,
            task: &task,
            follow_ups: delivery.follow_ups(),
            progress: &progress,
            cancel: &cancel,
            span: &agent,
        };
        run.run(started_at, traceparent.as_deref()).await
    };
    keepalive.abort();
    if handed_back(&ctx, &rt, &delivery, &progress.journal, &outcome, attempt).await {
        let usage = outcome.as_ref().map_or_else(|(_, u)| *u, |(_, u)| *u);
        flotilla_agent::spans::agent_ended(&agent, &usage, crate::metrics::HANDED_BACK, None);
        return;
    }
    let mut report = report(&ctx, &rt, &task, outcome, attempt, started_at, started).await;
    report.resumed_from_step = progress.journal.resumed_from();
    let error = report.error.as_ref().filter(|_| report.status == TaskStatus::Failed);
    flotilla_agent::spans::agent_ended(
        &agent,
        &report.usage,
        report.status.as_str(),
        error.map(|e| (e.kind, e.message.as_str())),
    );
    if let Some(step) = report.resumed_from_step {
        agent.record("flotilla.resumed_from_step", i64::from(step));
    }
    progress.flush_deltas().await;
    progress.emit(ProgressKind::Finished { status: report.status, usage: report.usage }).await;
    // In-progress acks (no more heartbeat events: the task has finished) go
    // on until the report is stored, so the task stays this worker's while
    // the report rides out a leader election.
    let acks = keep_alive(&ctx, &delivery, None, cancel);
    // In flight (the metric, the heartbeat's load) means holding a slot.
    drop((slot, in_flight));
    store_report_and_ack(&ctx, &rt, &delivery, &progress, &report, traceparent.as_deref(), started).await;
    acks.abort();
}

/// The progress publisher of one attempt.
fn progress_publisher(
    ctx: &WorkerContext,
    rt: &SubagentRuntime,
    task: &TaskMessage,
    attempt: u32,
) -> ProgressPublisher {
    ProgressPublisher {
        bus: ctx.bus.clone(),
        tenant: task.tenant.clone(),
        job_id: task.job_id,
        task_id: task.task_id,
        subagent_type: task.subagent_type.clone(),
        worker_id: ctx.worker_id.clone(),
        attempt,
        metrics: ctx.metrics.agent.clone(),
        deltas: Default::default(),
        journal: Arc::new(StepJournal::new(
            &ctx.bus,
            task,
            attempt,
            ctx.journal_carries_progress.load(std::sync::atomic::Ordering::Relaxed),
            rt.tools.clone(),
        )),
    }
}

/// The subagent run of one attempt that started.
struct Subagent<'a> {
    ctx: &'a WorkerContext,
    rt: &'a SubagentRuntime,
    task: &'a TaskMessage,
    /// Whether follow-up messages may come for the task (its publisher's
    /// `Flotilla-Follow-Ups` header).
    follow_ups: FollowUps,
    progress: &'a ProgressPublisher,
    cancel: &'a CancellationToken,
    /// The attempt's `invoke_agent` span.
    span: &'a tracing::Span,
}

impl Subagent<'_> {
    /// Runs a fresh subagent on the task within its limits (the task's
    /// deadline included), with the MCP context, sandbox scratch dir, inbox
    /// and approval gate of this attempt.
    async fn run(&self, started_at: time::OffsetDateTime, traceparent: Option<&str>) -> Outcome {
        let (ctx, rt, task) = (self.ctx, self.rt, self.task);
        let mut limits = rt.limits();
        if let Some(deadline) = task.deadline {
            let left = (deadline - started_at).try_into().unwrap_or(Duration::ZERO);
            limits.timeout = limits.timeout.min(left);
        }
        // App-controlled MCP context (resources, prompt), before the subagent starts.
        let system = crate::mcp_context::system_prompt(rt.mcp_context.as_ref(), &rt.config, task, self.cancel).await;
        if limits.timeout.is_zero() {
            return Err((
                ErrorInfo::new(ErrorKind::Timeout, "task deadline passed before it started"),
                Default::default(),
            ));
        }
        let system = system.map_err(|e| (e, Usage::default()))?;
        let model = match &rt.backend {
            Backend::Model(model) => model.clone(),
            Backend::Remote(remote) => return self.run_remote(remote.as_ref(), limits.timeout, traceparent).await,
        };
        let agent = Agent {
            model,
            tools: rt.tools.clone(),
            limits,
            policy: rt.tool_policy(),
            output: rt.output_schema.clone(),
        };
        let mut conv = Conversation::new(&system, &task.description);
        // An attempt after the first continues where the last one stopped.
        if self.progress.attempt > 1
            && let Some(resume) = self.progress.journal.resume(conv.clone()).await
        {
            conv = resume.conversation;
            if rt.sandbox.is_some() && conv.final_answer().is_none() {
                conv.note = Some(FRESH_SCRATCH.into());
            }
            tracing::info!(from_step = conv.steps, reason = %resume.reason, interrupted = resume.interrupted, "task resumed from its journal");
            tracing::info!(target: "gen_ai", parent: self.span, from_step = conv.steps, reason = %resume.reason, interrupted_calls = resume.interrupted, "resumed");
            self.progress.deltas.lock().await.step = conv.steps + 1;
            self.progress
                .emit(ProgressKind::Resumed {
                    from_step: conv.steps,
                    reason: resume.reason,
                    interrupted_calls: resume.interrupted as u32,
                })
                .await;
        }
        // The task's sandbox scratch dir lives exactly as long as this run.
        let scratch = match &rt.sandbox {
            Some(s) => s
                .open(task.task_id, Arc::new(self.progress.clone()))
                .await
                .map_err(|e| tracing::error!(error = %e, "sandbox scratch dir not created; execute will fail"))
                .ok(),
            None => None,
        };
        // Follow-up messages (`message_task`) reach the subagent before its next model call.
        let inbox = rt.inboxes.open(&ctx.bus, task, self.follow_ups, conv.inbox_taken).await;
        let gate = BusApprovalGate::new(
            ctx.bus.clone(),
            rt.approvals.clone(),
            self.progress.clone(),
            task.tenant.clone(),
            ctx.metrics.clone(),
        );
        let run_ctx = RunContext {
            job_id: task.job_id,
            task_id: Some(task.task_id),
            tenant: task.tenant.clone(),
            traceparent: traceparent.map(str::to_string),
            cancel: self.cancel.clone(),
            approvals: Some(Arc::new(gate)),
            inbox: Some(inbox.inbox()),
            span: self.span.clone(),
        };
        let r = agent.run(&mut conv, &run_ctx, self.progress).await;
        if let Some(scratch) = scratch {
            scratch.close().await;
        }
        r.map(|answer| (answer, conv.usage)).map_err(|e| (why_cancelled(ctx, task, e), conv.usage))
    }
}

impl Subagent<'_> {
    /// Runs the attempt on the type's remote agent (docs/PROTOCOLS.md,
    /// "Remote subagent types"): its streamed text goes out as this task's
    /// progress, its questions for a person through the approval gate. The
    /// agent stops on `cancel` itself (it tells the remote side); one that
    /// does not is abandoned [`REMOTE_CANCEL_GRACE`] later.
    async fn run_remote(&self, remote: &dyn RemoteAgent, timeout: Duration, traceparent: Option<&str>) -> Outcome {
        let (ctx, rt, task) = (self.ctx, self.rt, self.task);
        let gate = BusApprovalGate::new(
            ctx.bus.clone(),
            rt.approvals.clone(),
            self.progress.clone(),
            task.tenant.clone(),
            ctx.metrics.clone(),
        );
        let remote_task = RemoteTask {
            tenant: task.tenant.clone(),
            job_id: task.job_id,
            task_id: task.task_id,
            subagent_type: task.subagent_type.clone(),
            description: task.description.clone(),
            attempt: self.progress.attempt,
            timeout,
            cancel: self.cancel.clone(),
            traceparent: traceparent.map(str::to_string),
            approvals: Some(Arc::new(gate)),
            asked: Default::default(),
        };
        let run = remote.run(&remote_task, self.progress);
        let abandoned = async {
            self.cancel.cancelled().await;
            tokio::time::sleep(REMOTE_CANCEL_GRACE).await;
        };
        let timed_out = || {
            let message = format!("{} did not answer within {}s", remote.identity().model, timeout.as_secs());
            (ErrorInfo::new(ErrorKind::Timeout, message), Usage::default())
        };
        tokio::select! {
            r = tokio::time::timeout(timeout, run) => match r {
                Ok(Ok(answer)) => Ok((answer.text, answer.usage)),
                Ok(Err(failure)) => Err((why_cancelled(ctx, task, failure.error), failure.usage)),
                Err(_) => Err(timed_out()),
            },
            () = abandoned => {
                let e = ErrorInfo::new(ErrorKind::Cancelled, "cancelled; the remote agent did not stop in time");
                Err((why_cancelled(ctx, task, e), Usage::default()))
            }
        }
    }
}

/// How long a cancelled remote run may take to tell its agent and return.
const REMOTE_CANCEL_GRACE: Duration = Duration::from_secs(10);

/// Whether the attempt ends without a report, the task handed back: the
/// worker stops and the drain grace ran out, or a transient failure has
/// attempts left. A transient failure on the last attempt is dead-lettered
/// (and still reported).
async fn handed_back(
    ctx: &WorkerContext,
    rt: &SubagentRuntime,
    delivery: &TaskDelivery,
    journal: &StepJournal,
    outcome: &Outcome,
    attempt: u32,
) -> bool {
    if ctx.hand_back.is_cancelled() {
        // Not the task's fault: the drain grace ran out; hand it to another
        // worker, which resumes it from its journal.
        tracing::info!("worker stopping: task handed back");
        journal.mark(Record::HandedBack { reason: "drained".into() }).await;
        ctx.metrics.task_ended(&rt.ty, HANDED_BACK, None);
        let _ = delivery.hand_back(None).await;
        return true;
    }
    // Transient failures (a model endpoint down after its own retries) get
    // another attempt later, elsewhere if need be; the last attempt reports.
    if let Err((e, _)) = outcome
        && e.kind == ErrorKind::Transient
    {
        if i64::from(attempt) < ctx.bus.config.max_deliver {
            let delay = Backoff::nth(Duration::from_secs(1), Duration::from_secs(60), attempt.saturating_sub(1));
            tracing::warn!(error = %e, ?delay, "transient failure; task handed back for another attempt");
            journal.mark(Record::HandedBack { reason: "transient_error".into() }).await;
            let _ = delivery.hand_back(Some(delay)).await;
            return true;
        }
        let reason = format!("gave up after {attempt} attempts: {}", e.message);
        ctx.bus.dead_letter_task(&rt.ty, delivery.payload().clone(), &reason).await;
    }
    false
}

/// The report of a finished attempt; a long answer goes to the job files
/// first (`large_report.rs`).
async fn report(
    ctx: &WorkerContext,
    rt: &SubagentRuntime,
    task: &TaskMessage,
    outcome: Outcome,
    attempt: u32,
    started_at: time::OffsetDateTime,
    started: Instant,
) -> TaskReport {
    let (status, summary, summary_file, error, usage) = match outcome {
        Ok((answer, usage)) => match crate::large_report::offload(rt, task, answer).await {
            Ok((summary, file)) => (TaskStatus::Completed, summary, file, None, usage),
            Err(e) => (TaskStatus::Failed, String::new(), None, Some(e), usage),
        },
        Err((e, usage)) => {
            let status = if e.kind == ErrorKind::Cancelled { TaskStatus::Cancelled } else { TaskStatus::Failed };
            (status, String::new(), None, Some(e), usage)
        }
    };
    TaskReport {
        v: protocol::REPORT_VERSION,
        job_id: task.job_id,
        task_id: task.task_id,
        subagent_type: task.subagent_type.clone(),
        status,
        summary,
        summary_file,
        error,
        usage,
        worker_id: ctx.worker_id.clone(),
        attempt,
        resumed_from_step: None,
        started_at,
        finished_at: protocol::now(),
        duration_ms: started.elapsed().as_millis() as u64,
    }
}

/// How long a finished attempt's report is retried (a NATS restart, a
/// stream leader election after a cluster node is lost) while in-progress
/// acks keep the task; the work is done, so waiting beats redoing the last
/// step elsewhere.
const REPORT_STORE_BUDGET: Duration = Duration::from_secs(30);

/// Stores the report, then acks the task once the attempt's journal is
/// written (the entries appended behind the loop go out while the report is
/// stored, workers/src/journal.rs); a report that cannot be stored within
/// [`REPORT_STORE_BUDGET`], or before a drain's grace runs out, hands the
/// task back for a redelivery, which resumes from that journal.
async fn store_report_and_ack(
    ctx: &WorkerContext,
    rt: &SubagentRuntime,
    delivery: &TaskDelivery,
    progress: &ProgressPublisher,
    report: &TaskReport,
    traceparent: Option<&str>,
    started: Instant,
) {
    // `Nats-Msg-Id` = `report:<task>` (shared/bus/src/reports.rs): a report
    // that landed although its ack was lost, and a redelivered attempt's
    // report after it, are one stored report.
    let reports = ctx.bus.reports();
    let stored = tokio::select! {
        biased;
        stored = retry("report publish", REPORT_STORE_BUDGET, || reports.publish(&progress.tenant, report, traceparent)) => stored.map_err(|e| e.to_string()),
        () = ctx.hand_back.cancelled() => Err("the drain's grace ran out".into()),
    };
    progress.journal.settle().await;
    match stored {
        Ok(()) => {
            // A plain ack suffices: the report is already stored, so if this ack
            // is lost the redelivered task's second report is ignored by the planner.
            if let Err(e) = delivery.ack().await {
                tracing::warn!(error = %e, "task ack failed after report was stored");
            }
            ctx.metrics.task_ended(&rt.ty, report.status.as_str(), Some(started.elapsed()));
            tracing::info!(status = report.status.as_str(), ms = report.duration_ms, "task finished");
        }
        Err(e) => {
            tracing::error!(error = %e, "report not stored; task will be redelivered");
            let _ = delivery.hand_back(Some(Duration::from_secs(1))).await;
        }
    }
}

/// The shortest time between two `heartbeat` progress events of a task: the
/// in-progress acks go more often (a third of `ack_wait`), but a watcher
/// needs no more than this to know the task is alive.
const HEARTBEAT_EVENT_EVERY: Duration = Duration::from_secs(10);

/// Sends in-progress acks at a third of `ack_wait`, so long model and tool
/// calls keep the task while a dead worker loses it fast, and with
/// `progress` a heartbeat event at most every [`HEARTBEAT_EVENT_EVERY`].
fn keep_alive(
    ctx: &WorkerContext,
    delivery: &TaskDelivery,
    progress: Option<&ProgressPublisher>,
    cancel: CancellationToken,
) -> tokio::task::AbortHandle {
    let every = Duration::from_millis(ctx.bus.config.ack_wait.max(1) * 1000 / 3);
    let delivery = delivery.clone();
    let progress = progress.cloned();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        let mut beat = Instant::now();
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = cancel.cancelled() => return,
            }
            if let Err(e) = delivery.progress().await {
                tracing::warn!(error = %e, "in-progress ack failed");
            }
            if let Some(progress) = &progress
                && beat.elapsed() + every / 2 >= HEARTBEAT_EVENT_EVERY
            {
                beat = Instant::now();
                progress.emit(ProgressKind::Heartbeat).await;
            }
        }
    })
    .abort_handle()
}

/// Why a task that was cancelled before it started reports `cancelled`: its
/// own cancel (`cancel_task`) or its job's (workers/src/cancel.rs).
fn cancelled_before_start(ctx: &WorkerContext, task: &TaskMessage) -> String {
    let why = ctx.cancels.reason(&task.job_id, &task.task_id).unwrap_or_else(|| "the job was cancelled".into());
    format!("{why} (before the task started)")
}

/// A run the cancel watch aborted says whose cancel it was and why, instead
/// of the agent loop's bare "cancelled"; any other error is kept.
fn why_cancelled(ctx: &WorkerContext, task: &TaskMessage, e: ErrorInfo) -> ErrorInfo {
    match ctx.cancels.reason(&task.job_id, &task.task_id) {
        Some(why) if e.kind == ErrorKind::Cancelled && !ctx.hand_back.is_cancelled() => {
            ErrorInfo::new(ErrorKind::Cancelled, why)
        }
        _ => e,
    }
}
