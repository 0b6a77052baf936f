//! The orchestrator service: answers the job API on `<prefix>.api.*` and runs
//! one planner per accepted job, at most `[planner] concurrency` at once.
//!
//! | subject `<prefix>.api.<tenant>.` | request          | reply (`ok` payload)  |
//! |----------------------------------|------------------|-----------------------|
//! | `submit`                         | `SubmitRequest`  | `SubmitReply`         |
//! | `status`                         | `StatusRequest`  | `StatusReply` (header + one page of tasks) |
//! | `list`                           | `ListRequest`    | `ListReply`           |
//! | `cancel`                         | `CancelRequest`  | `CancelReply`         |
//! | `prune`                          | `PruneRequest`   | `PruneReply` (src/jobs/retention.rs) |
//! | `approvals`                      | `ApprovalsRequest` | `ApprovalsReply`    |
//! | `approve`                        | `ApproveRequest` | `ApproveReply` (src/approvals.rs) |
//! | `resolve`                        | `ResolveRequest` | `ResolveReply` (job ids starting or ending with a short id) |
//! | `files_ls`, `files_get`, `files_put`, `files_commit` | `Files*Request` | `Files*Reply` (src/files_api.rs) |
//!
//! Any number of orchestrators may share a prefix: they share the API (queue
//! group) and the jobs, each job planned by the holder of its lease
//! (src/runner.rs, src/leases.rs). At start the service resumes every
//! unfinished job that no other orchestrator owns, from its checkpoint.
//!
//! The tenant comes from the subject only (NATS permissions confine each
//! client credential to its tenant); a job of another tenant looks missing.
//!
//! Every reply is an `ApiReply`; a malformed request gets an error reply that
//! says what is wrong, never silence.
//!
//! Each tenant has its own request budget (`[tenants] api_rate`, `api_burst`:
//! a token bucket per tenant and orchestrator), so one tenant's flood of
//! requests is refused with a `limit` error telling when to retry instead
//! of queueing ahead of every other tenant's requests; and at most
//! `[tenants] max_queued_jobs` unfinished jobs (docs/SECURITY.md "Tenant
//! quotas and fairness").

use std::future::Future;
use std::sync::Arc;

use flotilla_bus::{ApiRequest, Bus, BusError, Cancellations};
use flotilla_config::Settings;
use flotilla_protocol::ids::{JobId, SubagentType, Tenant};
use flotilla_protocol::{
    self as protocol, ApiReply, CancelReply, CancelRequest, ErrorKind, JobEventKind, JobRecord, ListReply, ListRequest,
    ResolveReply, ResolveRequest, StatusReply, StatusRequest, SubmitReply, SubmitRequest,
};
use tokio_util::sync::CancellationToken;

use crate::dead_letters;
use crate::files_api::FilesApi;
use crate::jobs::{JobStore, ListQuery};
use crate::leases::Ownership;
use crate::planner::Planner;
use crate::reader::JobsReader;
use crate::reports::ReportRouter;
use crate::runner::JobRunner;
use flotilla_bus::Checkpoints;

/// Queue group of the API subscription, so several orchestrators share requests.
const API_QUEUE: &str = "flotilla-orchestrator";

/// Longest accepted job text.
const MAX_INPUT_BYTES: usize = 256 * 1024;

/// What every API request handler and planner task shares.
struct Service {
    bus: Bus,
    /// Job records: read by `status`/`list`, written by `submit` and planners.
    jobs: JobStore,
    /// The planners of the jobs whose lease this orchestrator holds.
    runner: Arc<JobRunner>,
    /// Cancelled jobs, watched by every worker.
    cancelled: Cancellations,
    /// The job-files operations, and the files of a submit.
    files: FilesApi,
    /// `[tenants]`: the quotas of each tenant.
    tenants: flotilla_config::TenantsConfig,
    /// Each tenant's API request budget.
    buckets: RateBuckets,
    /// Each tenant's unfinished jobs, as last counted.
    queued: QueuedCounts,
    /// The configured subagent types (`[subagents]`), a direct job's choice.
    types: Arc<Vec<SubagentType>>,
}

/// How long a count of a tenant's unfinished jobs answers for its submits.
const QUEUED_COUNT_FOR: std::time::Duration = std::time::Duration::from_secs(1);

/// Each tenant's count of unfinished jobs for `[tenants] max_queued_jobs`:
/// counted from the job index at most once per [`QUEUED_COUNT_FOR`] (one
/// counter at a time per tenant; the others wait for its count), plus the
/// jobs accepted since. A burst of a thousand submits so costs one index
/// listing, not a thousand concurrent ones (each a JetStream consumer).
#[derive(Default)]
struct QueuedCounts(dashmap::DashMap<Tenant, Arc<tokio::sync::Mutex<LastCount>>>);

/// When a tenant's unfinished jobs were last counted, and the count since.
type LastCount = Option<(std::time::Instant, usize)>;

impl QueuedCounts {
    /// The tenant's unfinished jobs, counted by `count` when the last count is stale.
    async fn get<F>(&self, tenant: &Tenant, count: impl FnOnce() -> F) -> Result<usize, BusError>
    where
        F: Future<Output = Result<usize, BusError>>,
    {
        let slot = self.0.entry(tenant.clone()).or_default().clone();
        let mut last = slot.lock().await;
        match *last {
            Some((at, n)) if at.elapsed() < QUEUED_COUNT_FOR => Ok(n),
            _ => {
                let n = count().await?;
                *last = Some((std::time::Instant::now(), n));
                Ok(n)
            }
        }
    }

    /// One more unfinished job of `tenant` (a submit was accepted).
    async fn accepted(&self, tenant: &Tenant) {
        let slot = self.0.get(tenant).map(|s| s.clone());
        if let Some(slot) = slot
            && let Some((_, n)) = slot.lock().await.as_mut()
        {
            *n += 1;
        }
    }
}

/// A token bucket per tenant: `api_burst` requests at once, refilled at
/// `api_rate` a second.
#[derive(Default)]
struct RateBuckets(dashmap::DashMap<Tenant, (f64, std::time::Instant)>);

impl RateBuckets {
    /// Takes one request of `tenant`'s budget at `now`, or tells how long
    /// until one is free.
    fn take(&self, tenant: &Tenant, rate: f64, burst: u32, now: std::time::Instant) -> Result<(), std::time::Duration> {
        let burst = f64::from(burst);
        let mut entry = self.0.entry(tenant.clone()).or_insert((burst, now));
        let (tokens, at) = *entry;
        let tokens = (tokens + now.saturating_duration_since(at).as_secs_f64() * rate).min(burst);
        if tokens >= 1.0 {
            *entry = (tokens - 1.0, now);
            Ok(())
        } else {
            *entry = (tokens, now);
            Err(std::time::Duration::from_secs_f64((1.0 - tokens) / rate))
        }
    }
}

/// A connected orchestrator: bus topology ensured and stores open, but not yet
/// answering the job API nor planning. The split lets the binary bind its HTTP
/// endpoints ([`Orchestrator::metrics_router`], the dashboard over
/// [`Orchestrator::jobs_reader`]) before any job runs, and keeps socket
/// serving out of this library.
pub struct Orchestrator {
    service: Arc<Service>,
    /// Subagent types whose queue depths a metrics scrape reads (`[subagents]`).
    types: Arc<Vec<SubagentType>>,
}

impl Orchestrator {
    /// Connects to NATS, ensures the bus topology and opens the job, report,
    /// checkpoint, file and cancellation stores.
    pub async fn connect(settings: &Settings) -> anyhow::Result<Self> {
        // A scripted planner counts every request in o200k tokens: build the
        // tables now, off the runtime's threads. A planner model that reports
        // its own usage leaves them to the budget checks, which rarely need
        // them (flotilla_agent::tokens::within), so an idle orchestrator does
        // not hold them (docs/PERFORMANCE.md, "idle orchestrator RSS").
        if settings.planner().is_ok_and(|p| settings.is_scripted(&p.model)) {
            tokio::task::spawn_blocking(flotilla_agent::tokens::warm_up).await?;
        }
        let bus = Bus::connect(&settings.nats, "flotilla-orchestrator", std::time::Duration::from_secs(30)).await?;
        bus.ensure_topology().await?;
        let jobs = JobStore::open(bus.clone()).await?;
        let reports = ReportRouter::start(bus.clone()).await?;
        let checkpoints = Checkpoints::open(&bus).await?;
        let cancelled = bus.cancellations().await?;
        // Reports are read against their consolidated record, not only their
        // stored checksum (docs/SECURITY.md, "Worker scope").
        let anchor = Arc::new(crate::reports::ConsolidatedReports::new(jobs.clone()));
        let files = bus.job_files(&settings.files).await?.with_report_anchor(anchor);
        jobs.retain(settings.jobs.retention(), files.clone());
        let files_api = FilesApi::new(files.clone(), jobs.clone(), &settings.files);
        let planner =
            Planner::new(settings, bus.clone(), jobs.clone(), reports, checkpoints, bus.cancellations().await?, files)?;
        let planner_config = settings.planner()?;
        let ttl = std::time::Duration::from_secs(planner_config.lease_ttl);
        let ownership = Ownership::open(&bus, orchestrator_id(), ttl).await?;
        let runner = JobRunner::new(
            bus.clone(),
            cancelled.clone(),
            jobs.clone(),
            Arc::new(planner),
            ownership,
            planner_config.concurrency,
            settings.tenants.clone(),
        );
        let types: Arc<Vec<SubagentType>> = Arc::new(settings.subagents.keys().cloned().collect());
        let service = Arc::new(Service {
            bus,
            jobs,
            runner: Arc::new(runner),
            cancelled,
            files: files_api,
            tenants: settings.tenants.clone(),
            buckets: RateBuckets::default(),
            queued: QueuedCounts::default(),
            types: types.clone(),
        });
        Ok(Self { service, types })
    }

    /// `GET /metrics` for Prometheus (src/metrics.rs); queue depths and the
    /// worker fleet are read from the bus on each scrape.
    pub fn metrics_router(&self) -> axum::Router {
        let metrics = self.service.jobs.metrics().clone();
        let (bus, types) = (self.service.bus.clone(), self.types.clone());
        let refresh = move || {
            let (metrics, bus, types) = (metrics.clone(), bus.clone(), types.clone());
            async move { metrics.refresh(&bus, &types).await }
        };
        flotilla_telemetry::metrics::router(self.service.jobs.metrics().registry().clone(), refresh)
    }

    /// Reads queue depths and the worker fleet every `every` (for OTLP
    /// export, which has no scrape to read them on) until `stop` fires.
    pub fn refresh_metrics_every(&self, every: std::time::Duration, stop: tokio_util::sync::CancellationToken) {
        let metrics = self.service.jobs.metrics().clone();
        let (bus, types) = (self.service.bus.clone(), self.types.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tick.tick() => metrics.refresh(&bus, &types).await,
                }
            }
        });
    }

    /// A read-only handle on every tenant's job records, for the web
    /// dashboard the binary serves (the `flotilla-dashboard` crate).
    pub fn jobs_reader(&self) -> JobsReader {
        JobsReader::new(self.service.jobs.clone())
    }

    /// Resumes every unfinished job, then answers the job API until `shutdown`
    /// completes; stops the planners (their jobs stay `running`, for the next
    /// orchestrator to resume) and waits for them before returning.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
        let service = self.service;
        let bus = service.bus.clone();
        service.runner.resume(&bus).await?;
        let stopped = CancellationToken::new();
        tokio::spawn(dead_letters::watch(bus.clone(), service.files.job_files(), stopped.clone()));
        let mut requests = bus.api_requests(API_QUEUE).await?;
        tracing::info!(api = %bus.subjects.api_all(), "orchestrator ready");
        tokio::pin!(shutdown);
        let ended = loop {
            tokio::select! {
                m = requests.next() => match m {
                    Some(m) => {
                        let s = service.clone();
                        tokio::spawn(async move { s.answer(m).await });
                    }
                    None => break Err(anyhow::anyhow!("API subscription closed")),
                },
                _ = &mut shutdown => break Ok(()),
            }
        };
        tracing::info!("orchestrator stopping");
        stopped.cancel();
        service.runner.stop().await;
        ended
    }
}

impl Service {
    async fn answer(&self, msg: ApiRequest) {
        if !msg.wants_reply() {
            tracing::debug!(subject = %msg.subject, "API message without reply subject ignored");
            return;
        }
        // `<prefix>.api.<tenant>.<op>`: NATS permissions decide who may use which tenant.
        let mut tokens = msg.subject.as_str().rsplit('.');
        let op = tokens.next().unwrap_or_default().to_string();
        let tenant = match tokens.next().map(Tenant::new) {
            Some(Ok(t)) => t,
            _ => {
                let reply = ApiReply::<()>::error(ErrorKind::Validation, "invalid tenant in the API subject");
                let _ = self.bus.reply(&msg, encode(reply)).await;
                return;
            }
        };
        let limits = self.tenants.limits(tenant.as_str());
        if let Err(wait) = self.buckets.take(&tenant, limits.api_rate, limits.api_burst, std::time::Instant::now()) {
            let mut reply = ApiReply::<()>::error(
                ErrorKind::Limit,
                format!(
                    "tenant {tenant} is over its job API rate ([tenants] api_rate = {}/s, api_burst = {}): retry in {} ms",
                    limits.api_rate,
                    limits.api_burst,
                    wait.as_millis().max(1)
                ),
            );
            if let protocol::ApiOutcome::Error(e) = &mut reply.outcome {
                e.retryable = true;
            }
            tracing::debug!(%tenant, op, "job API request refused: over the tenant's rate");
            let _ = self.bus.reply(&msg, encode(reply)).await;
            return;
        }
        let payload = self.dispatch(&op, tenant, &msg.payload).await;
        if let Err(e) = self.bus.reply(&msg, payload).await {
            tracing::warn!(error = %e, "API reply not sent");
        }
    }

    /// The answer of operation `op`: its request decoded (a malformed one
    /// is a validation error naming what is wrong), its handler run, its
    /// reply encoded ([`handle`]).
    async fn dispatch(&self, op: &str, tenant: Tenant, payload: &[u8]) -> bytes::Bytes {
        use protocol::files_api::{FilesCommitRequest, FilesGetRequest, FilesLsRequest, FilesPutRequest};
        use protocol::{ApprovalsRequest, ApproveRequest, Op, PruneRequest};
        let t = &tenant;
        match op {
            SubmitRequest::OPERATION => handle(payload, |r| self.submit(tenant.clone(), r)).await,
            StatusRequest::OPERATION => handle(payload, |r| self.status(t, r)).await,
            ListRequest::OPERATION => handle(payload, |r| self.list(t, r)).await,
            CancelRequest::OPERATION => handle(payload, |r| self.cancel(t, r)).await,
            PruneRequest::OPERATION => handle(payload, |r| crate::jobs::prune_request(&self.jobs, t, r)).await,
            ApprovalsRequest::OPERATION => handle(payload, |r| crate::approvals::list(&self.bus, t, r)).await,
            ApproveRequest::OPERATION => handle(payload, |r| crate::approvals::decide(&self.bus, t, r)).await,
            ResolveRequest::OPERATION => handle(payload, |r| self.resolve(t, r)).await,
            FilesLsRequest::OPERATION => handle(payload, |r| self.files.ls(t, r)).await,
            FilesGetRequest::OPERATION => handle(payload, |r| self.files.get(t, r)).await,
            FilesPutRequest::OPERATION => handle(payload, |r| self.files.put(t, r)).await,
            FilesCommitRequest::OPERATION => handle(payload, |r| self.files.commit(t, r)).await,
            other => {
                let (last, rest) = protocol::OPERATIONS.split_last().expect("the job API has operations");
                let known = format!("{} or {last}", rest.join(", "));
                encode::<()>(ApiReply::error(
                    ErrorKind::NotFound,
                    format!("unknown API operation {other:?}: use {known}"),
                ))
            }
        }
    }

    async fn submit(&self, tenant: Tenant, req: SubmitRequest) -> ApiReply<SubmitReply> {
        if req.input.trim().is_empty() {
            return ApiReply::error(ErrorKind::Validation, "the job text is empty");
        }
        if req.input.len() > MAX_INPUT_BYTES {
            return ApiReply::error(
                ErrorKind::Validation,
                format!("the job text is {} bytes; the limit is {MAX_INPUT_BYTES}", req.input.len()),
            );
        }
        if let Some(ty) = &req.subagent_type
            && !self.types.contains(ty)
        {
            let known: Vec<&str> = self.types.iter().map(SubagentType::as_str).collect();
            return ApiReply::error(
                ErrorKind::Validation,
                format!(
                    "no subagent type \"{ty}\" is configured for a direct job; the types are: {}",
                    known.join(", ")
                ),
            );
        }
        let max_queued = self.tenants.limits(tenant.as_str()).max_queued_jobs;
        match self.queued.get(&tenant, || self.jobs.unfinished_of(&tenant)).await {
            Ok(n) if n >= max_queued => {
                return ApiReply::error(
                    ErrorKind::Limit,
                    format!(
                        "tenant {tenant} has {n} unfinished jobs, its limit ([tenants] max_queued_jobs = {max_queued}): \
                         wait for some to end, or cancel some, then submit again"
                    ),
                );
            }
            Ok(_) => {}
            Err(e) => return ApiReply::error(ErrorKind::Transient, format!("job not stored: {e}")),
        }
        let id = JobId::new();
        // The job's files are stored before its record: no planner starts without them.
        if let Err(e) = self.files.adopt(&tenant, &id, &req.files).await {
            return ApiReply::error(e.kind, e.message);
        }
        let rec =
            JobRecord { subagent_type: req.subagent_type, ..JobRecord::new(id, tenant.clone(), req.input.clone()) };
        if let Err(e) = self.jobs.insert(rec).await {
            return ApiReply::error(ErrorKind::Transient, format!("job not stored: {e}"));
        }
        self.queued.accepted(&tenant).await;
        self.jobs.emit(id, JobEventKind::Submitted { input: req.input }).await;
        tracing::info!(job_id = %id, "job submitted");
        if !self.runner.start(id, tenant) {
            tracing::info!(job_id = %id, "no free planning slot here; the job waits for any orchestrator's");
        }
        ApiReply::ok(SubmitReply { job_id: id })
    }

    async fn cancel(&self, tenant: &Tenant, req: CancelRequest) -> ApiReply<CancelReply> {
        let rec = match self.jobs.get(&req.job_id).await {
            Ok(Some(rec)) if &rec.tenant == tenant => rec,
            Ok(_) => return ApiReply::error(ErrorKind::NotFound, format!("no job {}", req.job_id)),
            Err(e) => return ApiReply::error(ErrorKind::Transient, e.to_string()),
        };
        if rec.status.is_terminal() {
            return ApiReply::error(
                ErrorKind::Validation,
                format!("job {} already {}; nothing to cancel", rec.id, rec.status.as_str()),
            );
        }
        let reason = req.reason.unwrap_or_else(|| format!("cancelled by tenant {tenant}"));
        // 1. Every worker watches this bucket: it aborts the job's running subagents
        //    and reports any later task of the job `cancelled` without starting it.
        if let Err(e) = self.cancelled.record(&rec.id, &reason).await {
            return ApiReply::error(ErrorKind::Transient, format!("cancel not recorded: {e}"));
        }
        // 2. The planner stops, so it publishes no more tasks; its pending `task`
        //    calls return `cancelled` (and it reads the reason recorded above).
        //    Planned by another orchestrator, it learns from the same bucket.
        if !self.runner.cancel(&rec.id) {
            tracing::debug!(job_id = %rec.id, "cancelled job is planned by another orchestrator");
        }
        // 3. Queued tasks of the job leave the work queue.
        let purged_tasks = self.bus.tasks().purge_job(&rec.id, None).await.unwrap_or_else(|e| {
            tracing::warn!(job_id = %rec.id, error = %e, "queued tasks not purged; workers will drop them");
            0
        });
        // 4. Its pending approvals leave `approvals` (orchestrator/src/approvals/cancel.rs).
        let approvals = crate::approvals::cancel_job(&self.bus, &rec.id, &reason).await.unwrap_or_else(|e| {
            tracing::warn!(job_id = %rec.id, error = %e, "pending approvals not cancelled; listing settles them");
            0
        });
        tracing::info!(job_id = %rec.id, purged_tasks, approvals, %reason, "job cancelled");
        ApiReply::ok(CancelReply { job_id: rec.id, purged_tasks })
    }

    async fn status(&self, tenant: &Tenant, req: StatusRequest) -> ApiReply<StatusReply> {
        let limit = req.tasks_limit.unwrap_or(protocol::DEFAULT_TASKS_PAGE).min(protocol::MAX_TASKS_PAGE);
        match self.jobs.status(&req.job_id, Some(tenant), req.tasks_after, limit, req.tasks_filter.as_ref()).await {
            // Another tenant's job is indistinguishable from a missing one.
            Ok(Some(reply)) => ApiReply::ok(reply),
            Ok(_) => ApiReply::error(ErrorKind::NotFound, format!("no job {}", req.job_id)),
            Err(e) => ApiReply::error(ErrorKind::Transient, e.to_string()),
        }
    }

    /// The tenant's jobs whose id starts or ends with the request's short id, newest
    /// first, from the job index (one key listing of the tenant's entries:
    /// its cost follows the tenant's history, docs/PROTOCOL.md "Job API").
    async fn resolve(&self, tenant: &Tenant, req: ResolveRequest) -> ApiReply<ResolveReply> {
        let prefix = match protocol::check_job_prefix(&req.prefix) {
            Ok(p) => p,
            Err(e) => return ApiReply::error(ErrorKind::Validation, e),
        };
        let entries = match self.bus.job_index().await {
            Ok(index) => index.entries(Some(tenant), None).await,
            Err(e) => Err(e),
        };
        match entries {
            Ok(entries) => {
                let ids =
                    entries.into_iter().map(|e| e.id).filter(|id| protocol::matches_short_id(&id.to_string(), &prefix));
                ApiReply::ok(matching_jobs(ids))
            }
            Err(e) => ApiReply::error(ErrorKind::Transient, e.to_string()),
        }
    }

    async fn list(&self, tenant: &Tenant, req: ListRequest) -> ApiReply<ListReply> {
        let query = ListQuery {
            status: req.status,
            since: req.since,
            after: req.after,
            ..ListQuery::new(Some(tenant.clone()), req.limit.unwrap_or(100).min(protocol::MAX_LIST_PAGE))
        };
        match self.jobs.list(&query).await {
            Ok(page) => ApiReply::ok(ListReply { jobs: page.jobs, next_after: page.next_after }),
            Err(e) => ApiReply::error(ErrorKind::Transient, e.to_string()),
        }
    }
}

/// The reply listing `ids` (a job moving between statuses may appear twice
/// in the index): each once, newest first, at most
/// [`protocol::MAX_RESOLVE_CANDIDATES`] of them.
fn matching_jobs(ids: impl Iterator<Item = JobId>) -> ResolveReply {
    let mut ids: Vec<JobId> = ids.collect::<std::collections::BTreeSet<_>>().into_iter().collect();
    ids.reverse(); // UUIDv7: the greatest id is the newest job
    let matches = ids.len();
    ids.truncate(protocol::MAX_RESOLVE_CANDIDATES);
    ResolveReply { jobs: ids, matches }
}

/// This orchestrator's id in job leases: `<host>-<pid>-<random>`, unique
/// even when a restarted process gets the same pid.
fn orchestrator_id() -> String {
    let host = flotilla_telemetry::host::host_name();
    let nonce = uuid::Uuid::new_v4().simple().to_string();
    format!("{host}-{}-{}", std::process::id(), &nonce[..6])
}

/// Decodes `payload` as an `O` request and answers it with `answer`; a
/// request that does not decode is answered with a validation error. The one
/// place where job API requests are decoded and replies encoded, so an
/// operation is one request type ([`protocol::Op`]) and one handler.
async fn handle<O, F>(payload: &[u8], answer: impl FnOnce(O) -> F) -> bytes::Bytes
where
    O: protocol::Op,
    F: Future<Output = ApiReply<O::Reply>>,
{
    match protocol::decode::<O>(payload) {
        Ok(req) => encode(answer(req).await),
        Err(e) => encode::<O::Reply>(ApiReply::error(ErrorKind::Validation, e.to_string())),
    }
}

fn encode<T: serde::Serialize + serde::de::DeserializeOwned>(reply: ApiReply<T>) -> bytes::Bytes {
    protocol::encode(&reply).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenant_over_its_rate_waits_for_its_own_bucket_only() {
        let (acme, globex) = (Tenant::new("acme").unwrap(), Tenant::new("globex").unwrap());
        let buckets = RateBuckets::default();
        let t0 = std::time::Instant::now();
        assert!((0..3).all(|_| buckets.take(&acme, 10.0, 3, t0).is_ok()), "the burst");
        let wait = buckets.take(&acme, 10.0, 3, t0).unwrap_err();
        assert!(wait > std::time::Duration::ZERO && wait <= std::time::Duration::from_millis(100), "{wait:?}");
        assert!(buckets.take(&globex, 10.0, 3, t0).is_ok(), "another tenant's budget is its own");
        assert!(buckets.take(&acme, 10.0, 3, t0 + std::time::Duration::from_millis(100)).is_ok(), "refilled");
    }

    #[tokio::test]
    async fn a_burst_of_submits_counts_the_unfinished_jobs_once_and_adds_the_accepted() {
        let acme = Tenant::new("acme").unwrap();
        let queued = QueuedCounts::default();
        let listings = std::sync::atomic::AtomicUsize::new(0);
        let count = || async {
            listings.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            tokio::task::yield_now().await;
            Ok(5)
        };
        let counts = futures::future::join_all((0..50).map(|_| queued.get(&acme, count))).await;
        assert!(counts.iter().all(|n| matches!(n, Ok(5))), "{counts:?}");
        assert_eq!(listings.load(std::sync::atomic::Ordering::SeqCst), 1, "one listing for 50 concurrent submits");
        queued.accepted(&acme).await;
        assert_eq!(queued.get(&acme, count).await.unwrap(), 6, "the accepted job counts until the next listing");
    }

    #[test]
    fn resolve_lists_each_job_once_newest_first_and_counts_all() {
        let id = |n: u128| JobId(uuid::Uuid::from_u128(n));
        let reply = matching_jobs([id(1), id(2), id(1)].into_iter());
        assert_eq!((reply.jobs, reply.matches), (vec![id(2), id(1)], 2));
        let many = protocol::MAX_RESOLVE_CANDIDATES as u128 + 5;
        let reply = matching_jobs((0..many).map(id));
        assert_eq!(reply.matches, many as usize);
        assert_eq!(reply.jobs.len(), protocol::MAX_RESOLVE_CANDIDATES);
        assert_eq!(reply.jobs[0], id(many - 1), "the newest first");
    }
}
