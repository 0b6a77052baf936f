//! The job API as a client sees it: typed request/reply over the bus, on the
//! subjects of one tenant. Every operation goes through [`Client::call`],
//! whose request type names the operation and its reply
//! ([`flotilla_protocol::Op`]).

use std::time::Duration;

use flotilla_bus::{Bus, BusError};
use flotilla_protocol::ids::{JobId, TaskId, Tenant};
use flotilla_protocol::{
    ApiReply, ApprovalsReply, ApprovalsRequest, CancelReply, CancelRequest, ErrorKind, JobRecord, JobStatus, ListReply,
    ListRequest, MAX_LIST_PAGE, Op, ResolveRequest, SCHEMA_VERSION, StatusReply, StatusRequest, SubmitRequest,
    TaskFilter, WorkerHeartbeat,
};

use crate::jobref::JobRef;

/// How long one job API request may take unless the call says otherwise.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// A connected client acting for one tenant.
#[derive(Clone)]
pub struct Client {
    /// Carries the API requests and the event subscriptions.
    bus: Bus,
    /// Whose jobs: every request goes to this tenant's API subjects, which the
    /// NATS credentials may confine it to (docs/SECURITY.md).
    tenant: Tenant,
}

impl Client {
    /// A client of `tenant`'s jobs over `bus`.
    pub fn new(bus: Bus, tenant: Tenant) -> Self {
        Self { bus, tenant }
    }

    /// The same connection acting for another tenant (a dashboard or an MCP
    /// server acting for the tenant of each request's credential).
    pub fn for_tenant(&self, tenant: Tenant) -> Self {
        Self { bus: self.bus.clone(), tenant }
    }

    /// The connection, for what is not the job API (audit records, the
    /// events stream).
    pub fn bus(&self) -> &Bus {
        &self.bus
    }

    /// The tenant this client acts for.
    pub fn tenant(&self) -> &Tenant {
        &self.tenant
    }

    /// Sends `req` on its operation's subject within [`TIMEOUT`]; an error
    /// reply becomes an error kept whole under `doing` ([`api_result`]), a
    /// bus failure stays the bus's error.
    pub async fn call<O: Op>(&self, req: &O, doing: &'static str) -> anyhow::Result<O::Reply> {
        self.call_within(req, TIMEOUT, doing).await
    }

    /// [`Client::call`] with its own time budget.
    pub async fn call_within<O: Op>(
        &self,
        req: &O,
        timeout: Duration,
        doing: &'static str,
    ) -> anyhow::Result<O::Reply> {
        api_result(self.request(req, timeout).await?, doing)
    }

    /// Sends `req` and returns the reply as it came, error replies included.
    pub async fn request<O: Op>(&self, req: &O, timeout: Duration) -> Result<ApiReply<O::Reply>, BusError> {
        self.bus.request(&self.tenant, O::OPERATION, req, timeout).await
    }

    /// Submits a job without files; returns its id at once.
    pub async fn submit(&self, input: String) -> anyhow::Result<JobId> {
        let req = SubmitRequest { v: SCHEMA_VERSION, input, files: vec![], subagent_type: None };
        Ok(self.call(&req, "submit refused").await?.job_id)
    }

    /// A job's header with the first page of its tasks.
    pub async fn status(&self, job_id: JobId) -> anyhow::Result<JobRecord> {
        Ok(self.status_page(job_id, None, None).await?.job)
    }

    /// A job's header with one page of its tasks: at most `limit` (the
    /// orchestrator's default page when `None`), dispatched after `after`.
    pub async fn status_page(
        &self,
        job_id: JobId,
        limit: Option<usize>,
        after: Option<TaskId>,
    ) -> anyhow::Result<StatusReply> {
        let req =
            StatusRequest { v: SCHEMA_VERSION, job_id, tasks_limit: limit, tasks_after: after, tasks_filter: None };
        self.call(&req, "status").await
    }

    /// A job's header with one page of the tasks matching `filter` (at most
    /// `limit`, after `after`) and how many match in all (`tasks_matched`).
    pub async fn filtered_page(
        &self,
        job_id: JobId,
        filter: TaskFilter,
        limit: Option<usize>,
        after: Option<TaskId>,
    ) -> anyhow::Result<StatusReply> {
        let req = StatusRequest {
            v: SCHEMA_VERSION,
            job_id,
            tasks_limit: limit,
            tasks_after: after,
            tasks_filter: Some(filter),
        };
        self.call(&req, "status").await
    }

    /// Cancels a job.
    pub async fn cancel(&self, job_id: JobId, reason: Option<String>) -> anyhow::Result<CancelReply> {
        self.call(&CancelRequest { v: SCHEMA_VERSION, job_id, reason }, "cancel refused").await
    }

    /// Job summaries, newest first.
    pub async fn list(&self, status: Option<JobStatus>, limit: usize) -> anyhow::Result<ListReply> {
        let req = ListRequest { v: SCHEMA_VERSION, status, limit: Some(limit), ..Default::default() };
        self.call(&req, "list").await
    }

    /// Follows the pages of `first` until `limit` jobs or the last page
    /// (`flotilla jobs --limit`, timed by `flotilla bench --only load`); the
    /// reply's `next_after` is where a further listing would go on.
    pub async fn list_pages(&self, first: ListRequest, limit: usize) -> anyhow::Result<ListReply> {
        let mut jobs = Vec::new();
        let mut after = first.after;
        let mut next_after = None;
        while jobs.len() < limit {
            let req = ListRequest { limit: Some((limit - jobs.len()).min(MAX_LIST_PAGE)), after, ..first.clone() };
            let page = self.call(&req, "list").await?;
            jobs.extend(page.jobs);
            next_after = page.next_after.filter(|next| Some(*next) != after);
            match next_after {
                Some(next) => after = Some(next),
                None => break,
            }
        }
        Ok(ListReply { jobs, next_after })
    }

    /// The tenant's pending approval requests (of one job when `job_id` is given).
    pub async fn approvals(&self, job_id: Option<JobId>) -> anyhow::Result<ApprovalsReply> {
        self.call(&ApprovalsRequest { v: SCHEMA_VERSION, job_id }, "approvals").await
    }

    /// The workers whose heartbeat is live (the workers bucket, not the job API).
    pub async fn live_workers(&self) -> Result<Vec<WorkerHeartbeat>, BusError> {
        self.bus.live_workers().await
    }

    /// The task queue of every subagent type a worker ever declared a
    /// consumer for: pending, in flight, redelivered, the oldest waiting
    /// task's time and dead letters (the tasks and dead-letter streams, not
    /// the job API; sorted by type).
    pub async fn queues(&self) -> Result<Vec<flotilla_protocol::QueueStats>, BusError> {
        self.bus.tasks().stats().await
    }

    /// The job a person named: a whole id as given, or the one job of this
    /// tenant whose id starts or ends with a short id (the `resolve` operation). No
    /// match is a `not_found` error; several are an error listing them
    /// ([`Unresolved`]).
    pub async fn resolve(&self, job: &JobRef) -> anyhow::Result<JobId> {
        let prefix = match job {
            JobRef::Id(id) => return Ok(*id),
            JobRef::Prefix(p) => p,
        };
        let req = ResolveRequest { v: SCHEMA_VERSION, prefix: prefix.clone() };
        let found = self.call(&req, "resolving a job id prefix").await?;
        match found.jobs.as_slice() {
            [id] if found.matches == 1 => Ok(*id),
            [] => Err(Unresolved {
                kind: ErrorKind::NotFound,
                message: format!("no job of tenant {} has an id starting or ending with {prefix}", self.tenant),
                candidates: Vec::new(),
            }
            .into()),
            candidates => {
                let listed: Vec<String> = candidates.iter().map(|id| id.to_string()).collect();
                let more = found.matches.saturating_sub(listed.len());
                let more = if more > 0 { format!(" and {more} more") } else { String::new() };
                Err(Unresolved {
                    kind: ErrorKind::Validation,
                    message: format!(
                        "short job id {prefix} is ambiguous: {} jobs match ({}{more}); give more characters",
                        found.matches,
                        listed.join(", ")
                    ),
                    candidates: listed,
                }
                .into())
            }
        }
    }
}

/// A short job id that names no job or several of this tenant's.
#[derive(Debug)]
pub struct Unresolved {
    /// `not_found` (no match) or `validation` (ambiguous).
    pub kind: ErrorKind,
    /// What is wrong and what to do.
    pub message: String,
    /// The job ids an ambiguous prefix matches (empty for no match).
    pub candidates: Vec<String>,
}

impl std::fmt::Display for Unresolved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Unresolved {}

/// The `ok` value of a reply, or its error kept whole (kind and message)
/// under `doing`, so a caller finds the API's kind in the error's chain
/// (the CLI's `--json`, the dashboard's HTTP status).
pub fn api_result<T>(reply: ApiReply<T>, doing: &'static str) -> anyhow::Result<T> {
    reply.into_result().map_err(|e| anyhow::Error::new(e).context(doing))
}
