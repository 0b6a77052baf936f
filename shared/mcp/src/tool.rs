//! An MCP tool as a Flotilla [`Tool`]: the server's name, description and
//! input schema reach the model unchanged (only the name gets the optional
//! `<server>_` prefix); calls go through the server's [`ServerConn`] with the
//! call's idempotency key and traceparent in `_meta`. A server's
//! elicitation during the call goes to the call's approval gate
//! (docs/APPROVALS.md, "Elicitation").

use std::sync::Arc;

use async_trait::async_trait;
use rmcp::model::{JsonObject, RequestMetaObject};
use serde_json::Value;

use super::content;
use super::elicitation::{Elicitation, Responder};
use super::manager::{IDEMPOTENCY_META_KEY, ServerConn};
use flotilla_agent::tool::{ElicitationAnswer, ElicitationAsk, Tool, ToolContext, ToolError, ToolSpec};
use rmcp::model::{ElicitResult, ElicitationAction};

/// One discovered MCP tool.
pub struct McpTool {
    conn: Arc<ServerConn>,
    remote_name: String,
    spec: ToolSpec,
}

impl McpTool {
    /// Wraps `tool` of the server behind `conn`.
    pub fn new(conn: Arc<ServerConn>, tool: &rmcp::model::Tool) -> Self {
        let remote_name = tool.name.to_string();
        let name =
            if conn.settings.prefix { format!("{}_{remote_name}", conn.settings.name) } else { remote_name.clone() };
        let spec = ToolSpec {
            name,
            description: tool.description.as_deref().unwrap_or_default().to_string(),
            input_schema: Value::Object((*tool.input_schema).clone()),
        };
        Self { conn, remote_name, spec }
    }

    /// The tool's name on its server.
    pub fn remote_name(&self) -> &str {
        &self.remote_name
    }
}

#[async_trait]
impl Tool for McpTool {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    /// Only when the operator listed it in the server's `read_only_tools`;
    /// the server's own `readOnlyHint` is its claim, not the operator's.
    fn read_only(&self) -> bool {
        self.conn.settings.read_only_tools.contains(&self.remote_name)
    }

    async fn call(&self, ctx: &ToolContext, args: Value) -> Result<Value, ToolError> {
        self.call_with_artifact(ctx, args).await.0
    }

    async fn call_with_artifact(&self, ctx: &ToolContext, args: Value) -> (Result<Value, ToolError>, Option<Value>) {
        let arguments: JsonObject = match args {
            Value::Object(o) => o,
            other => return (Err(ToolError::validation(format!("arguments must be an object, got {other}"))), None),
        };
        let mut meta = RequestMetaObject::new();
        meta.0.0.insert(IDEMPOTENCY_META_KEY.into(), Value::String(ctx.idempotency_key.clone()));
        if let Some(tp) = &ctx.traceparent {
            meta.0.0.insert("traceparent".into(), Value::String(tp.clone()));
        }
        let responder: Arc<dyn Responder> = Arc::new(CallResponder {
            ctx: ctx.clone(),
            tool: self.spec.name.clone(),
            args: Value::Object(arguments.clone()),
        });
        match self.conn.call_with(&self.remote_name, arguments, meta, Some(responder)).await {
            Ok(result) => content::to_outcome(result),
            Err(e) => (Err(ToolError::new(e.kind(), e.to_string())), None),
        }
    }
}

/// Answers the elicitations of one call through the call's approval gate; a
/// cancelled task or job cancels the question.
struct CallResponder {
    ctx: ToolContext,
    /// The final tool name and the call's arguments, shown to the person.
    tool: String,
    args: Value,
}

#[async_trait]
impl Responder for CallResponder {
    async fn respond(&self, e: Elicitation) -> ElicitResult {
        let ctx = &self.ctx;
        let Some(gate) = &ctx.approvals else {
            tracing::warn!(tool = %self.tool, call_id = %ctx.call_id, server = %e.server, "no approval gate; elicitation declined");
            return ElicitResult::new(ElicitationAction::Decline);
        };
        let ask = ElicitationAsk { server: e.server, message: e.message, requested_schema: e.requested_schema };
        let answer = tokio::select! {
            v = gate.elicit(ctx, &self.tool, &self.args, &ask) => v.answer,
            _ = ctx.cancel.cancelled() => {
                tracing::info!(tool = %self.tool, call_id = %ctx.call_id, "elicitation cancelled with its task");
                ElicitationAnswer::Cancel
            }
        };
        match answer {
            ElicitationAnswer::Accept(content) => ElicitResult::new(ElicitationAction::Accept).with_content(content),
            ElicitationAnswer::Decline => ElicitResult::new(ElicitationAction::Decline),
            ElicitationAnswer::Cancel => ElicitResult::new(ElicitationAction::Cancel),
        }
    }
}
