//! What a worker knows about each subagent type it serves, built once at start
//! from static config: the model client and the tool set. Tasks share these;
//! each task gets only a fresh conversation.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use flotilla_agent::agent::{ContextBudget, Limits, OutputSchema, ToolPolicy};
use flotilla_agent::model::ChatModel;
use flotilla_agent::tool::{Eviction, ToolSet};
use flotilla_config::permissions::Permissions;
use flotilla_config::{Settings, SubagentConfig};
use flotilla_job_files::JobFiles;
use flotilla_mcp::McpHub;
use flotilla_protocol::MAX_MESSAGE_BYTES;
use flotilla_protocol::ids::SubagentType;
use flotilla_tools::{self as builtin, FileToolEnv};
use tokio::sync::Semaphore;

use crate::approval::ApprovalPolicy;
use crate::sandbox::{ExecuteTool, Sandbox};
use crate::tools;

/// One served subagent type.
pub struct SubagentRuntime {
    /// The type.
    pub ty: SubagentType,
    /// Its static config.
    pub config: SubagentConfig,
    /// Its model client.
    pub model: Arc<dyn ChatModel>,
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
    pub fn build(settings: &Settings, ty: &SubagentType, files: &JobFiles, mcp: &Arc<McpHub>) -> anyhow::Result<Self> {
        let config = settings
            .subagents
            .get(ty)
            .with_context(|| {
                let known: Vec<_> = settings.subagents.keys().map(|k| k.to_string()).collect();
                format!("no [subagents.{ty}] in the config (configured: {})", known.join(", "))
            })?
            .clone();
        let model_settings = settings.model(&config.model)?;
        let model = flotilla_models::priced(
            flotilla_models::build(&config.model, model_settings)?,
            settings.price(&config.model),
        );
        let permissions = Permissions::compile(&config.permissions, config.default_permission).map_err(|e| {
            anyhow::anyhow!("invalid config key `subagents.{ty}.permissions[{}]`: {}", e.rule, e.message)
        })?;
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
        if let Some(unknown) = config.stop_at_tools.iter().find(|t| !tools.names().contains(t)) {
            anyhow::bail!(
                "invalid config key `subagents.{ty}.stop_at_tools`: no tool {unknown:?} in this type's tools \
                 (tools: {})",
                tools.names().join(", ")
            );
        }
        if let Some(max_bytes) = settings.files.large_result_bytes() {
            let exempt = builtin::READ_ONLY.iter().map(|s| s.to_string()).collect();
            tools.set_eviction(Eviction { files: files.clone(), max_bytes, exempt });
        }
        let report_budget = report_budget(settings.files.large_result_bytes());
        let mcp_context = crate::mcp_context::McpContext::build(ty.as_str(), &config, mcp)?;
        let output_schema = match &config.output_schema {
            Some(schema) => Some(Arc::new(OutputSchema::new(schema.clone()).map_err(|e| {
                anyhow::anyhow!("invalid config key `subagents.{ty}.output_schema`: not a JSON Schema: {e}")
            })?)),
            None => None,
        };
        Ok(Self {
            ty: ty.clone(),
            slots: Arc::new(Semaphore::new(config.concurrency)),
            config,
            model,
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
        ToolPolicy { stop_at_tools: self.config.stop_at_tools.clone(), loop_detection: self.config.loop_detection }
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

/// Bytes of answer a report may carry inline: the eviction threshold when set,
/// and never more than fits a message with room for the envelope (JSON
/// escaping can double a string, hence the half).
fn report_budget(large_result_bytes: Option<usize>) -> usize {
    let fits = MAX_MESSAGE_BYTES / 2 - 16 * 1024;
    large_result_bytes.map_or(fits, |b| b.min(fits))
}
