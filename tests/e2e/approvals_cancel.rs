//! Cancelling a job settles its pending approvals. A call
//! waiting for a person will never run once its job is cancelled, so its
//! request leaves `flotilla approvals` and answering it is refused with the
//! reason (orchestrator/src/approvals/cancel.rs, docs/APPROVALS.md).

use flotilla_protocol::ApprovalState;
use flotilla_protocol::ids::JobId;
use flotilla_testkit::EventLog;
use serde_json::Value;

use crate::approvals::{self, cli, config, request};
use flotilla_testkit::{Deployment, TIMEOUT};

async fn listed(d: &Deployment) -> Vec<Value> {
    approvals::listed(d, "default").await
}

/// The stored state of the job's one approval request.
async fn stored_state(d: &Deployment, job: &JobId) -> ApprovalState {
    let store = d.bus.approvals().await.expect("approvals bucket");
    let records = store.list(Some(job)).await.expect("approval records");
    assert_eq!(records.len(), 1, "{records:#?}");
    records[0].record.state.clone()
}

/// A job waiting for a person to decide its subagent's call: its id and the call id.
async fn waiting_job(d: &Deployment, log: &mut EventLog) -> (JobId, String) {
    let job = d.submit("one margin").await;
    let call = request(log).await["call_id"].as_str().unwrap().to_string();
    assert_eq!(listed(d).await.len(), 1, "the request is listed before the cancel");
    (job, call)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_settles_pending_approvals_and_answering_one_is_refused() {
    let d = Deployment::start(1, |url| config(url, r#"["approve", "reject"]"#, 60)).await;
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let (job, call) = waiting_job(&d, &mut log).await;

    let (code, out, err) = cli(&d, &["cancel", &job.to_string(), "--reason", "change freeze"]).await;
    assert_eq!(code, 0, "{out}{err}");
    // The cancel's reply comes after the sweep: no waiting needed.
    assert!(listed(&d).await.is_empty(), "a cancelled job's request is still listed");
    match stored_state(&d, &job).await {
        ApprovalState::Cancelled { reason, .. } => assert_eq!(reason, "change freeze"),
        other => panic!("stored as {other:?}"),
    }

    let (code, out, err) = cli(&d, &["approve", &job.to_string(), &call, "--approve"]).await;
    assert_ne!(code, 0, "approving a cancelled job's call succeeded: {out}");
    assert!(
        err.contains(&format!("the approval request for call {call} was cancelled with its job (change freeze)")),
        "{err}"
    );
    assert_eq!(log.job_end(TIMEOUT).await["event"], "cancelled");
    let ran = log.seen.iter().any(|(s, v)| s.contains(".progress.") && v["event"] == "tool_result");
    assert!(!ran, "the gated call ran after its job was cancelled");
}

/// A request stored after the cancel's sweep (a worker whose gate was opening
/// as the cancel arrived) is settled when listed: here the cancellation is
/// recorded straight in the bucket, so no sweep ran at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_the_sweep_missed_is_settled_when_listed() {
    let d = Deployment::start(1, |url| config(url, r#"["approve", "reject"]"#, 60)).await;
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let (job, call) = waiting_job(&d, &mut log).await;

    let cancellations = d.bus.cancellations().await.expect("cancellations bucket");
    cancellations.record(&job, "recorded elsewhere").await.expect("cancel recorded");
    assert!(listed(&d).await.is_empty(), "a cancelled job's request is still listed");
    assert!(matches!(stored_state(&d, &job).await, ApprovalState::Cancelled { .. }));
    let (code, _, err) = cli(&d, &["approve", &job.to_string(), &call, "--reject"]).await;
    assert_ne!(code, 0);
    assert!(err.contains("was cancelled with its job (recorded elsewhere)"), "{err}");
}
