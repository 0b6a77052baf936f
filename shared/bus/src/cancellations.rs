//! Cancelled jobs and tasks: the `<prefix>_cancelled` KV bucket (entries
//! expire after a day). Key `<job>` cancels a whole job (orchestrator/src/service.rs);
//! key `<job>.<task>` cancels one task (the planner's `cancel_task`,
//! orchestrator/src/planner/async_tasks.rs); the value is the reason. Every
//! worker watches the bucket from its current entries on
//! (workers/src/cancel.rs), so a worker started after the cancel also knows.

use async_nats::jetstream::kv;
use futures::{Stream, StreamExt};

use crate::{Bus, BusError};
use flotilla_protocol::ids::{JobId, TaskId};

/// The cancellations bucket.
#[derive(Clone)]
pub struct Cancellations {
    kv: kv::Store,
}

/// A job, or one task of it, recorded as cancelled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cancelled {
    /// The job.
    pub job: JobId,
    /// The task, when only that task was cancelled; `None`: the whole job.
    pub task: Option<TaskId>,
    /// Why, as recorded.
    pub reason: String,
}

impl Bus {
    /// The cancellations bucket (opened once per connection, see `buckets.rs`).
    pub async fn cancellations(&self) -> Result<Cancellations, BusError> {
        Ok(Cancellations { kv: self.cancelled().await? })
    }
}

/// The bucket key of a job (`task` = `None`) or of one task of it.
fn cancel_key(job: &JobId, task: Option<&TaskId>) -> String {
    match task {
        Some(task) => format!("{job}.{task}"),
        None => job.to_string(),
    }
}

/// Reads a bucket key back; `None` for keys that are neither shape.
fn parse_key(key: &str) -> Option<(JobId, Option<TaskId>)> {
    match key.split_once('.') {
        Some((job, task)) => Some((job.parse().ok()?, Some(task.parse().ok()?))),
        None => Some((key.parse().ok()?, None)),
    }
}

impl Cancellations {
    /// Records `job` as cancelled for `reason`.
    pub async fn record(&self, job: &JobId, reason: &str) -> Result<(), BusError> {
        self.put(cancel_key(job, None), reason).await
    }

    /// Records one task of `job` as cancelled for `reason`; the job goes on.
    pub async fn record_task(&self, job: &JobId, task: &TaskId, reason: &str) -> Result<(), BusError> {
        self.put(cancel_key(job, Some(task)), reason).await
    }

    async fn put(&self, key: String, reason: &str) -> Result<(), BusError> {
        self.kv
            .put(&key, reason.to_string().into_bytes().into())
            .await
            .map_err(|e| BusError::new(format!("cannot record the cancel of {key}"), e))?;
        Ok(())
    }

    /// The reason `job` was cancelled, `None` when it was not.
    pub async fn reason(&self, job: &JobId) -> Result<Option<String>, BusError> {
        self.get(cancel_key(job, None)).await
    }

    /// The reason one task of `job` was cancelled, `None` when it was not
    /// (a cancelled job cancels its tasks too: see [`Self::reason`]).
    pub async fn task_reason(&self, job: &JobId, task: &TaskId) -> Result<Option<String>, BusError> {
        self.get(cancel_key(job, Some(task))).await
    }

    async fn get(&self, key: String) -> Result<Option<String>, BusError> {
        let value =
            self.kv.get(&key).await.map_err(|e| BusError::new(format!("cannot read the cancel of {key}"), e))?;
        Ok(value.map(|v| String::from_utf8_lossy(&v).into_owned()))
    }

    /// Every cancellation, of jobs and of tasks: those recorded so far, then
    /// new ones as they are recorded. Keys of neither shape and deletions are
    /// skipped.
    pub async fn watch(&self) -> Result<impl Stream<Item = Cancelled> + use<>, BusError> {
        let updates =
            self.kv.watch_with_history(">").await.map_err(|e| BusError::new("cannot watch cancellations", e))?;
        Ok(updates.filter_map(|entry| async move {
            match entry {
                Ok(e) if e.operation == kv::Operation::Put => {
                    let (job, task) = parse_key(&e.key)?;
                    Some(Cancelled { job, task, reason: String::from_utf8_lossy(&e.value).into_owned() })
                }
                Ok(_) => None,
                Err(e) => {
                    tracing::warn!(error = %e, "cancel watch hiccup");
                    None
                }
            }
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_and_task_keys_read_back_and_other_keys_are_skipped() {
        let (job, task) = (JobId::new(), TaskId::new());
        assert_eq!(parse_key(&cancel_key(&job, None)), Some((job, None)));
        assert_eq!(parse_key(&cancel_key(&job, Some(&task))), Some((job, Some(task))));
        assert_eq!(cancel_key(&job, Some(&task)), format!("{job}.{task}"));
        assert_eq!(parse_key("not-a-job"), None);
        assert_eq!(parse_key(&format!("{job}.nope")), None);
    }
}
