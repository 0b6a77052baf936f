//! An MCP tool as a Flotilla [`Tool`]: the server's name, description and
//! input schema reach the model unchanged (only the name gets the optional
//! `<server>_` prefix); calls go through the server's [`ServerConn`] with the
//! call's idempotency key and traceparent in `_meta`.

use std::sync::Arc;

use async_trait::async_trait;
use rmcp::model::{JsonObject, RequestMetaObject};
use serde_json::Value;

use super::content;
use super::manager::{IDEMPOTENCY_META_KEY, ServerConn};
use flotilla_agent::tool::{Tool, ToolContext, ToolError, ToolSpec};

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
        match self.conn.call(&self.remote_name, arguments, meta).await {
            Ok(result) => content::to_outcome(result),
            Err(e) => (Err(ToolError::new(e.kind(), e.to_string())), None),
        }
    }
}
