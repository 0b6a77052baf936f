//! Human approval over the bus: the worker's [`ApprovalGate`].
//!
//! A gated call (a tool under `interrupt_on`, or a file permission rule with
//! mode `interrupt`) is stored as a pending record in the approvals KV bucket,
//! announced on `<prefix>.job.<job>.approval.<task>` and as an
//! `approval_requested` progress event, and then waits on a KV watch of its
//! key until the orchestrator records a decision or the request expires. The
//! task stays ours meanwhile: `task.rs` keeps sending in-progress acks.
//!
//! The key is `<job>.<task>.<call id>`, so a redelivered task whose model
//! repeats the call (same id, same arguments) reads the stored answer instead
//! of asking again, and a pending request resumes with its original deadline.
//! Different arguments under a known call id are a new question: an approval
//! never carries over to arguments nobody saw.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use flotilla_shared::audit::Auditor;
use flotilla_shared::bus::{ApprovalStore, Bus, BusError, Versioned, Write};
use flotilla_shared::config::SubagentConfig;
use flotilla_shared::ids::{TaskId, Tenant};
use flotilla_shared::protocol::{
    self, ApprovalRecord, ApprovalRequest, ApprovalState, AuditOutcome, Decision, DecisionKind, ErrorKind, ProgressKind,
};
use flotilla_shared::tool::{ApprovalGate, ToolContext, ToolError, ToolSet};
use futures::StreamExt;
use serde_json::Value;
use time::OffsetDateTime;

use crate::progress::{ProgressPublisher, digest};

/// Decisions offered when a call is gated by something other than
/// `interrupt_on` (a permission rule with mode `interrupt`): editing the
/// arguments of a call that is already running inside its tool is not offered.
const DEFAULT_DECISIONS: [DecisionKind; 2] = [DecisionKind::Approve, DecisionKind::Reject];

/// What one subagent type's config says about approvals, built once.
pub struct ApprovalPolicy {
    /// `interrupt_on`: tool -> allowed decisions.
    rules: BTreeMap<String, Vec<DecisionKind>>,
    /// Input schema of every tool of the type (stored with each request so an
    /// edit is checked before it is accepted).
    schemas: BTreeMap<String, Value>,
    /// How long a request waits.
    timeout: Duration,
    /// The approvals bucket, opened on the first gated call of any task.
    store: tokio::sync::OnceCell<ApprovalStore>,
}

impl ApprovalPolicy {
    /// The policy of `config`, gating its `interrupt_on` tools in `tools`.
    /// A key naming no tool of the type is an error: a typo must not switch
    /// approval off silently.
    pub fn apply(ty: &str, config: &SubagentConfig, tools: &mut ToolSet) -> anyhow::Result<Self> {
        for name in config.interrupt_on.keys() {
            tools.require_approval(name).map_err(|e| {
                anyhow::anyhow!(
                    "invalid config key `subagents.{ty}.interrupt_on.{name}`: {e} (use the final tool name)"
                )
            })?;
        }
        Ok(Self {
            rules: config.interrupt_on.iter().map(|(k, v)| (k.clone(), v.decisions.clone())).collect(),
            schemas: tools.specs().into_iter().map(|s| (s.name, s.input_schema)).collect(),
            timeout: Duration::from_secs(config.approval_timeout),
            store: tokio::sync::OnceCell::new(),
        })
    }

    fn decisions(&self, tool: &str) -> Vec<DecisionKind> {
        self.rules.get(tool).cloned().unwrap_or_else(|| DEFAULT_DECISIONS.to_vec())
    }

    async fn store(&self, bus: &Bus) -> Result<&ApprovalStore, BusError> {
        self.store.get_or_try_init(|| bus.approvals()).await
    }
}

/// The gate of one task attempt. Creating one costs nothing; the bucket is
/// touched only when a call is gated.
pub struct BusApprovalGate {
    bus: Bus,
    policy: Arc<ApprovalPolicy>,
    progress: ProgressPublisher,
    tenant: Tenant,
    /// Writes each decision to the audit stream, when the worker audits.
    auditor: Option<Auditor>,
}

impl BusApprovalGate {
    /// A gate for the task `progress` reports on.
    pub fn new(
        bus: Bus,
        policy: Arc<ApprovalPolicy>,
        progress: ProgressPublisher,
        tenant: Tenant,
        auditor: Option<Auditor>,
    ) -> Self {
        Self { bus, policy, progress, tenant, auditor }
    }

    fn new_record(&self, task: TaskId, ctx: &ToolContext, tool: &str, args: &Value) -> ApprovalRecord {
        let now = protocol::now();
        ApprovalRecord {
            v: protocol::SCHEMA_VERSION,
            request: ApprovalRequest {
                v: protocol::SCHEMA_VERSION,
                job_id: ctx.job_id,
                task_id: task,
                tenant: self.tenant.clone(),
                subagent_type: self.progress.subagent_type.clone(),
                worker_id: self.progress.worker_id.clone(),
                call_id: ctx.call_id.clone(),
                tool: tool.to_string(),
                args: args.clone(),
                input_schema: self.policy.schemas.get(tool).cloned().unwrap_or(Value::Null),
                decisions: self.policy.decisions(tool),
                requested_at: now,
                expires_at: now + self.policy.timeout,
            },
            state: ApprovalState::Pending,
        }
    }

    /// Finds the stored answer or stores a new pending request; returns the
    /// record to wait on, or the final result when it is already decided.
    async fn open(
        &self,
        store: &ApprovalStore,
        key: &str,
        task: TaskId,
        ctx: &ToolContext,
        tool: &str,
        args: &Value,
    ) -> Result<Result<ApprovalRecord, Result<Value, ToolError>>, BusError> {
        loop {
            match store.get(key).await? {
                Some(v) if same_call(&v.record, args) => {
                    if let Some(result) = self.settled(&v.record) {
                        tracing::info!(tool, call_id = %ctx.call_id, "approval already answered; not asking again");
                        self.resolved(&v.record).await;
                        return Ok(Err(result));
                    }
                    // Pending from an earlier attempt: announce again, keep its deadline.
                    self.announce(&v.record).await;
                    return Ok(Ok(v.record));
                }
                other => {
                    let rec = self.new_record(task, ctx, tool, args);
                    let written = match other {
                        Some(old) => {
                            tracing::warn!(tool, call_id = %ctx.call_id, "call id reused with other arguments: asking again");
                            store.update(key, &rec, old.revision).await?
                        }
                        None => store.create(key, &rec).await?,
                    };
                    if let Write::Stored(_) = written {
                        self.announce(&rec).await;
                        return Ok(Ok(rec));
                    }
                }
            }
        }
    }

    async fn announce(&self, rec: &ApprovalRecord) {
        let r = &rec.request;
        tracing::info!(tool = %r.tool, call_id = %r.call_id, expires_at = %r.expires_at, "approval requested");
        self.bus.publish_event(self.bus.subjects.approval(&r.job_id, &r.task_id), r).await;
        self.progress
            .emit(ProgressKind::ApprovalRequested {
                call_id: r.call_id.clone(),
                tool: r.tool.clone(),
                args_sha256: digest(&r.args),
                decisions: r.decisions.clone(),
                expires_at: r.expires_at,
            })
            .await;
    }

    /// The result of a settled record (`None` while pending).
    fn settled(&self, rec: &ApprovalRecord) -> Option<Result<Value, ToolError>> {
        let r = &rec.request;
        match &rec.state {
            ApprovalState::Pending => None,
            ApprovalState::Expired { .. } => Some(Err(expired(rec))),
            ApprovalState::Decided { decision, .. } => Some(match decision {
                Decision::Approve => Ok(r.args.clone()),
                Decision::Edit { args } if r.decisions.contains(&DecisionKind::Edit) => Ok(args.clone()),
                Decision::Edit { .. } => Err(ToolError::new(
                    ErrorKind::Permission,
                    format!("the reviewer edited the call to {}, which allows no edits; the call was not run", r.tool),
                )),
                Decision::Reject { reason } => Err(ToolError::new(
                    ErrorKind::Permission,
                    match reason {
                        Some(why) => format!("a reviewer rejected this call to {}: {why}", r.tool),
                        None => format!("a reviewer rejected this call to {}", r.tool),
                    },
                )),
            }),
        }
    }

    async fn resolved(&self, rec: &ApprovalRecord) {
        let (outcome, by) = match &rec.state {
            ApprovalState::Decided { decision, by, .. } => (decision.kind().as_str(), by.clone()),
            ApprovalState::Expired { .. } => ("expired", None),
            ApprovalState::Pending => return,
        };
        let r = &rec.request;
        tracing::info!(tool = %r.tool, call_id = %r.call_id, outcome, by = ?by, "approval resolved");
        self.progress
            .emit(ProgressKind::ApprovalResolved {
                call_id: r.call_id.clone(),
                tool: r.tool.clone(),
                outcome: outcome.into(),
                by,
            })
            .await;
    }

    /// Waits for a decision on `key` until the request's deadline.
    async fn wait(
        &self,
        store: &ApprovalStore,
        key: &str,
        rec: ApprovalRecord,
    ) -> Result<Result<Value, ToolError>, BusError> {
        let deadline = tokio::time::Instant::now() + until(rec.request.expires_at);
        loop {
            let mut watch = std::pin::pin!(store.watch(key).await?);
            loop {
                tokio::select! {
                    next = watch.next() => match next {
                        Some(Ok(v)) => if let Some(result) = self.settled(&v.record) {
                            self.resolved(&v.record).await;
                            return Ok(result);
                        },
                        Some(Err(e)) => {
                            tracing::warn!(error = %e, "approval watch failed; watching again");
                            tokio::time::sleep(Duration::from_millis(500)).await;
                            break;
                        }
                        None => break,
                    },
                    _ = tokio::time::sleep_until(deadline) => return self.expire(store, key).await,
                }
            }
        }
    }

    /// Marks the request expired, unless a decision got there first.
    async fn expire(&self, store: &ApprovalStore, key: &str) -> Result<Result<Value, ToolError>, BusError> {
        loop {
            let Some(Versioned { mut record, revision }) = store.get(key).await? else {
                return Err(BusError::new(format!("approval {key} vanished"), "the record was deleted while waiting"));
            };
            if let Some(result) = self.settled(&record) {
                self.resolved(&record).await;
                return Ok(result);
            }
            record.state = ApprovalState::Expired { at: protocol::now() };
            if let Write::Stored(_) = store.update(key, &record, revision).await? {
                self.resolved(&record).await;
                return Ok(Err(expired(&record)));
            }
        }
    }
}

#[async_trait]
impl ApprovalGate for BusApprovalGate {
    async fn approve(&self, ctx: &ToolContext, tool: &str, args: &Value) -> Result<Value, ToolError> {
        let Some(task) = ctx.task_id else {
            return Err(ToolError::new(ErrorKind::Bug, "approval requested outside a task"));
        };
        let key = ApprovalStore::key(&ctx.job_id, &task, &ctx.call_id);
        let unavailable = |e: BusError| {
            tracing::warn!(tool, call_id = %ctx.call_id, error = %e, "approval store unavailable");
            ToolError::transient(format!("cannot ask for approval of {tool} right now; the call was not run"))
        };
        let started = std::time::Instant::now();
        let store = self.policy.store(&self.bus).await.map_err(unavailable)?;
        let result = match self.open(store, &key, task, ctx, tool, args).await.map_err(unavailable)? {
            Ok(rec) => self.wait(store, &key, rec).await.map_err(unavailable)?,
            Err(result) => result,
        };
        if let Some(auditor) = &self.auditor {
            let (outcome, audited) = match &result {
                Ok(run) if run == args => (AuditOutcome::Approved, run),
                Ok(edited) => (AuditOutcome::Edited, edited),
                Err(_) => (AuditOutcome::Rejected, args),
            };
            auditor.approval(ctx, tool, audited, outcome, started.elapsed()).await;
        }
        result
    }
}

/// Whether `rec` answers a call with these arguments: the ones asked about,
/// or the reviewer's edit of them (a tool that asks again from inside with
/// the edited arguments must not start a second round).
fn same_call(rec: &ApprovalRecord, args: &Value) -> bool {
    &rec.request.args == args
        || matches!(&rec.state, ApprovalState::Decided { decision: Decision::Edit { args: edited }, .. } if edited == args)
}

fn expired(rec: &ApprovalRecord) -> ToolError {
    let r = &rec.request;
    let secs = (r.expires_at - r.requested_at).whole_seconds();
    ToolError::new(
        ErrorKind::Permission,
        format!("no reviewer answered within {secs}s, so this call to {} was rejected and not run", r.tool),
    )
}

fn until(at: OffsetDateTime) -> Duration {
    (at - protocol::now()).try_into().unwrap_or(Duration::ZERO)
}
