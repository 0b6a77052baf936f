//! What a worker knows about each subagent type it serves, built once at start
//! from static config: the model client and the tool set. Tasks share these;
//! each task gets only a fresh conversation.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use flotilla_shared::agent::Limits;
use flotilla_shared::config::{Settings, SubagentConfig};
use flotilla_shared::ids::SubagentType;
use flotilla_shared::model::{self, ChatModel};
use flotilla_shared::tool::ToolSet;
use tokio::sync::Semaphore;

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
}

impl SubagentRuntime {
    /// Builds the runtime of `ty` from `settings`.
    pub fn build(settings: &Settings, ty: &SubagentType) -> anyhow::Result<Self> {
        let config = settings
            .subagents
            .get(ty)
            .with_context(|| {
                let known: Vec<_> = settings.subagents.keys().map(|k| k.to_string()).collect();
                format!("no [subagents.{ty}] in the config (configured: {})", known.join(", "))
            })?
            .clone();
        let model_settings = settings.model(&config.model)?;
        let model = model::build(&config.model, model_settings)?;
        let tools = tools::build(ty.as_str(), &config.tools, Duration::from_secs(config.tool_timeout))?;
        Ok(Self {
            ty: ty.clone(),
            slots: Arc::new(Semaphore::new(config.concurrency)),
            config,
            model,
            tools: Arc::new(tools),
        })
    }

    /// The agent limits of one task.
    pub fn limits(&self) -> Limits {
        Limits { max_steps: self.config.max_steps, timeout: Duration::from_secs(self.config.timeout), max_tokens: None }
    }
}
