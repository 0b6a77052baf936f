//! A read-only handle on every tenant's job records, for observers that live
//! outside this library. The web dashboard (the `flotilla-dashboard` crate,
//! bound by the `flotilla` binary: HTTP serving belongs to the binaries)
//! shows every tenant's jobs, which the job API, one tenant's at a time,
//! cannot list; this handle is all it gets of the job store, so it can list
//! and read jobs but never change one. Workers and events it reads, and
//! jobs it changes, through the job-API client (`flotilla-client`).

use flotilla_bus::BusError;
use flotilla_protocol::ids::{JobId, TaskId, Tenant};
use flotilla_protocol::{JobStatus, ListReply, StatusReply, TaskFilter};

use crate::jobs::{JobStore, ListQuery};

/// Reads job records; writes nothing.
/// Obtained from [`crate::service::Orchestrator::jobs_reader`].
#[derive(Clone)]
pub struct JobsReader {
    /// Job records of every tenant.
    jobs: JobStore,
}

impl JobsReader {
    pub(crate) fn new(jobs: JobStore) -> Self {
        Self { jobs }
    }

    /// One page of jobs, newest first: of `tenant` (every tenant's when
    /// `None`), with `status` when given, older than `after` (the previous
    /// page's `next_after`), at most `limit`.
    pub async fn list(
        &self,
        tenant: Option<Tenant>,
        status: Option<JobStatus>,
        after: Option<JobId>,
        limit: usize,
    ) -> Result<ListReply, BusError> {
        let query = ListQuery { status, after, ..ListQuery::new(tenant, limit) };
        let page = self.jobs.list(&query).await?;
        Ok(ListReply { jobs: page.jobs, next_after: page.next_after })
    }

    /// Job `id`'s header with at most `limit` of its tasks after `after`
    /// (of those matching `filter`, when given), whatever its tenant
    /// (`None` when there is no such job).
    pub async fn status(
        &self,
        id: &JobId,
        after: Option<TaskId>,
        limit: usize,
        filter: Option<&TaskFilter>,
    ) -> Result<Option<StatusReply>, BusError> {
        self.jobs.status(id, None, after, limit, filter).await
    }
}
