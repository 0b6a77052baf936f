//! The MCP tasks extension (`io.modelcontextprotocol/tasks`, the SEP-2663
//! shape rmcp 3.11 implements) for the long `submit_job` (docs/MCP.md, "Use
//! Flotilla from an MCP host"). A host that declares the extension gets a
//! task handle from `submit_job` instead of a bare job id, then polls
//! `tasks/get` (the job_status result is inlined once the job ends) and may
//! `tasks/cancel` it.
//!
//! The task id is the job id and every answer is read from the job API, so
//! the job stays the durable truth: nothing is kept in this process, a
//! restarted `mcp serve` answers for tasks created before, and a task is
//! visible only to the tenant the job belongs to (the caller's credential,
//! src/tools.rs `JobTools::api`).

use flotilla_protocol::ids::JobId;
use flotilla_protocol::{ErrorInfo, ErrorKind, JobRecord, JobStatus};
use rmcp::ErrorData;
use rmcp::RoleServer;
use rmcp::model::{CallToolResult, CreateTaskResult, DetailedTask, JsonObject, Task, TaskPayload, TaskStatus};
use rmcp::service::RequestContext;

use super::schema::JobStatusResult;
use flotilla_client::Client;

/// How often a host should poll `tasks/get`: jobs take seconds to hours, and
/// each poll is one job API request.
const POLL_INTERVAL_MS: u64 = 2_000;

/// Whether the request's client declared the tasks extension (in the
/// request's `_meta` or at `initialize`): only then may `submit_job` answer
/// with a task handle.
pub fn requested(ctx: &RequestContext<RoleServer>) -> bool {
    ctx.client_capabilities().is_some_and(|caps| caps.supports_tasks())
}

/// The handle `submit_job` returns for a just-submitted job.
pub fn created(job: &JobRecord) -> CreateTaskResult {
    CreateTaskResult::new(task(job, status(job.status)))
}

/// The job `task_id` names, as the caller sees it; an id that is not a job of
/// the caller's tenant is an unknown task (invalid params, as rmcp's own task
/// manager answers).
pub async fn job(api: &Client, task_id: &str) -> Result<JobRecord, ErrorData> {
    let unknown = |why: String| ErrorData::invalid_params(format!("unknown task {task_id:?}: {why}"), None);
    let id: JobId = task_id.parse().map_err(|e| unknown(format!("not a job id ({e})")))?;
    api.status(id).await.map_err(|e| match e.downcast_ref::<ErrorInfo>() {
        Some(info) if info.kind == ErrorKind::NotFound => unknown(format!("{e:#}")),
        _ => error(e),
    })
}

/// A job API failure as an MCP error: the API's refusal (e.g. cancelling an
/// ended job) is the caller's to fix (invalid params, with its message); the
/// bus failing is the server's (internal error).
pub fn error(e: anyhow::Error) -> ErrorData {
    if e.downcast_ref::<ErrorInfo>().is_some() {
        ErrorData::invalid_params(format!("{e:#}"), None)
    } else {
        ErrorData::internal_error(format!("{e:#}"), None)
    }
}

/// `tasks/get`: the job's state as a task. A completed job carries the
/// job_status result; a failed one too, as a tool error (`isError: true`),
/// since the tool call itself worked and the host's model should read why.
pub fn detailed(job: JobRecord) -> DetailedTask {
    let state = status(job.status);
    let mut base = task(&job, state);
    let payload = match job.status {
        JobStatus::Submitted | JobStatus::Running => {
            let c = &job.task_counts;
            base = base.with_status_message(format!(
                "{}: {} of {} tasks completed",
                job.status.as_str(),
                c.completed,
                job.tasks_total
            ));
            TaskPayload::Working
        }
        JobStatus::Cancelled => TaskPayload::Cancelled,
        JobStatus::Completed | JobStatus::Failed => {
            let failed = job.status == JobStatus::Failed;
            let value = serde_json::to_value(JobStatusResult::from(job)).unwrap_or_default();
            let result =
                if failed { CallToolResult::structured_error(value) } else { CallToolResult::structured(value) };
            TaskPayload::Completed { result: object(&result) }
        }
    };
    DetailedTask::new(base, payload)
}

/// The task status a job status stands for.
fn status(s: JobStatus) -> TaskStatus {
    match s {
        JobStatus::Submitted | JobStatus::Running => TaskStatus::Working,
        JobStatus::Completed | JobStatus::Failed => TaskStatus::Completed,
        JobStatus::Cancelled => TaskStatus::Cancelled,
    }
}

/// The task fields every answer shares: id, times, no expiry (the job record
/// is kept), the polling hint.
fn task(job: &JobRecord, status: TaskStatus) -> Task {
    let time = |t: time::OffsetDateTime| t.format(&time::format_description::well_known::Rfc3339).unwrap_or_default();
    Task::new(job.id.to_string(), status, time(job.created_at), time(job.updated_at))
        .with_poll_interval_ms(POLL_INTERVAL_MS)
}

/// A tool result as the JSON object a completed task inlines.
fn object(result: &CallToolResult) -> JsonObject {
    match serde_json::to_value(result) {
        Ok(serde_json::Value::Object(o)) => o,
        _ => JsonObject::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_protocol::ids::Tenant;

    fn job(status: JobStatus) -> JobRecord {
        let mut j = JobRecord::new(JobId::new(), Tenant::default(), "margin".into());
        j.status = status;
        j
    }

    #[test]
    fn a_job_maps_to_its_task_with_the_job_id_as_task_id() {
        let j = job(JobStatus::Running);
        let t = detailed(j.clone());
        assert_eq!((t.task.task_id.as_str(), t.status()), (j.id.to_string().as_str(), TaskStatus::Working));
        assert!(t.task.status_message.unwrap().starts_with("running: 0 of 0"));
        assert_eq!(detailed(job(JobStatus::Cancelled)).status(), TaskStatus::Cancelled);
        assert_eq!(created(&job(JobStatus::Submitted)).task.status, TaskStatus::Working);
    }

    #[test]
    fn an_ended_job_inlines_its_job_status_result_and_a_failure_is_a_tool_error() {
        let mut j = job(JobStatus::Completed);
        j.answer = Some("0.375".into());
        let TaskPayload::Completed { result } = detailed(j).payload else { panic!("completed") };
        assert_eq!(result["structuredContent"]["answer"], "0.375");
        assert_ne!(result.get("isError"), Some(&serde_json::json!(true)));
        let TaskPayload::Completed { result } = detailed(job(JobStatus::Failed)).payload else { panic!("completed") };
        assert_eq!(
            (&result["isError"], &result["structuredContent"]["status"]),
            (&serde_json::json!(true), &serde_json::json!("failed"))
        );
    }
}
