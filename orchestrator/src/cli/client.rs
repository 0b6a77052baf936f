//! The job API as seen from the CLI: typed request/reply over the bus, on the
//! subjects of one tenant.

use std::time::Duration;

use flotilla_bus::Bus;
use flotilla_protocol::ids::{JobId, TaskId, Tenant};
use flotilla_protocol::{
    ApiReply, CancelReply, CancelRequest, JobRecord, JobStatus, ListReply, ListRequest, ResolveReply, ResolveRequest,
    SCHEMA_VERSION, StatusReply, StatusRequest, SubmitReply, SubmitRequest,
};

use super::error::CliError;
use super::jobref::JobRef;

const TIMEOUT: Duration = Duration::from_secs(10);

/// A connected client acting for one tenant.
#[derive(Clone)]
pub struct ApiClient {
    /// Carries the API requests and, for `watch`, the event subscriptions.
    bus: Bus,
    /// Whose jobs: every request goes to this tenant's API subjects, which the
    /// NATS credentials may confine it to (docs/SECURITY.md).
    tenant: Tenant,
}

impl ApiClient {
    /// A client of `tenant`'s jobs over `bus`.
    pub fn new(bus: Bus, tenant: Tenant) -> Self {
        Self { bus, tenant }
    }

    /// The connection, for requests beyond the typed ones below and for
    /// following events.
    pub fn bus(&self) -> &Bus {
        &self.bus
    }

    /// The tenant this client acts for.
    pub fn tenant(&self) -> &Tenant {
        &self.tenant
    }

    /// Submits a job; returns its id.
    pub async fn submit(&self, input: String) -> anyhow::Result<JobId> {
        let req = SubmitRequest { v: SCHEMA_VERSION, input, files: vec![] };
        let reply: ApiReply<SubmitReply> = self.bus.request(&self.tenant, "submit", &req, TIMEOUT).await?;
        Ok(api_result(reply, "submit refused")?.job_id)
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
        let req = StatusRequest { v: SCHEMA_VERSION, job_id, tasks_limit: limit, tasks_after: after };
        let reply: ApiReply<StatusReply> = self.bus.request(&self.tenant, "status", &req, TIMEOUT).await?;
        api_result(reply, "status")
    }

    /// Cancels a job.
    pub async fn cancel(&self, job_id: JobId, reason: Option<String>) -> anyhow::Result<CancelReply> {
        let req = CancelRequest { v: SCHEMA_VERSION, job_id, reason };
        let reply: ApiReply<CancelReply> = self.bus.request(&self.tenant, "cancel", &req, TIMEOUT).await?;
        api_result(reply, "cancel refused")
    }

    /// Job summaries, newest first.
    pub async fn list(&self, status: Option<JobStatus>, limit: usize) -> anyhow::Result<ListReply> {
        let req = ListRequest { v: SCHEMA_VERSION, status, limit: Some(limit), ..Default::default() };
        let reply: ApiReply<ListReply> = self.bus.request(&self.tenant, "list", &req, TIMEOUT).await?;
        api_result(reply, "list")
    }

    /// The job a person named: a whole id as given, or the one job of this
    /// tenant whose id starts or ends with a short id (the `resolve` operation). No
    /// match is a `not_found` error; several are an error listing them.
    pub async fn resolve(&self, job: &JobRef) -> anyhow::Result<JobId> {
        let prefix = match job {
            JobRef::Id(id) => return Ok(*id),
            JobRef::Prefix(p) => p,
        };
        let req = ResolveRequest { v: SCHEMA_VERSION, prefix: prefix.clone() };
        let reply: ApiReply<ResolveReply> = self.bus.request(&self.tenant, "resolve", &req, TIMEOUT).await?;
        let found = api_result(reply, "resolving a job id prefix")?;
        match found.jobs.as_slice() {
            [id] if found.matches == 1 => Ok(*id),
            [] => Err(CliError::new(
                "not_found",
                format!("no job of tenant {} has an id starting or ending with {prefix}", self.tenant),
            )
            .into()),
            candidates => {
                let listed: Vec<String> = candidates.iter().map(|id| id.to_string()).collect();
                let more = found.matches.saturating_sub(listed.len());
                let more = if more > 0 { format!(" and {more} more") } else { String::new() };
                let mut e = CliError::new(
                    "validation",
                    format!(
                        "short job id {prefix} is ambiguous: {} jobs match ({}{more}); give more characters",
                        found.matches,
                        listed.join(", ")
                    ),
                );
                e.candidates = listed;
                Err(e.into())
            }
        }
    }
}

/// The `ok` value of a reply, or its error kept whole (kind and message)
/// under `doing`, so `--json` prints the API's kind (src/cli/error.rs).
pub fn api_result<T>(reply: ApiReply<T>, doing: &'static str) -> anyhow::Result<T> {
    reply.into_result().map_err(|e| anyhow::Error::new(e).context(doing))
}
