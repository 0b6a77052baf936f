//! Human approval over the bus: the worker's [`ApprovalGate`].
//!
//! A gated call (a tool under `interrupt_on`, or a file permission rule with
//! mode `interrupt`) is stored as a pending record in the approvals KV bucket
//! (`req.<type>.<job>.<task>.<call id>`), announced on
//! `<prefix>.job.<tenant>.<job>.approval.<task>` and as an `approval_requested`
//! progress event, and then waits on the round's decision key, which only the
//! orchestrator may write (shared/bus/src/approvals.rs), until a decision
//! arrives or the request expires. The task stays ours meanwhile: `task.rs`
//! keeps sending in-progress acks.
//!
//! A decision is used once: applying it marks the request `used`, so the same
//! call asked again (a model repeating a call id) is a new round with a new
//! question. A redelivered task whose call is pending or decided but not yet
//! used waits for, or applies, that round's decision without asking again.
//! Different arguments under a known call id are a new question: an approval
//! never carries over to arguments nobody saw.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use flotilla_agent::tool::{
    ApprovalGate, ApprovalVerdict, ElicitationAnswer, ElicitationAsk, ElicitationVerdict, ToolContext, ToolError,
    ToolSet,
};
use flotilla_bus::{ApprovalStore, Bus, BusError, Versioned, Write};
use flotilla_config::SubagentConfig;
use flotilla_protocol::ids::{TaskId, Tenant};
use flotilla_protocol::{
    self as protocol, ApprovalKind, ApprovalRecord, ApprovalRequest, ApprovalState, Decision, DecisionKind,
    DecisionRecord, ErrorKind, ProgressKind,
};
use flotilla_retry::Backoff;
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
}

/// Every `interrupt_on` rule offers decisions on a tool call: an
/// elicitation's decisions (accept, decline) answer an MCP server's question.
pub fn check_decisions(ty: &str, config: &SubagentConfig) -> Result<(), crate::runtime::InvalidKey> {
    for (name, rule) in &config.interrupt_on {
        if let Some(d) = rule.decisions.iter().find(|d| DecisionKind::ELICITATION.contains(d)) {
            return Err(crate::runtime::InvalidKey::new(
                format!("subagents.{ty}.interrupt_on.{name}.decisions"),
                format!("{d} answers an MCP server's question, not a tool call (use approve, reject, edit)"),
            ));
        }
    }
    Ok(())
}

impl ApprovalPolicy {
    /// The policy of `config`, gating its `interrupt_on` tools in `tools`.
    /// A key naming no tool of the type is an error: a typo must not switch
    /// approval off silently.
    pub fn apply(ty: &str, config: &SubagentConfig, tools: &mut ToolSet) -> anyhow::Result<Self> {
        check_decisions(ty, config)?;
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
        })
    }

    fn decisions(&self, tool: &str) -> Vec<DecisionKind> {
        self.rules.get(tool).cloned().unwrap_or_else(|| DEFAULT_DECISIONS.to_vec())
    }
}

/// The gate of one task attempt. Creating one costs nothing; the bucket is
/// touched only when a call is gated.
pub struct BusApprovalGate {
    bus: Bus,
    policy: Arc<ApprovalPolicy>,
    progress: ProgressPublisher,
    tenant: Tenant,
    metrics: Arc<crate::metrics::WorkerMetrics>,
}

impl BusApprovalGate {
    /// A gate for the task `progress` reports on; `metrics` count its waits.
    pub fn new(
        bus: Bus,
        policy: Arc<ApprovalPolicy>,
        progress: ProgressPublisher,
        tenant: Tenant,
        metrics: Arc<crate::metrics::WorkerMetrics>,
    ) -> Self {
        Self { bus, policy, progress, tenant, metrics }
    }

    fn new_record(&self, task: TaskId, call: &Call<'_>, round: u32) -> ApprovalRecord {
        let Call { ctx, tool, args, ask } = *call;
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
                decisions: match ask {
                    Some(_) => DecisionKind::ELICITATION.to_vec(),
                    None => self.policy.decisions(tool),
                },
                kind: if ask.is_some() { ApprovalKind::Elicitation } else { ApprovalKind::ToolCall },
                server: ask.map(|a| a.server.clone()),
                message: ask.map(|a| a.message.clone()),
                requested_schema: ask.map(|a| a.requested_schema.clone()),
                requested_at: now,
                expires_at: now + self.policy.timeout,
            },
            state: ApprovalState::Pending,
            round,
        }
    }

    /// Finds where the call stands: a pending request of this call to wait
    /// on, a stored outcome, or a new round (a new call, other arguments, or
    /// the same call again after its approval was used).
    async fn open(&self, store: &ApprovalStore, key: &str, task: TaskId, call: &Call<'_>) -> Result<Opened, BusError> {
        let Call { ctx, tool, args, .. } = *call;
        loop {
            let current = store.get(key).await?;
            if let Some(v) = current.as_ref().filter(|v| same_call(&v.record, args)) {
                match &v.record.state {
                    // Pending from an earlier attempt: announce again, keep its deadline.
                    ApprovalState::Pending => {
                        tracing::info!(tool, call_id = %ctx.call_id, round = v.record.round, "approval pending; waiting");
                        self.announce(&v.record).await;
                        return Ok(Opened::Wait(Box::new(v.record.clone())));
                    }
                    // The orchestrator's mirror of a decision: the decision key
                    // is the authority, and waiting on it reads it at once.
                    ApprovalState::Decided { .. } => {
                        tracing::info!(tool, call_id = %ctx.call_id, "approval already answered; not asking again");
                        return Ok(Opened::Wait(Box::new(v.record.clone())));
                    }
                    ApprovalState::Expired { .. } | ApprovalState::Cancelled { .. } => {
                        self.resolved(&v.record).await;
                        return Ok(Opened::Done(settled(&v.record)));
                    }
                    ApprovalState::Used { .. } => {
                        tracing::info!(tool, call_id = %ctx.call_id, "approval of this call was used already: asking again");
                    }
                }
            } else if current.is_some() {
                tracing::warn!(tool, call_id = %ctx.call_id, "call id reused with other arguments: asking again");
            }
            let round = current.as_ref().map_or(1, |v| v.record.round + 1);
            let rec = self.new_record(task, call, round);
            let written = match current {
                Some(old) => store.update(key, &rec, old.revision).await?,
                None => store.create(key, &rec).await?,
            };
            if let Write::Stored(_) = written {
                self.announce(&rec).await;
                return Ok(Opened::Wait(Box::new(rec)));
            }
        }
    }

    async fn announce(&self, rec: &ApprovalRecord) {
        let r = &rec.request;
        tracing::info!(tool = %r.tool, call_id = %r.call_id, expires_at = %r.expires_at, "approval requested");
        self.bus.publish_event(self.bus.subjects.approval(&r.tenant, &r.job_id, &r.task_id), r).await;
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

    async fn resolved(&self, rec: &ApprovalRecord) {
        let (outcome, by) = match &rec.state {
            ApprovalState::Decided { decision, by, .. } => (decision.kind().as_str(), by.clone()),
            ApprovalState::Used { decision, by, .. } => (decision.kind().as_str(), by.clone()),
            ApprovalState::Expired { .. } => ("expired", None),
            ApprovalState::Cancelled { .. } => ("cancelled", None),
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

    /// Waits for the decision of `rec`'s round until the request's deadline.
    /// `traceparent`: the tool call's span, parent of the `approval` span.
    async fn wait(
        &self,
        store: &ApprovalStore,
        key: &str,
        rec: ApprovalRecord,
        traceparent: Option<&str>,
    ) -> Result<ApprovalVerdict, BusError> {
        let decision_key = ApprovalStore::decision_key(key, rec.round);
        let deadline = tokio::time::Instant::now() + until(rec.request.expires_at);
        // The wait for a person, as a span of the tool call's trace.
        let span = tracing::info_span!(
            target: "gen_ai",
            parent: None,
            "approval",
            otel.name = %format_args!("approval {}", rec.request.tool),
            gen_ai.tool.name = %rec.request.tool,
            flotilla.approval.round = i64::from(rec.round),
            flotilla.approval.decision = tracing::field::Empty,
            flotilla.approval.by = tracing::field::Empty,
        );
        if let Some(parent) = traceparent {
            flotilla_telemetry::trace::set_parent(&span, parent);
        }
        let _waiting = self.metrics.approval_waiting(&self.progress.subagent_type);
        let verdict = match next_decision(|| store.watch_decision(&decision_key), deadline).await? {
            Some(decision) => self.apply(store, key, &decision, None).await,
            None => self.expire(store, key, &decision_key).await,
        };
        if let Ok(v) = &verdict {
            span.record("flotilla.approval.decision", v.decision.as_deref().unwrap_or("none"));
            if let Some(by) = &v.by {
                span.record("flotilla.approval.by", by.as_str());
            }
        }
        verdict
    }

    /// Marks the request of `decision`'s round used and returns the call's
    /// result. `expired_at`: the revision of our own expiry, when the decision
    /// was found after it (it counts only if stored before).
    async fn apply(
        &self,
        store: &ApprovalStore,
        key: &str,
        decision: &DecisionRecord,
        expired_at: Option<u64>,
    ) -> Result<ApprovalVerdict, BusError> {
        loop {
            let Some(Versioned { mut record, revision }) = store.get(key).await? else {
                return Err(vanished(key));
            };
            let applicable = record.round == decision.round
                && match record.state {
                    ApprovalState::Pending | ApprovalState::Decided { .. } => expired_at.is_none(),
                    ApprovalState::Expired { .. } => expired_at == Some(revision),
                    ApprovalState::Used { .. } => false,
                    // Cancelled with its job before the decision was applied.
                    ApprovalState::Cancelled { .. } => return Ok(settled(&record)),
                };
            if !applicable {
                let err = ToolError::new(
                    ErrorKind::Permission,
                    format!(
                        "the approval of this call to {} was already used; the call was not run",
                        record.request.tool
                    ),
                );
                return Ok(ApprovalVerdict { result: Err(err), decision: None, by: None });
            }
            record.state = ApprovalState::Used {
                decision: decision.decision.clone(),
                by: decision.by.clone(),
                at: protocol::now(),
            };
            if let Write::Stored(_) = store.update(key, &record, revision).await? {
                let mut shown = record.clone();
                shown.state = ApprovalState::Decided {
                    decision: decision.decision.clone(),
                    by: decision.by.clone(),
                    principal: decision.principal.clone(),
                    decided_at: decision.decided_at,
                };
                self.resolved(&shown).await;
                return Ok(ApprovalVerdict {
                    result: outcome(&record.request, &decision.decision),
                    decision: Some(decision.decision.kind().as_str().into()),
                    by: decision.by.clone(),
                });
            }
        }
    }

    /// Marks the request expired. A decision stored before the expiry (a
    /// lower revision of the same stream) still wins; one stored after it is
    /// void, and the orchestrator tells its reviewer so.
    async fn expire(&self, store: &ApprovalStore, key: &str, decision_key: &str) -> Result<ApprovalVerdict, BusError> {
        loop {
            let Some(Versioned { mut record, revision }) = store.get(key).await? else {
                return Err(vanished(key));
            };
            if !matches!(record.state, ApprovalState::Pending | ApprovalState::Decided { .. }) {
                return Ok(settled(&record));
            }
            record.state = ApprovalState::Expired { at: protocol::now() };
            let Write::Stored(expired_at) = store.update(key, &record, revision).await? else { continue };
            if let Some((decision, stored_at)) = store.decision(decision_key).await?
                && stored_at < expired_at
            {
                return self.apply(store, key, &decision, Some(expired_at)).await;
            }
            self.resolved(&record).await;
            return Ok(settled(&record));
        }
    }
}

/// First and longest pause between two watches of a decision key.
const REWATCH: (Duration, Duration) = (Duration::from_millis(200), Duration::from_secs(5));

/// The decision `watch` yields before `deadline` (`None` once it passed).
/// A watch that fails or ends (the server ended the consumer) is opened
/// again after the one backoff policy's pause (shared/retry/src/lib.rs),
/// never at once: a server that keeps ending watches must not spin the worker.
async fn next_decision<S, W, Fut>(
    mut watch: W,
    deadline: tokio::time::Instant,
) -> Result<Option<DecisionRecord>, BusError>
where
    W: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<S, BusError>>,
    S: futures::Stream<Item = Result<(DecisionRecord, u64), BusError>>,
{
    let mut backoff = Backoff::new(REWATCH.0, REWATCH.1);
    loop {
        let mut stream = std::pin::pin!(watch().await?);
        let next = tokio::select! {
            next = stream.next() => next,
            _ = tokio::time::sleep_until(deadline) => return Ok(None),
        };
        match next {
            Some(Ok((decision, _))) => return Ok(Some(decision)),
            Some(Err(e)) => tracing::warn!(error = %e, "decision watch failed; watching again"),
            None => tracing::debug!("decision watch ended; watching again"),
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff.next_delay()) => {}
            _ = tokio::time::sleep_until(deadline) => return Ok(None),
        }
    }
}

/// What is asked: a call (`ask` absent), or a server's question during it.
#[derive(Clone, Copy)]
struct Call<'a> {
    /// The call; for a question, with the question's own call id.
    ctx: &'a ToolContext,
    tool: &'a str,
    args: &'a Value,
    ask: Option<&'a ElicitationAsk>,
}

/// Where a gated call stands after reading its request.
enum Opened {
    /// Wait for the decision of this round.
    Wait(Box<ApprovalRecord>),
    /// Settled already: the call's result.
    Done(ApprovalVerdict),
}

/// The result of applying `decision` to `request`. The worker checks the
/// decision against the request's allowed decisions itself: the orchestrator
/// checked it too, but the worker is the one that runs the call.
fn outcome(request: &ApprovalRequest, decision: &Decision) -> Result<Value, ToolError> {
    let r = request;
    if !r.decisions.contains(&decision.kind()) {
        return Err(ToolError::new(
            ErrorKind::Permission,
            format!("the reviewer's {} is not allowed for {}; the call was not run", decision.kind(), r.tool),
        ));
    }
    match decision {
        Decision::Approve => Ok(r.args.clone()),
        Decision::Edit { args } => Ok(args.clone()),
        Decision::Reject { reason } => Err(ToolError::new(
            ErrorKind::Permission,
            match reason {
                Some(why) => format!("a reviewer rejected this call to {}: {why}", r.tool),
                None => format!("a reviewer rejected this call to {}", r.tool),
            },
        )),
        // Elicitation answers (only allowed on elicitation requests, above).
        // Checked by the orchestrator too; the worker is the one that answers.
        Decision::Accept { content } => match flotilla_agent::tool::check_content(r, content) {
            Ok(()) => Ok(content.clone()),
            Err(e) => Err(ToolError::validation(e.to_string())),
        },
        Decision::Decline => Err(ToolError::new(ErrorKind::Permission, "declined")),
        Decision::Cancel => Err(ToolError::new(ErrorKind::Cancelled, "cancelled")),
    }
}

fn vanished(key: &str) -> BusError {
    BusError::new(format!("approval {key} vanished"), "the record was deleted while waiting")
}

#[async_trait]
impl ApprovalGate for BusApprovalGate {
    async fn approve(&self, ctx: &ToolContext, tool: &str, args: &Value) -> Result<Value, ToolError> {
        self.review(ctx, tool, args).await.result
    }

    async fn review(&self, ctx: &ToolContext, tool: &str, args: &Value) -> ApprovalVerdict {
        self.ask(Call { ctx, tool, args, ask: None }).await
    }

    /// The question is stored under the call id `<call id>-elicit` (its own
    /// key, so the call's own approval and the question never share a
    /// round), with the decisions `accept`, `decline` and `cancel`. Nobody
    /// answering in time declines; the job's cancel cancels.
    async fn elicit(&self, ctx: &ToolContext, tool: &str, args: &Value, ask: &ElicitationAsk) -> ElicitationVerdict {
        let mut asking = ctx.clone();
        asking.call_id = format!("{}-elicit", ctx.call_id);
        let verdict = self.ask(Call { ctx: &asking, tool, args, ask: Some(ask) }).await;
        let Some(decision) = verdict.decision else {
            return ElicitationVerdict::declined("decline");
        };
        let answer = match (decision.as_str(), verdict.result) {
            ("accept", Ok(content)) => ElicitationAnswer::Accept(content),
            ("cancel" | "cancelled", _) => ElicitationAnswer::Cancel,
            _ => ElicitationAnswer::Decline,
        };
        ElicitationVerdict { answer, decision, by: verdict.by }
    }
}

impl BusApprovalGate {
    /// Asks `call`'s question and waits for its answer.
    async fn ask(&self, call: Call<'_>) -> ApprovalVerdict {
        let Call { ctx, tool, .. } = call;
        let failed = |e: ToolError| ApprovalVerdict { result: Err(e), decision: None, by: None };
        let Some(task) = ctx.task_id else {
            return failed(ToolError::new(ErrorKind::Bug, "approval requested outside a task"));
        };
        let key = ApprovalStore::key(&self.progress.subagent_type, &ctx.job_id, &task, &ctx.call_id);
        let unavailable = |e: BusError| {
            tracing::warn!(tool, call_id = %ctx.call_id, error = %e, "approval store unavailable");
            failed(ToolError::transient(format!("cannot ask for approval of {tool} right now; the call was not run")))
        };
        // The bus opens the bucket once per connection and hands out clones.
        let store = match self.bus.approvals().await {
            Ok(store) => store,
            Err(e) => return unavailable(e),
        };
        // The decision is audited by the tool set that asked, once
        // (`audit_decision` in shared/agent/src/tool/pipeline/approve.rs), not here.
        let verdict = match self.open(&store, &key, task, &call).await {
            Ok(Opened::Wait(rec)) => self.wait(&store, &key, *rec, ctx.traceparent.as_deref()).await,
            Ok(Opened::Done(verdict)) => Ok(verdict),
            Err(e) => Err(e),
        };
        verdict.unwrap_or_else(unavailable)
    }
}

/// Whether `rec` asked about a call with these arguments. (A tool asking
/// again from inside its approved call is answered by the tool set, see
/// `Asked` in shared/agent/src/tool/pipeline/approve.rs.)
fn same_call(rec: &ApprovalRecord, args: &Value) -> bool {
    &rec.request.args == args
}

/// The verdict on a request nobody may decide any more: expired (nobody
/// answered in time) or cancelled with its job.
fn settled(rec: &ApprovalRecord) -> ApprovalVerdict {
    let r = &rec.request;
    let (decision, message) = match &rec.state {
        ApprovalState::Cancelled { reason, .. } => {
            ("cancelled", format!("the job was cancelled ({reason}), so this call to {} was not run", r.tool))
        }
        _ => {
            let secs = (r.expires_at - r.requested_at).whole_seconds();
            (
                "expired",
                format!("no reviewer answered within {secs}s, so this call to {} was rejected and not run", r.tool),
            )
        }
    };
    ApprovalVerdict {
        result: Err(ToolError::new(ErrorKind::Permission, message)),
        decision: Some(decision.into()),
        by: None,
    }
}

fn until(at: OffsetDateTime) -> Duration {
    (at - protocol::now()).try_into().unwrap_or(Duration::ZERO)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    fn approve(round: u32) -> DecisionRecord {
        DecisionRecord {
            v: 1,
            round,
            decision: Decision::Approve,
            by: None,
            principal: None,
            decided_at: protocol::now(),
        }
    }

    /// A request nobody may decide any more is refused with why, and its
    /// audit record names the decision (docs/APPROVALS.md, "Audit").
    #[test]
    fn settled_requests_say_whether_they_expired_or_were_cancelled_with_their_job() {
        let now = protocol::now();
        let mut rec = ApprovalRecord {
            v: 1,
            request: ApprovalRequest {
                v: 1,
                job_id: flotilla_protocol::ids::JobId::new(),
                task_id: TaskId::new(),
                tenant: Tenant::default(),
                subagent_type: flotilla_protocol::ids::SubagentType::new("ops").unwrap(),
                worker_id: "w1".into(),
                call_id: "c1".into(),
                tool: "deploy".into(),
                args: serde_json::json!({}),
                input_schema: Value::Null,
                decisions: DEFAULT_DECISIONS.to_vec(),
                kind: ApprovalKind::ToolCall,
                server: None,
                message: None,
                requested_schema: None,
                requested_at: now,
                expires_at: now + Duration::from_secs(60),
            },
            state: ApprovalState::Expired { at: now },
            round: 1,
        };
        let v = settled(&rec);
        assert_eq!(v.decision.as_deref(), Some("expired"));
        let e = v.result.unwrap_err();
        assert_eq!(e.kind, ErrorKind::Permission);
        assert_eq!(e.message, "no reviewer answered within 60s, so this call to deploy was rejected and not run");
        rec.state = ApprovalState::Cancelled { reason: "change freeze".into(), at: now };
        let v = settled(&rec);
        assert_eq!((v.decision.as_deref(), v.by.as_deref()), (Some("cancelled"), None));
        let e = v.result.unwrap_err();
        assert_eq!(e.message, "the job was cancelled (change freeze), so this call to deploy was not run");
    }

    /// A server that ends every watch at once: before the backoff the gate
    /// re-watched in a tight loop (millions of watches a second).
    #[tokio::test]
    async fn watches_that_keep_ending_are_reopened_with_backoff() {
        let watches = AtomicU32::new(0);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(1);
        let got = next_decision(
            || async {
                watches.fetch_add(1, Ordering::SeqCst);
                Ok(futures::stream::empty())
            },
            deadline,
        )
        .await
        .unwrap();
        assert!(got.is_none(), "the deadline passed without a decision");
        // Pauses of at least 200, 400 and 800 ms: at most 3 watches fit in 1 s.
        let n = watches.load(Ordering::SeqCst);
        assert!((2..=3).contains(&n), "{n} watches in 1 s");
    }

    /// A failed watch is retried after a pause too, and the decision of a
    /// later watch is returned.
    #[tokio::test]
    async fn a_decision_after_a_failed_watch_is_returned() {
        let watches = AtomicU32::new(0);
        let start = tokio::time::Instant::now();
        let got = next_decision(
            || async {
                let item = match watches.fetch_add(1, Ordering::SeqCst) {
                    0 => Err(BusError::new("watch", "connection reset")),
                    _ => Ok((approve(3), 7)),
                };
                Ok(futures::stream::iter([item]))
            },
            start + Duration::from_secs(30),
        )
        .await
        .unwrap();
        assert_eq!(got.map(|d| d.round), Some(3));
        assert!(start.elapsed() >= REWATCH.0, "paused {:?} before watching again", start.elapsed());
    }
}
