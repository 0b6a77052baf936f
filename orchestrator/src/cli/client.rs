//! The job API as seen from the CLI: typed request/reply over the bus.

use std::time::Duration;

use flotilla_shared::bus::Bus;
use flotilla_shared::ids::{JobId, Tenant};
use flotilla_shared::protocol::{
    ApiReply, JobRecord, JobStatus, ListReply, ListRequest, SCHEMA_VERSION, StatusRequest, SubmitReply, SubmitRequest,
};

const TIMEOUT: Duration = Duration::from_secs(10);

/// Submits a job; returns its id.
pub async fn submit(bus: &Bus, input: String, tenant: Tenant) -> anyhow::Result<JobId> {
    let req = SubmitRequest { v: SCHEMA_VERSION, input, tenant };
    let reply: ApiReply<SubmitReply> = bus.request("submit", &req, TIMEOUT).await?;
    Ok(reply.into_result().map_err(|e| anyhow::anyhow!("submit refused: {e}"))?.job_id)
}

/// A job's record.
pub async fn status(bus: &Bus, job_id: JobId) -> anyhow::Result<JobRecord> {
    let reply: ApiReply<JobRecord> =
        bus.request("status", &StatusRequest { v: SCHEMA_VERSION, job_id }, TIMEOUT).await?;
    reply.into_result().map_err(|e| anyhow::anyhow!("{e}"))
}

/// Job summaries, newest first.
pub async fn list(bus: &Bus, status: Option<JobStatus>, limit: usize) -> anyhow::Result<ListReply> {
    let req = ListRequest { v: SCHEMA_VERSION, status, limit: Some(limit) };
    let reply: ApiReply<ListReply> = bus.request("list", &req, TIMEOUT).await?;
    reply.into_result().map_err(|e| anyhow::anyhow!("{e}"))
}
