//! `task(description, subagent_type)` (seed 000 section 2.5): delegates one
//! self-contained piece of work to a subagent type over the bus and returns
//! its report. Parallel calls in one planner turn are parallel tasks; a failed
//! report is an error result for that call only.
//!
//! The queue, the job records and the stored reports sit behind the traits
//! of orchestrator/src/ports.rs, so the tests below run this logic over the
//! in-memory fakes of orchestrator/src/fakes.rs.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use flotilla_agent::tool::{Tool, ToolContext, ToolError, ToolSpec};
use flotilla_bus::retry;
use flotilla_protocol::ids::{SubagentType, TaskId};
use flotilla_protocol::{
    self as protocol, ErrorInfo, ErrorKind, JobEventKind, TaskEntry, TaskMessage, TaskReport, TaskStatus,
};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::jobs::JobStore;
use crate::ports::TaskDispatch;
use crate::reports::ReportRouter;

/// Dispatches tasks and awaits their reports.
pub struct TaskTool {
    /// The task work queue (the bus in production).
    pub queue: Arc<dyn TaskDispatch>,
    /// Job records.
    pub jobs: JobStore,
    /// Report delivery.
    pub reports: ReportRouter,
    /// Subagent types with their descriptions, from config.
    pub types: BTreeMap<SubagentType, String>,
    /// Deadline of each task.
    pub task_timeout: Duration,
    /// How long a task may wait with no live worker of its type.
    pub no_worker_timeout: Duration,
}

#[derive(Deserialize)]
struct Args {
    description: String,
    subagent_type: String,
}

impl TaskTool {
    fn valid_types(&self) -> String {
        self.types.keys().map(|t| t.as_str()).collect::<Vec<_>>().join(", ")
    }
}

#[async_trait]
impl Tool for TaskTool {
    fn spec(&self) -> ToolSpec {
        let types: Vec<String> = self.types.iter().map(|(t, d)| format!("- {t}: {d}")).collect();
        ToolSpec {
            name: "task".into(),
            description: format!(
                "Delegate a self-contained task to an isolated subagent; returns its report. \
                 The description must hold everything it needs. Subagent types:\n{}",
                types.join("\n")
            ),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "description": {"type": "string", "minLength": 1},
                    "subagent_type": {"type": "string"}
                },
                "required": ["description", "subagent_type"],
                "additionalProperties": false
            }),
        }
    }

    async fn call(&self, ctx: &ToolContext, args: Value) -> Result<Value, ToolError> {
        let Args { description, subagent_type } =
            serde_json::from_value(args).map_err(|e| ToolError::validation(e.to_string()))?;
        let ty = match SubagentType::new(&subagent_type) {
            Ok(ty) if self.types.contains_key(&ty) => ty,
            _ => {
                return Err(ToolError::validation(format!(
                    "unknown subagent_type {subagent_type:?}; valid types: {}",
                    self.valid_types()
                )));
            }
        };
        let transient = |e: flotilla_bus::BusError| ToolError::transient(format!("task not dispatched: {e}"));
        // A resumed planner replays its pending calls: find the task this call
        // already created instead of dispatching it again.
        let existing = self
            .jobs
            .read(&ctx.job_id, |rec| {
                rec.tasks.iter().find(|t| t.call_id.as_deref() == Some(ctx.call_id.as_str())).cloned()
            })
            .await
            .map_err(transient)?;
        let (task_id, published) = match existing {
            Some(entry) if entry.status.is_some() => return outcome_of(&entry),
            Some(entry) => (entry.task_id, entry.published),
            None => {
                let task_id = TaskId::new();
                let entry = TaskEntry::dispatched(task_id, ty.clone(), description.clone(), ctx.call_id.clone());
                self.jobs.update(&ctx.job_id, |rec| rec.tasks.push(entry)).await.map_err(transient)?;
                (task_id, false)
            }
        };
        let waiter = self.reports.expect(task_id);
        if published {
            tracing::info!(%task_id, "re-attached to a task dispatched before a restart");
            if let Some(report) = self.reports.stored(&ctx.tenant, &ctx.job_id, &task_id).await {
                self.reports.forget(&task_id);
                self.consolidate(&report).await;
                return outcome_of_report(&report, &ty);
            }
        } else {
            let msg = TaskMessage {
                v: protocol::SCHEMA_VERSION,
                job_id: ctx.job_id,
                task_id,
                subagent_type: ty.clone(),
                description: description.clone(),
                tenant: ctx.tenant.clone(),
                attempt: 1,
                deadline: Some(protocol::now() + self.task_timeout),
                traceparent: ctx.traceparent.clone(),
                created_at: protocol::now(),
            };
            // Nats-Msg-Id = task id (shared/bus/src/tasks.rs): a publish repeated
            // after a crash inside the duplicate window is dropped by JetStream.
            let published = retry("task publish", Duration::from_secs(30), || self.queue.publish(&msg)).await;
            if let Err(e) = published {
                self.reports.forget(&task_id);
                return Err(transient(e));
            }
            self.jobs
                .emit(ctx.job_id, JobEventKind::TaskDispatched { task_id, subagent_type: ty.clone(), description })
                .await;
            self.jobs
                .update(&ctx.job_id, |rec| {
                    if let Some(t) = rec.task_mut(&task_id) {
                        t.published = true;
                    }
                })
                .await
                .map_err(transient)?;
            tracing::info!(%task_id, subagent_type = %ty, "task dispatched");
        }

        // Wait a little past the task's own deadline: the worker reports the timeout itself.
        let wait = self.task_timeout + Duration::from_secs(30);
        let give_up = tokio::time::sleep(wait);
        tokio::pin!(waiter, give_up);
        // Queueing behind busy workers is fine; a type nobody serves is not.
        let mut served =
            tokio::time::interval_at(tokio::time::Instant::now() + self.no_worker_timeout, self.no_worker_timeout);
        let report = loop {
            tokio::select! {
                r = &mut waiter => break r.ok(),
                _ = &mut give_up => break None,
                _ = served.tick() => {
                    if !self.served(&ty).await {
                        self.reports.forget(&task_id);
                        self.drop_queued(&ty, &ctx.job_id).await;
                        return Err(ToolError::new(
                            ErrorKind::Transient,
                            format!(
                                "no worker serves {ty}: no live worker of that type for {}s; start `flotilla-worker` with a [subagents.{ty}] section",
                                self.no_worker_timeout.as_secs()
                            ),
                        ));
                    }
                }
                _ = ctx.cancel.cancelled() => {
                    self.reports.forget(&task_id);
                    return Err(ToolError::new(ErrorKind::Cancelled, "cancelled"));
                }
            }
        };
        let Some(report) = report else {
            self.reports.forget(&task_id);
            return Err(ToolError::new(
                ErrorKind::Timeout,
                format!("no report for task {task_id} within {}s", wait.as_secs()),
            ));
        };
        self.consolidate(&report).await;
        outcome_of_report(&report, &ty)
    }
}

/// The tool result of a task from its report: the summary, or its error.
fn outcome_of_report(report: &TaskReport, ty: &SubagentType) -> Result<Value, ToolError> {
    match report.status {
        // Too large for a message: the planner gets the reference and reads what it needs.
        TaskStatus::Completed if report.summary_file.is_some() => Ok(json!({
            "report_file": report.summary_file,
            "note": "the report is too large to show here; read report_file.path with read_file or grep",
        })),
        TaskStatus::Completed => Ok(Value::String(report.summary.clone())),
        status => Err(task_error(report.task_id, ty, status, report.error.as_ref())),
    }
}

/// The tool result of an already consolidated task (a resumed planner).
fn outcome_of(entry: &TaskEntry) -> Result<Value, ToolError> {
    match entry.status {
        Some(TaskStatus::Completed) | None => Ok(Value::String(entry.summary.clone())),
        Some(status) => Err(task_error(entry.task_id, &entry.subagent_type, status, entry.error.as_ref())),
    }
}

fn task_error(task_id: TaskId, ty: &SubagentType, status: TaskStatus, error: Option<&ErrorInfo>) -> ToolError {
    let (kind, message) =
        error.map(|e| (e.kind, e.message.as_str())).unwrap_or((ErrorKind::Bug, "report without error"));
    ToolError::new(kind, format!("task {task_id} ({ty}) {}: {message}", status.as_str()))
}

impl TaskTool {
    /// Whether a live worker (by heartbeat) serves `ty`. A failed lookup
    /// counts as served: an unreadable bucket must not fail tasks.
    async fn served(&self, ty: &SubagentType) -> bool {
        match self.queue.served(ty).await {
            Ok(served) => served,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read live workers");
                true
            }
        }
    }

    /// Removes the job's queued tasks of a type nobody serves.
    async fn drop_queued(&self, ty: &SubagentType, job: &flotilla_protocol::ids::JobId) {
        if let Err(e) = self.queue.purge_job(job, Some(ty)).await {
            tracing::warn!(error = %e, "queued tasks of an unserved type not purged");
        }
    }

    /// Folds a report into the job record, once.
    async fn consolidate(&self, report: &TaskReport) {
        let r = report.clone();
        let updated = self
            .jobs
            .update(&report.job_id, move |rec| {
                let Some(entry) = rec.task_mut(&r.task_id) else { return false };
                if entry.status.is_some() {
                    return false;
                }
                entry.status = Some(r.status);
                entry.summary = match &r.summary_file {
                    Some(f) => format!("{}\n[full report: {} ({} bytes)]", r.summary, f.path, f.size_bytes),
                    None => r.summary.clone(),
                };
                entry.error = r.error.clone();
                entry.usage = r.usage;
                entry.worker_id = Some(r.worker_id.clone());
                entry.attempt = r.attempt;
                entry.duration_ms = r.duration_ms;
                entry.started_at = Some(r.started_at);
                entry.finished_at = Some(r.finished_at);
                rec.usage += r.usage;
                *rec.usage_by_type.entry(r.subagent_type.clone()).or_default() += r.usage;
                true
            })
            .await;
        match updated {
            Ok(true) => {
                let summary = if report.status == TaskStatus::Completed {
                    report.summary.chars().take(200).collect()
                } else {
                    report.error.as_ref().map(|e| e.message.clone()).unwrap_or_default()
                };
                self.jobs
                    .emit(
                        report.job_id,
                        JobEventKind::TaskReported { task_id: report.task_id, status: report.status, summary },
                    )
                    .await;
            }
            Ok(false) => tracing::debug!(task_id = %report.task_id, "report already consolidated"),
            Err(e) => tracing::error!(error = %e, "report not recorded in job"),
        }
    }
}

#[cfg(test)]
mod tests {
    //! The `task` tool over the in-memory fakes of orchestrator/src/fakes.rs:
    //! dispatch, re-attach after a restart, consolidation once, cancel, and
    //! a type nobody serves (issue #11 item 4).

    use flotilla_protocol::ids::{JobId, Tenant};
    use flotilla_protocol::{JobEvent, JobRecord, Usage};
    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::fakes::{FakeJobs, FakeQueue, FakeReports};

    const CALL: &str = "call-1";

    struct Rig {
        tool: Arc<TaskTool>,
        queue: Arc<FakeQueue>,
        stored: Arc<FakeReports>,
        backend: Arc<FakeJobs>,
        router: ReportRouter,
        job: JobId,
        tenant: Tenant,
    }

    fn finance() -> SubagentType {
        SubagentType::new("finance").unwrap()
    }

    /// A `task` tool over fresh fakes (or over `backend`, a bucket that
    /// outlived a restart), with a running job.
    async fn rig(backend: Option<Arc<FakeJobs>>, job: JobId, no_worker_timeout: Duration) -> Rig {
        let (queue, stored) = (Arc::new(FakeQueue::default()), Arc::new(FakeReports::default()));
        let tenant = Tenant::new("acme").unwrap();
        let fresh = backend.is_none();
        let backend = backend.unwrap_or_default();
        let jobs = JobStore::with_backend(backend.clone());
        if fresh {
            jobs.insert(JobRecord::new(job, tenant.clone(), "revenue by region".into())).await.unwrap();
        }
        let router = ReportRouter::new(stored.clone());
        let tool = Arc::new(TaskTool {
            queue: queue.clone(),
            jobs,
            reports: router.clone(),
            types: BTreeMap::from([(finance(), "numbers".into())]),
            task_timeout: Duration::from_secs(600),
            no_worker_timeout,
        });
        Rig { tool, queue, stored, backend, router, job, tenant }
    }

    impl Rig {
        fn ctx(&self, cancel: &CancellationToken) -> ToolContext {
            ToolContext {
                job_id: self.job,
                task_id: None,
                tenant: self.tenant.clone(),
                call_id: CALL.into(),
                idempotency_key: format!("{}:{CALL}", self.job),
                traceparent: None,
                cancel: cancel.clone(),
                approvals: None,
            }
        }

        /// Starts the `task` call in its own task (it waits for a report).
        fn call(&self, cancel: &CancellationToken) -> tokio::task::JoinHandle<Result<Value, ToolError>> {
            let (tool, ctx) = (self.tool.clone(), self.ctx(cancel));
            let args = json!({"description": "sum the north region", "subagent_type": "finance"});
            tokio::spawn(async move { tool.call(&ctx, args).await })
        }

        async fn record(&self) -> JobRecord {
            self.tool.jobs.get(&self.job).await.unwrap().unwrap()
        }

        fn reported_events(&self) -> usize {
            let reported = |e: &JobEvent| matches!(e.kind, JobEventKind::TaskReported { .. });
            self.backend.events().iter().filter(|e| reported(e)).count()
        }
    }

    /// A completed report of `msg`'s task, as a worker would publish it.
    fn report_of(msg: &TaskMessage, summary: &str, input_tokens: u64) -> TaskReport {
        TaskReport {
            v: protocol::SCHEMA_VERSION,
            job_id: msg.job_id,
            task_id: msg.task_id,
            subagent_type: msg.subagent_type.clone(),
            status: TaskStatus::Completed,
            summary: summary.into(),
            summary_file: None,
            error: None,
            usage: Usage { input_tokens, model_calls: 1, ..Usage::default() },
            worker_id: "w-1".into(),
            attempt: 1,
            started_at: protocol::now(),
            finished_at: protocol::now(),
            duration_ms: 5,
        }
    }

    #[tokio::test]
    async fn a_task_is_published_once_and_its_report_is_the_result_and_is_recorded() {
        let rig = rig(None, JobId::new(), Duration::from_secs(3600)).await;
        let call = rig.call(&CancellationToken::new());

        let msg = rig.queue.nth_published(1).await;
        assert_eq!((msg.job_id, &msg.tenant, &msg.subagent_type), (rig.job, &rig.tenant, &finance()));
        assert_eq!((msg.description.as_str(), msg.attempt), ("sum the north region", 1));
        let entry = rig.record().await.tasks.iter().find(|t| t.task_id == msg.task_id).cloned().unwrap();
        assert_eq!((entry.call_id.as_deref(), entry.status), (Some(CALL), None));

        rig.router.route(report_of(&msg, "north: 120", 7));
        assert_eq!(call.await.unwrap().unwrap(), Value::String("north: 120".into()));

        assert_eq!(rig.queue.published().len(), 1);
        // Stored in the bucket, not only in the live copy.
        let rec = rig.backend.stored(&rig.job).unwrap();
        assert_eq!(rec.tasks.len(), 1);
        let t = &rec.tasks[0];
        assert_eq!((t.status, t.summary.as_str(), t.published), (Some(TaskStatus::Completed), "north: 120", true));
        assert_eq!((rec.usage.input_tokens, rec.usage_by_type[&finance()].input_tokens), (7, 7));
        assert_eq!(rig.reported_events(), 1);
    }

    /// The bucket as a previous orchestrator left it: the job with this
    /// call's task entry, `published` or not yet.
    async fn left_behind(published: bool) -> (Arc<FakeJobs>, JobId, TaskMessage) {
        let (backend, job, task_id) = (Arc::new(FakeJobs::default()), JobId::new(), TaskId::new());
        let mut rec = JobRecord::new(job, Tenant::new("acme").unwrap(), "revenue by region".into());
        let mut entry = TaskEntry::dispatched(task_id, finance(), "sum the north region".into(), CALL.into());
        entry.published = published;
        rec.tasks.push(entry);
        JobStore::with_backend(backend.clone()).insert(rec.clone()).await.unwrap();
        let msg = TaskMessage {
            v: protocol::SCHEMA_VERSION,
            job_id: job,
            task_id,
            subagent_type: finance(),
            description: "sum the north region".into(),
            tenant: rec.tenant,
            attempt: 1,
            deadline: None,
            traceparent: None,
            created_at: protocol::now(),
        };
        (backend, job, msg)
    }

    #[tokio::test]
    async fn after_a_restart_a_stored_report_is_consolidated_and_nothing_is_published_again() {
        let (backend, job, msg) = left_behind(true).await;
        // A new orchestrator over the same bucket; the worker reported meanwhile.
        let rig = rig(Some(backend), job, Duration::from_secs(3600)).await;
        rig.stored.store(report_of(&msg, "north: 120", 7));

        // Bounded: a call that wrongly dispatches again waits for a report forever.
        let replayed = tokio::time::timeout(Duration::from_secs(10), rig.call(&CancellationToken::new())).await;

        assert!(rig.queue.published().is_empty(), "re-attached, not dispatched again");
        assert_eq!(replayed.expect("answered from the stored report").unwrap().unwrap(), json!("north: 120"));
        let rec = rig.backend.stored(&job).unwrap();
        assert_eq!((rec.tasks.len(), rec.tasks[0].status), (1, Some(TaskStatus::Completed)));
        assert_eq!(rec.usage.input_tokens, 7);
        assert_eq!(rig.router.waiting(), 0, "the waiter is dropped");
    }

    #[tokio::test]
    async fn after_a_restart_a_task_recorded_but_not_published_is_published_with_its_own_id() {
        let (backend, job, left) = left_behind(false).await;
        let rig = rig(Some(backend), job, Duration::from_secs(3600)).await;
        let call = rig.call(&CancellationToken::new());

        let msg = rig.queue.nth_published(1).await;
        // The same task id: JetStream drops it if the first publish did land.
        assert_eq!(msg.task_id, left.task_id);
        rig.router.route(report_of(&msg, "north: 120", 7));
        assert_eq!(call.await.unwrap().unwrap(), Value::String("north: 120".into()));
        assert_eq!(rig.backend.stored(&job).unwrap().tasks.len(), 1, "no second entry");
    }

    #[tokio::test]
    async fn a_redelivered_report_is_consolidated_once() {
        let rig = rig(None, JobId::new(), Duration::from_secs(3600)).await;
        let call = rig.call(&CancellationToken::new());
        let msg = rig.queue.nth_published(1).await;
        rig.router.route(report_of(&msg, "north: 120", 7));
        call.await.unwrap().unwrap();

        // A second attempt's report: the router has no waiter for it, and
        // consolidating it anyway (a re-attach racing the live report) changes nothing.
        let second = TaskReport { attempt: 2, ..report_of(&msg, "north: 999", 50) };
        rig.router.route(second.clone());
        rig.tool.consolidate(&second).await;
        // The planner replaying the same call gets the first report without a new task.
        let replayed = rig.call(&CancellationToken::new()).await.unwrap();

        assert_eq!(replayed.unwrap(), Value::String("north: 120".into()));
        let rec = rig.backend.stored(&rig.job).unwrap();
        assert_eq!((rec.tasks.len(), rec.tasks[0].summary.as_str(), rec.tasks[0].attempt), (1, "north: 120", 1));
        assert_eq!((rec.usage.input_tokens, rec.usage.model_calls), (7, 1));
        assert_eq!(rig.reported_events(), 1);
        assert_eq!(rig.queue.published().len(), 1);
    }

    #[tokio::test]
    async fn a_cancelled_job_ends_the_call_cancelled_and_leaves_the_queue_to_the_service() {
        let rig = rig(None, JobId::new(), Duration::from_secs(3600)).await;
        let cancel = CancellationToken::new();
        let call = rig.call(&cancel);
        let msg = rig.queue.nth_published(1).await;

        cancel.cancel();
        let err = call.await.unwrap().unwrap_err();

        assert_eq!(err.kind, ErrorKind::Cancelled);
        assert_eq!(rig.router.waiting(), 0, "the call stops waiting for the report");
        // The job's token also fires on shutdown, when queued tasks must
        // survive for the next orchestrator; the cancel request purges them
        // (orchestrator/src/service.rs), not the tool.
        assert!(rig.queue.purged().is_empty());
        // A late report finds no waiter and is not consolidated by this call.
        rig.router.route(report_of(&msg, "north: 120", 7));
        assert_eq!(rig.record().await.tasks[0].status, None);
    }

    #[tokio::test]
    async fn a_type_no_live_worker_serves_fails_the_call_and_purges_its_queued_tasks() {
        // The timeout under test is the no-worker one, kept short.
        let rig = rig(None, JobId::new(), Duration::from_millis(20)).await;
        rig.queue.set_served(false);

        let err = rig.call(&CancellationToken::new()).await.unwrap().unwrap_err();

        assert_eq!(err.kind, ErrorKind::Transient);
        assert!(err.message.contains("no worker serves finance"), "{}", err.message);
        assert_eq!(rig.queue.purged(), [(rig.job, Some(finance()))]);
        assert_eq!(rig.router.waiting(), 0);
    }
}
