//! Flotilla as a host of the Synadia Agent Protocol (`[agent_protocol]`,
//! docs/PROTOCOLS.md): the agent `flotilla` (the `agent` key) is registered
//! in the `agents` micro service once per served tenant, the tenant being
//! its `<owner>` token. A prompt is a job of that tenant, submitted through
//! the job-API client like any front end's (`flotilla_client::Client`), and
//! its reply stream is the job as it runs: the `ack`, a `job:<id>` status,
//! each event as a response chunk (the line `flotilla watch` prints), an
//! approval as a query, the answer, the terminator.
//!
//! Why a registration per tenant rather than one wildcard: callers must
//! publish to the subject `$SRV.INFO` names, verbatim (§4.3), so each
//! tenant needs a literal prompt subject; and a tenant's registration may
//! live in that tenant's own NATS account (`[agent_protocol.accounts]`),
//! the only way to keep the SDKs' fixed reply inboxes (`_INBOX.agents.>`)
//! and the registrations themselves from other tenants (docs/SECURITY.md).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use async_nats::service::ServiceExt;
use bytes::Bytes;
use flotilla_client::{Client, EndWatch, Event, Scope, render};
use flotilla_config::NatsConfig;
use flotilla_config::agent_protocol::AgentProtocolConfig;
use flotilla_protocol::ids::{JobId, SubagentType, Tenant};
use flotilla_protocol::{
    ApprovalKind, ApprovalRequest, ApproveRequest, Decision, ErrorKind, JobEventKind, ProgressKind, SCHEMA_VERSION,
};
use futures::StreamExt;
use serde_json::{Map, Value, json};
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use crate::wire::{self, AgentSubjects, Chunk, Envelope, Heartbeat};

/// Starts the host: the job-API connection, then per served tenant (on its
/// account's connection, or on `nats`) the registration of the agent
/// `config.agent` and one of each type of `config.subagents` (described by
/// `descriptions`, the `[subagents]` descriptions), each with its prompt
/// and status endpoints and its heartbeat, until `stop` fires. Fails when a
/// connection or a registration cannot be made.
pub async fn start(
    config: &AgentProtocolConfig,
    nats: &NatsConfig,
    descriptions: &BTreeMap<SubagentType, String>,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    let wait = Duration::from_secs(30);
    let bus = flotilla_bus::Bus::connect(nats, "flotilla-agent-protocol", wait).await?;
    let api = Client::new(bus.clone(), Tenant::default());
    let mut served = vec![(config.agent.clone(), None)];
    for ty in &config.subagents {
        let ty = SubagentType::new(ty)?;
        let description = descriptions.get(&ty).cloned().unwrap_or_default();
        served.push((ty.as_str().to_string(), Some((ty, description))));
    }
    for t in &config.tenants {
        let tenant = Tenant::new(t.as_str())?;
        let conn = match config.accounts.get(t) {
            Some(account) => {
                let name = format!("flotilla-agent-protocol-{t}");
                flotilla_bus::Bus::connect(account, &name, wait)
                    .await
                    .with_context(|| format!("[agent_protocol.accounts.{t}]"))?
                    .nats()
                    .clone()
            }
            None => bus.nats().clone(),
        };
        for (agent, direct) in &served {
            let subjects = AgentSubjects::new(agent, t, &config.session).map_err(anyhow::Error::msg)?;
            let host = Registration {
                api: api.for_tenant(tenant.clone()),
                nats: conn.clone(),
                subjects,
                direct: direct.clone(),
                heartbeat: Duration::from_secs(config.heartbeat_secs),
                keepalive: Duration::from_secs(config.keepalive_secs),
            };
            host.register(stop.clone())
                .await
                .with_context(|| format!("registering the agent {agent} for tenant {t}"))?;
        }
    }
    Ok(())
}

/// One tenant's agent.
#[derive(Clone)]
struct Registration {
    api: Client,
    nats: async_nats::Client,
    subjects: AgentSubjects,
    /// The subagent type (and its description) of a per-type agent, whose
    /// prompts are direct jobs of one task; `None` for the planner's agent.
    direct: Option<(SubagentType, String)>,
    heartbeat: Duration,
    keepalive: Duration,
}

impl Registration {
    async fn register(self, stop: CancellationToken) -> anyhow::Result<()> {
        let s = &self.subjects;
        let metadata = HashMap::from([
            ("agent".to_string(), s.agent.clone()),
            ("owner".to_string(), s.owner.clone()),
            ("session".to_string(), s.name.clone()),
            ("protocol_version".to_string(), wire::PROTOCOL_VERSION.to_string()),
        ]);
        let service = self
            .nats
            .service_builder()
            .description(self.description())
            .metadata(metadata)
            .queue_group(wire::QUEUE_GROUP)
            .start(wire::SERVICE_NAME, env!("CARGO_PKG_VERSION"))
            .await
            .map_err(|e| anyhow::anyhow!("cannot register the `agents` service: {e}"))?;
        let prompt_meta = self.prompt_metadata();
        let prompts = service
            .endpoint_builder()
            .name(wire::PROMPT_ENDPOINT)
            .queue_group(wire::QUEUE_GROUP)
            .metadata(prompt_meta.clone())
            .add(s.prompt())
            .await
            .map_err(|e| anyhow::anyhow!("cannot add the prompt endpoint {}: {e}", s.prompt()))?;
        let statuses = service
            .endpoint_builder()
            .name(wire::STATUS_ENDPOINT)
            .queue_group(wire::QUEUE_GROUP)
            .add(s.status())
            .await
            .map_err(|e| anyhow::anyhow!("cannot add the status endpoint {}: {e}", s.status()))?;
        // Registered at the server before start returns: a caller that
        // discovers right after must not find it missing.
        self.nats.flush().await.context("flushing the registration")?;
        let instance = service.info().await.id;
        tracing::info!(prompt = %s.prompt(), %instance, "agent protocol host registered");
        let me = Arc::new(self);
        let beat = me.beat(instance.clone(), prompt_meta);
        tokio::spawn(me.clone().heartbeats(beat.clone(), stop.clone()));
        tokio::spawn(me.clone().answer_status(statuses, beat, stop.clone()));
        tokio::spawn(me.serve_prompts(prompts, service, stop));
        Ok(())
    }

    fn description(&self) -> String {
        let owner = &self.subjects.owner;
        match &self.direct {
            None => format!(
                "Flotilla: each prompt is a job of tenant {owner}, streamed back as it runs (progress, approvals, the answer)"
            ),
            Some((ty, what)) => format!(
                "Flotilla subagent {ty}: each prompt runs as one {ty} task of tenant {owner}, streamed back as it runs \
                 (progress, approvals, the report). {what}"
            ),
        }
    }

    /// `max_payload` is the server's own limit (a larger prompt could not
    /// arrive); attachments are refused, the job API takes text.
    fn prompt_metadata(&self) -> HashMap<String, String> {
        let max = self.nats.server_info().max_payload;
        HashMap::from([
            ("max_payload".to_string(), wire::format_bytes(if max == 0 { 1 << 20 } else { max })),
            ("attachments_ok".to_string(), "false".to_string()),
        ])
    }

    /// The heartbeat payload but its `ts`.
    fn beat(&self, instance: String, prompt_meta: HashMap<String, String>) -> Heartbeat {
        let s = &self.subjects;
        Heartbeat {
            agent: s.agent.clone(),
            owner: s.owner.clone(),
            session: Some(s.name.clone()),
            instance_id: instance,
            ts: String::new(),
            interval_s: self.heartbeat.as_secs(),
            protocol_version: Some(wire::PROTOCOL_VERSION.into()),
            endpoints: Some(json!({wire::PROMPT_ENDPOINT: {"subject": s.prompt(), "metadata": prompt_meta}})),
            extra: Map::new(),
        }
    }

    async fn heartbeats(self: Arc<Self>, beat: Heartbeat, stop: CancellationToken) {
        let mut every = tokio::time::interval(self.heartbeat);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = every.tick() => {}
            }
            let payload = serde_json::to_vec(&Heartbeat { ts: wire::now_ts(), ..beat.clone() }).expect("encodes");
            if let Err(e) = self.nats.publish(self.subjects.heartbeat(), payload.into()).await {
                tracing::warn!(error = %e, "agent protocol heartbeat not sent");
            }
        }
    }

    async fn answer_status(
        self: Arc<Self>,
        mut requests: async_nats::service::endpoint::Endpoint,
        beat: Heartbeat,
        stop: CancellationToken,
    ) {
        loop {
            let req = tokio::select! {
                _ = stop.cancelled() => return,
                r = requests.next() => match r { Some(r) => r, None => return },
            };
            let payload = serde_json::to_vec(&Heartbeat { ts: wire::now_ts(), ..beat.clone() }).expect("encodes");
            if let Err(e) = req.respond(Ok(payload.into())).await {
                tracing::debug!(error = %e, "status reply not sent");
            }
        }
    }

    async fn serve_prompts(
        self: Arc<Self>,
        mut requests: async_nats::service::endpoint::Endpoint,
        service: async_nats::service::Service,
        stop: CancellationToken,
    ) {
        loop {
            let req = tokio::select! {
                _ = stop.cancelled() => break,
                r = requests.next() => match r { Some(r) => r, None => break },
            };
            let Some(reply) = req.message.reply.clone() else {
                tracing::debug!("a prompt without a reply subject is ignored");
                continue;
            };
            let stream = Stream::new(self.nats.clone(), reply);
            tokio::spawn(self.clone().prompt(req.message.payload.clone(), stream, stop.clone()));
        }
        if let Err(e) = service.stop().await {
            tracing::debug!(error = %e, "agent protocol service stop");
        }
    }

    /// One prompt, from its envelope to its terminator; the terminator is
    /// sent whatever happens (§6.5).
    async fn prompt(self: Arc<Self>, payload: Bytes, stream: Stream, stop: CancellationToken) {
        let outcome = self.run_prompt(&payload, &stream, &stop).await;
        if let Err((code, error, message)) = outcome {
            stream.error(code, error, &message).await;
        }
        stream.end().await;
    }

    async fn run_prompt(&self, payload: &[u8], stream: &Stream, stop: &CancellationToken) -> Result<(), Refusal> {
        let envelope = Envelope::decode(payload).map_err(|m| (400, "bad_request", m))?;
        if !envelope.attachments.is_empty() {
            return Err((
                400,
                "attachments_not_supported",
                "this agent takes no attachments (attachments_ok=false)".into(),
            ));
        }
        // The ack goes out before any work (§6.4).
        stream.send(&Chunk::ack()).await;
        let job = match &self.direct {
            None => self.api.submit(envelope.prompt).await,
            Some((ty, _)) => self.api.submit_task(ty.clone(), envelope.prompt, Vec::new()).await,
        }
        .map_err(refusal)?;
        stream.send(&Chunk::Status(format!("job:{job}"))).await;
        tracing::info!(%job, tenant = %self.api.tenant(), "agent protocol prompt submitted a job");
        self.follow(job, stream, stop).await
    }

    /// Streams `job` until it ends: each event a response chunk, each
    /// approval a query, then the answer (or the error frame of a failed or
    /// cancelled job).
    async fn follow(&self, job: JobId, stream: &Stream, stop: &CancellationToken) -> Result<(), Refusal> {
        let scope = Scope::Job(self.api.tenant().clone(), job);
        let (_, events) = self.api.follow_counted(scope, true).await.map_err(refusal)?;
        let mut events = std::pin::pin!(events);
        let mut ends = EndWatch::new(&self.api, job, true);
        let mut quiet = tokio::time::interval(self.keepalive);
        quiet.reset();
        let asking = CancellationToken::new();
        let _stop_asking = asking.clone().drop_guard();
        loop {
            let ev = tokio::select! {
                _ = stop.cancelled() => {
                    return Err((500, "host_stopped", format!("the Flotilla host stopped; job {job} goes on")));
                }
                _ = quiet.tick() => {
                    stream.send(&Chunk::ack()).await;
                    continue;
                }
                ev = ends.next(&mut events) => ev.map_err(refusal)?,
            };
            quiet.reset();
            let Some(ev) = ev else { return self.final_state(job, stream).await };
            match &ev {
                Event::Job(j) => match &j.kind {
                    JobEventKind::Completed { answer, .. } => {
                        stream.send(&marked(answer.clone(), "answer")).await;
                        return Ok(());
                    }
                    JobEventKind::Failed { error } => {
                        return Err((
                            500,
                            "job_failed",
                            format!("job {job} failed ({}): {}", error.kind, error.message),
                        ));
                    }
                    JobEventKind::Cancelled { reason } => {
                        return Err((409, "job_cancelled", format!("job {job} was cancelled: {reason}")));
                    }
                    _ => {}
                },
                Event::Progress(p) => {
                    if let ProgressKind::ApprovalRequested { call_id, .. } = &p.kind {
                        self.ask(job, p.task_id, call_id.clone(), stream.clone(), asking.clone());
                    }
                }
            }
            stream.send(&marked(format!("{}\n", render::event(&ev)), "progress")).await;
        }
    }

    /// The job ended without its terminal event reaching this follower:
    /// its record has the outcome.
    async fn final_state(&self, job: JobId, stream: &Stream) -> Result<(), Refusal> {
        let rec = self.api.status(job).await.map_err(refusal)?;
        match (rec.status, rec.answer) {
            (flotilla_protocol::JobStatus::Completed, Some(answer)) => {
                stream.send(&marked(answer, "answer")).await;
                Ok(())
            }
            (status, _) => Err((500, "job_ended", format!("job {job} ended {status:?} without an answer"))),
        }
    }

    /// An approval request of the job as a query (§7): the caller's one
    /// reply becomes the decision, sent through the job API as `flotilla
    /// approve` would. Unanswered, the request stays open for any other
    /// reviewer until it expires.
    fn ask(
        &self,
        job: JobId,
        task: flotilla_protocol::ids::TaskId,
        call_id: String,
        stream: Stream,
        stop: CancellationToken,
    ) {
        let me = self.clone();
        tokio::spawn(async move {
            let pending = match me.api.approvals(Some(job)).await {
                Ok(r) => r.approvals,
                Err(e) => return tracing::warn!(%job, error = %e, "approvals not read for a query"),
            };
            let Some(req) = pending.into_iter().find(|a| a.task_id == task && a.call_id == call_id) else { return };
            let inbox = me.nats.new_inbox();
            let mut sub = match me.nats.subscribe(inbox.clone()).await {
                Ok(s) => s,
                Err(e) => return tracing::warn!(error = %e, "no inbox for a query"),
            };
            let query = Chunk::Query { id: format!("{task}:{call_id}"), reply_subject: inbox, prompt: question(&req) };
            if !stream.send(&query).await {
                return;
            }
            let left = (req.expires_at - time::OffsetDateTime::now_utc()).try_into().unwrap_or(Duration::ZERO);
            let msg = tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(left) => return,
                m = sub.next() => match m { Some(m) => m, None => return },
            };
            let answer = match Envelope::decode(&msg.payload) {
                Ok(e) => e.prompt,
                Err(e) => return tracing::info!(%job, "unreadable query reply ignored: {e}"),
            };
            let decision = match decision(&req, &answer) {
                Ok(d) => d,
                Err(e) => {
                    stream.send(&marked(format!("reply to {call_id} not understood: {e}\n"), "progress")).await;
                    return;
                }
            };
            let approve = ApproveRequest {
                v: SCHEMA_VERSION,
                job_id: job,
                call_id,
                task_id: Some(task),
                decision,
                by: Some("agent protocol caller".into()),
                authenticated_as: Some(format!("agent protocol prompt on {}", me.subjects.prompt())),
            };
            if let Err(e) = me.api.call(&approve, "approve refused").await {
                stream.send(&marked(format!("decision not recorded: {e:#}\n"), "progress")).await;
            }
        });
    }
}

/// (code, machine error, message) of an error frame (§9).
type Refusal = (u16, &'static str, String);

/// A job-API error as the §9.2 code its kind means.
fn refusal(e: anyhow::Error) -> Refusal {
    let kind = e.chain().find_map(|c| c.downcast_ref::<flotilla_protocol::ErrorInfo>()).map(|i| i.kind);
    let code = match kind {
        Some(ErrorKind::Validation) => 400,
        Some(ErrorKind::Permission) => 403,
        Some(ErrorKind::NotFound) => 404,
        Some(ErrorKind::Limit) => 429,
        _ => 500,
    };
    (code, "job_api", format!("{e:#}"))
}

/// A response chunk in the object form, `flotilla` saying what it is
/// (`progress` or `answer`); callers that do not know the field read the text.
fn marked(text: String, what: &str) -> Chunk {
    let mut extra = Map::new();
    extra.insert("flotilla".into(), Value::String(what.into()));
    Chunk::Response { text, extra }
}

/// The query text of an approval request.
fn question(req: &ApprovalRequest) -> String {
    match req.kind {
        ApprovalKind::ToolCall => format!(
            "Task {} wants to call `{}` with {}. Reply `approve`, `reject` (optionally `reject: <reason>`), or `edit {{…}}` with new arguments.",
            req.task_id, req.tool, req.args
        ),
        ApprovalKind::Elicitation => format!(
            "{} asks: {} Reply with the answer (text, or a JSON object matching {}), or `decline` / `cancel`.",
            req.server.as_deref().unwrap_or("a tool"),
            req.message.as_deref().unwrap_or(""),
            req.requested_schema.clone().unwrap_or(Value::Null)
        ),
    }
}

/// The caller's reply as a decision of the kinds `req` allows.
fn decision(req: &ApprovalRequest, reply: &str) -> Result<Decision, String> {
    let text = reply.trim();
    if let Ok(d) = serde_json::from_str::<Decision>(text) {
        return Ok(d);
    }
    let lower = text.to_ascii_lowercase();
    let word = lower.split([':', ' ']).next().unwrap_or_default();
    match req.kind {
        ApprovalKind::ToolCall => match word {
            "approve" | "approved" | "yes" | "y" | "ok" => Ok(Decision::Approve),
            "reject" | "rejected" | "no" | "n" | "deny" => {
                let reason = text.split_once(':').map(|(_, r)| r.trim().to_string()).filter(|r| !r.is_empty());
                Ok(Decision::Reject { reason })
            }
            "edit" => {
                let args = text[4..].trim();
                serde_json::from_str(args)
                    .map(|args| Decision::Edit { args })
                    .map_err(|e| format!("edit arguments: {e}"))
            }
            _ => Err(format!("{text:?} is not approve, reject or edit {{…}}")),
        },
        ApprovalKind::Elicitation => match word {
            "decline" => Ok(Decision::Decline),
            "cancel" => Ok(Decision::Cancel),
            _ => match serde_json::from_str::<Value>(text) {
                Ok(content @ Value::Object(_)) => Ok(Decision::Accept { content }),
                _ => Ok(Decision::Accept { content: json!({"answer": text}) }),
            },
        },
    }
}

/// A prompt's reply subject: chunks in order, nothing after the terminator.
#[derive(Clone)]
struct Stream {
    nats: async_nats::Client,
    reply: async_nats::Subject,
    ended: Arc<Mutex<bool>>,
}

impl Stream {
    fn new(nats: async_nats::Client, reply: async_nats::Subject) -> Self {
        Self { nats, reply, ended: Arc::new(Mutex::new(false)) }
    }

    /// Sends one chunk; false once the stream has ended.
    async fn send(&self, chunk: &Chunk) -> bool {
        let ended = self.ended.lock().await;
        if *ended {
            return false;
        }
        if let Err(e) = self.nats.publish(self.reply.clone(), chunk.encode().into()).await {
            tracing::debug!(error = %e, "chunk not sent");
        }
        true
    }

    /// The error frame (§9.1): headers, and the JSON body.
    async fn error(&self, code: u16, error: &str, message: &str) {
        let ended = self.ended.lock().await;
        if *ended {
            return;
        }
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(wire::ERROR_CODE_HEADER, code.to_string().as_str());
        headers.insert(wire::ERROR_HEADER, wire::header_text(message).as_str());
        let body = wire::error_body(error, message);
        if let Err(e) = self.nats.publish_with_headers(self.reply.clone(), headers, body.into()).await {
            tracing::debug!(error = %e, "error frame not sent");
        }
    }

    /// The terminator: an empty body without headers (§6.5).
    async fn end(&self) {
        let mut ended = self.ended.lock().await;
        if *ended {
            return;
        }
        *ended = true;
        if let Err(e) = self.nats.publish(self.reply.clone(), Bytes::new()).await {
            tracing::debug!(error = %e, "terminator not sent");
        }
        let _ = self.nats.flush().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(kind: ApprovalKind) -> ApprovalRequest {
        let now = flotilla_protocol::now();
        ApprovalRequest {
            v: 1,
            job_id: JobId::new(),
            task_id: flotilla_protocol::ids::TaskId::new(),
            tenant: Tenant::default(),
            subagent_type: flotilla_protocol::ids::SubagentType::new("finance").unwrap(),
            worker_id: "w".into(),
            call_id: "c1".into(),
            tool: "calculate_margin".into(),
            args: json!({"revenue": 1}),
            input_schema: json!({}),
            decisions: vec![],
            kind,
            server: None,
            message: Some("Which region?".into()),
            requested_schema: None,
            requested_at: now,
            expires_at: now,
        }
    }

    #[test]
    fn replies_become_decisions() {
        let tool = req(ApprovalKind::ToolCall);
        assert_eq!(decision(&tool, "approve").unwrap(), Decision::Approve);
        assert_eq!(decision(&tool, "Reject: too big").unwrap(), Decision::Reject { reason: Some("too big".into()) });
        assert_eq!(decision(&tool, "edit {\"revenue\": 2}").unwrap(), Decision::Edit { args: json!({"revenue": 2}) });
        assert_eq!(decision(&tool, r#"{"decision": "approve"}"#).unwrap(), Decision::Approve);
        assert!(decision(&tool, "maybe").unwrap_err().contains("not approve"));
        let ask = req(ApprovalKind::Elicitation);
        assert_eq!(decision(&ask, "north").unwrap(), Decision::Accept { content: json!({"answer": "north"}) });
        assert_eq!(decision(&ask, "decline").unwrap(), Decision::Decline);
        assert_eq!(decision(&ask, r#"{"region": "x"}"#).unwrap(), Decision::Accept { content: json!({"region": "x"}) });
        assert!(question(&tool).contains("`calculate_margin`"));
    }
}
