//! A subagent type backed by a remote A2A agent (`[subagents.<type>] a2a =
//! { url, auth }`, docs/PROTOCOLS.md "A2A v1.0"): one attempt of a task is
//! one A2A task over the agent's JSON-RPC binding, or its HTTP+JSON
//! binding when the card offers no JSON-RPC interface.
//!
//! - The task's description is the user message; its `contextId` is the
//!   task's [`session_key`](RemoteTask::session_key), the same on every
//!   attempt. A2A has no delivery guarantee of its own; the task queue's
//!   redelivery is it: a redelivered task first looks up the remote task an
//!   earlier attempt started in its context (`ListTasks`, `GetTask`) and,
//!   when that one completed, asks or still runs, takes it over (its
//!   artifacts, its question, or `SubscribeToTask`) instead of having the
//!   agent do the work twice; otherwise it sends the description again.
//! - With `capabilities.streaming` the message is sent with
//!   `SendStreamingMessage`: status messages and artifact chunks become the
//!   task's progress (`model_delta`), the artifacts' text (else the final
//!   message's) the answer. Without, `SendMessage` blocks until the task ends
//!   or asks, and `GetTask` is not needed.
//! - `TASK_STATE_INPUT_REQUIRED` is a question for a person: an elicitation
//!   through the worker's approval gate ([`RemoteTask::ask_person`]); the
//!   answer goes back as a message naming the task, and the task goes on.
//! - A cancelled task sends `CancelTask`; an unreachable agent (connect
//!   error, 5xx, 429) is `transient`, so the worker hands the task back.
//!
//! The agent card is read once per worker (at the first task) from
//! `<url>/.well-known/agent-card.json`; it names the endpoint and its
//! binding. Both bindings carry the same request and response objects
//! (wire.rs): JSON-RPC as a method and `params` in an envelope, HTTP+JSON as
//! a verb and path (`POST /message:send`, `GET /tasks/{id}`, ...) with the
//! object as the body or query, and every SSE event as the bare object.

use std::time::Duration;

use async_trait::async_trait;
use flotilla_agent::agent::AgentObserver;
use flotilla_agent::model::ModelIdentity;
use flotilla_agent::remote::{RemoteAgent, RemoteAnswer, RemoteFailure, RemoteTask};
use flotilla_agent::tool::ElicitationAnswer;
use flotilla_config::a2a::A2aAgentRef;
use flotilla_models::sse::SseReader;
use flotilla_protocol::{ErrorInfo, ErrorKind};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::sync::OnceCell;

use crate::wire::*;

/// How long the card fetch and a unary call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// A remote A2A agent.
pub struct A2aAgent {
    base: String,
    token: Option<String>,
    http: reqwest::Client,
    /// The subagent type, until the card names the agent.
    label: String,
    card: OnceCell<Endpoint>,
}

/// What the card says about reaching the agent.
#[derive(Clone, Debug)]
struct Endpoint {
    url: String,
    binding: Binding,
    streaming: bool,
    name: String,
}

/// The protocol binding a task is sent over: JSON-RPC when the card offers
/// it, else HTTP+JSON.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Binding {
    JsonRpc,
    HttpJson,
}

fn failure(kind: ErrorKind, message: impl Into<String>) -> RemoteFailure {
    RemoteFailure::from(ErrorInfo::new(kind, message))
}

impl A2aAgent {
    /// The agent of type `ty` at `r.url`, with the bearer token of
    /// `r.auth.bearer_env` (read now: a missing variable fails the worker's
    /// start, naming it).
    pub fn new(ty: &str, r: &A2aAgentRef) -> anyhow::Result<Self> {
        let token = match r.auth.as_ref().and_then(|a| a.bearer_env.as_deref()) {
            Some(var) => Some(std::env::var(var).map_err(|_| {
                anyhow::anyhow!("[subagents.{ty}] a2a.auth.bearer_env = {var:?}: the variable is not set")
            })?),
            None => None,
        };
        if !(r.url.starts_with("http://") || r.url.starts_with("https://")) {
            anyhow::bail!("[subagents.{ty}] a2a.url = {:?}: give the agent's http:// or https:// base URL", r.url);
        }
        flotilla_config::tls::install_crypto_provider();
        let http = reqwest::Client::builder().build()?;
        Ok(Self {
            base: r.url.trim_end_matches('/').to_string(),
            token,
            http,
            label: ty.to_string(),
            card: OnceCell::new(),
        })
    }

    /// `req` with the agent's bearer token, when it has one.
    fn authed(&self, req: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.token {
            Some(t) => req.bearer_auth(t),
            None => req,
        }
    }

    /// A JSON-RPC request of `method` with `params` to `url`.
    fn rpc(&self, url: &str, method: &str, params: Value) -> reqwest::RequestBuilder {
        let body =
            json!({"jsonrpc": "2.0", "id": uuid::Uuid::new_v4().to_string(), "method": method, "params": params});
        self.authed(self.http.post(url).header(VERSION_HEADER, PROTOCOL_VERSION)).json(&body)
    }

    /// The request of operation `method` (its JSON-RPC name) with `params`
    /// over `ep`'s binding.
    fn request(&self, ep: &Endpoint, method: &str, params: Value) -> Result<reqwest::RequestBuilder, RemoteFailure> {
        match ep.binding {
            Binding::JsonRpc => Ok(self.rpc(&ep.url, method, params)),
            Binding::HttpJson => self.rest(&ep.url, method, params),
        }
    }

    /// The HTTP+JSON request of `method`: the task id of `params` in the
    /// path, the rest as the body (POST) or the query (GET).
    fn rest(&self, base: &str, method: &str, params: Value) -> Result<reqwest::RequestBuilder, RemoteFailure> {
        use reqwest::Method;
        let id = params.get("id").and_then(Value::as_str).unwrap_or_default();
        let (verb, segments): (Method, Vec<String>) = match method {
            "SendMessage" => (Method::POST, vec!["message:send".into()]),
            "SendStreamingMessage" => (Method::POST, vec!["message:stream".into()]),
            "GetTask" => (Method::GET, vec!["tasks".into(), id.into()]),
            "CancelTask" => (Method::POST, vec!["tasks".into(), format!("{id}:cancel")]),
            "SubscribeToTask" => (Method::GET, vec!["tasks".into(), format!("{id}:subscribe")]),
            "ListTasks" => (Method::GET, vec!["tasks".into()]),
            other => return Err(failure(ErrorKind::Bug, format!("{other} has no HTTP+JSON form here"))),
        };
        let bad =
            |e: String| failure(ErrorKind::Validation, format!("the HTTP+JSON URL {base:?} of the agent card: {e}"));
        let mut url = reqwest::Url::parse(base).map_err(|e| bad(e.to_string()))?;
        url.path_segments_mut().map_err(|()| bad("not a base URL".into()))?.pop_if_empty().extend(&segments);
        let query: Vec<(&String, String)> = match verb {
            Method::GET => params
                .as_object()
                .into_iter()
                .flatten()
                .filter(|(k, _)| k.as_str() != "id")
                .map(|(k, v)| (k, v.as_str().map_or_else(|| v.to_string(), str::to_string)))
                .collect(),
            _ => Vec::new(),
        };
        if !query.is_empty() {
            url.query_pairs_mut().extend_pairs(query);
        }
        let req = self.authed(self.http.request(verb.clone(), url).header(VERSION_HEADER, PROTOCOL_VERSION));
        Ok(if verb == Method::GET { req } else { req.json(&params) })
    }

    async fn endpoint(&self) -> Result<&Endpoint, RemoteFailure> {
        self.card
            .get_or_try_init(|| async {
                let url = format!("{}{AGENT_CARD_PATH}", self.base);
                let resp = self
                    .authed(self.http.get(&url).timeout(CALL_TIMEOUT))
                    .send()
                    .await
                    .map_err(|e| unreachable(&self.base, e))?;
                let resp = status_ok(resp, &self.base).await?;
                let card: AgentCard = resp
                    .json()
                    .await
                    .map_err(|e| failure(ErrorKind::Validation, format!("the agent card at {url} is not one: {e}")))?;
                let offered = |binding: &str| card.supported_interfaces.iter().find(|i| i.protocol_binding == binding);
                let (url, binding) = match (offered(BINDING_JSONRPC), offered(BINDING_HTTP_JSON)) {
                    (Some(i), _) => (i.url.clone(), Binding::JsonRpc),
                    (None, Some(i)) => (i.url.clone(), Binding::HttpJson),
                    (None, None) if card.supported_interfaces.is_empty() => (self.base.clone(), Binding::JsonRpc),
                    (None, None) => {
                        let offered: Vec<&str> =
                            card.supported_interfaces.iter().map(|i| i.protocol_binding.as_str()).collect();
                        return Err(failure(
                            ErrorKind::Validation,
                            format!(
                                "the agent at {} offers the bindings {offered:?}; Flotilla speaks {BINDING_JSONRPC} \
                                 and {BINDING_HTTP_JSON}",
                                self.base
                            ),
                        ));
                    }
                };
                Ok(Endpoint { url, binding, streaming: card.capabilities.streaming.unwrap_or(false), name: card.name })
            })
            .await
    }

    /// One unary call's result.
    async fn call(&self, ep: &Endpoint, method: &str, params: Value) -> Result<Value, RemoteFailure> {
        let resp = self
            .request(ep, method, params)?
            .timeout(CALL_TIMEOUT)
            .send()
            .await
            .map_err(|e| unreachable(&self.base, e))?;
        let resp = status_ok(resp, &self.base).await?;
        let body: Value = resp
            .json()
            .await
            .map_err(|e| failure(ErrorKind::Validation, format!("{method}: not a JSON reply: {e}")))?;
        ep.binding.result(method, body)
    }

    /// Sends `message` and follows the task until it ends or asks.
    async fn exchange(
        &self,
        ep: &Endpoint,
        message: Message,
        observer: &dyn AgentObserver,
        run: &mut Run,
        remote: &RemoteId,
    ) -> Result<(), RemoteFailure> {
        let params = serde_json::to_value(SendMessageRequest { message, ..Default::default() }).unwrap_or_default();
        if !ep.streaming {
            let result = self.call(ep, "SendMessage", params).await?;
            let reply: SendMessageResponse = serde_json::from_value(result)
                .map_err(|e| failure(ErrorKind::Validation, format!("SendMessage: an unreadable reply: {e}")))?;
            match reply {
                SendMessageResponse::Task(t) => run.task(t, observer).await,
                SendMessageResponse::Message(m) => run.message(m),
            }
            remote.set(&run.task_id);
            return Ok(());
        }
        self.follow(ep, "SendStreamingMessage", params, observer, run, remote).await
    }

    /// Reads the SSE stream `method` (`SendStreamingMessage`,
    /// `SubscribeToTask`) answers with, until the task ends or asks.
    async fn follow(
        &self,
        ep: &Endpoint,
        method: &str,
        params: Value,
        observer: &dyn AgentObserver,
        run: &mut Run,
        remote: &RemoteId,
    ) -> Result<(), RemoteFailure> {
        let resp = self
            .request(ep, method, params)?
            .header("accept", "text/event-stream")
            .send()
            .await
            .map_err(|e| unreachable(&self.base, e))?;
        let resp = status_ok(resp, &self.base).await?;
        let mut bytes = resp.bytes_stream();
        let mut events = SseReader::default();
        let mut ended = false;
        while !ended {
            let got = match bytes.next().await {
                Some(chunk) => events.push(&chunk.map_err(|e| unreachable(&self.base, e))?),
                None => {
                    ended = true;
                    events.finish().into_iter().collect()
                }
            };
            for event in got.into_iter().filter(|e| !e.data.is_empty()) {
                let body: Value = serde_json::from_str(&event.data)
                    .map_err(|e| failure(ErrorKind::Validation, format!("{method}: an unreadable event: {e}")))?;
                let item: StreamResponse = serde_json::from_value(ep.binding.result(method, body)?)
                    .map_err(|e| failure(ErrorKind::Validation, format!("an unreadable stream item: {e}")))?;
                run.item(item, observer).await;
                remote.set(&run.task_id);
                if run.settled() {
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    /// On a redelivered task: the remote task an earlier attempt started in
    /// this context, followed instead of sent again when it completed, asks,
    /// or still runs (then `SubscribeToTask`, with streaming). `false` when
    /// there is none to take over (none, it failed or was cancelled, or the
    /// agent lists no tasks): the attempt sends the description again.
    async fn take_over(
        &self,
        ep: &Endpoint,
        context: &str,
        observer: &dyn AgentObserver,
        run: &mut Run,
        remote: &RemoteId,
    ) -> Result<bool, RemoteFailure> {
        let list = ListTasksRequest { context_id: context.into(), page_size: Some(1), ..Default::default() };
        let listed = match self.call(ep, "ListTasks", serde_json::to_value(list).unwrap_or_default()).await {
            Ok(v) => serde_json::from_value::<ListTasksResponse>(v).unwrap_or_default(),
            Err(e) if e.error.kind == ErrorKind::Transient => return Err(e),
            Err(e) => {
                tracing::info!(agent = %ep.name, error = %e.error.message, "no earlier A2A task looked up: sending again");
                return Ok(false);
            }
        };
        let Some(found) = listed.tasks.into_iter().next() else { return Ok(false) };
        let id = TaskIdRequest { id: found.id.clone(), ..Default::default() };
        let mut task = self.get_task(ep, &id).await?;
        if matches!(task.status.state, TaskState::Submitted | TaskState::Working) && ep.streaming {
            tracing::info!(agent = %ep.name, task = %task.id, "following the A2A task of an earlier attempt");
            run.task_id = task.id.clone();
            remote.set(&task.id);
            let params = serde_json::to_value(&id).unwrap_or_default();
            match self.follow(ep, "SubscribeToTask", params, observer, run, remote).await {
                Ok(()) => return Ok(true),
                Err(e) if e.error.kind == ErrorKind::Transient => return Err(e),
                // It ended between the look-up and the subscription, which
                // an agent refuses for a task in a terminal state: its
                // final state is the answer.
                Err(e) => {
                    task = self.get_task(ep, &id).await?;
                    if !task.status.state.is_terminal() {
                        return Err(e);
                    }
                    tracing::info!(agent = %ep.name, task = %task.id, state = ?task.status.state, "the A2A task of an earlier attempt ended before it was followed");
                }
            }
        }
        match task.status.state {
            TaskState::Failed | TaskState::Canceled | TaskState::Rejected => return Ok(false),
            TaskState::Submitted | TaskState::Working => return Ok(false),
            _ => {
                run.task(task, observer).await;
                remote.set(&run.task_id);
            }
        }
        Ok(true)
    }

    /// `GetTask` of `id`.
    async fn get_task(&self, ep: &Endpoint, id: &TaskIdRequest) -> Result<Task, RemoteFailure> {
        let got = self.call(ep, "GetTask", serde_json::to_value(id).unwrap_or_default()).await?;
        serde_json::from_value(got)
            .map_err(|e| failure(ErrorKind::Validation, format!("GetTask: an unreadable task: {e}")))
    }

    async fn attempt(
        &self,
        task: &RemoteTask,
        observer: &dyn AgentObserver,
        remote: &RemoteId,
    ) -> Result<RemoteAnswer, RemoteFailure> {
        let ep = self.endpoint().await?.clone();
        let context = task.session_key();
        let mut run = Run::default();
        let mut message = Message {
            message_id: format!("{}-{}", task.task_id, task.attempt),
            context_id: context.clone(),
            role: Role::User,
            parts: vec![Part::text(task.description.clone())],
            ..Default::default()
        };
        let mut resumed = task.attempt > 1 && self.take_over(&ep, &context, observer, &mut run, remote).await?;
        loop {
            if !std::mem::take(&mut resumed) {
                self.exchange(&ep, message, observer, &mut run, remote).await?;
            }
            match run.state {
                TaskState::Completed => return Ok(RemoteAnswer { text: run.answer(), usage: Default::default() }),
                TaskState::InputRequired => {
                    let question = run.status_text.clone().unwrap_or_else(|| "The agent asks for input.".into());
                    let verdict = task.ask_person(&ep.name, &question, None).await;
                    let reply = match verdict.answer {
                        ElicitationAnswer::Accept(content) => match content.get("answer").and_then(Value::as_str) {
                            Some(text) => Part::text(text),
                            None => Part::data(content),
                        },
                        ElicitationAnswer::Decline | ElicitationAnswer::Cancel => {
                            self.cancel_remote(&ep, &run.task_id).await;
                            return Err(failure(
                                ErrorKind::Business,
                                format!("{} asked \"{question}\" and the answer was {}", ep.name, verdict.decision),
                            ));
                        }
                    };
                    run.state = TaskState::Working;
                    message = Message {
                        message_id: uuid::Uuid::new_v4().to_string(),
                        context_id: context.clone(),
                        task_id: run.task_id.clone(),
                        role: Role::User,
                        parts: vec![reply],
                        ..Default::default()
                    };
                }
                TaskState::Failed | TaskState::Rejected | TaskState::Canceled => {
                    let why = run.status_text.clone().unwrap_or_default();
                    return Err(failure(
                        ErrorKind::Business,
                        format!("{} ended the task {}: {why}", ep.name, run.state.as_str()),
                    ));
                }
                TaskState::AuthRequired => {
                    return Err(failure(
                        ErrorKind::Permission,
                        format!("{} needs the caller to authenticate elsewhere (TASK_STATE_AUTH_REQUIRED)", ep.name),
                    ));
                }
                _ if run.direct.is_some() => return Ok(RemoteAnswer { text: run.answer(), usage: Default::default() }),
                other => {
                    // The stream ended without a final state: the agent went away.
                    return Err(failure(
                        ErrorKind::Transient,
                        format!("{}'s stream ended with the task {}", ep.name, other.as_str()),
                    ));
                }
            }
        }
    }

    /// `CancelTask` for the run's remote task, best effort.
    async fn cancel_remote(&self, ep: &Endpoint, id: &str) {
        if id.is_empty() {
            return;
        }
        if let Err(e) = self.call(ep, "CancelTask", json!({"id": id})).await {
            tracing::info!(agent = %ep.name, task = %id, error = %e.error.message, "the remote A2A task was not cancelled");
        }
    }
}

#[async_trait]
impl RemoteAgent for A2aAgent {
    fn identity(&self) -> ModelIdentity<'_> {
        let model = self.card.get().map(|e| e.name.as_str()).unwrap_or(&self.label);
        ModelIdentity { provider: "a2a", model }
    }

    async fn run(&self, task: &RemoteTask, observer: &dyn AgentObserver) -> Result<RemoteAnswer, RemoteFailure> {
        let remote = RemoteId::default();
        let attempt = self.attempt(task, observer, &remote);
        tokio::pin!(attempt);
        tokio::select! {
            r = &mut attempt => r,
            () = task.cancel.cancelled() => {
                // Abandoning the stream does not stop the remote task: CancelTask does.
                if let Some(ep) = self.card.get() {
                    self.cancel_remote(ep, &remote.get()).await;
                }
                Err(failure(ErrorKind::Cancelled, "cancelled"))
            }
        }
    }
}

/// The remote task's id once the agent named it, readable when the attempt
/// is dropped on cancel.
#[derive(Default)]
struct RemoteId(std::sync::Mutex<String>);

impl RemoteId {
    fn set(&self, id: &str) {
        let mut g = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if g.as_str() != id {
            *g = id.to_string();
        }
    }

    fn get(&self) -> String {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// What one attempt has seen so far.
#[derive(Default)]
struct Run {
    task_id: String,
    state: TaskState,
    status_text: Option<String>,
    /// Artifact text by id, in arrival order.
    artifacts: Vec<(String, String)>,
    /// A direct message answer (no task).
    direct: Option<String>,
}

impl Run {
    fn settled(&self) -> bool {
        self.direct.is_some() || self.state.is_terminal() || self.state.is_interrupted()
    }

    fn answer(&self) -> String {
        if let Some(d) = &self.direct {
            return d.clone();
        }
        let texts: Vec<&str> = self.artifacts.iter().map(|(_, t)| t.as_str()).filter(|t| !t.is_empty()).collect();
        if texts.is_empty() { self.status_text.clone().unwrap_or_default() } else { texts.join("\n") }
    }

    fn message(&mut self, m: Message) {
        self.direct = Some(m.text());
    }

    async fn status(&mut self, s: TaskStatus, observer: &dyn AgentObserver) {
        self.state = s.state;
        if let Some(m) = s.message {
            let text = m.text();
            if !text.is_empty() {
                observer.model_delta(&format!("{text}\n")).await;
                self.status_text = Some(text);
            }
        }
    }

    fn artifact(&mut self, a: Artifact, append: bool) -> String {
        let text = a.text();
        match self.artifacts.iter_mut().find(|(id, _)| *id == a.artifact_id) {
            Some((_, t)) if append => t.push_str(&text),
            Some((_, t)) => *t = text.clone(),
            None => self.artifacts.push((a.artifact_id, text.clone())),
        }
        text
    }

    async fn task(&mut self, t: Task, observer: &dyn AgentObserver) {
        self.task_id = t.id;
        for a in t.artifacts {
            self.artifact(a, false);
        }
        self.status(t.status, observer).await;
    }

    async fn item(&mut self, item: StreamResponse, observer: &dyn AgentObserver) {
        match item {
            StreamResponse::Task(t) => self.task(t, observer).await,
            StreamResponse::Message(m) => self.message(m),
            StreamResponse::StatusUpdate(u) => {
                if self.task_id.is_empty() {
                    self.task_id = u.task_id;
                }
                self.status(u.status, observer).await;
            }
            StreamResponse::ArtifactUpdate(u) => {
                let text = self.artifact(u.artifact, u.append);
                if !text.is_empty() {
                    observer.model_delta(&text).await;
                }
            }
        }
    }
}

fn unreachable(base: &str, e: reqwest::Error) -> RemoteFailure {
    failure(ErrorKind::Transient, format!("the A2A agent at {base} is not reachable: {}", e.without_url()))
}

/// The response when it is a success; else the failure its status means.
async fn status_ok(resp: reqwest::Response, base: &str) -> Result<reqwest::Response, RemoteFailure> {
    let status = resp.status();
    if status.is_success() {
        return Ok(resp);
    }
    let kind = match status.as_u16() {
        401 | 403 => ErrorKind::Permission,
        404 => ErrorKind::NotFound,
        408 | 429 | 500..=599 => ErrorKind::Transient,
        _ => ErrorKind::Validation,
    };
    let body: String = resp.text().await.unwrap_or_default().chars().take(300).collect();
    Err(failure(kind, format!("the A2A agent at {base} answered {status}: {body}")))
}

impl Binding {
    /// The operation's result in a reply body (or SSE event) of this
    /// binding: a JSON-RPC envelope's `result`, or the HTTP+JSON body itself.
    fn result(self, method: &str, body: Value) -> Result<Value, RemoteFailure> {
        match self {
            Binding::HttpJson => Ok(body),
            Binding::JsonRpc => {
                let reply: RpcResponse = serde_json::from_value(body)
                    .map_err(|e| failure(ErrorKind::Validation, format!("{method}: not a JSON-RPC reply: {e}")))?;
                rpc_result(method, reply)
            }
        }
    }
}

fn rpc_result(method: &str, reply: RpcResponse) -> Result<Value, RemoteFailure> {
    if let Some(e) = reply.error {
        let kind = match e.code {
            -32001 => ErrorKind::NotFound,
            -32603 => ErrorKind::Transient,
            _ => ErrorKind::Validation,
        };
        return Err(failure(kind, format!("{method}: the agent refused ({}): {}", e.code, e.message)));
    }
    reply
        .result
        .ok_or_else(|| failure(ErrorKind::Validation, format!("{method}: a reply with neither result nor error")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Deltas(std::sync::Mutex<Vec<String>>);

    #[async_trait]
    impl AgentObserver for Deltas {
        async fn model_delta(&self, text: &str) {
            self.0.lock().unwrap().push(text.to_string());
        }
    }

    fn item(v: Value) -> StreamResponse {
        serde_json::from_value(v).expect("a stream item")
    }

    fn reply(v: Value) -> RpcResponse {
        serde_json::from_value(v).expect("a JSON-RPC reply")
    }

    #[tokio::test]
    async fn a_stream_relays_status_text_and_chunks_and_answers_with_the_artifacts() {
        let obs = Deltas::default();
        let mut run = Run::default();
        run.item(
            item(json!({"task": {"id": "t1", "contextId": "c", "status": {"state": "TASK_STATE_SUBMITTED"}}})),
            &obs,
        )
        .await;
        assert_eq!(run.task_id, "t1");
        assert!(!run.settled());
        run.item(
            item(json!({"statusUpdate": {"taskId": "t1", "contextId": "c", "status": {"state": "TASK_STATE_WORKING",
            "message": {"messageId": "m1", "role": "ROLE_AGENT", "parts": [{"text": "thinking"}]}}}})),
            &obs,
        )
        .await;
        run.item(item(json!({"artifactUpdate": {"taskId": "t1", "artifact": {"artifactId": "a", "parts": [{"text": "0.3"}]}}})), &obs)
            .await;
        run.item(
            item(json!({"artifactUpdate": {"taskId": "t1", "append": true, "lastChunk": true,
            "artifact": {"artifactId": "a", "parts": [{"text": "75"}]}}})),
            &obs,
        )
        .await;
        run.item(item(json!({"statusUpdate": {"taskId": "t1", "status": {"state": "TASK_STATE_COMPLETED"}}})), &obs)
            .await;
        assert!(run.settled());
        assert_eq!(run.state, TaskState::Completed);
        assert_eq!(run.answer(), "0.375");
        assert_eq!(*obs.0.lock().unwrap(), ["thinking\n", "0.3", "75"]);
    }

    #[tokio::test]
    async fn input_required_settles_with_the_question_and_no_artifacts_answer_with_the_status() {
        let obs = Deltas::default();
        let mut run = Run::default();
        run.item(
            item(json!({"statusUpdate": {"taskId": "t2", "status": {"state": "TASK_STATE_INPUT_REQUIRED",
            "message": {"messageId": "q", "role": "ROLE_AGENT", "parts": [{"text": "Which quarter?"}]}}}})),
            &obs,
        )
        .await;
        assert_eq!(run.task_id, "t2");
        assert!(run.settled());
        assert_eq!(run.state, TaskState::InputRequired);
        assert_eq!(run.status_text.as_deref(), Some("Which quarter?"));
        assert_eq!(run.answer(), "Which quarter?");
    }

    #[tokio::test]
    async fn a_direct_message_is_the_answer() {
        let mut run = Run::default();
        run.item(
            item(json!({"message": {"messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": "hi"}]}})),
            &Deltas::default(),
        )
        .await;
        assert!(run.settled());
        assert_eq!(run.answer(), "hi");
    }

    #[test]
    fn http_json_requests_put_the_task_id_in_the_path_and_the_rest_in_the_body_or_query() {
        let r = A2aAgentRef { url: "http://127.0.0.1:1".into(), auth: None };
        let agent = A2aAgent::new("finance", &r).unwrap();
        let built = |method: &str, params: Value| {
            let req = agent.rest("http://127.0.0.1:1/a2a/", method, params).unwrap().build().unwrap();
            let body = req.body().and_then(|b| b.as_bytes()).map(|b| String::from_utf8_lossy(b).into_owned());
            (req.method().to_string(), req.url().to_string(), body)
        };
        let (verb, url, body) = built("SendStreamingMessage", json!({"message": {"messageId": "m1"}}));
        assert_eq!((verb.as_str(), url.as_str()), ("POST", "http://127.0.0.1:1/a2a/message:stream"));
        assert_eq!(body.as_deref(), Some(r#"{"message":{"messageId":"m1"}}"#));
        let (verb, url, body) = built("GetTask", json!({"id": "t 1/x"}));
        assert_eq!((verb.as_str(), url.as_str(), body), ("GET", "http://127.0.0.1:1/a2a/tasks/t%201%2Fx", None));
        let (verb, url, _) = built("CancelTask", json!({"id": "t1"}));
        assert_eq!((verb.as_str(), url.as_str()), ("POST", "http://127.0.0.1:1/a2a/tasks/t1:cancel"));
        let (verb, url, _) = built("SubscribeToTask", json!({"id": "t1"}));
        assert_eq!((verb.as_str(), url.as_str()), ("GET", "http://127.0.0.1:1/a2a/tasks/t1:subscribe"));
        let (verb, url, body) = built("ListTasks", json!({"contextId": "c1", "pageSize": 1}));
        assert_eq!(
            (verb.as_str(), url.as_str(), body),
            ("GET", "http://127.0.0.1:1/a2a/tasks?contextId=c1&pageSize=1", None)
        );
    }

    #[test]
    fn an_http_json_body_is_the_result_and_a_json_rpc_one_is_unwrapped() {
        let task = json!({"id": "t1", "status": {"state": "TASK_STATE_COMPLETED"}});
        assert_eq!(Binding::HttpJson.result("GetTask", task.clone()).unwrap(), task);
        let envelope = json!({"jsonrpc": "2.0", "id": "1", "result": task.clone()});
        assert_eq!(Binding::JsonRpc.result("GetTask", envelope).unwrap(), task);
        let refused = json!({"jsonrpc": "2.0", "id": "1", "error": {"code": -32001, "message": "no such task"}});
        assert_eq!(Binding::JsonRpc.result("GetTask", refused).unwrap_err().error.kind, ErrorKind::NotFound);
    }

    #[test]
    fn rpc_errors_map_to_error_kinds() {
        let kind = |code: i64| {
            rpc_result("M", reply(json!({"jsonrpc": "2.0", "id": 1, "error": {"code": code, "message": "no"}})))
                .unwrap_err()
                .error
                .kind
        };
        assert_eq!(kind(-32001), ErrorKind::NotFound);
        assert_eq!(kind(-32603), ErrorKind::Transient);
        assert_eq!(kind(-32602), ErrorKind::Validation);
        let ok = rpc_result("M", reply(json!({"jsonrpc": "2.0", "id": 1, "result": {"x": 1}}))).unwrap();
        assert_eq!(ok, json!({"x": 1}));
        let empty = rpc_result("M", reply(json!({"jsonrpc": "2.0", "id": 1}))).unwrap_err();
        assert_eq!(empty.error.kind, ErrorKind::Validation);
    }
}
