//! A subagent type backed by a protocol agent (`[subagents.<type>] agent =
//! { name, owner }`, docs/PROTOCOLS.md "Synadia Agent Protocol for NATS"):
//! one attempt of a task is one prompt of that agent.
//!
//! - The agent is found through `$SRV.INFO.agents` (every instance answers
//!   with its registration): the first instance, by session name, whose
//!   metadata names this `agent` and `owner`; its prompt endpoint's subject
//!   is kept until a prompt finds nobody there, then looked up again.
//! - The prompt is the task's description (the JSON envelope). The stream's
//!   `response` chunks are the task's progress (`model_delta`) and, joined,
//!   its answer; `status` chunks (the `ack`, keepalives) only show the agent
//!   is alive; the empty message ends the stream.
//! - A `query` chunk is a question for a person: an elicitation through the
//!   worker's approval gate ([`RemoteTask::ask_person`]); the answer goes to
//!   the query's reply subject as an envelope and the stream goes on. A
//!   decline fails the task.
//! - The protocol delivers at most once: a worker that dies mid-prompt loses
//!   the stream. The task queue redelivers the task, and the new attempt
//!   prompts again (the same instance while it is registered).
//! - Nobody registered, no responders, a stream quiet for longer than
//!   `QUIET` (the host sends keepalives), or a `5xx` error frame are
//!   `transient`: the task goes back to the queue. A `4xx` frame fails it.

use std::time::Duration;

use async_nats::{Client, HeaderMap, StatusCode};
use async_trait::async_trait;
use bytes::Bytes;
use flotilla_agent::agent::AgentObserver;
use flotilla_agent::model::ModelIdentity;
use flotilla_agent::remote::{RemoteAgent, RemoteAnswer, RemoteFailure, RemoteTask};
use flotilla_agent::tool::ElicitationAnswer;
use flotilla_config::agent_protocol::AgentRef;
use flotilla_protocol::{ErrorInfo, ErrorKind};
use futures::StreamExt;
use serde_json::Value;
use tokio::sync::Mutex;

use crate::wire::{self, Chunk, Envelope};

/// How long discovery waits for the next `$SRV.INFO` reply once one came.
const DISCOVER_STALL: Duration = Duration::from_millis(300);
/// How long discovery waits in all.
const DISCOVER_MAX: Duration = Duration::from_secs(3);
/// How long a prompt's stream may stay silent (the SDKs' default
/// inactivity timeout; hosts send a keepalive well within it).
const QUIET: Duration = Duration::from_secs(60);

/// A protocol agent that runs a subagent type's tasks.
pub struct ProtocolAgent {
    nats: Client,
    agent: AgentRef,
    /// The prompt subject of the instance found last.
    prompt_subject: Mutex<Option<String>>,
}

fn failure(kind: ErrorKind, message: impl Into<String>) -> RemoteFailure {
    RemoteFailure::from(ErrorInfo::new(kind, message))
}

impl ProtocolAgent {
    /// The agent `agent` reached over `nats` (the worker's connection).
    pub fn new(nats: Client, agent: &AgentRef) -> anyhow::Result<Self> {
        wire::AgentSubjects::new(&agent.name, &agent.owner, "x").map_err(|e| anyhow::anyhow!(e))?;
        Ok(Self { nats, agent: agent.clone(), prompt_subject: Mutex::new(None) })
    }

    /// The prompt subject of a registered instance of the agent.
    async fn prompt_subject(&self) -> Result<String, RemoteFailure> {
        let mut known = self.prompt_subject.lock().await;
        if let Some(s) = known.as_ref() {
            return Ok(s.clone());
        }
        let found = self.discover().await?;
        *known = Some(found.clone());
        Ok(found)
    }

    async fn forget_instance(&self) {
        *self.prompt_subject.lock().await = None;
    }

    /// Asks `$SRV.INFO.agents` and picks this agent's instance.
    async fn discover(&self) -> Result<String, RemoteFailure> {
        let unreachable = |e: String| failure(ErrorKind::Transient, format!("cannot discover protocol agents: {e}"));
        let inbox = self.nats.new_inbox();
        let mut replies = self.nats.subscribe(inbox.clone()).await.map_err(|e| unreachable(e.to_string()))?;
        let subject = format!("$SRV.INFO.{}", wire::SERVICE_NAME);
        self.nats.publish_with_reply(subject, inbox, Bytes::new()).await.map_err(|e| unreachable(e.to_string()))?;
        self.nats.flush().await.map_err(|e| unreachable(e.to_string()))?;
        let deadline = tokio::time::Instant::now() + DISCOVER_MAX;
        let mut instances: Vec<(String, String)> = Vec::new();
        loop {
            let wait = if instances.is_empty() {
                deadline
            } else {
                deadline.min(tokio::time::Instant::now() + DISCOVER_STALL)
            };
            let Ok(Some(m)) = tokio::time::timeout_at(wait, replies.next()).await else { break };
            if m.status == Some(StatusCode::NO_RESPONDERS) {
                break;
            }
            if let Some(found) = self.instance_of(&m.payload) {
                instances.push(found);
            }
        }
        instances.sort();
        instances.into_iter().next().map(|(_, subject)| subject).ok_or_else(|| {
            failure(
                ErrorKind::Transient,
                format!(
                    "no protocol agent {} of owner {} is registered (asked $SRV.INFO.{})",
                    self.agent.name,
                    self.agent.owner,
                    wire::SERVICE_NAME
                ),
            )
        })
    }

    /// `(session, prompt subject)` of a `$SRV.INFO` reply when it is an
    /// instance of this agent.
    fn instance_of(&self, info: &[u8]) -> Option<(String, String)> {
        let info: Value = serde_json::from_slice(info).ok()?;
        let meta = info.get("metadata")?;
        let field = |k: &str| meta.get(k).and_then(Value::as_str);
        if field("agent") != Some(self.agent.name.as_str()) || field("owner") != Some(self.agent.owner.as_str()) {
            return None;
        }
        let endpoints = info.get("endpoints")?.as_array()?;
        let prompt = endpoints.iter().find(|e| e.get("name").and_then(Value::as_str) == Some(wire::PROMPT_ENDPOINT))?;
        let subject = prompt.get("subject")?.as_str()?.to_string();
        Some((field("session").unwrap_or_default().to_string(), subject))
    }

    /// One prompt of the agent with `task`'s description, read to its end.
    async fn attempt(&self, task: &RemoteTask, observer: &dyn AgentObserver) -> Result<RemoteAnswer, RemoteFailure> {
        let subject = self.prompt_subject().await?;
        let lost = |e: String| failure(ErrorKind::Transient, format!("prompt of {} not sent: {e}", self.agent.name));
        let inbox = self.nats.new_inbox();
        let mut stream = self.nats.subscribe(inbox.clone()).await.map_err(|e| lost(e.to_string()))?;
        let prompt = Bytes::from(Envelope::text(task.description.clone()).encode());
        self.nats.publish_with_reply(subject.clone(), inbox, prompt).await.map_err(|e| lost(e.to_string()))?;
        let mut answer = String::new();
        loop {
            let m = match tokio::time::timeout(QUIET, stream.next()).await {
                Ok(Some(m)) => m,
                Ok(None) => return Err(lost("the reply subscription closed".into())),
                Err(_) => {
                    return Err(failure(
                        ErrorKind::Transient,
                        format!("{} sent nothing for {} s (not even a keepalive)", self.agent.name, QUIET.as_secs()),
                    ));
                }
            };
            if m.status == Some(StatusCode::NO_RESPONDERS) {
                self.forget_instance().await;
                return Err(failure(
                    ErrorKind::Transient,
                    format!("nobody serves {subject} (the agent {} went away)", self.agent.name),
                ));
            }
            if let Some(e) = error_frame(m.headers.as_ref(), &m.payload) {
                return Err(e);
            }
            if m.payload.is_empty() {
                return Ok(RemoteAnswer { text: answer, usage: Default::default() });
            }
            let chunk = Chunk::decode(&m.payload).map_err(|e| {
                failure(ErrorKind::Validation, format!("{} sent an unreadable chunk: {e}", self.agent.name))
            })?;
            match chunk {
                Some(Chunk::Response { text, .. }) => {
                    observer.model_delta(&text).await;
                    answer.push_str(&text);
                }
                Some(Chunk::Query { reply_subject, prompt, .. }) => {
                    let verdict = task.ask_person(&self.agent.name, &prompt, None).await;
                    let reply = match verdict.answer {
                        ElicitationAnswer::Accept(content) => match content.get("answer").and_then(Value::as_str) {
                            Some(text) => text.to_string(),
                            None => content.to_string(),
                        },
                        ElicitationAnswer::Decline | ElicitationAnswer::Cancel => {
                            return Err(failure(
                                ErrorKind::Business,
                                format!(
                                    "{} asked \"{prompt}\" and the answer was {}",
                                    self.agent.name, verdict.decision
                                ),
                            ));
                        }
                    };
                    self.nats
                        .publish(reply_subject, Bytes::from(Envelope::text(reply).encode()))
                        .await
                        .map_err(|e| lost(format!("the answer to a query: {e}")))?;
                }
                Some(Chunk::Status(_)) | None => {}
            }
        }
    }
}

/// The failure an error frame (§9.1) says, if `headers` make it one.
fn error_frame(headers: Option<&HeaderMap>, payload: &[u8]) -> Option<RemoteFailure> {
    let code: u16 = headers?.get(wire::ERROR_CODE_HEADER)?.as_str().parse().unwrap_or(500);
    let description = headers.and_then(|h| h.get(wire::ERROR_HEADER)).map(|v| v.as_str().to_string());
    let body: Option<Value> = serde_json::from_slice(payload).ok();
    let message = body
        .as_ref()
        .and_then(|b| b.get("message"))
        .and_then(Value::as_str)
        .map(str::to_string)
        .or(description)
        .unwrap_or_default();
    let kind = match code {
        401 | 403 => ErrorKind::Permission,
        404 => ErrorKind::NotFound,
        408 | 429 | 500..=599 => ErrorKind::Transient,
        _ => ErrorKind::Validation,
    };
    Some(failure(kind, format!("the agent answered {code}: {message}")))
}

#[async_trait]
impl RemoteAgent for ProtocolAgent {
    fn identity(&self) -> ModelIdentity<'_> {
        ModelIdentity { provider: "agent-protocol", model: &self.agent.name }
    }

    async fn run(&self, task: &RemoteTask, observer: &dyn AgentObserver) -> Result<RemoteAnswer, RemoteFailure> {
        tokio::select! {
            r = self.attempt(task, observer) => r,
            // Dropping the stream's subscription abandons the prompt; the
            // protocol has no cancel of a prompt in flight.
            () = task.cancel.cancelled() => Err(failure(ErrorKind::Cancelled, "cancelled")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_frames_map_to_error_kinds() {
        let mut h = HeaderMap::new();
        h.insert(wire::ERROR_CODE_HEADER, "503");
        h.insert(wire::ERROR_HEADER, "busy");
        let e = error_frame(Some(&h), b"").unwrap();
        assert_eq!((e.error.kind, e.error.message.as_str()), (ErrorKind::Transient, "the agent answered 503: busy"));
        h.insert(wire::ERROR_CODE_HEADER, "400");
        let e = error_frame(Some(&h), &wire::error_body("bad_request", "the prompt is empty")).unwrap();
        assert_eq!(e.error.kind, ErrorKind::Validation);
        assert!(e.error.message.contains("the prompt is empty"), "{}", e.error.message);
        assert!(error_frame(None, b"{}").is_none(), "a chunk is no error frame");
    }
}
