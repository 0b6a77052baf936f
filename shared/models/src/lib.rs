//! Flotilla's model providers and [`build`], the one factory the binaries
//! call for every `[models.<name>]` entry (docs/MODELS.md):
//!
//! - [`openai`]: any OpenAI-compatible `/chat/completions` endpoint.
//! - [`anthropic`]: Anthropic's Messages API.
//! - `scripted`: deterministic turns from a file, for the demo and tests; the
//!   model itself is `flotilla_agent::model::scripted`, because the agent
//!   loop's own unit tests run on it.
//! - [`mod@priced`]: the cost stamp put around any of them when a price is set.
//!
//! The HTTP providers share [`http`] (client, retries, error mapping, secret
//! hygiene), [`sse`] (server-sent events) and [`turn`] (assembling a model
//! turn from streamed pieces).
//!
//! The `ChatModel` trait and the conversation types are the agent crate's;
//! this crate implements them. It must not depend on the bus, the MCP client
//! or the binaries: a provider knows HTTP and its wire format, nothing else.

#![deny(missing_docs)]

pub mod anthropic;
pub mod http;
pub mod openai;
pub mod priced;
pub mod probe;
pub mod sse;
#[cfg(test)]
mod test_server;
pub mod turn;

use std::sync::Arc;

use flotilla_agent::model::scripted::ScriptedModel;
use flotilla_agent::model::{ChatModel, ModelError};
use flotilla_config::ModelSettings;

pub use priced::{Price, priced};

/// Builds the model configured as `name`, whatever its provider: the
/// binaries' one place that knows every provider.
pub fn build(name: &str, settings: &ModelSettings) -> Result<Arc<dyn ChatModel>, ModelError> {
    Ok(match settings {
        ModelSettings::OpenAi { .. } => Arc::new(openai::OpenAiModel::new(name, settings)?),
        ModelSettings::Anthropic { .. } => Arc::new(anthropic::AnthropicModel::new(name, settings)?),
        ModelSettings::Scripted { script } => Arc::new(ScriptedModel::load(name, script)?),
    })
}
