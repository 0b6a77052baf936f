//! A streamed Messages API answer (`stream: true`): named server-sent events
//! (`message_start` with the prompt's token counts, `content_block_start`,
//! `content_block_delta` with `text_delta` or `input_json_delta` pieces,
//! `message_delta` with the `stop_reason` and the output count,
//! `message_stop`; `ping` in between). Text pieces go to the request's delta
//! sink as they arrive; tool inputs are put together from their JSON
//! pieces. An `error` event of kind `overloaded_error` or `api_error` is
//! retried like a 529; any other is final.

use reqwest::Response;
use serde::Deserialize;
use serde_json::Value;

use crate::http::Failure;
use crate::sse::{SseEvent, SseReader};
use crate::turn::Turn;
use flotilla_agent::model::{ModelRequest, ModelResponse};

use super::{AnthropicModel, WireBlock, WireUsage, error_text};

/// Reads the events of `response` into a response.
pub(crate) async fn read(
    model: &AnthropicModel,
    mut response: Response,
    request: ModelRequest<'_>,
    sent: &[u8],
) -> Result<ModelResponse, Failure> {
    let mut reader = SseReader::default();
    let mut state = Streamed::default();
    while !state.stopped
        && let Some(events) = model.http.events(&mut response, &mut reader).await?
    {
        for event in events {
            state.apply(model, event, &request).await?;
        }
    }
    if !state.started {
        return Err(model.http.malformed("the stream ended before message_start").into());
    }
    Ok(model.respond(state.turn, state.stop_reason.as_deref(), state.usage, sent)?)
}

/// What the stream has delivered so far.
#[derive(Default)]
struct Streamed {
    turn: Turn,
    usage: WireUsage,
    stop_reason: Option<String>,
    started: bool,
    stopped: bool,
}

impl Streamed {
    async fn apply(
        &mut self,
        model: &AnthropicModel,
        event: SseEvent,
        request: &ModelRequest<'_>,
    ) -> Result<(), Failure> {
        let data: StreamEvent = serde_json::from_str(&event.data).map_err(|e| model.http.malformed(e))?;
        match data {
            StreamEvent::MessageStart { message } => {
                self.started = true;
                self.usage.update(message.usage.unwrap_or_default());
            }
            StreamEvent::ContentBlockStart { index, content_block } => match content_block {
                WireBlock::Text { text } => self.text(&text, request).await,
                WireBlock::ToolUse { id, name, input } => {
                    let call = self.turn.call(index);
                    call.id = Some(id);
                    call.name = name;
                    call.value = Some(input);
                }
                WireBlock::Other => {}
            },
            StreamEvent::ContentBlockDelta { index, delta } => match delta {
                BlockDelta::TextDelta { text } => self.text(&text, request).await,
                BlockDelta::InputJsonDelta { partial_json } => self.turn.call(index).arguments.push_str(&partial_json),
                BlockDelta::Other => {}
            },
            StreamEvent::MessageDelta { delta, usage } => {
                self.stop_reason = delta.stop_reason.or(self.stop_reason.take());
                self.usage.update(usage.unwrap_or_default());
            }
            StreamEvent::MessageStop => self.stopped = true,
            StreamEvent::Error { error } => return Err(stream_error(model, &error)),
            StreamEvent::Other => {}
        }
        Ok(())
    }

    async fn text(&mut self, text: &str, request: &ModelRequest<'_>) {
        request.delta(text).await;
        self.turn.text.push_str(text);
    }
}

fn stream_error(model: &AnthropicModel, error: &Value) -> Failure {
    let message = format!("the stream ended in an error: {}", model.http.sanitize(&error_text(error)));
    match error.get("type").and_then(Value::as_str) {
        Some("overloaded_error" | "api_error") => Failure::Retryable { message, retry_after: None },
        _ => Failure::Final(model.http.malformed(message)),
    }
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum StreamEvent {
    MessageStart {
        message: StartMessage,
    },
    ContentBlockStart {
        index: u64,
        content_block: WireBlock,
    },
    ContentBlockDelta {
        index: u64,
        delta: BlockDelta,
    },
    MessageDelta {
        delta: MessageDelta,
        #[serde(default)]
        usage: Option<WireUsage>,
    },
    MessageStop,
    Error {
        error: Value,
    },
    /// `ping`, `content_block_stop` and kinds added later.
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
struct StartMessage {
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[allow(clippy::enum_variant_names)] // the API's names: text_delta, input_json_delta
enum BlockDelta {
    TextDelta {
        text: String,
    },
    InputJsonDelta {
        partial_json: String,
    },
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
struct MessageDelta {
    #[serde(default)]
    stop_reason: Option<String>,
}
