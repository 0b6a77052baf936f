//! The dashboard's writes: submit (with files), cancel, the approvals list
//! and approval decisions. Each is a request on the job API of the tenant
//! it acts for (`<prefix>.api.<tenant>.<op>`, docs/PROTOCOL.md), exactly as
//! the CLI sends it (orchestrator/cli/src/commands/submit.rs, files.rs, cancel.rs, approve.rs) through the same client (`flotilla-client`), so
//! the orchestrator's own checks apply; the dashboard never writes a store.
//! Both the JSON API (src/api.rs) and the HTML forms
//! (src/forms.rs) call these.

use std::time::Duration;

use axum::http::StatusCode;
use flotilla_client::{NewFile as Upload, TIMEOUT};
use flotilla_protocol::ids::{JobId, TaskId, Tenant};
use flotilla_protocol::path::FilePath;
use flotilla_protocol::{
    ApprovalsReply, ApprovalsRequest, ApproveReply, ApproveRequest, CancelReply, CancelRequest, Decision, ErrorInfo,
    ErrorKind, JobRecord, Op, SCHEMA_VERSION,
};

use super::guard::Principal;
use super::{Dash, Failure};

/// A file sent with a submit: its job path and its bytes.
pub struct NewFile {
    pub path: FilePath,
    pub bytes: Vec<u8>,
}

/// The HTTP status of an API error reply's kind.
pub fn status_of(kind: ErrorKind) -> StatusCode {
    match kind {
        ErrorKind::Validation => StatusCode::BAD_REQUEST,
        ErrorKind::Business | ErrorKind::Cancelled => StatusCode::CONFLICT,
        ErrorKind::Permission => StatusCode::FORBIDDEN,
        ErrorKind::NotFound => StatusCode::NOT_FOUND,
        ErrorKind::Limit => StatusCode::PAYLOAD_TOO_LARGE,
        ErrorKind::Transient => StatusCode::SERVICE_UNAVAILABLE,
        ErrorKind::Timeout => StatusCode::GATEWAY_TIMEOUT,
        ErrorKind::Bug => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// A failed upload or submit: an error reply keeps its kind as the HTTP
/// status and its message, anything else is the bus failing (503).
pub(crate) fn refused(e: anyhow::Error) -> Failure {
    match e.chain().find_map(|c| c.downcast_ref::<ErrorInfo>()) {
        Some(info) => Failure(status_of(info.kind), info.message.clone()),
        None => super::unavailable(format!("{e:#}")),
    }
}

impl Dash {
    /// One typed request on `tenant`'s job API; an error reply keeps its kind
    /// as the HTTP status, a bus failure is 503.
    pub(crate) async fn call<O: Op>(&self, tenant: &Tenant, req: &O, timeout: Duration) -> Result<O::Reply, Failure> {
        let reply = self.client.for_tenant(tenant.clone()).request(req, timeout).await.map_err(super::unavailable)?;
        reply.into_result().map_err(|e| Failure(status_of(e.kind), e.message))
    }

    /// Job `id`'s header, if `who` sees it (404 otherwise, as for no job).
    pub async fn visible_job(&self, who: &Principal, id: &str) -> Result<JobRecord, Failure> {
        let rec = self.job(id).await?;
        if !who.sees(&rec.tenant) {
            return Err(Failure(StatusCode::NOT_FOUND, format!("no job {}", rec.id)));
        }
        Ok(rec)
    }

    /// Uploads `files` (at most `[files] max_upload_bytes` in all) in parts,
    /// then submits the job for `tenant`; no job starts if an upload fails.
    pub async fn submit(&self, tenant: &Tenant, input: String, files: Vec<NewFile>) -> Result<JobId, Failure> {
        if input.trim().is_empty() {
            return Err(Failure(StatusCode::BAD_REQUEST, "the job text is empty".into()));
        }
        let total: u64 = files.iter().map(|f| f.bytes.len() as u64).sum();
        if total > self.max_upload {
            let max = self.max_upload;
            let msg = format!("the files come to {total} bytes, more than [files] max_upload_bytes ({max} bytes)");
            return Err(Failure(StatusCode::PAYLOAD_TOO_LARGE, msg));
        }
        let files: Vec<Upload> =
            files.into_iter().map(|f| Upload { path: f.path.to_string(), bytes: f.bytes }).collect();
        let client = self.client.for_tenant(tenant.clone());
        let staged = client.upload(&files).await.map_err(refused)?;
        client.submit_with_files(input, staged).await.map_err(refused)
    }

    /// Cancels job `id` for `who`, on the job's own tenant's API.
    pub async fn cancel(&self, who: &Principal, id: &str, reason: Option<String>) -> Result<CancelReply, Failure> {
        let rec = self.visible_job(who, id).await?;
        who.may_act(&rec.tenant)?;
        let req = CancelRequest { v: SCHEMA_VERSION, job_id: rec.id, reason };
        self.call(&rec.tenant, &req, TIMEOUT).await
    }

    /// `tenant`'s pending approval requests (of one job when `job` is given).
    pub async fn approvals(&self, tenant: &Tenant, job: Option<JobId>) -> Result<ApprovalsReply, Failure> {
        self.call(tenant, &ApprovalsRequest { v: SCHEMA_VERSION, job_id: job }, TIMEOUT).await
    }

    /// Answers approval request `call_id` of `job` as `flotilla approve` does.
    pub async fn decide(&self, who: &Principal, d: DecisionInput) -> Result<ApproveReply, Failure> {
        let rec = self.visible_job(who, &d.job_id.to_string()).await?;
        who.may_act(&rec.tenant)?;
        if let Decision::Edit { args } = &d.decision
            && !args.is_object()
        {
            return Err(Failure(StatusCode::BAD_REQUEST, "edit args must be a JSON object of tool arguments".into()));
        }
        let by = d.by.filter(|b| !b.trim().is_empty()).unwrap_or_else(|| who.actor());
        let req = ApproveRequest {
            v: SCHEMA_VERSION,
            job_id: rec.id,
            call_id: d.call_id,
            task_id: d.task_id,
            decision: d.decision,
            by: Some(by),
            // From the request's credential (the guard), never its body.
            authenticated_as: Some(who.actor()),
        };
        self.call(&rec.tenant, &req, TIMEOUT).await
    }
}

/// One approval decision, from the API's JSON or a form.
pub struct DecisionInput {
    pub job_id: JobId,
    pub call_id: String,
    pub task_id: Option<TaskId>,
    pub decision: Decision,
    pub by: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_kinds_map_to_distinct_http_statuses_for_the_common_cases() {
        assert_eq!(status_of(ErrorKind::NotFound), StatusCode::NOT_FOUND);
        assert_eq!(status_of(ErrorKind::Validation), StatusCode::BAD_REQUEST);
        assert_eq!(status_of(ErrorKind::Permission), StatusCode::FORBIDDEN);
        assert_eq!(status_of(ErrorKind::Business), StatusCode::CONFLICT);
    }
}
