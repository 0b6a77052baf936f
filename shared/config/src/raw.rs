//! The serde shape of the configuration file. Defaults live here; validation
//! lives in [`super::Settings`].

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The whole file.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawConfig {
    /// `[nats]`
    pub nats: NatsConfig,
    /// `[models.<name>]`
    pub models: BTreeMap<String, RawModel>,
    /// `[planner]`
    pub planner: Option<PlannerConfig>,
    /// `[subagents.<type>]`
    pub subagents: BTreeMap<String, SubagentConfig>,
    /// `[local]`
    pub local: LocalConfig,
    /// `[files]`
    pub files: super::files::FilesConfig,
    /// `[jobs]`
    pub jobs: super::jobs::JobsConfig,
    /// `[worker]`
    pub worker: super::operations::WorkerConfig,
    /// `[metrics]`
    pub metrics: super::operations::MetricsConfig,
    /// `[dashboard]`
    pub dashboard: super::operations::DashboardConfig,
    /// `[mcp_servers.<name>]`
    pub mcp_servers: BTreeMap<String, crate::RawMcpServer>,
    /// `[tenants]`
    pub tenants: super::tenants::TenantsConfig,
    /// `[telemetry]`
    pub telemetry: super::telemetry::TelemetryConfig,
    /// `[a2a]`
    pub a2a: super::a2a::A2aConfig,
    /// `[agent_protocol]`
    pub agent_protocol: super::agent_protocol::AgentProtocolConfig,
}

/// `[nats]`: where the bus is and how names are prefixed.
#[derive(Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct NatsConfig {
    /// Server URL(s), comma separated.
    pub url: String,
    /// Prefix of every subject, stream and bucket.
    pub prefix: String,
    /// Seconds a worker may go silent before JetStream redelivers its task
    /// (a killed worker's task resumes elsewhere this soon, docs/RELIABILITY.md
    /// "Takeover"). Workers send in-progress acks at a third of this.
    pub ack_wait: u64,
    /// Deliveries of a task before it is dead-lettered.
    pub max_deliver: i64,
    /// Replicas of every stream and bucket (3 on a 3-node cluster).
    pub replicas: usize,
    /// Prefix of this process's reply subjects. Give each role its own
    /// (`_INBOX.worker`, `_INBOX.client-acme`) so NATS permissions can keep
    /// one credential from reading another's replies (docs/SECURITY.md).
    pub inbox_prefix: String,
    /// Declare streams and buckets at start (`true`), or only wait for them
    /// to exist (`false`: for credentials without JetStream admin rights,
    /// such as the `worker` role of deploy/nats).
    pub manage_topology: bool,
    /// Days the audit stream keeps tool-call and approval records.
    pub audit_retention_days: u64,
    /// `[nats.auth]`: credentials.
    pub auth: super::nats_auth::NatsAuthConfig,
    /// `[nats.tls]`: TLS towards the server.
    pub tls: super::nats_auth::NatsTlsConfig,
    /// `[nats.consumers]`: lifetime and number of clients' consumers.
    pub consumers: super::tenants::ClientConsumers,
}

impl Default for NatsConfig {
    fn default() -> Self {
        Self {
            url: "nats://127.0.0.1:4222".into(),
            prefix: "flotilla".into(),
            ack_wait: 6,
            max_deliver: 5,
            replicas: 1,
            inbox_prefix: "_INBOX".into(),
            manage_topology: true,
            audit_retention_days: 90,
            auth: Default::default(),
            tls: Default::default(),
            consumers: Default::default(),
        }
    }
}

/// Hides credentials a URL may carry (`nats://user:pass@host`).
impl std::fmt::Debug for NatsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsConfig")
            .field("url", &crate::redact_url(&self.url))
            .field("prefix", &self.prefix)
            .field("ack_wait", &self.ack_wait)
            .field("max_deliver", &self.max_deliver)
            .field("replicas", &self.replicas)
            .field("inbox_prefix", &self.inbox_prefix)
            .field("manage_topology", &self.manage_topology)
            .field("audit_retention_days", &self.audit_retention_days)
            .field("auth", &self.auth.method())
            .field("tls", &self.tls)
            .field("consumers", &self.consumers)
            .finish()
    }
}

/// `[models.<name>]` before validation.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawModel {
    /// `openai`, `anthropic` or `scripted`.
    pub provider: String,
    /// openai, anthropic: endpoint base URL.
    pub base_url: Option<String>,
    /// openai, anthropic: model name.
    pub model: Option<String>,
    /// openai, anthropic: name of the env var with the API key.
    pub api_key_env: Option<String>,
    /// openai, anthropic: request timeout in seconds.
    pub timeout: Option<u64>,
    /// openai, anthropic: retries on 429/5xx/timeouts.
    pub max_retries: Option<u32>,
    /// openai, anthropic: sampling temperature.
    pub temperature: Option<f32>,
    /// openai, anthropic: stream the answer as server-sent events.
    pub stream: Option<bool>,
    /// openai: send a subagent type's `output_schema` as `response_format`
    /// (`json_schema`), for endpoints that support it.
    pub structured_outputs: Option<bool>,
    /// anthropic: the most tokens of one answer.
    pub max_tokens: Option<u32>,
    /// scripted: the script file.
    pub script: Option<PathBuf>,
    /// US dollars per million prompt tokens (cost accounting; optional).
    pub price_input_per_mtok: Option<f64>,
    /// US dollars per million completion tokens (cost accounting; optional).
    pub price_output_per_mtok: Option<f64>,
    /// US dollars per million prompt tokens written to the provider's
    /// prompt cache (default: `price_input_per_mtok`).
    pub price_cache_write_per_mtok: Option<f64>,
    /// US dollars per million prompt tokens read from the provider's prompt
    /// cache (default: `price_input_per_mtok`).
    pub price_cache_read_per_mtok: Option<f64>,
}

/// `[planner]`: the agent that owns a job's todo list.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PlannerConfig {
    /// Name under `[models]`.
    pub model: String,
    /// System prompt; the list of subagent types is appended to it.
    #[serde(default = "default_planner_prompt")]
    pub system_prompt: String,
    /// Model turns before the job fails.
    #[serde(default = "default_planner_steps")]
    pub max_steps: u32,
    /// Job wall-time limit in seconds.
    #[serde(default = "default_job_timeout")]
    pub timeout: u64,
    /// Per-task deadline in seconds, stamped on every task message.
    #[serde(default = "default_task_timeout")]
    pub task_timeout: u64,
    /// Jobs planned at once by one orchestrator.
    #[serde(default = "default_planner_concurrency")]
    pub concurrency: usize,
    /// Seconds a task may wait while no live worker (by heartbeat) serves its
    /// type before it fails with "no worker serves `<type>`".
    #[serde(default = "default_no_worker_timeout")]
    pub no_worker_timeout: u64,
    /// Token budget of the planner's own conversation per job, when set
    /// (each task has its own budget, `[subagents.<type>] max_tokens`).
    #[serde(default)]
    pub max_tokens: Option<u64>,
    /// Tokens (o200k_base) the planner's next model request may hold; past
    /// it, older turns are compacted into a model-written summary
    /// (docs/CONFIG.md, "Bounded context").
    #[serde(default = "default_context_tokens")]
    pub context_tokens: u64,
    /// The instructions of the compaction call that summarises older turns.
    #[serde(default = "default_compaction_prompt")]
    pub compaction_prompt: String,
    /// Tokens of a task's summary that enter the planner's conversation; the
    /// full report stays in the job's files.
    #[serde(default = "default_report_tokens")]
    pub report_tokens: u64,
    /// Tasks of one `map_tasks` call outstanding at most, and calls of one
    /// planner turn running at once (docs/TOOLS.md, "map_tasks" and
    /// "Parallel calls of a planner turn").
    #[serde(default = "default_max_in_flight")]
    pub max_in_flight: usize,
    /// Seconds a job's lease outlives its orchestrator's last renewal: an
    /// orchestrator that dies loses its jobs to another after at most this
    /// long (docs/RELIABILITY.md, "Job leases"). 3 to 300.
    #[serde(default = "default_lease_ttl")]
    pub lease_ttl: u64,
    /// Built-in tools the planner gets besides `write_todos` and `task`
    /// (default: the read-only file tools; docs/TOOLS.md). Validation
    /// refuses any other kind of [`crate::ToolRef`] here.
    #[serde(default = "default_planner_tools")]
    pub tools: Vec<crate::ToolRef>,
    /// File permission rules of the planner's built-in file tools, first match wins.
    #[serde(default)]
    pub permissions: Vec<crate::permissions::PermissionRule>,
    /// Mode when no rule matches: `allow` (default), `deny` or `interrupt`.
    #[serde(default)]
    pub default_permission: crate::permissions::Mode,
    /// Catch the model repeating a call (docs/TOOLS.md, "Stopping at a tool
    /// and loop detection").
    #[serde(default = "default_true")]
    pub loop_detection: bool,
}

fn default_true() -> bool {
    true
}

fn default_planner_tools() -> Vec<crate::ToolRef> {
    crate::builtin_tools::READ_ONLY.iter().map(|s| crate::ToolRef::Builtin(s.to_string())).collect()
}

fn default_planner_prompt() -> String {
    "You are the planner. Keep a todo list with write_todos, delegate self-contained work with \
     task(description, subagent_type), then consolidate the reports into one answer."
        .into()
}
/// The default `context_tokens` of the planner and of every subagent type.
pub const DEFAULT_CONTEXT_TOKENS: u64 = 32_000;

/// The default `[planner] compaction_prompt`, also the compaction prompt of
/// every subagent.
pub const DEFAULT_COMPACTION_PROMPT: &str = "\
You are compacting the earlier part of an agent's conversation so it can continue within its context window. \
Write a faithful, dense summary of the turns below for the agent itself to read. Keep, verbatim: every task id, \
tool call outcome that still matters, file path (job files such as /reports/... and /inputs/...), number and \
result the final answer will need; the decisions taken and why; and the open items: work started but not \
finished, tasks still running, what remains to do. Drop greetings, repetition and detail that a file path \
already points to. Do not invent anything and do not answer the job: only summarise.";

fn default_context_tokens() -> u64 {
    DEFAULT_CONTEXT_TOKENS
}
fn default_compaction_prompt() -> String {
    DEFAULT_COMPACTION_PROMPT.into()
}
fn default_report_tokens() -> u64 {
    2_000
}
fn default_max_in_flight() -> usize {
    256
}
fn default_lease_ttl() -> u64 {
    15
}
fn default_planner_steps() -> u32 {
    30
}
fn default_job_timeout() -> u64 {
    3600
}
fn default_task_timeout() -> u64 {
    600
}
fn default_no_worker_timeout() -> u64 {
    60
}
fn default_planner_concurrency() -> usize {
    16
}

/// `[subagents.<type>]`: one statically configured subagent type.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SubagentConfig {
    /// What this type is for; shown to the planner so it can choose.
    pub description: String,
    /// The subagent's system prompt.
    #[serde(default)]
    pub system_prompt: String,
    /// Name under `[models]`; empty on a type backed by a remote agent
    /// (`agent` or `a2a`, docs/PROTOCOLS.md).
    #[serde(default)]
    pub model: String,
    /// A Synadia Agent Protocol agent that runs this type's tasks instead of a model loop.
    #[serde(default)]
    pub agent: Option<crate::agent_protocol::AgentRef>,
    /// A remote A2A agent that runs this type's tasks instead of a model loop.
    #[serde(default)]
    pub a2a: Option<crate::a2a::A2aAgentRef>,
    /// The tools this type gets; nothing else, whatever a task says.
    #[serde(default)]
    pub tools: Vec<crate::ToolRef>,
    /// Model turns before the task fails.
    #[serde(default = "default_subagent_steps")]
    pub max_steps: u32,
    /// Task wall-time limit in seconds.
    #[serde(default = "default_task_timeout")]
    pub timeout: u64,
    /// Tasks of this type one worker runs at once.
    #[serde(default = "default_concurrency")]
    pub concurrency: usize,
    /// Per tool-call timeout in seconds.
    #[serde(default = "default_tool_timeout")]
    pub tool_timeout: u64,
    /// Tools whose calls wait for a person, by final tool name (docs/APPROVALS.md).
    #[serde(default)]
    pub interrupt_on: BTreeMap<String, super::interrupt::InterruptConfig>,
    /// Seconds an approval request waits before the call is rejected.
    #[serde(default = "super::interrupt::default_approval_timeout")]
    pub approval_timeout: u64,
    /// `[subagents.<type>.sandbox]`: gives this type the `execute` tool (docs/SANDBOX.md).
    #[serde(default)]
    pub sandbox: Option<super::sandbox::SandboxConfig>,
    /// Token budget of one task, when set.
    #[serde(default)]
    pub max_tokens: Option<u64>,
    /// Tokens (o200k_base) a task's next model request may hold before older
    /// turns are compacted (docs/CONFIG.md, "Bounded context").
    #[serde(default = "default_context_tokens")]
    pub context_tokens: u64,
    /// File permission rules of this type's built-in file tools, first match wins.
    #[serde(default)]
    pub permissions: Vec<crate::permissions::PermissionRule>,
    /// Mode when no rule matches: `allow` (default), `deny` or `interrupt`.
    #[serde(default)]
    pub default_permission: crate::permissions::Mode,
    /// MCP resources (`"<server>/<uri>"`) appended to the system prompt before each task (docs/MCP.md).
    #[serde(default)]
    pub mcp_resources: Vec<String>,
    /// An MCP prompt that becomes the system prompt of each task (docs/MCP.md).
    #[serde(default)]
    pub mcp_prompt: Option<crate::mcp::McpPromptConfig>,
    /// Tools (final names) whose successful result is the task's answer,
    /// with no further model call (docs/TOOLS.md, "Stopping at a tool and
    /// loop detection").
    #[serde(default)]
    pub stop_at_tools: Vec<String>,
    /// Tools (final names) that may run twice to the effect of once: a call
    /// an earlier attempt may have started runs again on resume without the
    /// note that it may already have taken effect (docs/RELIABILITY.md,
    /// "Step journal").
    #[serde(default)]
    pub idempotent_tools: Vec<String>,
    /// Catch the model repeating a call (same section of docs/TOOLS.md).
    #[serde(default = "default_true")]
    pub loop_detection: bool,
    /// JSON Schema every answer of this type must match (docs/TOOLS.md,
    /// "Structured answers"); the planner then reads the answer as a value.
    #[serde(default)]
    pub output_schema: Option<serde_json::Value>,
}

fn default_subagent_steps() -> u32 {
    12
}
fn default_concurrency() -> usize {
    4
}
fn default_tool_timeout() -> u64 {
    60
}

/// `[local]`: the all-in-one mode of `flotilla up`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct LocalConfig {
    /// Worker processes to start.
    pub workers: usize,
    /// nats-server binary (looked up on PATH when not a path).
    pub nats_server: String,
    /// Where nats-server keeps JetStream data and logs, relative to the config file.
    pub state_dir: PathBuf,
    /// The job `flotilla demo` submits.
    pub demo_job: String,
}

impl Default for LocalConfig {
    fn default() -> Self {
        Self {
            workers: 2,
            nats_server: "nats-server".into(),
            state_dir: ".flotilla".into(),
            demo_job: "Compute the gross margin of each region and consolidate them into one table: \
                       north: revenue 120, cost 75; south: revenue 0, cost 30; east: revenue 250, cost 190; \
                       west: revenue 80, cost 20."
                .into(),
        }
    }
}
