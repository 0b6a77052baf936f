//! The [`Dispatcher`]: dispatches the tasks of this orchestrator's jobs and
//! follows each to its end, for every planner tool that delegates (`task`,
//! the asynchronous delegation tools, `map_tasks`). It is split in
//! [`start`](Dispatcher::start) (record, publish) and
//! [`wait`](Dispatcher::wait) (await the end, consolidate) so a tool can
//! start many tasks and collect them later, across an orchestrator restart.
//!
//! Guarantees (docs/RELIABILITY.md):
//! - a task is recorded under its dispatch key (`key`) before it is
//!   published, so a resumed planner calling again with the same key gets the
//!   same task back and the task is never published twice, nor once its
//!   report is stored;
//! - the first report of a task is consolidated into the job exactly once;
//!   later ones (a redelivered attempt) change nothing.
//!
//! - a tenant has at most `[tenants] max_tasks_in_flight` tasks published
//!   and not yet ended here: a further `task` or map item waits for a place,
//!   a further `start_task` is refused with a `limit` error. So one
//!   tenant's tasks are never more than that many ahead of another's in a
//!   subagent type's queue (docs/SECURITY.md "Tenant quotas and fairness").
//!
//! The queue, the job records and the stored reports sit behind the traits
//! of orchestrator/src/ports.rs, so the tests below run this logic over the
//! in-memory fakes of orchestrator/src/fakes.rs.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use flotilla_agent::tool::{ToolContext, ToolError, ToolSpec};
use flotilla_bus::{BusError, FollowUps, retry};
use flotilla_config::TenantsConfig;
use flotilla_protocol::ids::{JobId, SubagentType, TaskId, Tenant};
use flotilla_protocol::path::FilePath;
use flotilla_protocol::{
    self as protocol, ErrorInfo, ErrorKind, FileRef, JobEventKind, TaskEntry, TaskMessage, TaskReport, TaskStatus,
};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};

use crate::jobs::JobStore;
use crate::ports::TaskDispatch;
use crate::reports::ReportRouter;

/// How long past a task's own deadline its report is awaited: the worker
/// reports the timeout itself.
const REPORT_GRACE: Duration = Duration::from_secs(30);

/// Dispatches tasks of one orchestrator's jobs and follows them to their end.
#[derive(Clone)]
pub struct Dispatcher {
    queue: Arc<dyn TaskDispatch>,
    jobs: JobStore,
    reports: ReportRouter,
    types: Arc<BTreeMap<SubagentType, String>>,
    task_timeout: Duration,
    no_worker_timeout: Duration,
    /// Report waiters registered before a task was published, taken by its
    /// first `wait` (or looked at by `finished`).
    early: Arc<DashMap<TaskId, oneshot::Receiver<TaskReport>>>,
    /// Whether a type is served, as last looked up: thousands of waiting
    /// tasks share one lookup of the live workers.
    served: Arc<DashMap<SubagentType, (tokio::time::Instant, bool)>>,
    report_tokens: usize,
    /// Each tenant's places for tasks in flight.
    in_flight: Arc<InFlight>,
    /// Where the report file a consolidated report carried whole is written
    /// ([`Dispatcher::with_report_files`]), and the writes allowed at once;
    /// `None` writes none.
    report_files: Option<(flotilla_job_files::JobFiles, Arc<Semaphore>)>,
}

/// `[tenants] max_tasks_in_flight`: a semaphore per tenant, and the permit
/// each published task holds until it ends (its report is consolidated, it
/// is given up on, or its job's planner stops here).
#[derive(Default)]
struct InFlight {
    tenants: TenantsConfig,
    places: DashMap<Tenant, Arc<Semaphore>>,
    held: DashMap<TaskId, (JobId, OwnedSemaphorePermit)>,
}

impl InFlight {
    fn places(&self, tenant: &Tenant) -> (Arc<Semaphore>, usize) {
        let cap = self.tenants.limits(tenant.as_str()).max_tasks_in_flight;
        (self.places.entry(tenant.clone()).or_insert_with(|| Arc::new(Semaphore::new(cap))).clone(), cap)
    }

    /// A place for one more task of `ctx`'s tenant: waited for (until the
    /// call is cancelled) when `wait`, else refused at once when none is free.
    async fn admit(&self, ctx: &ToolContext, wait: bool) -> Result<OwnedSemaphorePermit, ToolError> {
        let (places, cap) = self.places(&ctx.tenant);
        if let Ok(permit) = places.clone().try_acquire_owned() {
            return Ok(permit);
        }
        if !wait {
            return Err(ToolError::new(
                ErrorKind::Limit,
                format!(
                    "tenant {} has {cap} tasks in flight, its limit ([tenants] max_tasks_in_flight): \
                     wait for some with wait_tasks, then start more",
                    ctx.tenant
                ),
            ));
        }
        tracing::debug!(tenant = %ctx.tenant, cap, "tenant at its tasks-in-flight limit; the task waits for a place");
        tokio::select! {
            p = places.acquire_owned() => p.map_err(|_| ToolError::new(ErrorKind::Bug, "task places closed")),
            () = ctx.cancel.cancelled() => Err(ToolError::new(ErrorKind::Cancelled, "cancelled")),
        }
    }
}

/// Tries of a derived report file's write before it is left to the record.
const REPORT_FILE_ATTEMPTS: u32 = 5;
/// Report files written at once. A wide fan-out's reports arrive faster than
/// Object Store puts complete (each is several round trips); unbounded, ten
/// thousand puts were in flight at once, each holding its buffers, and they
/// slowed the calls' own record writes on the same connection. A waiting
/// write holds only its text.
const REPORT_FILE_WRITERS: usize = 16;

/// How long a lookup of the live workers answers for every task of a type.
const SERVED_FRESH: Duration = Duration::from_secs(5);

/// How a task ended, as the planner's tools show it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct TaskOutcome {
    /// The task.
    pub task_id: TaskId,
    /// completed | failed | rejected | cancelled (a timeout is `failed` with a `timeout` error).
    pub status: TaskStatus,
    /// The (capped) report summary, or "" on error.
    pub summary: String,
    /// Why it did not complete.
    pub error: Option<ErrorInfo>,
    /// The full report in the job files, when there is one.
    #[serde(serialize_with = "path_text")]
    pub report_path: Option<FilePath>,
    /// That file's reference (size, lines, digest), when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub report_file: Option<FileRef>,
}

fn path_text<S: serde::Serializer>(path: &Option<FilePath>, s: S) -> Result<S::Ok, S::Error> {
    match path {
        Some(p) => s.serialize_some(p.as_str()),
        None => s.serialize_none(),
    }
}

impl TaskOutcome {
    /// The outcome recorded in a consolidated entry (`None` while it runs).
    pub fn of_entry(entry: &TaskEntry) -> Option<Self> {
        let status = entry.status?;
        let report_file = entry.report_file.clone();
        Some(Self {
            task_id: entry.task_id,
            status,
            summary: entry.summary.clone(),
            error: entry.error.clone(),
            report_path: report_file.as_ref().and_then(|f| FilePath::parse(&f.path).ok()),
            report_file,
        })
    }

    /// The outcome as a tool error, for a task that did not complete.
    pub fn error(&self, ty: &SubagentType) -> ToolError {
        let (kind, message) = self
            .error
            .as_ref()
            .map(|e| (e.kind, e.message.as_str()))
            .unwrap_or((ErrorKind::Bug, "report without error"));
        ToolError::new(kind, format!("task {} ({ty}) {}: {message}", self.task_id, self.status.as_str()))
    }
}

fn transient(what: &'static str) -> impl Fn(BusError) -> ToolError {
    move |e| ToolError::transient(format!("{what}: {e}"))
}

impl Dispatcher {
    /// A dispatcher over `queue`, `jobs` and `reports` for the configured `types`.
    pub fn new(
        queue: Arc<dyn TaskDispatch>,
        jobs: JobStore,
        reports: ReportRouter,
        types: BTreeMap<SubagentType, String>,
        task_timeout: Duration,
        no_worker_timeout: Duration,
    ) -> Self {
        Self {
            queue,
            jobs,
            reports,
            types: Arc::new(types),
            task_timeout,
            no_worker_timeout,
            early: Arc::default(),
            served: Arc::default(),
            report_tokens: usize::MAX,
            in_flight: Arc::default(),
            report_files: None,
        }
    }

    /// Writes `/reports/<task>.md` of every task whose consolidated report
    /// carried its whole text into `files`, after the record is stored and
    /// without waiting for it (docs/TOOLS.md, "Job inputs and reports"):
    /// the file is derived from the record, so it stays off both the
    /// worker's and the planner's path, and a read of it before it lands is
    /// served from the record (`ConsolidatedReports`, orchestrator/src/reports.rs).
    /// A report by reference was stored by its worker before it was sent.
    pub fn with_report_files(mut self, files: flotilla_job_files::JobFiles) -> Self {
        self.report_files = Some((files, Arc::new(Semaphore::new(REPORT_FILE_WRITERS))));
        self
    }

    /// Starts writing the derived report file of `entry` (see
    /// [`Self::with_report_files`]); a write that fails after its retries
    /// leaves the file to the record, which serves every orchestrator read.
    fn write_report_file(&self, job: JobId, entry: &TaskEntry) {
        let (Some((files, writers)), Some(text)) = (&self.report_files, crate::reports::derived_report_text(entry))
        else {
            return;
        };
        let (files, writers, task) = (files.clone(), writers.clone(), entry.task_id);
        tokio::spawn(async move {
            let Ok(_writing) = writers.acquire_owned().await else { return };
            let path = flotilla_job_files::report_path(&task);
            let mut backoff = flotilla_retry::Backoff::new(Duration::from_millis(50), Duration::from_secs(2));
            for attempt in 1..=REPORT_FILE_ATTEMPTS {
                match files.store_reserved(&job, &path, text.as_bytes()).await {
                    Ok(()) => return,
                    Err(e) if attempt == REPORT_FILE_ATTEMPTS => {
                        tracing::warn!(%task, error = %e, "report file not stored; reads are served from the task record");
                    }
                    Err(_) => tokio::time::sleep(backoff.next_delay()).await,
                }
            }
        });
    }

    /// Caps each tenant's tasks in flight (`[tenants] max_tasks_in_flight`).
    pub fn with_tenants(mut self, tenants: TenantsConfig) -> Self {
        self.in_flight = Arc::new(InFlight { tenants, ..InFlight::default() });
        self
    }

    /// The `[tenants]` limits of `tenant`.
    pub fn tenant_limits(&self, tenant: &Tenant) -> flotilla_config::TenantLimits {
        self.in_flight.tenants.limits(tenant.as_str())
    }

    /// Gives back the places of `job`'s tasks still held: its planner
    /// stopped here, so nothing here follows them any more.
    pub fn release_job(&self, job: &JobId) {
        self.in_flight.held.retain(|_, (j, _)| j != job);
    }

    /// Caps what a completed task's summary may take of the planner's
    /// conversation (`[planner] report_tokens`).
    pub fn with_report_tokens(mut self, report_tokens: usize) -> Self {
        self.report_tokens = report_tokens;
        self
    }

    /// Tokens of a task's summary the planner sees; the rest stays in its
    /// report file.
    pub fn report_tokens(&self) -> usize {
        self.report_tokens
    }

    /// The spec of a tool that delegates one task (`task`, `start_task`):
    /// `what` it does, then (`list_types`) the subagent types; arguments
    /// `description` and `subagent_type`. The types are listed in one tool's
    /// description only: every repeat is paid in every planner request.
    pub fn delegating_spec(&self, name: &str, what: &str, list_types: bool) -> ToolSpec {
        let types: Vec<String> = self.types.iter().map(|(t, d)| format!("- {t}: {d}")).collect();
        let description =
            if list_types { format!("{what} Subagent types:\n{}", types.join("\n")) } else { what.to_string() };
        ToolSpec {
            name: name.into(),
            description,
            input_schema: serde_json::json!({
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

    /// The configured subagent types with their descriptions (for tool specs).
    pub fn types(&self) -> &BTreeMap<SubagentType, String> {
        &self.types
    }

    /// The job store the tasks are recorded in.
    pub fn jobs(&self) -> &JobStore {
        &self.jobs
    }

    /// The configured type named `name`, or a validation error listing the valid ones.
    pub fn subagent_type(&self, name: &str) -> Result<SubagentType, ToolError> {
        match SubagentType::new(name) {
            Ok(ty) if self.types.contains_key(&ty) => Ok(ty),
            _ => Err(ToolError::validation(format!(
                "unknown subagent_type {name:?}; valid types: {}",
                self.types.keys().map(|t| t.as_str()).collect::<Vec<_>>().join(", ")
            ))),
        }
    }

    /// Creates the task entry and publishes the task. Idempotent per
    /// (`ctx.job_id`, `key`): a resumed planner calling again with the same
    /// key gets the same TaskId back, and the task is never published twice
    /// (nor when its report is already stored). `key` is the tool call id for
    /// `task` and `start_task`, and e.g. "map:<map id>:<item index>" for map_tasks.
    /// Waits for a place under the tenant's tasks-in-flight limit.
    pub async fn start(
        &self,
        ctx: &ToolContext,
        subagent_type: &str,
        description: String,
        key: &str,
    ) -> Result<TaskId, ToolError> {
        self.start_with(ctx, subagent_type, description, key, true).await
    }

    /// [`start`](Self::start), but refused with a `limit` error when the
    /// tenant has no place free (`start_task`: the planner is told to wait
    /// for tasks it started rather than pile up more).
    pub async fn start_now(
        &self,
        ctx: &ToolContext,
        subagent_type: &str,
        description: String,
        key: &str,
    ) -> Result<TaskId, ToolError> {
        self.start_with(ctx, subagent_type, description, key, false).await
    }

    async fn start_with(
        &self,
        ctx: &ToolContext,
        subagent_type: &str,
        description: String,
        key: &str,
        wait: bool,
    ) -> Result<TaskId, ToolError> {
        // Each step is boxed, so a start holds only the step it is in: a
        // planner turn's `task` calls and a map's tasks start up to
        // `[planner] max_in_flight` at once (thousands, when raised), and
        // they queue on the job's store (docs/PERFORMANCE.md, "Scale").
        let ty = self.subagent_type(subagent_type)?;
        let existing =
            Box::pin(self.jobs.task_by_key(&ctx.job_id, key)).await.map_err(transient("task not dispatched"))?;
        let entry = match existing {
            Some(entry) => {
                if entry.status.is_some() || entry.published {
                    tracing::info!(task_id = %entry.task_id, "re-attached to a task dispatched before a restart");
                    return Ok(entry.task_id);
                }
                // Recorded, then the orchestrator stopped: the publish may or may not have landed.
                let stored =
                    Box::pin(self.reports.stored(&ctx.tenant, &ctx.job_id, &entry.subagent_type, &entry.task_id)).await;
                if let Some(report) = stored {
                    Box::pin(self.consolidate(&report)).await;
                    return Ok(entry.task_id);
                }
                (entry, self.in_flight.admit(ctx, wait).await?)
            }
            None => {
                let place = self.in_flight.admit(ctx, wait).await?;
                let entry = TaskEntry::dispatched(TaskId::new(), ty, description, key.to_string());
                let stored =
                    Box::pin(self.jobs.add_task(&ctx.job_id, entry)).await.map_err(transient("task not dispatched"))?;
                if stored.published || stored.status.is_some() {
                    return Ok(stored.task_id);
                }
                (stored, place)
            }
        };
        let (entry, place) = entry;
        // Held from before the publish, so a fast report cannot end the task
        // before its place is taken.
        self.in_flight.held.insert(entry.task_id, (ctx.job_id, place));
        let task_id = entry.task_id;
        let published = Box::pin(self.publish(ctx, entry)).await;
        if published.is_err() {
            self.in_flight.held.remove(&task_id);
        }
        published
    }

    /// Publishes a recorded task and marks it published.
    async fn publish(&self, ctx: &ToolContext, entry: TaskEntry) -> Result<TaskId, ToolError> {
        let task_id = entry.task_id;
        let msg = TaskMessage {
            v: protocol::SCHEMA_VERSION,
            job_id: ctx.job_id,
            task_id,
            subagent_type: entry.subagent_type.clone(),
            description: entry.description.clone(),
            tenant: ctx.tenant.clone(),
            attempt: 1,
            deadline: Some(protocol::now() + self.task_timeout),
            traceparent: ctx.traceparent.clone(),
            created_at: protocol::now(),
        };
        // Only a task `start_task` dispatched can get `message_task` follow-ups.
        let follow_ups = match &entry.call_id {
            Some(key) if key.starts_with(super::async_tasks::KEY_PREFIX) => FollowUps::Possible,
            _ => FollowUps::None,
        };
        // Registered before the publish, so a live report cannot slip past.
        self.early.insert(task_id, self.reports.expect(task_id, &entry.subagent_type));
        // Nats-Msg-Id = task id (shared/bus/src/tasks.rs): a publish repeated
        // after a crash inside the duplicate window is dropped by JetStream.
        let published =
            Box::pin(retry("task publish", Duration::from_secs(30), || self.queue.publish(&msg, follow_ups))).await;
        if let Err(e) = published {
            self.early.remove(&task_id);
            self.reports.forget(&task_id);
            return Err(transient("task not dispatched")(e));
        }
        let (ty, description) = (entry.subagent_type, entry.description);
        let dispatched = JobEventKind::TaskDispatched { task_id, subagent_type: ty.clone(), description };
        Box::pin(self.jobs.emit(ctx.job_id, dispatched)).await;
        Box::pin(self.jobs.update_task(&ctx.job_id, &task_id, |t| !std::mem::replace(&mut t.published, true)))
            .await
            .map_err(transient("task published but not marked"))?;
        tracing::info!(%task_id, subagent_type = %ty, "task dispatched");
        Ok(task_id)
    }

    /// Waits until `task` ends (its report, its deadline, no live worker of
    /// its type, or `ctx.cancel`), consolidates its report into the job
    /// exactly once, and returns the outcome. Cancelling `ctx.cancel` returns
    /// Err(cancelled) without cancelling the task itself.
    pub async fn wait(&self, ctx: &ToolContext, task: TaskId) -> Result<TaskOutcome, ToolError> {
        let entry = Box::pin(self.entry(&ctx.job_id, &task)).await?;
        if let Some(done) = TaskOutcome::of_entry(&entry) {
            self.early.remove(&task);
            return Ok(done);
        }
        // Only these two of the entry are kept for the wait.
        let (ty, dispatched) = (entry.subagent_type, entry.dispatched_at.unwrap_or_else(protocol::now));
        let waiter = match self.early.remove(&task) {
            Some((_, rx)) => rx,
            None => {
                let rx = self.reports.expect(task, &ty);
                let stored = Box::pin(self.reports.stored(&ctx.tenant, &ctx.job_id, &ty, &task)).await;
                if let Some(report) = stored {
                    self.reports.forget(&task);
                    return Ok(Box::pin(self.consolidate(&report)).await);
                }
                rx
            }
        };
        let left = (dispatched + self.task_timeout + REPORT_GRACE) - protocol::now();
        let wait = Duration::try_from(left).unwrap_or(Duration::ZERO);
        let give_up = tokio::time::sleep(wait);
        tokio::pin!(waiter, give_up);
        // Queueing behind busy workers is fine; a type nobody serves is not.
        let first = tokio::time::Instant::now() + self.no_worker_timeout;
        let mut served = tokio::time::interval_at(first, self.no_worker_timeout);
        // What runs after the wait is boxed (allocated when it starts): a
        // waiting call's state stays a few hundred bytes, and a planner holds
        // `[planner] max_in_flight` of them (docs/PERFORMANCE.md, "Scale").
        loop {
            tokio::select! {
                r = &mut waiter => match r {
                    Ok(report) => return Ok(Box::pin(self.consolidate(&report)).await),
                    // The router dropped the waiter (a newer wait on the same task).
                    Err(_) => return Err(ToolError::transient(format!("task {task}: its report went to another waiter"))),
                },
                _ = &mut give_up => {
                    self.reports.forget(&task);
                    let msg = format!("no report for task {task} within {}s", (self.task_timeout + REPORT_GRACE).as_secs());
                    return Box::pin(self.end(&ctx.job_id, &task, ErrorInfo::new(ErrorKind::Timeout, msg))).await;
                }
                _ = served.tick() => {
                    if !Box::pin(self.served(&ty)).await {
                        self.reports.forget(&task);
                        let msg = format!(
                            "no worker serves {ty}: no live worker of that type for {}s; start `flotilla-worker` with a [subagents.{ty}] section",
                            self.no_worker_timeout.as_secs()
                        );
                        Box::pin(self.withdraw(&ctx.job_id, &task, &msg)).await;
                        return Box::pin(self.end(&ctx.job_id, &task, ErrorInfo::new(ErrorKind::Transient, msg))).await;
                    }
                }
                _ = ctx.cancel.cancelled() => {
                    self.reports.forget(&task);
                    return Err(ToolError::new(ErrorKind::Cancelled, "cancelled"));
                }
            }
        }
    }

    /// The outcome of a task that has already ended (consolidated), or None while it runs.
    pub async fn finished(&self, job: &JobId, task: &TaskId) -> Result<Option<TaskOutcome>, ToolError> {
        let entry = self.entry(job, task).await?;
        if let Some(done) = TaskOutcome::of_entry(&entry) {
            return Ok(Some(done));
        }
        // A report that reached the waiter registered at publish time.
        let arrived = match self.early.get_mut(task) {
            Some(mut rx) => rx.try_recv().ok(),
            None => None,
        };
        if let Some(report) = arrived {
            self.early.remove(task);
            return Ok(Some(self.consolidate(&report).await));
        }
        Ok(None)
    }

    async fn entry(&self, job: &JobId, task: &TaskId) -> Result<TaskEntry, ToolError> {
        self.jobs
            .task(job, task)
            .await
            .map_err(transient("task not readable"))?
            .ok_or_else(|| ToolError::new(ErrorKind::NotFound, format!("no task {task} in job {job}")))
    }

    /// Whether a live worker (by heartbeat) serves `ty`. A failed lookup
    /// counts as served: an unreadable bucket must not fail tasks.
    async fn served(&self, ty: &SubagentType) -> bool {
        if let Some(seen) = self.served.get(ty).filter(|s| s.0.elapsed() < SERVED_FRESH) {
            return seen.1;
        }
        let served = match self.queue.served(ty).await {
            Ok(served) => served,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read live workers");
                true
            }
        };
        self.served.insert(ty.clone(), (tokio::time::Instant::now(), served));
        served
    }

    /// Withdraws this one task of a type nobody serves; the job's other
    /// queued tasks of that type keep their own no-worker deadlines.
    async fn withdraw(&self, job: &JobId, task: &TaskId, reason: &str) {
        if let Err(e) = self.queue.withdraw(job, task, reason).await {
            tracing::warn!(%task, error = %e, "task of an unserved type not withdrawn; a late worker may run it");
        }
    }

    /// Records that `task` ended without a report (`failed` with `error`),
    /// unless a report was consolidated meanwhile; returns the recorded outcome.
    async fn end(&self, job: &JobId, task: &TaskId, error: ErrorInfo) -> Result<TaskOutcome, ToolError> {
        self.in_flight.held.remove(task);
        let e = error.clone();
        let recorded = self
            .jobs
            .update_task(job, task, |t| {
                if t.status.is_some() {
                    return false;
                }
                t.status = Some(TaskStatus::Failed);
                t.error = Some(e.clone());
                t.finished_at = Some(protocol::now());
                true
            })
            .await;
        match recorded {
            Ok(Some(entry)) => {
                self.write_report_file(*job, &entry);
                let kind = JobEventKind::TaskReported {
                    task_id: *task,
                    status: TaskStatus::Failed,
                    summary: error.message.clone(),
                };
                self.jobs.emit(*job, kind).await;
            }
            Ok(None) => {}
            Err(e) => tracing::error!(%task, error = %e, "task end not recorded in job"),
        }
        let entry = self.entry(job, task).await?;
        Ok(TaskOutcome::of_entry(&entry).unwrap_or(TaskOutcome {
            task_id: *task,
            status: TaskStatus::Failed,
            summary: String::new(),
            error: Some(error),
            report_path: None,
            report_file: None,
        }))
    }

    /// Folds a report into the job, once; returns the task's outcome as
    /// recorded (the first report's, when this one came later).
    pub(crate) async fn consolidate(&self, report: &TaskReport) -> TaskOutcome {
        self.in_flight.held.remove(&report.task_id);
        let r = report.clone();
        let updated = self
            .jobs
            .update_task_and_header(
                &report.job_id,
                &report.task_id,
                move |entry| {
                    if entry.status.is_some() {
                        return false;
                    }
                    entry.status = Some(r.status);
                    entry.summary = match &r.summary_file {
                        Some(f) => format!("{}\n[full report: {} ({} bytes)]", r.summary, f.path, f.size_bytes),
                        None => r.summary.clone(),
                    };
                    entry.report_file = r.summary_file.clone();
                    entry.error = r.error.clone();
                    entry.usage = r.usage;
                    entry.worker_id = Some(r.worker_id.clone());
                    entry.attempt = r.attempt;
                    entry.resumed_from_step = r.resumed_from_step;
                    entry.duration_ms = r.duration_ms;
                    entry.started_at = Some(r.started_at);
                    entry.finished_at = Some(r.finished_at);
                    true
                },
                |rec, entry| {
                    // The task's spend joins the job's totals in the same header write.
                    rec.usage += entry.usage;
                    *rec.usage_by_type.entry(entry.subagent_type.clone()).or_default() += entry.usage;
                },
            )
            .await;
        let recorded = match updated {
            Ok(Some(entry)) => {
                self.write_report_file(report.job_id, &entry);
                let summary = if report.status == TaskStatus::Completed {
                    report.summary.chars().take(200).collect()
                } else {
                    report.error.as_ref().map(|e| e.message.clone()).unwrap_or_default()
                };
                let kind = JobEventKind::TaskReported { task_id: report.task_id, status: report.status, summary };
                self.jobs.emit(report.job_id, kind).await;
                Some(entry)
            }
            Ok(None) => {
                tracing::debug!(task_id = %report.task_id, "report already consolidated");
                self.jobs.task(&report.job_id, &report.task_id).await.ok().flatten()
            }
            Err(e) => {
                tracing::error!(error = %e, "report not recorded in job");
                None
            }
        };
        recorded.as_ref().and_then(TaskOutcome::of_entry).unwrap_or_else(|| outcome_of_report(report))
    }
}

/// The outcome a report tells, when it could not be recorded.
fn outcome_of_report(report: &TaskReport) -> TaskOutcome {
    TaskOutcome {
        task_id: report.task_id,
        status: report.status,
        summary: report.summary.clone(),
        error: report.error.clone(),
        report_path: report.summary_file.as_ref().and_then(|f| FilePath::parse(&f.path).ok()),
        report_file: report.summary_file.clone(),
    }
}

#[cfg(test)]
mod tests {
    //! Dispatch over the in-memory fakes of orchestrator/src/fakes.rs, through
    //! the `task` tool (start + wait) and directly: dispatch, re-attach after a
    //! restart, consolidation once, cancel, and a type nobody serves.

    use flotilla_protocol::ids::{JobId, Tenant};
    use flotilla_protocol::{JobEvent, JobRecord, Usage};

    use flotilla_agent::tool::Tool;
    use flotilla_job_files::ObjectBackend;
    use serde_json::{Value, json};
    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::fakes::{FakeJobs, FakeQueue, FakeReports};
    use crate::planner::TaskTool;

    const CALL: &str = "call-1";

    struct Rig {
        tool: Arc<TaskTool>,
        dispatcher: Dispatcher,
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
        let dispatcher = Dispatcher::new(
            queue.clone(),
            jobs,
            router.clone(),
            BTreeMap::from([(finance(), "numbers".into())]),
            Duration::from_secs(600),
            no_worker_timeout,
        );
        let tool = Arc::new(TaskTool { dispatcher: dispatcher.clone() });
        Rig { tool, dispatcher, queue, stored, backend, router, job, tenant }
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

        /// The stored header with every stored task entry.
        async fn record(&self) -> JobRecord {
            self.backend.stored(&self.job).unwrap()
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
            resumed_from_step: None,
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
        // A `task` task cannot get follow-ups: its worker neither looks
        // them up nor follows them (workers/src/inbox.rs).
        assert_eq!(rig.queue.follow_ups(), [FollowUps::None]);
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
        let rec = JobRecord::new(job, Tenant::new("acme").unwrap(), "revenue by region".into());
        let entry = TaskEntry::dispatched(task_id, finance(), "sum the north region".into(), CALL.into());
        let store = JobStore::with_backend(backend.clone());
        store.insert(rec.clone()).await.unwrap();
        store.add_task(&job, entry).await.unwrap();
        store
            .update_task(&job, &task_id, |t| std::mem::replace(&mut t.published, published) != published)
            .await
            .unwrap();
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

    /// Republish on resume: the orchestrator died after its publish landed but
    /// before it marked the entry published, and the worker has reported
    /// since: the replay consolidates that report and publishes nothing.
    #[tokio::test]
    async fn after_a_restart_an_unmarked_task_with_a_stored_report_is_not_published_again() {
        let (backend, job, msg) = left_behind(false).await;
        let rig = rig(Some(backend), job, Duration::from_secs(3600)).await;
        rig.stored.store(report_of(&msg, "north: 120", 7));

        let replayed = tokio::time::timeout(Duration::from_secs(10), rig.call(&CancellationToken::new())).await;

        assert!(rig.queue.published().is_empty(), "not published again");
        assert_eq!(replayed.expect("answered from the stored report").unwrap().unwrap(), json!("north: 120"));
        assert_eq!(rig.backend.stored(&job).unwrap().tasks[0].status, Some(TaskStatus::Completed));
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
        rig.dispatcher.consolidate(&second).await;
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
        assert!(rig.queue.withdrawn().is_empty());
        // A late report finds no waiter and is not consolidated by this call.
        rig.router.route(report_of(&msg, "north: 120", 7));
        assert_eq!(rig.record().await.tasks[0].status, None);
    }

    #[tokio::test]
    async fn a_type_no_live_worker_serves_fails_the_call_and_withdraws_only_its_task() {
        // The timeout under test is the no-worker one, kept short.
        let rig = rig(None, JobId::new(), Duration::from_millis(20)).await;
        rig.queue.set_served(false);

        let err = rig.call(&CancellationToken::new()).await.unwrap().unwrap_err();

        assert_eq!(err.kind, ErrorKind::Transient);
        assert!(err.message.contains("no worker serves finance"), "{}", err.message);
        // Only this call's task: the job's other queued tasks of the type
        // keep their own deadlines.
        let task = rig.record().await.tasks[0].task_id;
        assert_eq!(rig.queue.withdrawn(), [(rig.job, task)]);
        assert_eq!(rig.router.waiting(), 0);
    }
    #[tokio::test]
    async fn start_is_idempotent_per_key_and_finished_tells_when_the_task_ended() {
        let rig = rig(None, JobId::new(), Duration::from_secs(3600)).await;
        let ctx = rig.ctx(&CancellationToken::new());
        let d = &rig.dispatcher;
        let a = d.start(&ctx, "finance", "sum north".into(), "map:m1:0").await.unwrap();
        let again = d.start(&ctx, "finance", "sum north".into(), "map:m1:0").await.unwrap();
        let b = d.start(&ctx, "finance", "sum south".into(), "map:m1:1").await.unwrap();

        assert_eq!(a, again, "the same key is the same task");
        assert_ne!(a, b);
        assert_eq!(rig.queue.published().len(), 2, "published once per key");
        assert!(d.finished(&rig.job, &a).await.unwrap().is_none(), "still running");

        // The report reaches the waiter registered at publish time; `finished`
        // consolidates it without any `wait`.
        let msg = rig.queue.published().into_iter().find(|m| m.task_id == a).unwrap();
        rig.router.route(report_of(&msg, "north: 120", 7));
        let done = d.finished(&rig.job, &a).await.unwrap().expect("ended");
        assert_eq!((done.status, done.summary.as_str()), (TaskStatus::Completed, "north: 120"));
        // `wait` on an ended task answers from the record.
        assert_eq!(d.wait(&ctx, a).await.unwrap().summary, "north: 120");
        assert_eq!(rig.reported_events(), 1);
    }

    #[tokio::test]
    async fn an_unknown_type_is_a_validation_error_listing_the_valid_ones() {
        let rig = rig(None, JobId::new(), Duration::from_secs(3600)).await;
        let ctx = rig.ctx(&CancellationToken::new());
        let err = rig.dispatcher.start(&ctx, "legal", "x".into(), "k").await.unwrap_err();
        assert_eq!(err.kind, ErrorKind::Validation);
        assert!(err.message.contains("valid types: finance"), "{}", err.message);
        assert!(rig.queue.published().is_empty());
    }

    /// Job files whose puts wait at a gate, counting how many are in at once.
    #[derive(Default)]
    struct GatedFiles {
        inner: flotilla_job_files::MemoryBackend,
        open: tokio::sync::Notify,
        is_open: std::sync::atomic::AtomicBool,
        /// (in a put now, most at once).
        puts: tokio::sync::watch::Sender<(usize, usize)>,
    }

    #[async_trait::async_trait]
    impl ObjectBackend for GatedFiles {
        async fn info(&self, name: &str) -> Result<Option<flotilla_job_files::ObjectInfo>, String> {
            self.inner.info(name).await
        }
        async fn get(
            &self,
            name: &str,
            max: u64,
        ) -> Result<Option<(Vec<u8>, std::collections::HashMap<String, String>)>, String> {
            self.inner.get(name, max).await
        }
        async fn put(
            &self,
            name: &str,
            bytes: &[u8],
            metadata: std::collections::HashMap<String, String>,
        ) -> Result<(), String> {
            self.puts.send_modify(|(now, most)| {
                *now += 1;
                *most = (*most).max(*now);
            });
            let opened = self.open.notified();
            if !self.is_open.load(std::sync::atomic::Ordering::SeqCst) {
                opened.await;
            }
            let stored = self.inner.put(name, bytes, metadata).await;
            self.puts.send_modify(|(now, _)| *now -= 1);
            stored
        }
        async fn list(&self, prefix: &str) -> Result<Vec<(String, flotilla_job_files::ObjectInfo)>, String> {
            self.inner.list(prefix).await
        }
        async fn delete(&self, name: &str) -> Result<(), String> {
            self.inner.delete(name).await
        }
    }

    #[tokio::test]
    async fn report_files_are_written_a_bounded_number_at_a_time_and_every_one_lands() {
        const TASKS: usize = 3 * REPORT_FILE_WRITERS;
        let rig = rig(None, JobId::new(), Duration::from_secs(3600)).await;
        let gated = Arc::new(GatedFiles::default());
        let files = flotilla_job_files::JobFiles::new(gated.clone(), 1 << 20);
        let tool = Arc::new(TaskTool { dispatcher: rig.dispatcher.clone().with_report_files(files.clone()) });
        let calls: Vec<_> = (0..TASKS)
            .map(|i| {
                let mut ctx = rig.ctx(&CancellationToken::new());
                ctx.call_id = format!("call-{i}");
                ctx.idempotency_key = format!("{}:call-{i}", rig.job);
                let (tool, args) =
                    (tool.clone(), json!({"description": format!("region {i}"), "subagent_type": "finance"}));
                tokio::spawn(async move { tool.call(&ctx, args).await })
            })
            .collect();
        rig.queue.nth_published(TASKS).await;
        for msg in rig.queue.published() {
            rig.router.route(report_of(&msg, &format!("margin of {}", msg.description), 1));
        }
        // Every call ends while its file waits: the files are off the call's path.
        for call in calls {
            call.await.unwrap().unwrap();
        }
        let mut puts = gated.puts.subscribe();
        puts.wait_for(|(now, _)| *now >= REPORT_FILE_WRITERS).await.unwrap();
        // This test runs on one thread: a yield lets every writer that is
        // ready take its turn, so an unbounded writer would be in a put now.
        for _ in 0..TASKS {
            tokio::task::yield_now().await;
        }
        assert_eq!(puts.borrow().0, REPORT_FILE_WRITERS, "puts in flight while the store holds them");
        gated.is_open.store(true, std::sync::atomic::Ordering::SeqCst);
        gated.open.notify_waiters();
        let stored = gated.inner.list("").await.unwrap();
        let mut landed = stored.len();
        while landed < TASKS {
            puts.changed().await.unwrap();
            landed = gated.inner.list("").await.unwrap().len();
        }
        assert_eq!(puts.borrow().1, REPORT_FILE_WRITERS, "most puts at once");
        for msg in rig.queue.published() {
            let text = files.read(&rig.job, &flotilla_job_files::report_path(&msg.task_id)).await.unwrap();
            assert_eq!(String::from_utf8(text).unwrap(), format!("margin of {}", msg.description));
        }
    }
}
