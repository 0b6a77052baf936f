//! The approval API: `<prefix>.api.<tenant>.approvals` lists a tenant's open
//! requests, `<prefix>.api.<tenant>.approve` records a decision (see
//! docs/APPROVALS.md).
//!
//! Deciding goes through the orchestrator rather than straight to KV so the
//! tenant check and the decision rules (pending, not expired, allowed by the
//! tool's policy, edits that fit the schema) live in one place, and clients
//! need no write access to the approvals bucket. The decision is created once
//! under the request round's decision key, which no worker may write
//! (shared/bus/src/approvals.rs): a decision racing another reviewer or the
//! worker's expiry either wins or gets a clear error, never a silent overwrite.
//!
//! A cancelled job's requests are settled as cancelled (`cancel.rs`): they
//! leave the listing, and a decision on one is refused with the job's reason.

mod cancel;

pub use cancel::cancel_job;

use flotilla_agent::tool::{DecisionError, check_decision};
use flotilla_bus::{ApprovalStore, Bus, Versioned, Write};
use flotilla_protocol::ids::Tenant;
use flotilla_protocol::{
    self as protocol, ApiReply, ApprovalState, ApprovalsReply, ApprovalsRequest, ApproveReply, ApproveRequest,
    DecisionRecord, ErrorKind,
};

/// Longest accepted reason or reviewer name.
const MAX_TEXT: usize = 2000;

/// `approvals`: open (pending, unexpired) requests of `tenant`, oldest first.
/// A request of a cancelled job or task is settled as cancelled, not listed.
pub async fn list(bus: &Bus, tenant: &Tenant, req: ApprovalsRequest) -> ApiReply<ApprovalsReply> {
    match open_requests(bus, tenant, req.job_id.as_ref()).await {
        Ok(mut approvals) => {
            approvals.sort_by_key(|r| r.requested_at);
            ApiReply::ok(ApprovalsReply { approvals })
        }
        Err(e) => ApiReply::error(ErrorKind::Transient, e.to_string()),
    }
}

async fn open_requests(
    bus: &Bus,
    tenant: &Tenant,
    job: Option<&protocol::ids::JobId>,
) -> Result<Vec<protocol::ApprovalRequest>, flotilla_bus::BusError> {
    let store = open_store(bus).await?;
    let cancelled = bus.cancellations().await?;
    let now = protocol::now();
    let mut open = Vec::new();
    for v in store.list(job).await? {
        if &v.record.request.tenant != tenant || !v.record.is_open(now) {
            continue;
        }
        let v = cancel::settle_if_cancelled(&store, &cancelled, v).await?;
        if v.record.is_open(now) {
            open.push(v.record.request);
        }
    }
    Ok(open)
}

/// `approve`: records one decision.
pub async fn decide(bus: &Bus, tenant: &Tenant, req: ApproveRequest) -> ApiReply<ApproveReply> {
    let too_long = |s: &Option<String>| s.as_ref().is_some_and(|s| s.len() > MAX_TEXT);
    if too_long(&req.by) || matches!(&req.decision, protocol::Decision::Reject { reason } if too_long(reason)) {
        return ApiReply::error(
            ErrorKind::Validation,
            format!("reason and reviewer name are limited to {MAX_TEXT} bytes"),
        );
    }
    let principal = match principal_of(tenant, req.authenticated_as.as_deref()) {
        Ok(p) => p,
        Err(message) => return ApiReply::error(ErrorKind::Validation, message),
    };
    let store = match open_store(bus).await {
        Ok(s) => s,
        Err(e) => return ApiReply::error(ErrorKind::Transient, e.to_string()),
    };
    let found = match find(&store, tenant, &req).await {
        Ok(v) => v,
        Err(reply) => return reply,
    };
    let settled = match bus.cancellations().await {
        Ok(cancelled) => cancel::settle_if_cancelled(&store, &cancelled, found).await,
        Err(e) => Err(e),
    };
    let Versioned { mut record, .. } = match settled {
        Ok(v) => v,
        Err(e) => return ApiReply::error(ErrorKind::Transient, e.to_string()),
    };
    if let Err(e) = check_decision(&record, &req.decision, protocol::now()) {
        let kind = match e {
            DecisionError::InvalidEdit { .. }
            | DecisionError::InvalidContent { .. }
            | DecisionError::NotAllowed { .. } => ErrorKind::Validation,
            _ => ErrorKind::Business,
        };
        return ApiReply::error(kind, e.to_string());
    }
    let key = ApprovalStore::key_of(&record);
    let decision = DecisionRecord {
        v: protocol::SCHEMA_VERSION,
        round: record.round,
        decision: req.decision.clone(),
        by: req.by.clone(),
        principal: Some(principal),
        decided_at: protocol::now(),
    };
    let stored_at = match store.create_decision(&ApprovalStore::decision_key(&key, record.round), &decision).await {
        Ok(Write::Stored(rev)) => rev,
        Ok(Write::Conflict) => {
            return ApiReply::error(ErrorKind::Business, format!("call {} was already answered", req.call_id));
        }
        Err(e) => return ApiReply::error(ErrorKind::Transient, e.to_string()),
    };
    if let Err(reply) = mirror(&store, &key, &decision, stored_at).await {
        return reply;
    }
    let r = &record.request;
    tracing::info!(
        %tenant, job_id = %r.job_id, task_id = %r.task_id, call_id = %r.call_id, tool = %r.tool,
        decision = %req.decision.kind(), by = ?req.by, principal = ?decision.principal, "approval decided"
    );
    record.state = ApprovalState::Decided {
        decision: decision.decision,
        by: decision.by,
        principal: decision.principal,
        decided_at: decision.decided_at,
    };
    ApiReply::ok(ApproveReply { record })
}

/// Longest accepted `authenticated_as`.
const MAX_CREDENTIAL: usize = 200;

/// Who decided, as authenticated: the tenant is the one whose API subject
/// the request came on, which NATS permissions confine a client to; the
/// credential is the front-end's statement, or `job API` for a direct client
/// (docs/APPROVALS.md, "Who decided"). Never the free-text `by`.
fn principal_of(tenant: &Tenant, authenticated_as: Option<&str>) -> Result<String, String> {
    match authenticated_as.map(str::trim) {
        None | Some("") => Ok(format!("tenant {tenant} via job API")),
        Some(a) if a.len() > MAX_CREDENTIAL || a.chars().any(char::is_control) => {
            Err(format!("authenticated_as is limited to {MAX_CREDENTIAL} bytes without control characters"))
        }
        Some(a) => Ok(format!("tenant {tenant} via {a}")),
    }
}

/// Shows the decision stored at revision `stored_at` on the request, for
/// listings. The worker may have moved the request on meanwhile: used (the
/// decision took effect) or expired; an expiry stored before the decision
/// (a lower revision) means the decision came too late and is void.
async fn mirror(
    store: &ApprovalStore,
    key: &str,
    decision: &DecisionRecord,
    stored_at: u64,
) -> Result<(), ApiReply<ApproveReply>> {
    let transient = |e: flotilla_bus::BusError| ApiReply::error(ErrorKind::Transient, e.to_string());
    loop {
        let Some(Versioned { mut record, revision }) = store.get(key).await.map_err(transient)? else {
            return Ok(());
        };
        match record.state {
            ApprovalState::Pending => {}
            ApprovalState::Expired { .. } if revision < stored_at => {
                let err = DecisionError::Settled { call_id: record.request.call_id, how: "expired unanswered".into() };
                return Err(ApiReply::error(ErrorKind::Business, err.to_string()));
            }
            ApprovalState::Cancelled { reason, .. } if revision < stored_at => {
                let err = DecisionError::Cancelled { call_id: record.request.call_id, reason };
                return Err(ApiReply::error(ErrorKind::Business, err.to_string()));
            }
            _ => return Ok(()),
        }
        record.state = ApprovalState::Decided {
            decision: decision.decision.clone(),
            by: decision.by.clone(),
            principal: decision.principal.clone(),
            decided_at: decision.decided_at,
        };
        if let Write::Stored(_) = store.update(key, &record, revision).await.map_err(transient)? {
            return Ok(());
        }
    }
}

async fn open_store(bus: &Bus) -> Result<ApprovalStore, flotilla_bus::BusError> {
    bus.approvals().await
}

/// The record the request means: by task when given, else the one pending
/// record of that call id in the job. Another tenant's job looks missing.
async fn find(
    store: &ApprovalStore,
    tenant: &Tenant,
    req: &ApproveRequest,
) -> Result<Versioned, ApiReply<ApproveReply>> {
    let missing = || {
        ApiReply::error(
            ErrorKind::NotFound,
            format!("no approval request for call {:?} in job {}", req.call_id, req.job_id),
        )
    };
    let transient = |e: flotilla_bus::BusError| ApiReply::error(ErrorKind::Transient, e.to_string());
    let mut candidates: Vec<Versioned> = store
        .list(Some(&req.job_id))
        .await
        .map_err(transient)?
        .into_iter()
        .filter(|v| {
            v.record.request.call_id == req.call_id && req.task_id.is_none_or(|t| v.record.request.task_id == t)
        })
        .collect();
    candidates.retain(|v| &v.record.request.tenant == tenant);
    let now = protocol::now();
    let open: Vec<usize> = (0..candidates.len()).filter(|i| candidates[*i].record.is_open(now)).collect();
    match (open.len(), candidates.len()) {
        (1, _) => Ok(candidates.swap_remove(open[0])),
        (0, 0) => Err(missing()),
        (0, 1) => Ok(candidates.remove(0)), // settled: check_decision says how
        (0, _) => Err(ApiReply::error(
            ErrorKind::Business,
            format!("call {:?} of job {} has no open approval request", req.call_id, req.job_id),
        )),
        _ => {
            let tasks: Vec<String> = open.iter().map(|i| candidates[*i].record.request.task_id.to_string()).collect();
            Err(ApiReply::error(
                ErrorKind::Validation,
                format!(
                    "call {:?} is pending in several tasks of job {}; pass --task with one of: {}",
                    req.call_id,
                    req.job_id,
                    tasks.join(", ")
                ),
            ))
        }
    }
}
