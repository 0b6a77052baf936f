//! Finished jobs written straight into the jobs bucket and the job index, as
//! the orchestrator's job store files a completed job (a header and an index
//! entry holding its summary): the history that `flotilla bench --only load`
//! and the history tests list. Running tens of thousands of real jobs only to
//! have a history would take most of an hour on a small machine; listing cost
//! depends on what is stored, not on how it got there.

use futures::{StreamExt, TryStreamExt};

use flotilla_protocol::ids::{JobId, Tenant};
use flotilla_protocol::{self as protocol, JobRecord, JobStatus, JobSummary};

use crate::{BusError, JobIndex, JobRecords, job_keys};

/// Writes at once.
const CONCURRENCY: usize = 64;

/// Writes `n` completed jobs of `tenant` (answer "done", input
/// `history job <id>`); returns their ids, oldest first.
pub async fn seed_finished_jobs(
    records: &JobRecords,
    index: &JobIndex,
    tenant: &Tenant,
    n: usize,
) -> Result<Vec<JobId>, BusError> {
    let ids: Vec<JobId> = (0..n).map(|_| JobId::new()).collect();
    futures::stream::iter(ids.clone())
        .map(|id| async move {
            let mut rec = JobRecord::new(id, tenant.clone(), format!("history job {id}"));
            rec.status = JobStatus::Completed;
            rec.answer = Some("done".into());
            records.create(&job_keys::header(&id), protocol::encode(&rec).into()).await?;
            let summary = JobSummary {
                id,
                tenant: tenant.clone(),
                status: rec.status,
                input: rec.input.clone(),
                tasks: 0,
                task_counts: rec.task_counts,
                usage: rec.usage,
                created_at: rec.created_at,
                updated_at: rec.updated_at,
            };
            let summary = serde_json::to_vec(&summary).expect("a job summary serializes");
            index.put(tenant, JobStatus::Completed, &id, summary.into()).await
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<()>()
        .await?;
    Ok(ids)
}
