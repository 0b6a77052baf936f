//! The MCP face of the finance functions, written with rmcp's server macros.
//! Each tool only translates: arguments in, the pure function's result out as
//! text plus `structuredContent`, a business refusal out as `isError` with the
//! rule's text, which the calling model can read and
//! recover from.
//!
//! `sleep_ms`, `environment` and `confirm_transfer` are test aids, off unless
//! the server is started with `--test-tools`: they let tests hit a client
//! timeout, check that a stdio child sees only the environment its config
//! declares, and run an elicitation round trip (docs/APPROVALS.md,
//! "Elicitation").

use std::time::Duration;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolResult, ContentBlock, ErrorData, GetPromptRequestParams, GetPromptResponse, GetPromptResult,
    ListPromptsResult, ListResourcesResult, PaginatedRequestParams, PromptMessage, ReadResourceRequestParams,
    ReadResourceResponse, ReadResourceResult, ResourceContents, Role, ServerCapabilities, ServerConfig,
};
use rmcp::service::{Peer, RequestContext};
use rmcp::{RoleServer, ServerHandler, tool, tool_handler, tool_router};
use serde::Deserialize;
use serde_json::json;

/// Arguments of `gross_margin`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct MarginArgs {
    /// Revenue of the period; must be greater than zero.
    pub revenue: f64,
    /// Cost of goods sold in the period.
    pub cost: f64,
}

/// Arguments of `add` and `multiply`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct PairArgs {
    /// First integer.
    pub a: i64,
    /// Second integer.
    pub b: i64,
}

/// Arguments of the `sleep_ms` test aid.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct SleepArgs {
    /// Milliseconds to sleep before answering.
    pub ms: u64,
}

/// Arguments of the `confirm_transfer` test aid.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct TransferArgs {
    /// Amount to transfer.
    pub amount: i64,
    /// Recipient.
    pub to: String,
}

/// The finance MCP server.
#[derive(Clone)]
pub struct FinanceTools {
    tool_router: ToolRouter<Self>,
}

/// Tools that exist only with `--test-tools`.
pub const TEST_TOOLS: &[&str] = &["sleep_ms", "environment", "confirm_transfer"];

impl FinanceTools {
    /// The server; `test_tools` adds the [`TEST_TOOLS`].
    pub fn new(test_tools: bool) -> Self {
        let mut tool_router = Self::tool_router();
        if !test_tools {
            for name in TEST_TOOLS {
                tool_router.remove_route(name);
            }
        }
        Self { tool_router }
    }
}

fn ok_number(value: serde_json::Value) -> CallToolResult {
    let mut r = CallToolResult::success(vec![ContentBlock::text(value.to_string())]);
    r.structured_content = Some(json!({ "result": value }));
    r
}

fn refused(message: String, code: &str) -> CallToolResult {
    let mut r = CallToolResult::error(vec![ContentBlock::text(message.clone())]);
    r.structured_content = Some(json!({ "error": { "code": code, "message": message } }));
    r
}

#[tool_router]
impl FinanceTools {
    /// Gross margin `(revenue - cost) / revenue`, rounded to 4 decimals.
    #[tool(
        description = "Calculate gross margin (revenue - cost) / revenue, rounded to 4 decimals. \
                       Revenue must be greater than zero.",
        annotations(read_only_hint = true)
    )]
    fn gross_margin(&self, Parameters(MarginArgs { revenue, cost }): Parameters<MarginArgs>) -> CallToolResult {
        match crate::gross_margin(revenue, cost) {
            Ok(m) => ok_number(json!(m)),
            Err(e) => refused(e.to_string(), "non_positive_revenue"),
        }
    }

    /// `a + b`.
    #[tool(description = "Add two integers exactly.")]
    fn add(&self, Parameters(PairArgs { a, b }): Parameters<PairArgs>) -> CallToolResult {
        match crate::add(a, b) {
            Ok(v) => ok_number(json!(v)),
            Err(e) => refused(e.to_string(), "overflow"),
        }
    }

    /// `a * b`.
    #[tool(description = "Multiply two integers exactly.")]
    fn multiply(&self, Parameters(PairArgs { a, b }): Parameters<PairArgs>) -> CallToolResult {
        match crate::multiply(a, b) {
            Ok(v) => ok_number(json!(v)),
            Err(e) => refused(e.to_string(), "overflow"),
        }
    }

    /// Test aid: answers after `ms` milliseconds.
    #[tool(description = "Test aid: sleep for ms milliseconds, then answer.")]
    async fn sleep_ms(&self, Parameters(SleepArgs { ms }): Parameters<SleepArgs>) -> CallToolResult {
        tokio::time::sleep(Duration::from_millis(ms)).await;
        CallToolResult::success(vec![ContentBlock::text(format!("slept {ms} ms"))])
    }

    /// Test aid: the server's environment variables.
    #[tool(description = "Test aid: report this server's environment variables.")]
    fn environment(&self) -> CallToolResult {
        let vars: serde_json::Map<String, serde_json::Value> =
            std::env::vars().map(|(k, v)| (k, serde_json::Value::String(v))).collect();
        let names: Vec<&String> = vars.keys().collect();
        let mut r = CallToolResult::success(vec![ContentBlock::text(json!(names).to_string())]);
        r.structured_content = Some(serde_json::Value::Object(vars));
        r
    }

    /// Test aid: asks the client (elicitation) to confirm, then reports the
    /// client's answer as given: action and content.
    #[tool(description = "Test aid: ask a person to confirm a transfer, then report their answer.")]
    async fn confirm_transfer(
        &self,
        peer: Peer<RoleServer>,
        Parameters(TransferArgs { amount, to }): Parameters<TransferArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let params = serde_json::from_value(json!({
            "mode": "form",
            "message": format!("Transfer {amount} to {to}?"),
            "requestedSchema": {
                "type": "object",
                "properties": {
                    "approve": {"type": "boolean", "description": "Whether to transfer"},
                    "note": {"type": "string", "default": "none"}
                },
                "required": ["approve"]
            }
        }))
        .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        let answer = peer
            .create_elicitation(params)
            .await
            .map_err(|e| ErrorData::internal_error(format!("elicitation failed: {e}"), None))?;
        let got = json!({"action": answer.action, "content": answer.content});
        let mut r = CallToolResult::success(vec![ContentBlock::text(got.to_string())]);
        r.structured_content = Some(got);
        Ok(r)
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for FinanceTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_prompts().enable_resources().enable_tools().build())
    }

    /// Up to 2025-11-25: `confirm_payment` asks its question as a
    /// server-to-client elicitation request, which 2026-07-28 no longer
    /// allows, so a 2026-07-28 client negotiates down to this server (as it
    /// does to any 2025 peer, docs/MCP.md).
    fn supported_protocol_versions(&self) -> std::borrow::Cow<'static, [rmcp::model::ProtocolVersion]> {
        std::borrow::Cow::Borrowed(rmcp::model::ProtocolVersion::known_up_to(
            &rmcp::model::ProtocolVersion::V_2025_11_25,
        ))
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        Ok(ListResourcesResult::with_all_items(crate::context::resources()))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let text = crate::context::read(&request.uri)
            .ok_or_else(|| ErrorData::resource_not_found(format!("no resource {:?}", request.uri), None))?;
        Ok(ReadResourceResult::new(vec![ResourceContents::text(text, request.uri)]).into())
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        Ok(ListPromptsResult::with_all_items(crate::context::prompts()))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let args = request.arguments.unwrap_or_default();
        let text = crate::context::render_prompt(&request.name, &args)
            .map_err(|e| ErrorData::invalid_params(e.to_string(), None))?;
        let mut r = GetPromptResult::new(vec![PromptMessage::new_text(Role::User, text)]);
        r.description = Some("System prompt of a finance analyst subagent".into());
        Ok(r.into())
    }
}
