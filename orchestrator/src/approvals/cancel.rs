//! Approvals of a cancelled job (docs/APPROVALS.md, "Cancelled jobs").
//!
//! Cancelling a job stops its subagents, so a call waiting for a person will
//! never run: its request must leave `flotilla approvals`, and a reviewer
//! answering it afterwards must learn why rather than be told it worked.
//! `cancel` (orchestrator/src/service.rs) marks every open request of the
//! job `cancelled` with the job's reason. A worker may still store a request
//! after that sweep (its gate was opening as the cancel arrived), so listing
//! and deciding also check the cancellations bucket and settle such a
//! request the same way: the sweep is the fast path, the check the guarantee.

use flotilla_bus::{ApprovalStore, Bus, BusError, Cancellations, Versioned, Write};
use flotilla_protocol::ids::JobId;
use flotilla_protocol::{self as protocol, ApprovalState};

/// Marks every open request of `job` cancelled for `reason`; returns how
/// many it settled. Requests already decided, used or expired keep their
/// state: a decision taken before the cancel stays on record.
pub async fn cancel_job(bus: &Bus, job: &JobId, reason: &str) -> Result<usize, BusError> {
    let store = bus.approvals().await?;
    let mut settled = 0;
    for v in store.list(Some(job)).await? {
        if settle(&store, v, reason).await?.is_some() {
            settled += 1;
        }
    }
    Ok(settled)
}

/// Marks `v` cancelled for `reason` while it is pending (compare-and-set on
/// its revision, read again after a conflict). Returns the stored record
/// with its new revision, `None` when it was no longer pending.
pub(super) async fn settle(
    store: &ApprovalStore,
    mut v: Versioned,
    reason: &str,
) -> Result<Option<Versioned>, BusError> {
    let key = ApprovalStore::key_of(&v.record);
    loop {
        if !matches!(v.record.state, ApprovalState::Pending) {
            return Ok(None);
        }
        v.record.state = ApprovalState::Cancelled { reason: reason.to_string(), at: protocol::now() };
        match store.update(&key, &v.record, v.revision).await? {
            Write::Stored(revision) => return Ok(Some(Versioned { record: v.record, revision })),
            Write::Conflict => match store.get(&key).await? {
                Some(fresh) => v = fresh,
                None => return Ok(None),
            },
        }
    }
}

/// Why the request's job (or its task alone, the planner's `cancel_task`)
/// was cancelled, if it was.
pub(super) async fn reason_of(cancelled: &Cancellations, v: &Versioned) -> Result<Option<String>, BusError> {
    let r = &v.record.request;
    if let Some(reason) = cancelled.reason(&r.job_id).await? {
        return Ok(Some(reason));
    }
    cancelled.task_reason(&r.job_id, &r.task_id).await
}

/// Settles `v` when its job or task was cancelled after the sweep (or the
/// sweep failed): `v` as it stands then, cancelled or not.
pub(super) async fn settle_if_cancelled(
    store: &ApprovalStore,
    cancelled: &Cancellations,
    v: Versioned,
) -> Result<Versioned, BusError> {
    if !matches!(v.record.state, ApprovalState::Pending) {
        return Ok(v);
    }
    let Some(reason) = reason_of(cancelled, &v).await? else { return Ok(v) };
    let key = ApprovalStore::key_of(&v.record);
    match settle(store, v, &reason).await? {
        Some(done) => Ok(done),
        // Moved on meanwhile (decided, expired): as it stands now.
        None => store.get(&key).await?.ok_or_else(|| BusError::new(format!("approval {key} vanished"), "deleted")),
    }
}
