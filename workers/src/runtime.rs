//! What a worker knows about each subagent type it serves, built once at start
//! from static config: the model client and the tool set. Tasks share these;
//! each task gets only a fresh conversation.
//!
//! The checks of a type's config that only building its runtime would make
//! (`permissions`, `interrupt_on` decisions, `stop_at_tools`,
//! `output_schema`) are [`validate`], a pure function, so `flotilla config
//! check` makes the same ones before any worker starts.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use flotilla_agent::agent::{ContextBudget, Limits, OutputSchema, ToolPolicy};
use flotilla_agent::model::{ChatModel, ModelIdentity};
use flotilla_agent::remote::RemoteAgent;
use flotilla_agent::tool::{Eviction, ToolSet};
use flotilla_config::permissions::Permissions;
use flotilla_config::{Settings, SubagentConfig};
use flotilla_job_files::JobFiles;
use flotilla_mcp::McpHub;
use flotilla_protocol::MAX_MESSAGE_BYTES;
use flotilla_protocol::ids::SubagentType;
use flotilla_tools::{self as builtin, FileToolEnv};
use tokio::sync::Semaphore;

use flotilla_sandbox::{ExecuteTool, Sandbox};

use crate::approval::{self, ApprovalPolicy};
use crate::tools;

/// One served subagent type.
pub struct SubagentRuntime {
    /// The type.
    pub ty: SubagentType,
    /// Its static config.
    pub config: SubagentConfig,
    /// What runs its tasks: a model loop here, or an agent elsewhere.
    pub backend: Backend,
    /// The follow-up messages of its running tasks (inbox.rs).
    pub inboxes: crate::inbox::Inboxes,
    /// Its tools, and nothing else.
    pub tools: Arc<ToolSet>,
    /// Bounds tasks of this type in flight on this worker.
    pub slots: Arc<Semaphore>,
    /// The job files, where oversized reports go.
    pub files: JobFiles,
    /// Reports whose answer exceeds this many bytes travel by reference.
    pub report_budget: usize,
    /// Which calls wait for a person (`interrupt_on`), and for how long.
    pub approvals: Arc<ApprovalPolicy>,
    /// Where `execute` runs, when the type has a sandbox.
    pub sandbox: Option<Arc<Sandbox>>,
    /// MCP resources and prompt loaded into each task's system prompt.
    pub mcp_context: Option<crate::mcp_context::McpContext>,
    /// The schema every answer of this type must match (`output_schema`).
    pub output_schema: Option<Arc<OutputSchema>>,
}

impl SubagentRuntime {
    /// Builds the runtime of `ty` from `settings`.
    pub fn build(
        settings: &Settings,
        ty: &SubagentType,
        files: &JobFiles,
        mcp: &Arc<McpHub>,
        bus: &flotilla_bus::Bus,
    ) -> anyhow::Result<Self> {
        let config = settings
            .subagents
            .get(ty)
            .with_context(|| {
                let known: Vec<_> = settings.subagents.keys().map(|k| k.to_string()).collect();
                format!("no [subagents.{ty}] in the config (configured: {})", known.join(", "))
            })?
            .clone();
        let backend = match crate::remote::build(ty, &config, bus)? {
            Some(remote) => Backend::Remote(remote),
            None => Backend::Model(flotilla_models::priced(
                flotilla_models::build(&config.model, settings.model(&config.model)?)?,
                settings.price(&config.model),
            )),
        };
        let permissions = permissions(ty.as_str(), &config)?;
        let builtins = Arc::new(FileToolEnv { files: files.clone(), permissions });
        // `execute` comes with the sandbox, listed in `tools` or not; config
        // validation refuses it without one (shared/config/src/lib.rs).
        let mut tools =
            tools::build(ty.as_str(), &config.tools, Duration::from_secs(config.tool_timeout), &builtins, mcp)?;
        let sandbox = match &config.sandbox {
            Some(sb) => {
                let sandbox = Sandbox::start(ty.as_str(), sb)?;
                tools.add(Arc::new(ExecuteTool::new(sandbox.clone(), ty.clone(), builtins.clone())), "sandbox")?;
                Some(sandbox)
            }
            None => None,
        };
        let approvals = Arc::new(ApprovalPolicy::apply(ty.as_str(), &config, &mut tools)?);
        check_stop_at_tools(ty.as_str(), &config, &tools.names())?;
        if let Some(max_bytes) = settings.files.large_result_bytes() {
            let exempt = builtin::READ_ONLY.iter().map(|s| s.to_string()).collect();
            tools.set_eviction(Eviction { files: files.clone(), max_bytes, exempt });
        }
        let report_budget = report_budget(settings.files.large_result_bytes());
        let mcp_context = crate::mcp_context::McpContext::build(ty.as_str(), &config, mcp)?;
        let output_schema = output_schema(ty.as_str(), &config)?;
        Ok(Self {
            ty: ty.clone(),
            inboxes: crate::inbox::Inboxes::new(ty.clone()),
            slots: Arc::new(Semaphore::new(config.concurrency)),
            config,
            backend,
            tools: Arc::new(tools),
            files: files.clone(),
            report_budget,
            approvals,
            sandbox,
            mcp_context,
            output_schema,
        })
    }

    /// Stop-at tools and loop detection of this type's tasks.
    pub fn tool_policy(&self) -> ToolPolicy {
        ToolPolicy {
            stop_at_tools: self.config.stop_at_tools.clone(),
            loop_detection: self.config.loop_detection,
            idempotent_tools: self.config.idempotent_tools.clone(),
            ..ToolPolicy::default()
        }
    }

    /// The agent limits of one task.
    pub fn limits(&self) -> Limits {
        Limits {
            max_steps: self.config.max_steps,
            timeout: Duration::from_secs(self.config.timeout),
            max_tokens: self.config.max_tokens,
            context: Some(ContextBudget {
                tokens: self.config.context_tokens,
                prompt: flotilla_config::DEFAULT_COMPACTION_PROMPT.into(),
            }),
        }
    }
}

/// What runs a type's tasks.
#[derive(Clone)]
pub enum Backend {
    /// The agent loop in this worker, on this model (`model`).
    Model(Arc<dyn ChatModel>),
    /// An agent elsewhere, over an agent protocol (`agent`, `a2a`; docs/PROTOCOLS.md).
    Remote(Arc<dyn RemoteAgent>),
}

impl Backend {
    /// Provider and model, or protocol and remote agent, for spans and metrics.
    pub fn identity(&self) -> ModelIdentity<'_> {
        match self {
            Self::Model(m) => m.identity(),
            Self::Remote(r) => r.identity(),
        }
    }
}

/// A config key of a subagent type whose value cannot work, and why. Prints
/// as the worker reports it at start: `invalid config key <key>: <why>`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid config key `{key}`: {message}")]
pub struct InvalidKey {
    /// The key, e.g. `subagents.finance.stop_at_tools`.
    pub key: String,
    /// What is wrong with its value.
    pub message: String,
}

impl InvalidKey {
    /// The problem `message` of `key`.
    pub fn new(key: impl Into<String>, message: impl Into<String>) -> Self {
        Self { key: key.into(), message: message.into() }
    }
}

/// The checks a worker makes as it builds the runtime of type `ty`, short of
/// starting anything: its `permissions` compile, its `interrupt_on` rules
/// offer tool-call decisions, its `stop_at_tools` name tools it has (`tools`:
/// the names of its tool set, `execute` included when it has a sandbox) and
/// its `output_schema` is a JSON Schema. The first problem is returned.
pub fn validate(ty: &str, config: &SubagentConfig, tools: &[String]) -> Result<(), InvalidKey> {
    permissions(ty, config)?;
    approval::check_decisions(ty, config)?;
    check_stop_at_tools(ty, config, tools)?;
    output_schema(ty, config)?;
    Ok(())
}

/// The type's file permissions, compiled.
fn permissions(ty: &str, config: &SubagentConfig) -> Result<Permissions, InvalidKey> {
    Permissions::compile(&config.permissions, config.default_permission)
        .map_err(|e| InvalidKey::new(format!("subagents.{ty}.permissions[{}]", e.rule), e.message))
}

/// Every `stop_at_tools` and `idempotent_tools` entry names one of `tools`:
/// a typo would let a run go on past the tool meant to end it, or tell the
/// model a repeated call is harmless when the tool it meant is not.
fn check_stop_at_tools(ty: &str, config: &SubagentConfig, tools: &[String]) -> Result<(), InvalidKey> {
    for (key, names) in [("stop_at_tools", &config.stop_at_tools), ("idempotent_tools", &config.idempotent_tools)] {
        if let Some(unknown) = names.iter().find(|t| !tools.contains(t)) {
            return Err(InvalidKey::new(
                format!("subagents.{ty}.{key}"),
                format!("no tool {unknown:?} in this type's tools (tools: {})", tools.join(", ")),
            ));
        }
    }
    Ok(())
}

/// The type's `output_schema`, compiled.
fn output_schema(ty: &str, config: &SubagentConfig) -> Result<Option<Arc<OutputSchema>>, InvalidKey> {
    let Some(schema) = &config.output_schema else { return Ok(None) };
    let compiled = OutputSchema::new(schema.clone())
        .map_err(|e| InvalidKey::new(format!("subagents.{ty}.output_schema"), format!("not a JSON Schema: {e}")))?;
    Ok(Some(Arc::new(compiled)))
}

/// Bytes of answer a report may carry inline: the eviction threshold when set,
/// and never more than fits a message with room for the envelope (JSON
/// escaping can double a string, hence the half).
fn report_budget(large_result_bytes: Option<usize>) -> usize {
    let fits = MAX_MESSAGE_BYTES / 2 - 16 * 1024;
    large_result_bytes.map_or(fits, |b| b.min(fits))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(extra: &str) -> SubagentConfig {
        let text = format!("description = \"d\"\nmodel = \"m\"\ntools = [\"read_file\"]\n{extra}");
        toml::from_str(&text).expect("a subagent config")
    }

    fn tools() -> Vec<String> {
        vec!["read_file".into(), "execute".into()]
    }

    #[test]
    fn a_good_type_passes() {
        let c = config("stop_at_tools = [\"execute\"]\noutput_schema = { type = \"object\" }");
        assert_eq!(validate("t", &c, &tools()), Ok(()));
    }

    #[test]
    fn a_stop_at_tool_the_type_lacks_is_named_with_its_key() {
        let e = validate("t", &config("stop_at_tools = [\"submit\"]"), &tools()).unwrap_err();
        assert_eq!(e.key, "subagents.t.stop_at_tools");
        assert!(e.message.contains("\"submit\"") && e.message.contains("read_file, execute"), "{e}");
        assert!(e.to_string().starts_with("invalid config key `subagents.t.stop_at_tools`: "), "{e}");
    }

    #[test]
    fn an_output_schema_that_is_no_json_schema_is_named_with_its_key() {
        let e = validate("t", &config("output_schema = { type = 42 }"), &tools()).unwrap_err();
        assert_eq!(e.key, "subagents.t.output_schema");
        assert!(e.message.starts_with("not a JSON Schema"), "{e}");
    }

    #[test]
    fn an_elicitation_decision_on_a_tool_is_named_with_its_key() {
        let c = config("[interrupt_on.read_file]\ndecisions = [\"accept\"]");
        let e = validate("t", &c, &tools()).unwrap_err();
        assert_eq!(e.key, "subagents.t.interrupt_on.read_file.decisions");
    }
}
