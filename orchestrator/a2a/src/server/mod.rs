//! Flotilla's job API as an A2A v1.0 agent, on the HTTP API's listener
//! (`[a2a] enabled`, `[dashboard] listen`; docs/PROTOCOLS.md "A2A v1.0").
//!
//! An A2A task is a Flotilla job: a message without a `taskId` submits one
//! (its text is the job's input, its `raw` file parts the job's
//! `/inputs/` files); `GetTask`, `ListTasks`, `CancelTask` are the job
//! API's `status`, `list` and `cancel`; the stream (`SendStreamingMessage`,
//! `SubscribeToTask`) and push notifications are the job's events read
//! from the events stream; a pending approval or elicitation is
//! `TASK_STATE_INPUT_REQUIRED`, and a message naming the task answers it.
//! Everything goes through the job-API client (`flotilla-client`) of the
//! caller's tenant, so the orchestrator's own checks and tenant confinement
//! apply; this crate keeps no job state, only the webhooks of tasks being
//! followed (in memory, `push`).
//!
//! Who the caller is comes from outside: the dashboard's guard
//! authenticates every request (its bearer tokens, docs/HTTP_API.md "Auth")
//! and the binary turns its principal into a [`Caller`] request extension
//! (orchestrator/cli/src/commands/endpoints.rs). A route reached without
//! one answers 401, so the API cannot be mounted unauthenticated by
//! mistake. The agent card ([`A2aServer::card_router`]) is public, as A2A
//! clients fetch it before they know how to authenticate; it holds the
//! fleet's skills and the security scheme, never a tenant's data.
//!
//! One concept a file: the job ↔ task mapping and the unary methods
//! (`tasks.rs`), the streams (`stream.rs`), webhooks (`push.rs`), and here
//! the card and the two bindings (JSON-RPC at `POST /a2a`, HTTP+JSON
//! under `/a2a/`).

mod push;
mod stream;
mod tasks;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use flotilla_client::Client;
use flotilla_config::a2a::A2aConfig;
use flotilla_protocol::ids::Tenant;
use futures::{Stream, StreamExt};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::wire::{self, *};

/// Who an A2A request acts as: set by the authenticating layer in front of
/// [`A2aServer::api_router`] as a request extension.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    /// The tenant whose jobs the request reads and changes.
    pub tenant: Tenant,
    /// May name another tenant in a request's `tenant` field (the
    /// dashboard's admin token).
    pub any_tenant: bool,
    /// Who decided an approval, for its record (`by`, `authenticated_as`).
    pub name: String,
}

impl Caller {
    /// The tenant a request acts for, given its `tenant` field: a caller
    /// bound to one tenant may only name its own.
    fn tenant_for(&self, asked: &str) -> Result<Tenant, A2aError> {
        if asked.is_empty() || asked == self.tenant.as_str() {
            return Ok(self.tenant.clone());
        }
        if !self.any_tenant {
            return Err(A2aError::InvalidRequest(format!(
                "this credential acts for tenant {}: leave out `tenant` or give {}",
                self.tenant, self.tenant
            )));
        }
        Tenant::new(asked).map_err(|e| A2aError::InvalidParams(format!("tenant {asked:?}: {e}")))
    }
}

/// One skill of the card: a subagent type (or the planner) and what it is for.
#[derive(Clone, Debug)]
pub struct Skill {
    /// The id (the subagent type's name, or `planner`).
    pub id: String,
    /// What it does.
    pub description: String,
}

/// The A2A server: the card, both bindings and the webhooks.
#[derive(Clone)]
pub struct A2aServer {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    config: A2aConfig,
    skills: Vec<Skill>,
    /// Whether requests need a bearer token (the card's security scheme).
    bearer: bool,
    push: push::Registry,
}

impl A2aServer {
    /// A server acting through `client` (any tenant; each request uses its
    /// caller's), with `skills` on its card; `bearer`: the listener
    /// requires bearer tokens.
    pub fn new(client: Client, config: &A2aConfig, skills: Vec<Skill>, bearer: bool) -> Self {
        let push = push::Registry::new(config.push.clone());
        Self { inner: Arc::new(Inner { client, config: config.clone(), skills, bearer, push }) }
    }

    /// `GET /.well-known/agent-card.json`, unauthenticated.
    pub fn card_router(&self) -> axum::Router {
        axum::Router::new().route(wire::AGENT_CARD_PATH, get(card)).with_state(self.clone())
    }

    /// The JSON-RPC binding (`POST /a2a`) and the HTTP+JSON binding
    /// (`/a2a/message:send`, `/a2a/tasks/{id}`, ...); every route needs a
    /// [`Caller`] extension (401 without).
    pub fn api_router(&self) -> axum::Router {
        axum::Router::new()
            .route("/a2a", post(jsonrpc))
            .route("/a2a/message:send", post(rest_send))
            .route("/a2a/message:stream", post(rest_stream))
            .route("/a2a/tasks", get(rest_list))
            .route("/a2a/tasks/{id}", get(rest_get_task).post(rest_post_task))
            .route("/a2a/tasks/{id}/pushNotificationConfigs", get(rest_list_push).post(rest_create_push))
            .route("/a2a/tasks/{id}/pushNotificationConfigs/{config}", get(rest_get_push).delete(rest_delete_push))
            .with_state(self.clone())
    }

    fn client_for(&self, tenant: Tenant) -> Client {
        self.inner.client.for_tenant(tenant)
    }

    fn blocking_timeout(&self) -> Duration {
        Duration::from_secs(self.inner.config.blocking_timeout_secs)
    }

    /// The base URL of the listener as this request reached it.
    fn base_url(&self, headers: &HeaderMap) -> String {
        if let Some(url) = &self.inner.config.public_url {
            return url.trim_end_matches('/').to_string();
        }
        let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("127.0.0.1");
        format!("http://{host}")
    }

    fn card(&self, base: &str) -> AgentCard {
        let cfg = &self.inner.config;
        let url = format!("{base}/a2a");
        let interface = |binding: &str| AgentInterface {
            url: url.clone(),
            protocol_binding: binding.into(),
            tenant: String::new(),
            protocol_version: wire::PROTOCOL_VERSION.into(),
        };
        let mut schemes = serde_json::Map::new();
        let mut requirements = Vec::new();
        if self.inner.bearer {
            schemes.insert(
                "bearer".into(),
                json!({"httpAuthSecurityScheme": {
                    "scheme": "Bearer",
                    "description": "A Flotilla HTTP API token ([dashboard] token_env, or [dashboard.tenants.<tenant>] token_env): the token decides the tenant"
                }}),
            );
            requirements.push(json!({"schemes": {"bearer": {"list": []}}}));
        }
        let skills = self
            .inner
            .skills
            .iter()
            .map(|s| AgentSkill {
                id: s.id.clone(),
                name: s.id.clone(),
                description: s.description.clone(),
                tags: vec![if s.id == tasks::PLANNER_SKILL { "planner" } else { "subagent" }.into()],
                examples: Vec::new(),
            })
            .collect();
        AgentCard {
            name: cfg.name.clone(),
            description: cfg.description.clone().unwrap_or_else(|| {
                "A Flotilla fleet: a planner agent splits each request into tasks for its subagent types and \
                 answers with their consolidated reports"
                    .into()
            }),
            supported_interfaces: vec![interface(wire::BINDING_JSONRPC), interface(wire::BINDING_HTTP_JSON)],
            provider: None,
            version: env!("CARGO_PKG_VERSION").into(),
            documentation_url: None,
            capabilities: AgentCapabilities {
                streaming: Some(true),
                push_notifications: Some(cfg.push.enabled),
                extended_agent_card: Some(false),
            },
            security_schemes: schemes,
            security_requirements: requirements,
            default_input_modes: vec!["text/plain".into(), "application/json".into()],
            default_output_modes: vec!["text/plain".into(), "text/markdown".into()],
            skills,
        }
    }
}

async fn card(State(s): State<A2aServer>, headers: HeaderMap) -> Response {
    Json(s.card(&s.base_url(&headers))).into_response()
}

/// An A2A error: its JSON-RPC code, HTTP status and `google.rpc` reason.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum A2aError {
    TaskNotFound(String),
    NotCancelable(String),
    PushNotSupported(String),
    Unsupported(String),
    InvalidParams(String),
    InvalidRequest(String),
    MethodNotFound(String),
    Version(String),
    Parse(String),
    Internal(String),
}

impl A2aError {
    fn parts(&self) -> (i64, StatusCode, &'static str, &'static str, &str) {
        use A2aError::*;
        match self {
            TaskNotFound(m) => (-32001, StatusCode::NOT_FOUND, "NOT_FOUND", "TASK_NOT_FOUND", m),
            NotCancelable(m) => (-32002, StatusCode::BAD_REQUEST, "FAILED_PRECONDITION", "TASK_NOT_CANCELABLE", m),
            PushNotSupported(m) => {
                (-32003, StatusCode::BAD_REQUEST, "FAILED_PRECONDITION", "PUSH_NOTIFICATION_NOT_SUPPORTED", m)
            }
            Unsupported(m) => (-32004, StatusCode::BAD_REQUEST, "FAILED_PRECONDITION", "UNSUPPORTED_OPERATION", m),
            Version(m) => (-32009, StatusCode::BAD_REQUEST, "FAILED_PRECONDITION", "VERSION_NOT_SUPPORTED", m),
            InvalidParams(m) => (-32602, StatusCode::BAD_REQUEST, "INVALID_ARGUMENT", "INVALID_PARAMS", m),
            InvalidRequest(m) => (-32600, StatusCode::BAD_REQUEST, "INVALID_ARGUMENT", "INVALID_REQUEST", m),
            MethodNotFound(m) => (-32601, StatusCode::NOT_FOUND, "NOT_FOUND", "METHOD_NOT_FOUND", m),
            Parse(m) => (-32700, StatusCode::BAD_REQUEST, "INVALID_ARGUMENT", "INVALID_REQUEST", m),
            Internal(m) => (-32603, StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL", "INTERNAL_ERROR", m),
        }
    }

    fn details(reason: &str) -> Value {
        json!([{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": reason, "domain": "a2a-protocol.org", "metadata": {}}])
    }

    fn rpc(&self) -> RpcError {
        let (code, _, _, reason, message) = self.parts();
        RpcError { code, message: message.to_string(), data: Some(Self::details(reason)) }
    }

    /// The HTTP+JSON binding's error body (`google.rpc.Status`).
    fn rest(&self) -> Response {
        let (_, status, grpc, reason, message) = self.parts();
        let body = json!({"error": {"code": status.as_u16(), "status": grpc, "message": message, "details": Self::details(reason)}});
        (status, Json(body)).into_response()
    }

    /// A job-API failure as the A2A error a client can act on.
    pub(crate) fn from_api(e: anyhow::Error) -> Self {
        use flotilla_protocol::ErrorKind;
        match e.chain().find_map(|c| c.downcast_ref::<flotilla_protocol::ErrorInfo>()) {
            Some(info) => match info.kind {
                ErrorKind::NotFound => A2aError::TaskNotFound(info.message.clone()),
                ErrorKind::Validation | ErrorKind::Limit => A2aError::InvalidParams(info.message.clone()),
                ErrorKind::Permission => A2aError::InvalidRequest(info.message.clone()),
                ErrorKind::Business | ErrorKind::Cancelled => A2aError::Unsupported(info.message.clone()),
                _ => A2aError::Internal(format!("the job API failed: {}", info.message)),
            },
            None => A2aError::Internal(format!("the bus did not answer: {e:#}")),
        }
    }
}

/// Refuses a client that asks for another major version (`A2A-Version`); no
/// header is taken as 1.0, the only version served.
fn check_version(headers: &HeaderMap) -> Result<(), A2aError> {
    let Some(v) = headers.get(wire::VERSION_HEADER).and_then(|v| v.to_str().ok()) else {
        return Ok(());
    };
    if v.trim().split('.').next() == Some("1") {
        Ok(())
    } else {
        Err(A2aError::Version(format!("A2A-Version {v} is not served: this server speaks A2A 1.0")))
    }
}

// The error is the handler's own response, returned at once.
#[allow(clippy::result_large_err)]
fn caller_of(ext: Option<axum::Extension<Caller>>) -> Result<Caller, Response> {
    ext.map(|axum::Extension(c)| c).ok_or_else(|| {
        (StatusCode::UNAUTHORIZED, "no authenticated caller: the A2A routes sit behind the HTTP API's guard\n")
            .into_response()
    })
}

fn params<T: DeserializeOwned>(v: Value) -> Result<T, A2aError> {
    serde_json::from_value(v).map_err(|e| A2aError::InvalidParams(format!("invalid params: {e}")))
}

/// `POST /a2a`: one JSON-RPC 2.0 request.
async fn jsonrpc(
    State(s): State<A2aServer>,
    caller: Option<axum::Extension<Caller>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let caller = match caller_of(caller) {
        Ok(c) => c,
        Err(r) => return r,
    };
    let req: RpcRequest = match serde_json::from_slice::<Value>(&body) {
        Err(e) => return rpc_reply(Value::Null, Err(A2aError::Parse(format!("not JSON: {e}")))),
        Ok(v) => match serde_json::from_value(v) {
            Ok(r) => r,
            Err(e) => {
                return rpc_reply(Value::Null, Err(A2aError::InvalidRequest(format!("not a JSON-RPC request: {e}"))));
            }
        },
    };
    let id = req.id.clone().unwrap_or(Value::Null);
    if req.jsonrpc != "2.0" {
        return rpc_reply(id, Err(A2aError::InvalidRequest("jsonrpc must be \"2.0\"".into())));
    }
    if let Err(e) = check_version(&headers) {
        return rpc_reply(id, Err(e));
    }
    let base = s.base_url(&headers);
    let result = match req.method.as_str() {
        "SendStreamingMessage" | "SubscribeToTask" => {
            let streamed = if req.method == "SendStreamingMessage" {
                match params::<SendMessageRequest>(req.params) {
                    Ok(p) => tasks::send_streaming(&s, &caller, p, &base).await.map(StreamExt::boxed),
                    Err(e) => Err(e),
                }
            } else {
                match params::<TaskIdRequest>(req.params) {
                    Ok(p) => tasks::subscribe(&s, &caller, p, &base).await.map(StreamExt::boxed),
                    Err(e) => Err(e),
                }
            };
            return match streamed {
                Ok(events) => sse(events.map(move |item| {
                    let r = RpcResponse {
                        jsonrpc: "2.0".into(),
                        id: id.clone(),
                        result: Some(serde_json::to_value(item).unwrap_or_default()),
                        error: None,
                    };
                    serde_json::to_string(&r).unwrap_or_default()
                })),
                Err(e) => rpc_reply(id, Err(e)),
            };
        }
        "SendMessage" => match params::<SendMessageRequest>(req.params) {
            Ok(p) => tasks::send(&s, &caller, p, &base).await.map(|t| to_value(SendMessageResponse::Task(t))),
            Err(e) => Err(e),
        },
        "GetTask" => match params::<TaskIdRequest>(req.params) {
            Ok(p) => tasks::get(&s, &caller, p, &base).await.map(to_value),
            Err(e) => Err(e),
        },
        "ListTasks" => match params::<ListTasksRequest>(req.params) {
            Ok(p) => tasks::list(&s, &caller, p, &base).await.map(to_value),
            Err(e) => Err(e),
        },
        "CancelTask" => match params::<TaskIdRequest>(req.params) {
            Ok(p) => tasks::cancel(&s, &caller, p, &base).await.map(to_value),
            Err(e) => Err(e),
        },
        "CreateTaskPushNotificationConfig" => match params::<TaskPushNotificationConfig>(req.params) {
            Ok(p) => push::create(&s, &caller, p, &base).await.map(to_value),
            Err(e) => Err(e),
        },
        "GetTaskPushNotificationConfig" => match params::<PushConfigRequest>(req.params) {
            Ok(p) => push::get(&s, &caller, p).await.map(to_value),
            Err(e) => Err(e),
        },
        "ListTaskPushNotificationConfigs" => match params::<PushConfigRequest>(req.params) {
            Ok(p) => push::list(&s, &caller, p).await.map(to_value),
            Err(e) => Err(e),
        },
        "DeleteTaskPushNotificationConfig" => match params::<PushConfigRequest>(req.params) {
            Ok(p) => push::delete(&s, &caller, p).await.map(|()| json!({})),
            Err(e) => Err(e),
        },
        "GetExtendedAgentCard" => {
            Err(A2aError::InvalidRequest("this agent has no extended card (capabilities.extendedAgentCard)".into()))
        }
        other => Err(A2aError::MethodNotFound(format!("no method {other:?}"))),
    };
    rpc_reply(id, result)
}

fn to_value<T: serde::Serialize>(v: T) -> Value {
    serde_json::to_value(v).unwrap_or_default()
}

fn rpc_reply(id: Value, result: Result<Value, A2aError>) -> Response {
    let (result, error) = match result {
        Ok(v) => (Some(v), None),
        Err(e) => (None, Some(e.rpc())),
    };
    Json(RpcResponse { jsonrpc: "2.0".into(), id, result, error }).into_response()
}

/// Server-Sent Events, one `data:` line of JSON per item; the response ends
/// with the stream (the task's end).
fn sse(items: impl Stream<Item = String> + Send + 'static) -> Response {
    let events = items.map(|data| Ok::<_, Infallible>(SseEvent::default().data(data)));
    Sse::new(events).keep_alive(KeepAlive::default()).into_response()
}

type Rest = Result<Response, Response>;

fn rest_json<T: serde::Serialize>(r: Result<T, A2aError>) -> Response {
    match r {
        Ok(v) => Json(v).into_response(),
        Err(e) => e.rest(),
    }
}

// The error is the handler's own response, returned at once.
#[allow(clippy::result_large_err)]
fn rest_prelude(caller: Option<axum::Extension<Caller>>, headers: &HeaderMap) -> Result<Caller, Response> {
    let caller = caller_of(caller)?;
    check_version(headers).map_err(|e| e.rest())?;
    Ok(caller)
}

// The error is the handler's own response, returned at once.
#[allow(clippy::result_large_err)]
fn rest_body<T: DeserializeOwned>(body: &[u8]) -> Result<T, Response> {
    serde_json::from_slice(body).map_err(|e| A2aError::InvalidParams(format!("invalid body: {e}")).rest())
}

async fn rest_send(
    State(s): State<A2aServer>,
    caller: Option<axum::Extension<Caller>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Rest {
    let caller = rest_prelude(caller, &headers)?;
    let req: SendMessageRequest = rest_body(&body)?;
    let base = s.base_url(&headers);
    Ok(rest_json(tasks::send(&s, &caller, req, &base).await.map(SendMessageResponse::Task)))
}

async fn rest_stream(
    State(s): State<A2aServer>,
    caller: Option<axum::Extension<Caller>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Rest {
    let caller = rest_prelude(caller, &headers)?;
    let req: SendMessageRequest = rest_body(&body)?;
    let base = s.base_url(&headers);
    match tasks::send_streaming(&s, &caller, req, &base).await {
        Ok(events) => Ok(sse(events.map(|e| serde_json::to_string(&e).unwrap_or_default()))),
        Err(e) => Err(e.rest()),
    }
}

#[derive(serde::Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct TaskQuery {
    #[serde(default)]
    history_length: Option<i32>,
    #[serde(default)]
    tenant: Option<String>,
}

/// `GET /a2a/tasks/{id}` (`GetTask`) and `GET /a2a/tasks/{id}:subscribe`.
async fn rest_get_task(
    State(s): State<A2aServer>,
    caller: Option<axum::Extension<Caller>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Query(q): Query<TaskQuery>,
) -> Rest {
    let caller = rest_prelude(caller, &headers)?;
    let base = s.base_url(&headers);
    let tenant = q.tenant.unwrap_or_default();
    if let Some(id) = id.strip_suffix(":subscribe") {
        let req = TaskIdRequest { tenant, id: id.into(), ..Default::default() };
        return match tasks::subscribe(&s, &caller, req, &base).await {
            Ok(events) => Ok(sse(events.map(|e| serde_json::to_string(&e).unwrap_or_default()))),
            Err(e) => Err(e.rest()),
        };
    }
    let req = TaskIdRequest { tenant, id, history_length: q.history_length, metadata: None };
    Ok(rest_json(tasks::get(&s, &caller, req, &base).await))
}

/// `POST /a2a/tasks/{id}:cancel` (`CancelTask`).
async fn rest_post_task(
    State(s): State<A2aServer>,
    caller: Option<axum::Extension<Caller>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Rest {
    let caller = rest_prelude(caller, &headers)?;
    let Some(id) = id.strip_suffix(":cancel") else {
        return Err(A2aError::MethodNotFound(format!("POST /a2a/tasks/{id}: only {id}:cancel is a method")).rest());
    };
    let mut req: TaskIdRequest =
        if body.is_empty() { TaskIdRequest::default() } else { rest_body(&body).unwrap_or_default() };
    req.id = id.into();
    let base = s.base_url(&headers);
    Ok(rest_json(tasks::cancel(&s, &caller, req, &base).await))
}

/// `GET /a2a/tasks` (`ListTasks`): the request's fields as query parameters.
async fn rest_list(
    State(s): State<A2aServer>,
    caller: Option<axum::Extension<Caller>>,
    headers: HeaderMap,
    Query(q): Query<std::collections::BTreeMap<String, String>>,
) -> Rest {
    let caller = rest_prelude(caller, &headers)?;
    let obj: serde_json::Map<String, Value> = q
        .into_iter()
        .map(|(k, v)| {
            let value = match k.as_str() {
                "pageSize" | "historyLength" => v.parse::<i64>().map(Value::from).unwrap_or(Value::String(v)),
                "includeArtifacts" => Value::Bool(v == "true"),
                _ => Value::String(v),
            };
            (k, value)
        })
        .collect();
    let req: ListTasksRequest = params(Value::Object(obj)).map_err(|e| e.rest())?;
    let base = s.base_url(&headers);
    Ok(rest_json(tasks::list(&s, &caller, req, &base).await))
}

async fn rest_create_push(
    State(s): State<A2aServer>,
    caller: Option<axum::Extension<Caller>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Rest {
    let caller = rest_prelude(caller, &headers)?;
    let mut cfg: TaskPushNotificationConfig = rest_body(&body)?;
    cfg.task_id = id;
    let base = s.base_url(&headers);
    Ok(rest_json(push::create(&s, &caller, cfg, &base).await))
}

async fn rest_list_push(
    State(s): State<A2aServer>,
    caller: Option<axum::Extension<Caller>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Rest {
    let caller = rest_prelude(caller, &headers)?;
    let req = PushConfigRequest { task_id: id, ..Default::default() };
    Ok(rest_json(push::list(&s, &caller, req).await))
}

async fn rest_get_push(
    State(s): State<A2aServer>,
    caller: Option<axum::Extension<Caller>>,
    headers: HeaderMap,
    Path((id, config)): Path<(String, String)>,
) -> Rest {
    let caller = rest_prelude(caller, &headers)?;
    let req = PushConfigRequest { task_id: id, id: config, ..Default::default() };
    Ok(rest_json(push::get(&s, &caller, req).await))
}

async fn rest_delete_push(
    State(s): State<A2aServer>,
    caller: Option<axum::Extension<Caller>>,
    headers: HeaderMap,
    Path((id, config)): Path<(String, String)>,
) -> Rest {
    let caller = rest_prelude(caller, &headers)?;
    let req = PushConfigRequest { task_id: id, id: config, ..Default::default() };
    Ok(rest_json(push::delete(&s, &caller, req).await.map(|()| json!({}))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenant_bound_caller_names_only_its_own_tenant() {
        let acme = Caller { tenant: Tenant::new("acme").unwrap(), any_tenant: false, name: "t".into() };
        assert_eq!(acme.tenant_for("").unwrap().as_str(), "acme");
        assert_eq!(acme.tenant_for("acme").unwrap().as_str(), "acme");
        assert!(matches!(acme.tenant_for("globex"), Err(A2aError::InvalidRequest(_))));
        let admin = Caller { any_tenant: true, ..acme };
        assert_eq!(admin.tenant_for("globex").unwrap().as_str(), "globex");
    }

    #[test]
    fn only_major_version_one_is_served() {
        let mut h = HeaderMap::new();
        assert!(check_version(&h).is_ok());
        h.insert(wire::VERSION_HEADER, "1.0".parse().unwrap());
        assert!(check_version(&h).is_ok());
        h.insert(wire::VERSION_HEADER, "0.3".parse().unwrap());
        assert!(matches!(check_version(&h), Err(A2aError::Version(_))));
    }
}
