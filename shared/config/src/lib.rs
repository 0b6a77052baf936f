//! Configuration in two steps (STYLE.md point 7): [`raw`] holds the serde shape
//! of one TOML file plus `FLOTILLA_*` environment overrides, read with the
//! `config` crate; [`Settings::load`] validates it into runtime settings whose
//! errors name the offending key. Relative paths resolve against the config
//! file's directory, so a config works from any working directory.
//!
//! The keys are a public contract, documented in `docs/CONFIG.md`.

#![deny(missing_docs)]

pub mod a2a;
pub mod agent_protocol;
pub mod builtin_tools;
pub mod files;
pub mod interrupt;
pub mod jobs;
pub mod mcp;
mod mcp_import;
pub mod nats_auth;
pub mod operations;
pub mod permissions;
mod price;
pub mod raw;
pub mod sandbox;
pub mod staging;
pub mod telemetry;
pub mod tenants;
pub mod tls;
pub mod tool_ref;
pub mod url_policy;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use files::FilesConfig;
pub use interrupt::InterruptConfig;
pub use jobs::JobsConfig;
pub use mcp::{McpServerSettings, McpTransport, RawMcpServer, SessionMode};
pub use nats_auth::{NatsAuthConfig, NatsTlsConfig};
pub use operations::{DashboardConfig, DashboardTenant, MetricsConfig, WorkerConfig};
pub use price::Price;
pub use raw::{
    DEFAULT_COMPACTION_PROMPT, DEFAULT_CONTEXT_TOKENS, LocalConfig, NatsConfig, PlannerConfig, SubagentConfig,
};
pub use sandbox::SandboxConfig;
pub use tenants::{TenantLimits, TenantsConfig};
pub use tool_ref::ToolRef;

/// Hides credentials in a URL for logs and errors: `nats://user:pass@h` -> `nats://***@h`.
pub fn redact_url(url: &str) -> String {
    url.split(',')
        .map(|u| match (u.find("://"), u.rfind('@')) {
            (Some(s), Some(at)) if at > s => format!("{}***{}", &u[..s + 3], &u[at..]),
            _ => u.to_string(),
        })
        .collect::<Vec<_>>()
        .join(",")
}

use flotilla_protocol::ids::{SubagentType, is_valid_token};

/// Environment variable prefix for overrides: `FLOTILLA_NATS__URL` sets `[nats] url`.
pub const ENV_PREFIX: &str = "FLOTILLA";

/// Why a configuration was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file or environment could not be read or parsed. `cause` is in
    /// the message and deliberately not a `source`: a chain printer would
    /// print it twice on one line.
    #[error("cannot load configuration{}: {cause}", path.as_ref().map(|p| format!(" from {}", p.display())).unwrap_or_default())]
    Load {
        /// The file, when there is one.
        path: Option<PathBuf>,
        /// What the `config` crate said.
        cause: ::config::ConfigError,
    },
    /// A key has a value that cannot work.
    #[error("invalid config key `{key}`: {message}")]
    Invalid {
        /// Dotted key, e.g. `subagents.finance.model`.
        key: String,
        /// What is wrong and what to do.
        message: String,
    },
}

fn invalid(key: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid { key: key.into(), message: message.into() }
}

/// `[models.<name>] max_tokens` of an `anthropic` model when unset.
pub const DEFAULT_ANSWER_TOKENS: u32 = 4096;

/// A chat model, resolved from `[models.<name>]`.
#[derive(Clone, Debug)]
pub enum ModelSettings {
    /// Any OpenAI-compatible `/chat/completions` endpoint.
    OpenAi {
        /// Base URL, e.g. `https://api.openai.com/v1`.
        base_url: String,
        /// Model name sent in requests.
        model: String,
        /// Name of the environment variable holding the API key (never the key).
        api_key_env: Option<String>,
        /// Per-request timeout.
        timeout: Duration,
        /// Retries on 429/5xx/timeouts before giving up.
        max_retries: u32,
        /// Sampling temperature, when set.
        temperature: Option<f32>,
        /// Ask for the answer as server-sent events (`stream = true`).
        stream: bool,
        /// Send an `output_schema` as `response_format` (`structured_outputs = true`).
        structured_outputs: bool,
    },
    /// Anthropic's Messages API (`{base_url}/v1/messages`).
    Anthropic {
        /// Base URL, default `https://api.anthropic.com`.
        base_url: String,
        /// Model name sent in requests, e.g. `claude-sonnet-4-5`.
        model: String,
        /// Name of the environment variable holding the API key (never the key).
        api_key_env: Option<String>,
        /// Per-request timeout.
        timeout: Duration,
        /// Retries on 429/529/5xx/timeouts before giving up.
        max_retries: u32,
        /// Sampling temperature, when set.
        temperature: Option<f32>,
        /// The most tokens one answer may have (`max_tokens`, required by the API).
        max_tokens: u32,
        /// Ask for the answer as server-sent events (`stream = true`).
        stream: bool,
    },
    /// Deterministic turns from a script file.
    Scripted {
        /// The script, resolved to an absolute path.
        script: PathBuf,
    },
}

/// Validated configuration.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The file it came from, if any.
    pub source: Option<PathBuf>,
    /// NATS connection and naming.
    pub nats: NatsConfig,
    /// Models by name.
    pub models: BTreeMap<String, ModelSettings>,
    /// The planner agent, when configured.
    pub planner: Option<PlannerConfig>,
    /// Subagent types by name.
    pub subagents: BTreeMap<SubagentType, SubagentConfig>,
    /// Local all-in-one mode (`flotilla up`).
    pub local: LocalConfig,
    /// Prices of the models that have them, by model name.
    pub prices: BTreeMap<String, crate::Price>,
    /// `[worker]`: heartbeats.
    pub worker: WorkerConfig,
    /// `[metrics]`: Prometheus endpoints.
    pub metrics: MetricsConfig,
    /// `[dashboard]`: the orchestrator's web dashboard.
    pub dashboard: DashboardConfig,
    /// `[files]`: job files and large-result eviction.
    pub files: FilesConfig,
    /// `[jobs]`: job history retention.
    pub jobs: JobsConfig,
    /// `[mcp_servers.<name>]`, plus servers imported with `--mcp-config`.
    pub mcp_servers: BTreeMap<String, crate::McpServerSettings>,
    /// `[tenants]`: per-tenant quotas.
    pub tenants: TenantsConfig,
    /// `[telemetry]`: OpenTelemetry export.
    pub telemetry: telemetry::TelemetryConfig,
    /// `[a2a]`: the A2A v1.0 server on the dashboard's listener.
    pub a2a: a2a::A2aConfig,
    /// `[agent_protocol]`: the Synadia Agent Protocol host (docs/PROTOCOLS.md).
    pub agent_protocol: agent_protocol::AgentProtocolConfig,
}

impl Settings {
    /// Loads `path` (if given) plus environment overrides and validates them.
    pub fn load(path: Option<&Path>) -> Result<Self, ConfigError> {
        Self::load_with_env(path, std::env::vars())
    }

    /// Like [`Settings::load`] with an explicit environment (for tests).
    pub fn load_with_env(
        path: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, ConfigError> {
        let mut builder = ::config::Config::builder();
        if let Some(p) = path {
            if !p.is_file() {
                return Err(invalid("--config", format!("{} does not exist or is not a file", p.display())));
            }
            builder = builder.add_source(::config::File::from(p).format(::config::FileFormat::Toml));
        }
        let env: std::collections::HashMap<String, String> =
            env.into_iter().filter(|(k, _)| k.starts_with(&format!("{ENV_PREFIX}_")) && k.contains("__")).collect();
        builder = builder.add_source(
            ::config::Environment::with_prefix(ENV_PREFIX)
                .prefix_separator("_")
                .separator("__")
                .try_parsing(true)
                .source(Some(env)),
        );
        let raw: raw::RawConfig = builder
            .build()
            .and_then(|c| c.try_deserialize())
            .map_err(|cause| ConfigError::Load { path: path.map(Path::to_path_buf), cause })?;
        let base = path.and_then(|p| p.parent()).map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("."));
        Self::validate(raw, path, &base)
    }

    fn validate(raw: raw::RawConfig, path: Option<&Path>, base: &Path) -> Result<Self, ConfigError> {
        if !is_valid_token(&raw.nats.prefix) {
            return Err(invalid("nats.prefix", "use 1-64 characters from a-z, A-Z, 0-9, '-' and '_'"));
        }
        let mut raw = raw;
        Self::validate_nats(&mut raw.nats, base)?;
        let mut models = BTreeMap::new();
        let mut prices = BTreeMap::new();
        for (name, m) in raw.models {
            let key = |k: &str| format!("models.{name}.{k}");
            let price_keys = [
                ("price_input_per_mtok", m.price_input_per_mtok),
                ("price_output_per_mtok", m.price_output_per_mtok),
                ("price_cache_write_per_mtok", m.price_cache_write_per_mtok),
                ("price_cache_read_per_mtok", m.price_cache_read_per_mtok),
            ];
            if price_keys.iter().any(|(_, v)| v.is_some()) {
                for (k, v) in price_keys {
                    if v.is_some_and(|v| !v.is_finite() || v < 0.0) {
                        return Err(invalid(key(k), "must be a number >= 0 (US dollars per million tokens)"));
                    }
                }
                let input = m.price_input_per_mtok.unwrap_or(0.0);
                let price = crate::Price {
                    input_per_mtok: input,
                    output_per_mtok: m.price_output_per_mtok.unwrap_or(0.0),
                    cache_write_per_mtok: m.price_cache_write_per_mtok.unwrap_or(input),
                    cache_read_per_mtok: m.price_cache_read_per_mtok.unwrap_or(input),
                };
                prices.insert(name.clone(), price);
            }
            let settings = match m.provider.as_str() {
                "openai" => ModelSettings::OpenAi {
                    base_url: m.base_url.unwrap_or_else(|| "https://api.openai.com/v1".into()),
                    model: m.model.ok_or_else(|| invalid(key("model"), "required for provider \"openai\""))?,
                    api_key_env: m.api_key_env,
                    timeout: Duration::from_secs(m.timeout.unwrap_or(120)),
                    max_retries: m.max_retries.unwrap_or(3),
                    temperature: m.temperature,
                    stream: m.stream.unwrap_or(false),
                    structured_outputs: m.structured_outputs.unwrap_or(false),
                },
                "anthropic" => ModelSettings::Anthropic {
                    base_url: m.base_url.unwrap_or_else(|| "https://api.anthropic.com".into()),
                    model: m.model.ok_or_else(|| invalid(key("model"), "required for provider \"anthropic\""))?,
                    api_key_env: m.api_key_env,
                    timeout: Duration::from_secs(m.timeout.unwrap_or(120)),
                    max_retries: m.max_retries.unwrap_or(3),
                    temperature: m.temperature,
                    max_tokens: match m.max_tokens.unwrap_or(DEFAULT_ANSWER_TOKENS) {
                        0 => return Err(invalid(key("max_tokens"), "must be at least 1 (tokens of one answer)")),
                        n => n,
                    },
                    stream: m.stream.unwrap_or(false),
                },
                "scripted" => {
                    let script =
                        m.script.ok_or_else(|| invalid(key("script"), "required for provider \"scripted\""))?;
                    let script = base.join(script);
                    if !script.is_file() {
                        return Err(invalid(key("script"), format!("{} does not exist", script.display())));
                    }
                    ModelSettings::Scripted { script }
                }
                other => {
                    return Err(invalid(
                        key("provider"),
                        format!("unknown provider {other:?}: use \"openai\", \"anthropic\" or \"scripted\""),
                    ));
                }
            };
            models.insert(name, settings);
        }
        let check_model = |key: String, model: &str| {
            if models.contains_key(model) {
                Ok(())
            } else {
                let known: Vec<_> = models.keys().cloned().collect();
                Err(invalid(key, format!("no model {model:?} under [models] (known: {})", known.join(", "))))
            }
        };
        if let Some(p) = &raw.planner {
            check_model("planner.model".into(), &p.model)?;
            if p.max_steps == 0 {
                return Err(invalid("planner.max_steps", "must be at least 1"));
            }
            if p.max_in_flight == 0 {
                return Err(invalid(
                    "planner.max_in_flight",
                    "must be at least 1 (tasks of one map_tasks call at once)",
                ));
            }
            check_context(p.context_tokens, p.report_tokens, &p.compaction_prompt)?;
            if !(3..=300).contains(&p.lease_ttl) {
                return Err(invalid(
                    "planner.lease_ttl",
                    "must be 3 to 300 (seconds a job's lease outlives its orchestrator's last renewal)",
                ));
            }
            if let Some(t) = p.tools.iter().find(|t| !matches!(t, ToolRef::Builtin(_))) {
                return Err(invalid(
                    "planner.tools",
                    format!(
                        "{:?} is not a built-in tool: the planner gets only built-ins ({})",
                        t.to_string(),
                        crate::builtin_tools::ALL.join(", ")
                    ),
                ));
            }
            check_permissions("planner", &p.permissions, p.default_permission)?;
        }
        let mut subagents = BTreeMap::new();
        for (name, s) in raw.subagents {
            let ty = SubagentType::new(&name).map_err(|e| invalid(format!("subagents.{name}"), e.to_string()))?;
            match (s.model.is_empty(), &s.agent, &s.a2a) {
                (false, None, None) => check_model(format!("subagents.{name}.model"), &s.model)?,
                (true, Some(_), None) | (true, None, Some(_)) => check_remote(&name, &s)?,
                (true, None, None) => {
                    return Err(invalid(
                        format!("subagents.{name}.model"),
                        "required: name a model under [models], or back the type by a remote agent with \
                         `agent` or `a2a` (docs/PROTOCOLS.md)",
                    ));
                }
                _ => {
                    return Err(invalid(
                        format!("subagents.{name}"),
                        "set exactly one of `model`, `agent` and `a2a`: a type runs a model loop or a remote agent",
                    ));
                }
            }
            check_subagent(&name, &s)?;
            subagents.insert(ty, s);
        }
        let mut local = raw.local;
        local.state_dir = base.join(&local.state_dir);
        if raw.files.max_file_bytes == 0 {
            return Err(invalid("files.max_file_bytes", "must be at least 1 (bytes)"));
        }
        raw.files.staging.check(raw.files.max_upload_bytes).map_err(|(k, m)| invalid(k, m))?;
        let days = raw.jobs.retention_days;
        if !(days.is_finite() && days > 0.0 && days <= 36_500.0) {
            return Err(invalid(
                "jobs.retention_days",
                "must be more than 0 and at most 36500 (days a finished job is kept)",
            ));
        }
        if !(1..=60).contains(&raw.worker.heartbeat) {
            return Err(invalid("worker.heartbeat", "must be 1 to 60 (seconds between worker heartbeats)"));
        }
        raw.tenants.check().map_err(|(k, m)| invalid(k, m))?;
        raw.telemetry.validate()?;
        raw.a2a.validate().map_err(|m| invalid("a2a", m))?;
        raw.agent_protocol.validate().map_err(|(k, m)| invalid(k, m))?;
        if let Some(ty) =
            raw.agent_protocol.subagents.iter().find(|t| !subagents.keys().any(|k| k.as_str() == t.as_str()))
        {
            let known: Vec<&str> = subagents.keys().map(SubagentType::as_str).collect();
            return Err(invalid(
                "agent_protocol.subagents",
                format!("{ty:?} is not a configured subagent type (the types: {})", known.join(", ")),
            ));
        }
        for nats in raw.agent_protocol.accounts.values_mut() {
            Self::validate_nats(nats, base)?;
        }
        if raw.a2a.enabled && raw.dashboard.listen.is_none() {
            return Err(invalid(
                "a2a.enabled",
                "the A2A server runs on the HTTP API's listener: set [dashboard] listen",
            ));
        }
        let mut mcp_servers = BTreeMap::new();
        for (name, server) in raw.mcp_servers {
            let s = crate::mcp::validate(&name, server, base).map_err(|p| invalid(p.key, p.message))?;
            mcp_servers.insert(name, s);
        }
        Ok(Settings {
            mcp_servers,
            source: path.map(Path::to_path_buf),
            nats: raw.nats,
            models,
            planner: raw.planner,
            subagents,
            local,
            prices,
            worker: raw.worker,
            metrics: raw.metrics,
            dashboard: raw.dashboard,
            files: raw.files,
            jobs: raw.jobs,
            tenants: raw.tenants,
            telemetry: raw.telemetry,
            a2a: raw.a2a,
            agent_protocol: raw.agent_protocol,
        })
    }

    fn validate_nats(nats: &mut NatsConfig, base: &Path) -> Result<(), ConfigError> {
        if !(1..=5).contains(&nats.replicas) {
            return Err(invalid("nats.replicas", "must be 1 to 5 (3 on a 3-node JetStream cluster)"));
        }
        let inbox_ok = !nats.inbox_prefix.is_empty()
            && nats.inbox_prefix.split('.').all(|t| !t.is_empty() && !t.contains(['*', '>', ' ']));
        if !inbox_ok {
            return Err(invalid("nats.inbox_prefix", "use dot-separated tokens without wildcards, e.g. _INBOX.worker"));
        }
        if nats.audit_retention_days == 0 {
            return Err(invalid("nats.audit_retention_days", "must be at least 1"));
        }
        nats.consumers.check().map_err(|(k, m)| invalid(k, m))?;
        nats.auth.validate(base)?;
        nats.tls.validate(base)
    }

    /// The model `name`, which validation guarantees exists when referenced.
    pub fn model(&self, name: &str) -> Result<&ModelSettings, ConfigError> {
        self.models.get(name).ok_or_else(|| invalid(format!("models.{name}"), "no such model"))
    }

    /// Whether model `name` is scripted: it counts every request in o200k
    /// tokens, so a process serving it builds the tokenizer at start.
    pub fn is_scripted(&self, name: &str) -> bool {
        matches!(self.models.get(name), Some(ModelSettings::Scripted { .. }))
    }

    /// The price of model `name`, when configured.
    pub fn price(&self, name: &str) -> Option<crate::Price> {
        self.prices.get(name).copied()
    }

    /// The planner section, or an error saying it is needed.
    pub fn planner(&self) -> Result<&PlannerConfig, ConfigError> {
        self.planner.as_ref().ok_or_else(|| {
            invalid("planner", "missing: the orchestrator needs a [planner] section (see docs/CONFIG.md)")
        })
    }
}

/// The checks of one `[subagents.<name>]` that need no other section.
/// The planner's context keys: positive, and a report summary smaller than
/// the context it enters.
fn check_context(context_tokens: u64, report_tokens: u64, prompt: &str) -> Result<(), ConfigError> {
    if context_tokens == 0 {
        return Err(invalid(
            "planner.context_tokens",
            "must be at least 1 (tokens the planner's model request may hold before older turns are compacted)",
        ));
    }
    if report_tokens == 0 || report_tokens >= context_tokens {
        return Err(invalid(
            "planner.report_tokens",
            format!("must be at least 1 and below planner.context_tokens ({context_tokens})"),
        ));
    }
    if prompt.trim().is_empty() {
        return Err(invalid(
            "planner.compaction_prompt",
            "must not be empty (the instructions of the compaction call)",
        ));
    }
    Ok(())
}

/// A type backed by a remote agent (docs/PROTOCOLS.md, "Remote subagent
/// types") runs no model loop in the worker: the keys only that loop reads
/// would be silently ignored, so they are refused.
fn check_remote(name: &str, s: &SubagentConfig) -> Result<(), ConfigError> {
    let loop_only = [
        ("tools", !s.tools.is_empty()),
        ("sandbox", s.sandbox.is_some()),
        ("interrupt_on", !s.interrupt_on.is_empty()),
        ("permissions", !s.permissions.is_empty()),
        ("mcp_resources", !s.mcp_resources.is_empty()),
        ("mcp_prompt", s.mcp_prompt.is_some()),
        ("stop_at_tools", !s.stop_at_tools.is_empty()),
        ("idempotent_tools", !s.idempotent_tools.is_empty()),
        ("output_schema", s.output_schema.is_some()),
        ("system_prompt", !s.system_prompt.is_empty()),
    ];
    if let Some((key, _)) = loop_only.iter().find(|(_, set)| *set) {
        return Err(invalid(
            format!("subagents.{name}.{key}"),
            "not available on a type backed by a remote agent (`agent` or `a2a`): the remote agent has its own \
             tools and prompt; remove the key or use `model`",
        ));
    }
    let token = |t: &str| !t.is_empty() && !t.contains(['.', '*', '>', ' ', '\t', '\n', '\r']);
    if let Some(a) = &s.agent {
        for (key, v) in [("name", &a.name), ("owner", &a.owner)] {
            if !token(v) {
                return Err(invalid(
                    format!("subagents.{name}.agent.{key}"),
                    format!("{v:?} is not one NATS subject token (non-empty, no dots, wildcards or spaces)"),
                ));
            }
        }
    }
    if let Some(a) = &s.a2a {
        let ok = url::Url::parse(&a.url).is_ok_and(|u| matches!(u.scheme(), "http" | "https") && u.has_host());
        if !ok {
            return Err(invalid(
                format!("subagents.{name}.a2a.url"),
                format!("{:?} is not an http(s) URL (the agent's base URL, e.g. https://agents.example/a2a)", a.url),
            ));
        }
    }
    Ok(())
}

fn check_subagent(name: &str, s: &SubagentConfig) -> Result<(), ConfigError> {
    if s.concurrency == 0 {
        return Err(invalid(format!("subagents.{name}.concurrency"), "must be at least 1"));
    }
    if s.max_steps == 0 {
        return Err(invalid(format!("subagents.{name}.max_steps"), "must be at least 1"));
    }
    if s.context_tokens == 0 {
        return Err(invalid(
            format!("subagents.{name}.context_tokens"),
            "must be at least 1 (tokens a task's model request may hold before older turns are compacted)",
        ));
    }
    for (tool, i) in &s.interrupt_on {
        if i.decisions.is_empty() {
            return Err(invalid(
                format!("subagents.{name}.interrupt_on.{tool}.decisions"),
                "list at least one of \"approve\", \"reject\", \"edit\"",
            ));
        }
    }
    if s.approval_timeout == 0 || (!s.interrupt_on.is_empty() && s.approval_timeout >= s.timeout) {
        return Err(invalid(
            format!("subagents.{name}.approval_timeout"),
            format!("must be at least 1 and below the task timeout ({}s)", s.timeout),
        ));
    }
    if s.sandbox.is_none() && s.tools.contains(&ToolRef::Execute) {
        return Err(invalid(
            format!("subagents.{name}.tools"),
            format!("\"execute\" needs a [subagents.{name}.sandbox] section (docs/SANDBOX.md)"),
        ));
    }
    if let Some(sb) = &s.sandbox
        && let Err((k, m)) = sb.check()
    {
        return Err(invalid(format!("subagents.{name}.sandbox.{k}"), m));
    }
    check_permissions(&format!("subagents.{name}"), &s.permissions, s.default_permission)?;
    Ok(())
}

/// Checks an agent's file permission rules, naming the failing rule's key.
fn check_permissions(
    section: &str,
    rules: &[crate::permissions::PermissionRule],
    default: crate::permissions::Mode,
) -> Result<(), ConfigError> {
    crate::permissions::Permissions::compile(rules, default)
        .map(|_| ())
        .map_err(|e| invalid(format!("{section}.permissions[{}]", e.rule), e.message))
}

#[cfg(test)]
mod tests;
