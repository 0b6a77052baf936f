//! The A2A v1.0 wire types, as the protocol's ProtoJSON form spells them
//! (`specification/a2a.proto` of a2aproject/A2A, package `lf.a2a.v1`; the
//! `a2a-sdk` 1.3.0 Python SDK reads and writes exactly this): camelCase
//! field names, enums by their proto names (`TASK_STATE_COMPLETED`,
//! `ROLE_AGENT`), `oneof`s as the one field that is set, bytes as base64.
//!
//! Shared by the server (a Flotilla job as an A2A task) and the client (a
//! remote A2A agent behind a subagent type), so both speak one spelling.
//! Fields the proto marks optional are `Option` or empty-skipped, so what
//! Flotilla writes is what a ProtoJSON encoder writes, and unknown fields
//! from a newer peer are ignored rather than refused.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The protocol version this crate speaks (the `A2A-Version` header).
pub const PROTOCOL_VERSION: &str = "1.0";
/// The header a client names its protocol version in.
pub const VERSION_HEADER: &str = "A2A-Version";
/// Where an agent card is served, under the agent's base URL.
pub const AGENT_CARD_PATH: &str = "/.well-known/agent-card.json";
/// The `protocolBinding` of the JSON-RPC 2.0 binding.
pub const BINDING_JSONRPC: &str = "JSONRPC";
/// The `protocolBinding` of the HTTP+JSON (REST) binding.
pub const BINDING_HTTP_JSON: &str = "HTTP+JSON";

fn is_false(b: &bool) -> bool {
    !*b
}

/// Where a task stands (`TaskState`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum TaskState {
    /// Not set (never sent by Flotilla; a peer's is treated as unknown).
    #[serde(rename = "TASK_STATE_UNSPECIFIED")]
    #[default]
    Unspecified,
    /// Accepted, not started.
    #[serde(rename = "TASK_STATE_SUBMITTED")]
    Submitted,
    /// Being worked on.
    #[serde(rename = "TASK_STATE_WORKING")]
    Working,
    /// Done, with its artifacts.
    #[serde(rename = "TASK_STATE_COMPLETED")]
    Completed,
    /// Ended without a result.
    #[serde(rename = "TASK_STATE_FAILED")]
    Failed,
    /// Stopped on request.
    #[serde(rename = "TASK_STATE_CANCELED")]
    Canceled,
    /// Waits for the client's answer (a person's).
    #[serde(rename = "TASK_STATE_INPUT_REQUIRED")]
    InputRequired,
    /// Refused by the agent.
    #[serde(rename = "TASK_STATE_REJECTED")]
    Rejected,
    /// Waits for the client to authenticate somewhere.
    #[serde(rename = "TASK_STATE_AUTH_REQUIRED")]
    AuthRequired,
}

impl TaskState {
    /// Whether no further update follows.
    pub fn is_terminal(self) -> bool {
        matches!(self, TaskState::Completed | TaskState::Failed | TaskState::Canceled | TaskState::Rejected)
    }

    /// Whether the task waits for the client (the stream and a blocking
    /// send stop there too).
    pub fn is_interrupted(self) -> bool {
        matches!(self, TaskState::InputRequired | TaskState::AuthRequired)
    }

    /// The proto name (`TASK_STATE_WORKING`).
    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Unspecified => "TASK_STATE_UNSPECIFIED",
            TaskState::Submitted => "TASK_STATE_SUBMITTED",
            TaskState::Working => "TASK_STATE_WORKING",
            TaskState::Completed => "TASK_STATE_COMPLETED",
            TaskState::Failed => "TASK_STATE_FAILED",
            TaskState::Canceled => "TASK_STATE_CANCELED",
            TaskState::InputRequired => "TASK_STATE_INPUT_REQUIRED",
            TaskState::Rejected => "TASK_STATE_REJECTED",
            TaskState::AuthRequired => "TASK_STATE_AUTH_REQUIRED",
        }
    }
}

/// Who wrote a message (`Role`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum Role {
    /// Not set.
    #[serde(rename = "ROLE_UNSPECIFIED")]
    #[default]
    Unspecified,
    /// The client.
    #[serde(rename = "ROLE_USER")]
    User,
    /// The agent.
    #[serde(rename = "ROLE_AGENT")]
    Agent,
}

/// One piece of content (`Part`): exactly one of `text`, `raw` (base64),
/// `url` or `data`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Part {
    /// Text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// File bytes, base64 (ProtoJSON `bytes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw: Option<String>,
    /// A file by reference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Structured data (any JSON value).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
    /// Free metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
    /// A file's name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub filename: String,
    /// Its media type.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub media_type: String,
}

impl Part {
    /// A text part.
    pub fn text(text: impl Into<String>) -> Self {
        Self { text: Some(text.into()), ..Default::default() }
    }

    /// A structured-data part.
    pub fn data(data: Value) -> Self {
        Self { data: Some(data), ..Default::default() }
    }
}

/// One message of a conversation (`Message`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Message {
    /// Unique per message, chosen by its writer.
    pub message_id: String,
    /// The conversation it belongs to.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub context_id: String,
    /// The task it belongs to (a follow-up to that task when a client sends it).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub task_id: String,
    /// Who wrote it.
    #[serde(default)]
    pub role: Role,
    /// Its content.
    #[serde(default)]
    pub parts: Vec<Part>,
    /// Free metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
    /// Extension URIs it uses.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extensions: Vec<String>,
    /// Other tasks it refers to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reference_task_ids: Vec<String>,
}

impl Message {
    /// An agent message of one text part.
    pub fn agent_text(task_id: &str, context_id: &str, text: impl Into<String>) -> Self {
        Self {
            message_id: uuid::Uuid::new_v4().to_string(),
            context_id: context_id.into(),
            task_id: task_id.into(),
            role: Role::Agent,
            parts: vec![Part::text(text)],
            ..Default::default()
        }
    }

    /// The text of its text parts, one per line.
    pub fn text(&self) -> String {
        let texts: Vec<&str> = self.parts.iter().filter_map(|p| p.text.as_deref()).collect();
        texts.join("\n")
    }
}

/// Where a task stands, with the agent's latest word (`TaskStatus`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskStatus {
    /// The state.
    #[serde(default)]
    pub state: TaskState,
    /// The agent's message with it (the question of an input-required state).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<Message>,
    /// When it was reached (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<String>,
}

/// An output of a task (`Artifact`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Artifact {
    /// Unique within the task.
    pub artifact_id: String,
    /// A name for people.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// What it is.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// Its content.
    #[serde(default)]
    pub parts: Vec<Part>,
    /// Free metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
    /// Extension URIs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extensions: Vec<String>,
}

impl Artifact {
    /// The text of its text parts, one per line.
    pub fn text(&self) -> String {
        let texts: Vec<&str> = self.parts.iter().filter_map(|p| p.text.as_deref()).collect();
        texts.join("\n")
    }
}

/// A unit of work (`Task`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Task {
    /// Chosen by the server.
    pub id: String,
    /// The conversation.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub context_id: String,
    /// Where it stands.
    #[serde(default)]
    pub status: TaskStatus,
    /// Its outputs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<Artifact>,
    /// The messages so far.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<Message>,
    /// Free metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

/// A state change of a streamed task (`TaskStatusUpdateEvent`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskStatusUpdateEvent {
    /// The task.
    pub task_id: String,
    /// Its conversation.
    #[serde(default)]
    pub context_id: String,
    /// The new status.
    #[serde(default)]
    pub status: TaskStatus,
    /// Free metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

/// An artifact (or a chunk of one) of a streamed task (`TaskArtifactUpdateEvent`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskArtifactUpdateEvent {
    /// The task.
    pub task_id: String,
    /// Its conversation.
    #[serde(default)]
    pub context_id: String,
    /// The artifact or its next chunk.
    #[serde(default)]
    pub artifact: Artifact,
    /// Appends to an artifact of the same id already sent.
    #[serde(default, skip_serializing_if = "is_false")]
    pub append: bool,
    /// The artifact's last chunk.
    #[serde(default, skip_serializing_if = "is_false")]
    pub last_chunk: bool,
    /// Free metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

/// One item of a stream (`StreamResponse`, a `oneof`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum StreamResponse {
    /// The task as a whole (first on a stream).
    Task(Task),
    /// A message (an agent that answers without a task).
    Message(Message),
    /// A status change.
    StatusUpdate(TaskStatusUpdateEvent),
    /// An artifact.
    ArtifactUpdate(TaskArtifactUpdateEvent),
}

/// What `SendMessage` answers (`SendMessageResponse`, a `oneof`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum SendMessageResponse {
    /// The task the message started or continued.
    Task(Task),
    /// A direct answer without a task.
    Message(Message),
}

/// How the server authenticates to a webhook (`AuthenticationInfo`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuthenticationInfo {
    /// An HTTP authentication scheme (`Bearer`, `Basic`, ...).
    #[serde(default)]
    pub scheme: String,
    /// Its credentials.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub credentials: String,
}

/// A webhook a task's updates are pushed to (`TaskPushNotificationConfig`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskPushNotificationConfig {
    /// The tenant (the HTTP+JSON path's or the request's).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub tenant: String,
    /// The config's id (the server assigns one when empty).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub id: String,
    /// The task.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub task_id: String,
    /// Where updates are POSTed.
    #[serde(default)]
    pub url: String,
    /// Sent back in the `X-A2A-Notification-Token` header, so the receiver
    /// knows the notification is for it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub token: String,
    /// How the server authenticates to the webhook.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authentication: Option<AuthenticationInfo>,
}

/// `SendMessageConfiguration`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SendMessageConfiguration {
    /// Media types the client accepts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub accepted_output_modes: Vec<String>,
    /// A webhook for this task's updates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_push_notification_config: Option<TaskPushNotificationConfig>,
    /// How many history messages the reply's task carries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history_length: Option<i32>,
    /// Answer at once instead of when the task ends or is interrupted.
    #[serde(default, skip_serializing_if = "is_false")]
    pub return_immediately: bool,
}

/// `SendMessageRequest` (also of `SendStreamingMessage`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SendMessageRequest {
    /// The tenant.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub tenant: String,
    /// The message.
    pub message: Message,
    /// How to answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub configuration: Option<SendMessageConfiguration>,
    /// Free metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

/// `GetTaskRequest`, `SubscribeToTaskRequest` and `CancelTaskRequest`: a task by id.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskIdRequest {
    /// The tenant.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub tenant: String,
    /// The task.
    pub id: String,
    /// `GetTask`: how many history messages to include.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history_length: Option<i32>,
    /// `CancelTask`: free metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

/// `ListTasksRequest`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListTasksRequest {
    /// The tenant.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub tenant: String,
    /// Only this conversation's tasks.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub context_id: String,
    /// Only tasks in this state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<TaskState>,
    /// At most this many.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_size: Option<i32>,
    /// The previous page's `nextPageToken`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub page_token: String,
    /// How many history messages each task carries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history_length: Option<i32>,
    /// Only tasks whose status changed after this time (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_timestamp_after: Option<String>,
    /// Whether each task carries its artifacts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include_artifacts: Option<bool>,
}

/// `ListTasksResponse`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListTasksResponse {
    /// This page, newest first.
    pub tasks: Vec<Task>,
    /// Where the next page starts; empty on the last page.
    pub next_page_token: String,
    /// The page size used.
    pub page_size: i32,
    /// The tasks on this page: the job listing behind it pages without
    /// counting every match (docs/PROTOCOLS.md, "A2A v1.0").
    pub total_size: i32,
}

/// `GetTaskPushNotificationConfigRequest`, `DeleteTaskPushNotificationConfigRequest`
/// and `ListTaskPushNotificationConfigsRequest` (without `id`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PushConfigRequest {
    /// The tenant.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub tenant: String,
    /// The task.
    pub task_id: String,
    /// The config (not for the list).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub id: String,
    /// The list's page size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_size: Option<i32>,
    /// The list's page token.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub page_token: String,
}

/// `ListTaskPushNotificationConfigsResponse`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListPushConfigsResponse {
    /// The task's webhooks.
    pub configs: Vec<TaskPushNotificationConfig>,
    /// Empty: every config fits one page.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub next_page_token: String,
}

/// An interface of an agent: where, over which binding (`AgentInterface`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentInterface {
    /// Its URL.
    pub url: String,
    /// `JSONRPC`, `HTTP+JSON` or `GRPC`.
    pub protocol_binding: String,
    /// The tenant its paths carry, if any.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub tenant: String,
    /// `1.0`.
    #[serde(default)]
    pub protocol_version: String,
}

/// What an agent can do besides request/reply (`AgentCapabilities`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentCapabilities {
    /// `SendStreamingMessage` and `SubscribeToTask`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub streaming: Option<bool>,
    /// Webhooks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub push_notifications: Option<bool>,
    /// An extended card for authenticated clients.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extended_agent_card: Option<bool>,
}

/// One thing an agent does (`AgentSkill`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentSkill {
    /// Unique within the card.
    pub id: String,
    /// For people.
    pub name: String,
    /// What it does.
    pub description: String,
    /// Keywords.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Example requests.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub examples: Vec<String>,
}

/// Who runs the agent (`AgentProvider`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentProvider {
    /// Its website.
    pub url: String,
    /// Its name.
    pub organization: String,
}

/// An agent's self-description (`AgentCard`). Security schemes and
/// requirements stay JSON: Flotilla writes one bearer scheme and reads
/// none of a remote card's.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentCard {
    /// Its name.
    pub name: String,
    /// What it does.
    #[serde(default)]
    pub description: String,
    /// Where and how to reach it, preferred first.
    #[serde(default)]
    pub supported_interfaces: Vec<AgentInterface>,
    /// Who runs it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<AgentProvider>,
    /// The agent's version.
    #[serde(default)]
    pub version: String,
    /// Its documentation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub documentation_url: Option<String>,
    /// What it can do.
    #[serde(default)]
    pub capabilities: AgentCapabilities,
    /// Named security schemes (`SecurityScheme` objects).
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub security_schemes: Map<String, Value>,
    /// Which schemes a request must satisfy (`SecurityRequirement` objects).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub security_requirements: Vec<Value>,
    /// Media types it reads.
    #[serde(default)]
    pub default_input_modes: Vec<String>,
    /// Media types it writes.
    #[serde(default)]
    pub default_output_modes: Vec<String>,
    /// What it does, one skill each.
    #[serde(default)]
    pub skills: Vec<AgentSkill>,
}

/// A JSON-RPC 2.0 request.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct RpcRequest {
    /// `2.0`.
    pub jsonrpc: String,
    /// The request id (absent: a notification).
    #[serde(default)]
    pub id: Option<Value>,
    /// `SendMessage`, `GetTask`, ...
    pub method: String,
    /// The method's request object.
    #[serde(default)]
    pub params: Value,
}

/// A JSON-RPC 2.0 error object.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct RpcError {
    /// The code (-32001 task not found, ..., -32602 invalid params).
    pub code: i64,
    /// What went wrong, for people.
    pub message: String,
    /// Typed details (`google.rpc.ErrorInfo`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

/// A JSON-RPC 2.0 response: `result` or `error`.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct RpcResponse {
    /// `2.0`.
    pub jsonrpc: String,
    /// The request's id.
    #[serde(default)]
    pub id: Value,
    /// The answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// The failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<RpcError>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_proto_json_spelling_is_the_sdks() {
        let update = StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
            task_id: "t".into(),
            context_id: "c".into(),
            status: TaskStatus { state: TaskState::InputRequired, message: None, timestamp: None },
            metadata: None,
        });
        assert_eq!(
            serde_json::to_value(&update).unwrap(),
            json!({"statusUpdate": {"taskId": "t", "contextId": "c", "status": {"state": "TASK_STATE_INPUT_REQUIRED"}}})
        );
        let sent: SendMessageRequest = serde_json::from_value(json!({
            "message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "hi"}, {"data": {"a": 1}}]},
            "configuration": {"returnImmediately": true, "somethingNewer": 1}
        }))
        .unwrap();
        assert_eq!(sent.message.text(), "hi");
        assert!(sent.configuration.unwrap().return_immediately);
        let reply: SendMessageResponse = serde_json::from_value(json!({"task": {"id": "x", "status": {}}})).unwrap();
        assert!(matches!(reply, SendMessageResponse::Task(t) if t.id == "x"));
    }
}
