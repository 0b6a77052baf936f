//! Issue 11 item 3c: an approval decision is audited exactly once, by the
//! tool set that asked (shared/src/tool/set.rs `audit_decision`), with the
//! decision's outcome. The worker's bus gate used to write a second record of
//! its own, so one approved call left two `approval` records in the audit
//! stream (docs/APPROVALS.md, "audit `approval` records").

use flotilla_protocol::ids::{JobId, Tenant};
use flotilla_protocol::{AuditAction, AuditOutcome, AuditRecord};
use flotilla_tests::{EventLog, TestConfig, proc::run_cli};

use crate::common::{Deployment, TIMEOUT};

const PLANNER: &str = r#"
[[turns]]
[[turns.calls]]
tool = "task"
args = '{"subagent_type": "finance", "description": "margin: revenue 120, cost 75"}'

[[turns]]
content = "{% set r = last[0] %}{% if r.ok %}{{ r.value }}{% else %}task failed: {{ r.error.message }}{% endif %}"
"#;

const SUBAGENT: &str = r#"
[[turns]]
[[turns.calls]]
tool = "calculate_margin"
args = '{"revenue": 120, "cost": 75}'

[[turns]]
content = "{% set r = last[0] %}{% if r.ok %}margin={{ r.value.margin }}{% else %}{{ r.error.kind }}{% endif %}"
"#;

/// One finance subagent whose `calculate_margin` calls need approval.
fn config(url: &str, approval_timeout: u64) -> TestConfig {
    let mut c = TestConfig::new(url);
    c.scripted_model("planner", PLANNER).scripted_model("finance", SUBAGENT);
    c.section(&format!(
        r#"[planner]
model = "planner"
task_timeout = 120
[subagents.finance]
description = "Computes gross margins."
model = "finance"
tools = ["calculate_margin"]
approval_timeout = {approval_timeout}
[subagents.finance.interrupt_on.calculate_margin]
decisions = ["approve", "reject"]
"#
    ));
    c
}

/// The job's audit records once the worker's `calculate_margin` call record
/// is in: that record is published after the call's approval decision, on the
/// same connection, so every approval record is in the stream by then.
async fn audit_after_the_call(d: &Deployment, job: JobId) -> Vec<AuditRecord> {
    let tenant = Tenant::default();
    flotilla_tests::eventually(TIMEOUT, "the calculate_margin call record", || {
        let (bus, tenant) = (d.bus.clone(), tenant.clone());
        async move {
            let records = flotilla_bus::audit::read(&bus, &tenant, &job).await.ok()?;
            let call = |r: &AuditRecord| r.action == AuditAction::ToolCall && r.tool == "calculate_margin";
            records.iter().any(call).then_some(records)
        }
    })
    .await
}

fn approvals(records: &[AuditRecord]) -> Vec<AuditOutcome> {
    records.iter().filter(|r| r.action == AuditAction::Approval).map(|r| r.outcome).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fixes_one_approved_call_leaves_one_approval_record() {
    let d = Deployment::start(1, |url| config(url, 60)).await;
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let job = d.submit("one margin").await;
    let req = log.until(TIMEOUT, "an approval request", |s, _| s.contains(".approval.")).await;
    let call = req["call_id"].as_str().unwrap().to_string();
    let (job_arg, cfg) = (job.to_string(), d.config_arg());
    let (code, out, err) = tokio::task::spawn_blocking(move || {
        run_cli(&["approve", &job_arg, &call, "--approve", "--config", &cfg], &[("USER", "tester")])
    })
    .await
    .unwrap();
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(log.job_end(TIMEOUT).await["event"], "completed");

    let records = audit_after_the_call(&d, job).await;
    assert_eq!(approvals(&records), vec![AuditOutcome::Approved], "{records:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fixes_an_expired_approval_is_one_rejected_record() {
    let d = Deployment::start(1, |url| config(url, 1)).await;
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let job = d.submit("one margin").await;
    assert_eq!(log.job_end(TIMEOUT).await["event"], "completed");

    let records = audit_after_the_call(&d, job).await;
    assert_eq!(approvals(&records), vec![AuditOutcome::Rejected], "{records:#?}");
}
