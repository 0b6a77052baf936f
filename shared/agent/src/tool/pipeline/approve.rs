//! Human approval (docs/APPROVALS.md), before and during a call.
//!
//! Before: a gated tool's call waits for the gate; the arguments a reviewer
//! edited are validated again and are the ones that run. Outside the timeout
//! layer, so the wait never counts against the tool timeout.
//!
//! During: the tool gets an [`Asked`] gate. A gated tool asking again for the
//! call that was just approved (a file permission rule with mode `interrupt`)
//! is answered by that approval instead of a second round; any other question
//! goes to the real gate, with the tool timeout's clock stopped while a person
//! decides (pipeline/timeout.rs).
//!
//! Either way the decision is audited here, once: gates decide, the pipeline
//! records.

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::timeout::Waits;
use super::validate::validate;
use super::{Call, Layer, Next, Reply};
use crate::audit::{Approval, Auditor};
use crate::tool::{
    ApprovalGate, ApprovalVerdict, ElicitationAnswer, ElicitationAsk, ElicitationVerdict, ToolContext, ToolError,
};
use flotilla_protocol::ErrorKind;

/// Waits for a person on gated calls and hands the tool a gate that audits.
pub(crate) struct Approve<'s> {
    /// Tools whose calls wait for the gate first.
    pub gated: &'s BTreeSet<String>,
    /// Where decisions are recorded, if anywhere.
    pub auditor: Option<&'s Auditor>,
}

#[async_trait::async_trait]
impl Layer for Approve<'_> {
    async fn handle<'a>(&self, mut call: Call<'a>, next: Next<'a>) -> Reply {
        let gated = self.gated.contains(call.name);
        if gated {
            match Box::pin(self.before(&call)).await {
                Ok(args) => call.args = Cow::Owned(args),
                Err(e) => return Reply::refused(e),
            }
        }
        if gated || call.gate.is_some() {
            call.gate = Some(Arc::new(Asked {
                approved: gated.then(|| (call.name.to_string(), call.args.clone().into_owned())),
                gate: call.gate.take(),
                waits: call.waits.clone(),
                auditor: self.auditor.cloned(),
            }));
        }
        next.run(call).await
    }
}

impl Approve<'_> {
    /// Waits for the decision on a gated call: the arguments to run with.
    async fn before(&self, call: &Call<'_>) -> Result<Value, ToolError> {
        let (ctx, name) = (call.ctx, call.name);
        let Some(gate) = &call.gate else {
            return Err(ToolError::new(
                ErrorKind::Permission,
                format!("tool {name} requires human approval and no approval gate is available; the call was not run"),
            ));
        };
        let asked = Instant::now();
        let verdict = tokio::select! {
            r = gate.review(ctx, name, &call.args) => r,
            _ = ctx.cancel.cancelled() => return Err(ToolError::new(ErrorKind::Cancelled, "cancelled")),
        };
        audit_decision(self.auditor, ctx, name, &call.args, &verdict, asked.elapsed()).await;
        let args = verdict.result?;
        validate(&call.entry()?.validator, &args).map_err(|e| {
            ToolError::validation(format!("the reviewer's edited arguments do not fit the tool: {}", e.message))
        })?;
        Ok(args)
    }
}

/// The gate a tool sees from inside its call (see the module docs).
struct Asked {
    /// The gated call this run was approved for, if any.
    approved: Option<(String, Value)>,
    /// The caller's gate, if it has one.
    gate: Option<Arc<dyn ApprovalGate>>,
    /// The call's approval waits, which the tool timeout does not count.
    waits: Waits,
    /// Where decisions are recorded, if anywhere.
    auditor: Option<Auditor>,
}

#[async_trait::async_trait]
impl ApprovalGate for Asked {
    async fn approve(&self, ctx: &ToolContext, tool: &str, args: &Value) -> Result<Value, ToolError> {
        if self.approved.as_ref().is_some_and(|(t, a)| t == tool && a == args) {
            return Ok(args.clone());
        }
        let Some(gate) = &self.gate else {
            return Err(ToolError::new(
                ErrorKind::Permission,
                format!("{tool} requires human approval; the call was not run"),
            ));
        };
        let asked = Instant::now();
        let verdict = {
            let _resume = self.waits.start();
            gate.review(ctx, tool, args).await
        };
        audit_decision(self.auditor.as_ref(), ctx, tool, args, &verdict, asked.elapsed()).await;
        verdict.result
    }

    /// A server's question during the call: always a new question for a
    /// person (an approval of the call answers nothing the server asks), with
    /// the tool timeout's clock stopped while they answer.
    async fn elicit(&self, ctx: &ToolContext, tool: &str, args: &Value, ask: &ElicitationAsk) -> ElicitationVerdict {
        let Some(gate) = &self.gate else {
            tracing::warn!(tool, call_id = %ctx.call_id, server = %ask.server, "no approval gate; elicitation declined");
            return ElicitationVerdict::declined("decline");
        };
        let asked = Instant::now();
        let verdict = {
            let _resume = self.waits.start();
            gate.elicit(ctx, tool, args, ask).await
        };
        audit_elicitation(self.auditor.as_ref(), ctx, tool, &verdict, asked.elapsed()).await;
        verdict
    }
}

/// The one audit record of an elicitation's answer: `approved` for an
/// accept, `rejected` otherwise, with the decision taken. The record holds
/// the SHA-256 of the content (`args_sha256`), never the content: a person's
/// answer may be sensitive (docs/APPROVALS.md, "Elicitation").
async fn audit_elicitation(
    auditor: Option<&Auditor>,
    ctx: &ToolContext,
    tool: &str,
    verdict: &ElicitationVerdict,
    waited: Duration,
) {
    use flotilla_protocol::AuditOutcome;
    let Some(auditor) = auditor else { return };
    let (outcome, content) = match &verdict.answer {
        ElicitationAnswer::Accept(content) => (AuditOutcome::Approved, content),
        ElicitationAnswer::Decline | ElicitationAnswer::Cancel => (AuditOutcome::Rejected, &Value::Null),
    };
    let approval = Approval { outcome, decision: &verdict.decision, by: verdict.by.as_deref(), waited };
    auditor.approval(ctx.call_site(), tool, content, approval).await;
}

/// The one audit record of an approval decision: `approved`, `edited` (with
/// the edited arguments) or `rejected` (by a reviewer, because nobody
/// answered within `approval_timeout`, or with the job's cancel: all
/// `permission` errors), with the decision and the reviewer when the gate
/// names them (docs/APPROVALS.md). A call that got no decision (gate
/// unavailable, the task's own cancel) has no approval record; its tool call
/// record says why. Gates themselves do not audit.
async fn audit_decision(
    auditor: Option<&Auditor>,
    ctx: &ToolContext,
    name: &str,
    args: &Value,
    verdict: &ApprovalVerdict,
    waited: Duration,
) {
    use flotilla_protocol::AuditOutcome;
    let Some(auditor) = auditor else { return };
    let (outcome, audited, decision) = match &verdict.result {
        Ok(a) if a == args => (AuditOutcome::Approved, a, "approve"),
        Ok(a) => (AuditOutcome::Edited, a, "edit"),
        Err(e) if e.kind == ErrorKind::Permission => (AuditOutcome::Rejected, args, "reject"),
        Err(_) => return,
    };
    let approval = Approval {
        outcome,
        decision: verdict.decision.as_deref().unwrap_or(decision),
        by: verdict.by.as_deref(),
        waited,
    };
    auditor.approval(ctx.call_site(), name, audited, approval).await;
}
