//! A read-only handle on every tenant's jobs, for observers that live outside
//! this library. The web dashboard is served by the `flotilla` binary
//! (src/cli/dashboard/: HTTP serving belongs to the binaries), yet
//! it shows what only the orchestrator's stores know; this handle is all it
//! gets, so it can list and read jobs, workers and events but never change a job.

use flotilla_bus::{Bus, BusError};
use flotilla_protocol::ids::{JobId, TaskId, Tenant};
use flotilla_protocol::{JobStatus, ListReply, StatusReply, WorkerHeartbeat};
use futures::Stream;

use crate::events::{self, Event, Scope};
use crate::jobs::{JobStore, ListQuery};

/// Reads job records, live workers and job events; writes nothing.
/// Obtained from [`crate::service::Orchestrator::jobs_reader`].
#[derive(Clone)]
pub struct JobsReader {
    /// For the events stream and the workers bucket.
    bus: Bus,
    /// Job records of every tenant.
    jobs: JobStore,
}

impl JobsReader {
    pub(crate) fn new(bus: Bus, jobs: JobStore) -> Self {
        Self { bus, jobs }
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

    /// Job `id`'s header with at most `limit` of its tasks after `after`,
    /// whatever its tenant (`None` when there is no such job).
    pub async fn status(
        &self,
        id: &JobId,
        after: Option<TaskId>,
        limit: usize,
    ) -> Result<Option<StatusReply>, BusError> {
        self.jobs.status(id, None, after, limit).await
    }

    /// The workers whose heartbeat is live.
    pub async fn live_workers(&self) -> Result<Vec<WorkerHeartbeat>, BusError> {
        self.bus.live_workers().await
    }

    /// Events of `scope` as [`events::follow`] reads them: a job's from its
    /// first stored event, wider scopes from now on.
    pub async fn follow(
        &self,
        scope: Scope,
        with_progress: bool,
    ) -> anyhow::Result<impl Stream<Item = anyhow::Result<Event>> + use<>> {
        events::follow(&self.bus, scope, with_progress).await
    }
}
