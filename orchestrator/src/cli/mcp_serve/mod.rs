//! `flotilla mcp serve`: Flotilla's job API as an MCP server, so an MCP host
//! (Claude Desktop, Cursor, an IDE, another agent) can hand a long job to the
//! fleet and follow it (docs/MCP.md, "Use Flotilla from an MCP host"). It is
//! a client of the job API over the bus like every other CLI command, acting
//! for `--tenant`; it holds no state of its own, so any number can run.
//!
//! One concept a file: the tools (`tools.rs`) and their schemas
//! (`schema.rs`), waiting with progress (`wait.rs`), job files as resources
//! (`resources.rs`), and the HTTP transport (`http.rs`, with its bearer token
//! and DNS-rebinding checks); stdio (`--stdio`, for a host that starts the
//! command) is rmcp's own.

mod http;
mod resources;
mod schema;
mod tasks;
mod tools;
mod wait;

use std::net::SocketAddr;

use clap::Args as ClapArgs;
use flotilla_config::Settings;
use flotilla_protocol::ids::Tenant;
use rmcp::ServiceExt;

pub use tools::JobTools;

/// Serve the job API to MCP hosts (stdio or Streamable HTTP).
#[derive(ClapArgs, Debug)]
pub struct ServeArgs {
    /// Speak MCP on stdin/stdout (for a host that starts this command).
    #[arg(long, conflicts_with_all = ["listen", "token_env", "tenant_tokens", "allowed_hosts"])]
    pub stdio: bool,
    /// Streamable HTTP address; the endpoint is `/mcp`.
    #[arg(long, default_value = "127.0.0.1:8765")]
    pub listen: SocketAddr,
    /// Environment variable holding the bearer token HTTP clients must send
    /// (`Authorization: Bearer <token>`), acting for `--tenant`; a token
    /// is required off loopback.
    #[arg(long, value_name = "VAR")]
    pub token_env: Option<String>,
    /// A token that acts for another tenant: `TENANT=VAR`, VAR holding the
    /// token; repeatable. The token decides the tenant, not the request.
    #[arg(long = "tenant-token", value_name = "TENANT=VAR")]
    pub tenant_tokens: Vec<String>,
    /// A host name (or `host:port`) the HTTP server also answers to, besides
    /// loopback names and the listen address; repeatable.
    #[arg(long = "allowed-host", value_name = "HOST")]
    pub allowed_hosts: Vec<String>,
}

/// Runs until the transport closes (stdio) or Ctrl-C / SIGTERM (HTTP).
pub async fn run(settings: &Settings, tenant: &Tenant, args: ServeArgs) -> anyhow::Result<i32> {
    // Checked before connecting, so a refused setup says why at once.
    let guard = if args.stdio { None } else { Some(http::Access::new(&args, tenant)?) };
    let api = super::connect(settings, tenant).await?;
    let tools = JobTools::new(api, settings.files.max_upload_bytes);
    match guard {
        None => {
            let service = tools
                .serve(rmcp::transport::stdio())
                .await
                .map_err(|e| anyhow::anyhow!("MCP over stdio: the host's initialize failed: {e}"))?;
            service.waiting().await.map_err(|e| anyhow::anyhow!("MCP over stdio ended abnormally: {e}"))?;
        }
        Some(access) => http::serve(tools, args.listen, access, tenant).await?,
    }
    Ok(0)
}
