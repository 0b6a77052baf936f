//! OpenAI-compatible `/chat/completions` provider (stub, being written).

use async_trait::async_trait;

use super::{ChatModel, ModelError, ModelRequest, ModelResponse};
use crate::config::ModelSettings;
use crate::protocol::ErrorKind;

/// A model behind an OpenAI-compatible endpoint.
pub struct OpenAiModel {
    name: String,
}

impl OpenAiModel {
    /// Builds the client from `[models.<name>]`.
    pub fn new(name: &str, _settings: &ModelSettings) -> Result<Self, ModelError> {
        Ok(Self { name: name.into() })
    }
}

#[async_trait]
impl ChatModel for OpenAiModel {
    async fn complete(&self, _request: ModelRequest<'_>) -> Result<ModelResponse, ModelError> {
        Err(ModelError { kind: ErrorKind::Bug, model: self.name.clone(), message: "not implemented".into() })
    }
}
