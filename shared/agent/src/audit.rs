//! Writing audit records: every tool call passes through the tool set's
//! pipeline (shared/agent/src/tool/pipeline/), which hands it to the tool
//! set's [`Auditor`]; approval code writes its
//! decisions through the same auditor ([`Auditor::approval`]), so one sink sees
//! every tool call and approval of a process.
//!
//! An [`Auditor`] knows who is calling (agent and process) and builds the
//! [`AuditRecord`]; an [`AuditSink`] stores it. The bus's `BusAuditSink`,
//! wired in by the binaries, publishes to the audit stream
//! (`<prefix>.audit.<tenant>.<job>`): the publish is queued before the
//! call's result goes back to the model and the stream's ack is
//! awaited in the background, so auditing adds no round trip to a tool call; a
//! missing ack is logged as an error with the record's trace id.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;

use flotilla_protocol::ids::{JobId, TaskId, Tenant};
use flotilla_protocol::{self as protocol, AuditAction, AuditOutcome, AuditRecord, ErrorKind};

/// Where a call happened, as the audit record names it. The tool layer
/// builds it from its call context (`ToolContext::call_site`), so this module
/// needs nothing of the tool module.
#[derive(Clone, Copy, Debug)]
pub struct CallSite<'a> {
    /// Whose job.
    pub tenant: &'a Tenant,
    /// The job.
    pub job_id: JobId,
    /// The task, `None` for the planner.
    pub task_id: Option<TaskId>,
    /// The model's call id.
    pub call_id: &'a str,
    /// The run's W3C traceparent, whose trace id the record carries.
    pub traceparent: Option<&'a str>,
}

/// One approval decision, as its audit record tells it (docs/APPROVALS.md).
#[derive(Clone, Copy, Debug)]
pub struct Approval<'a> {
    /// `approved`, `edited` or `rejected`.
    pub outcome: AuditOutcome,
    /// The decision taken: `approve`, `reject`, `edit`, `expired` (nobody
    /// answered in time) or `cancelled` (with its job).
    pub decision: &'a str,
    /// Who decided, when someone did.
    pub by: Option<&'a str>,
    /// How long the call waited for the decision.
    pub waited: Duration,
}

/// Stores audit records.
#[async_trait]
pub trait AuditSink: Send + Sync {
    /// Stores one record. Never fails the audited call: problems are logged.
    async fn write(&self, record: AuditRecord);
}

/// Who is calling, and where records go.
#[derive(Clone)]
pub struct Auditor {
    sink: Arc<dyn AuditSink>,
    agent: String,
    worker: String,
}

impl std::fmt::Debug for Auditor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auditor").field("agent", &self.agent).field("worker", &self.worker).finish_non_exhaustive()
    }
}

impl Auditor {
    /// Records of `agent` (`planner` or a subagent type) in process `worker`.
    pub fn new(sink: Arc<dyn AuditSink>, agent: impl Into<String>, worker: impl Into<String>) -> Self {
        Self { sink, agent: agent.into(), worker: worker.into() }
    }

    fn record(
        &self,
        site: CallSite<'_>,
        action: AuditAction,
        tool: &str,
        args: &Value,
        (outcome, error_kind): (AuditOutcome, Option<ErrorKind>),
        duration: Duration,
    ) -> AuditRecord {
        AuditRecord {
            v: protocol::SCHEMA_VERSION,
            at: protocol::now(),
            action,
            tenant: site.tenant.clone(),
            job_id: site.job_id,
            task_id: site.task_id,
            agent: self.agent.clone(),
            worker: self.worker.clone(),
            tool: tool.to_string(),
            call_id: site.call_id.to_string(),
            args_sha256: args_digest(args),
            outcome,
            error_kind,
            decision: None,
            by: None,
            duration_ms: duration.as_millis() as u64,
            trace_id: site.traceparent.and_then(flotilla_protocol::trace::trace_id).map(str::to_string),
        }
    }

    /// Records one finished tool call: `failed` is the error kind the call
    /// ended with, `None` when it succeeded.
    pub async fn tool_call(
        &self,
        site: CallSite<'_>,
        tool: &str,
        args: &Value,
        failed: Option<ErrorKind>,
        duration: Duration,
    ) {
        let result = match failed {
            None => (AuditOutcome::Ok, None),
            Some(kind) => (AuditOutcome::Error, Some(kind)),
        };
        let rec = self.record(site, AuditAction::ToolCall, tool, args, result, duration);
        self.sink.write(rec).await;
    }

    /// Records an approval decision on a gated call (`args` are the edited
    /// arguments when the decision was an edit).
    pub async fn approval(&self, site: CallSite<'_>, tool: &str, args: &Value, approval: Approval<'_>) {
        let mut rec = self.record(site, AuditAction::Approval, tool, args, (approval.outcome, None), approval.waited);
        rec.decision = Some(approval.decision.to_string());
        rec.by = approval.by.map(str::to_string);
        self.sink.write(rec).await;
    }
}

/// Hex SHA-256 of `args` as canonical JSON (object keys sorted at every level).
pub fn args_digest(args: &Value) -> String {
    let bytes = serde_json::to_vec(&canonical(args)).unwrap_or_default();
    flotilla_protocol::digest::sha256_hex(&bytes)
}

fn canonical(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            Value::Object(keys.into_iter().map(|k| (k.clone(), canonical(&m[k]))).collect())
        }
        Value::Array(a) => Value::Array(a.iter().map(canonical).collect()),
        other => other.clone(),
    }
}

/// Keeps records in memory (tests, and tools that want to inspect them).
#[derive(Default)]
pub struct MemoryAuditSink {
    records: Mutex<Vec<AuditRecord>>,
}

impl MemoryAuditSink {
    /// Every record so far.
    pub fn records(&self) -> Vec<AuditRecord> {
        self.records.lock().expect("audit records").clone()
    }
}

#[async_trait]
impl AuditSink for MemoryAuditSink {
    async fn write(&self, record: AuditRecord) {
        self.records.lock().expect("audit records").push(record);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn digest_ignores_key_order_but_not_values() {
        let a = args_digest(&json!({"revenue": 120, "cost": {"x": 1, "y": [1, 2]}}));
        let b = args_digest(&json!({"cost": {"y": [1, 2], "x": 1}, "revenue": 120}));
        assert_eq!(a, b);
        assert_eq!(a.len(), 64);
        assert_ne!(a, args_digest(&json!({"revenue": 121, "cost": {"x": 1, "y": [1, 2]}})));
        // Known vector: sha256("{}").
        assert_eq!(args_digest(&json!({})), "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a");
    }
}
