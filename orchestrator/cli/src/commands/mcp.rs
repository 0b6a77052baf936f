//! `flotilla mcp`: layered debugging of MCP servers without a model
//! (docs/MCP.md). Uses the same config (and `--mcp-config`) as the
//! workers, so what works here works for a subagent:
//!
//! - `flotilla mcp tools <server>`: names, descriptions and input schemas as
//!   the server lists them, and which the config lists in `read_only_tools`
//!   (add `--json` for `{"tools": [...]}`, the shape of MCP's tools/list
//!   result);
//! - `flotilla mcp call <server> <tool> '<json args>'`: the raw result
//!   (content, isError, structuredContent); exit code 1 when isError, 2 when
//!   the server could not be reached or refused the request;
//! - `flotilla mcp health`: connect to every configured server and report
//!   (`{"servers": [...]}`);
//! - `flotilla mcp login <server>`: sign in once to an `authorization_code`
//!   server and store the credentials for the workers (src/commands/mcp_login.rs);
//! - `flotilla mcp serve`: the other way round, Flotilla's job API as an MCP
//!   server for MCP hosts (the `flotilla-mcp-server` crate).
//!
//! `call` and `health` print JSON either way: indented for a person, one
//! line under `--json` (docs/OPERATIONS.md, "Scripting with --json").

use super::out::{self, outln};
use clap::{Args as ClapArgs, Subcommand};
use flotilla_config::Settings;
use flotilla_mcp::McpHub;
use flotilla_protocol::ids::Tenant;
use rmcp::model::RequestMetaObject;
use serde_json::Value;

/// Inspect and call MCP servers from the config.
#[derive(ClapArgs, Debug)]
pub struct Args {
    #[command(subcommand)]
    command: McpCommand,
}

impl Args {
    /// Whether this is `flotilla mcp serve`, a service that exports traces.
    pub fn serves(&self) -> bool {
        matches!(self.command, McpCommand::Serve(_))
    }
}

#[derive(Subcommand, Debug)]
enum McpCommand {
    /// List a server's tools: names, descriptions, input schemas.
    Tools {
        /// Server name (`[mcp_servers.<name>]` or an imported `mcpServers` entry).
        server: String,
    },
    /// Call one tool and print the raw result; exit 1 on isError.
    Call {
        /// Server name.
        server: String,
        /// Tool name as the server knows it (no prefix).
        tool: String,
        /// Arguments as a JSON object.
        #[arg(default_value = "{}")]
        args: String,
    },
    /// Connect to every configured server; print its health as JSON.
    Health,
    // Its help is LoginArgs' doc comment (src/commands/mcp_login.rs).
    Login(super::mcp_login::LoginArgs),
    /// Serve this tenant's job API as an MCP server (stdio or Streamable HTTP at /mcp).
    Serve(Box<flotilla_mcp_server::ServeArgs>),
}

/// Runs the subcommand; `json`: one JSON object on one line.
pub async fn run(settings: &Settings, tenant: &Tenant, args: Args, json: bool) -> anyhow::Result<i32> {
    let args = match args.command {
        McpCommand::Serve(serve) => return serve_mcp(settings, tenant, *serve).await,
        McpCommand::Login(login) => return super::mcp_login::run(settings, login, json).await,
        command => command,
    };
    let hub = McpHub::new(&settings.mcp_servers);
    let print = |value: &Value| -> anyhow::Result<()> {
        if json { out::json(value) } else { Ok(outln!("{}", serde_json::to_string_pretty(value)?)?) }
    };
    let code = match args {
        McpCommand::Tools { server } => {
            let conn = hub.server(&server)?;
            conn.discover().await?;
            let tools = conn.tools().unwrap_or_default();
            if json {
                out::json(&serde_json::json!({ "tools": tools }))?;
            } else {
                for t in &tools {
                    let exposed =
                        if conn.settings.prefix { format!("{server}_{}", t.name) } else { t.name.to_string() };
                    let listed = conn.settings.read_only_tools.contains(t.name.as_ref());
                    let read_only = if listed { "  read-only: listed in read_only_tools" } else { "" };
                    outln!("{}  (model sees: {exposed}){read_only}", t.name)?;
                    if let Some(d) = &t.description {
                        outln!("  {d}")?;
                    }
                    outln!("  input schema: {}", Value::Object((*t.input_schema).clone()))?;
                }
                if tools.is_empty() {
                    outln!("(no tools)")?;
                }
            }
            0
        }
        McpCommand::Call { server, tool, args } => {
            let arguments: Value =
                serde_json::from_str(&args).map_err(|e| anyhow::anyhow!("arguments are not valid JSON: {e}"))?;
            let Value::Object(arguments) = arguments else {
                anyhow::bail!("arguments must be a JSON object, e.g. '{{\"a\": 1}}'");
            };
            let conn = hub.server(&server)?;
            let result = conn.call(&tool, arguments, RequestMetaObject::new()).await?;
            print(&serde_json::to_value(&result)?)?;
            if result.is_error == Some(true) { 1 } else { 0 }
        }
        McpCommand::Serve(_) | McpCommand::Login(_) => unreachable!("run above"),
        McpCommand::Health => {
            let names = settings.mcp_servers.keys().cloned().collect();
            let results = hub.discover(&names).await;
            print(&serde_json::json!({ "servers": hub.health() }))?;
            if results.iter().all(|(_, r)| r.is_ok()) { 0 } else { 1 }
        }
    };
    hub.shutdown().await;
    Ok(code)
}

/// `flotilla mcp serve`: checks the server's setup, connects, binds its
/// HTTP address (none over stdio) and runs it (the `flotilla-mcp-server`
/// crate) until the transport closes or Ctrl-C / SIGTERM.
async fn serve_mcp(settings: &Settings, tenant: &Tenant, args: flotilla_mcp_server::ServeArgs) -> anyhow::Result<i32> {
    let server = flotilla_mcp_server::Server::new(args, tenant).await?;
    let api = super::connect(settings, tenant).await?;
    let listener = match server.listen() {
        Some(listen) => Some(
            tokio::net::TcpListener::bind(listen)
                .await
                .map_err(|e| anyhow::anyhow!("cannot listen on {listen}: {e} (pick another with --listen)"))?,
        ),
        None => None,
    };
    server.run(api, settings.files.max_upload_bytes, listener, crate::shutdown_signal()).await?;
    Ok(0)
}
