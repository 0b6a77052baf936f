//! `flotilla mcp serve`: Flotilla's job API as an MCP server, so an MCP host
//! (Claude Desktop, Cursor, an IDE, another agent) can hand a long job to the
//! fleet and follow it (docs/MCP.md, "Use Flotilla from an MCP host"). It is
//! a client of the job API (`flotilla-client`) like every CLI command, acting
//! for `--tenant`; it holds no state of its own, so any number can run. The
//! `flotilla` binary parses the flags ([`ServeArgs`]), connects, binds the
//! HTTP address and runs a [`Server`] on it (mini-redis style).
//!
//! A library so the binary only starts it: it must not depend on the
//! orchestrator library or the bus directly, only on the job-API client.
//!
//! One concept a file: the tools (`tools.rs`) and their schemas
//! (`schema.rs`), waiting with progress (`wait.rs`), job files as resources
//! (`resources.rs`), the tasks extension for `submit_job` (`tasks.rs`), and
//! the HTTP transport (`http.rs`, with its bearer token and DNS-rebinding
//! checks, or OAuth resource-server mode in `oauth.rs`); stdio (`--stdio`, for a host that starts the
//! command) is rmcp's own.
//!
//! Every MCP revision from 2024-11-05 to 2026-07-28 is served by the same
//! handler over both transports (docs/MCP.md, "Protocol revisions"): rmcp
//! does the 2026-07-28 lifecycle (`server/discover`, per-request `_meta`,
//! no session) and the `initialize` negotiation of older hosts; what is
//! this server's is which revisions it offers and what its answers carry
//! (`tools.rs`).

#![deny(missing_docs)]

mod dpop;
mod http;
mod oauth;
mod resources;
mod schema;
mod sessions;
mod tasks;
mod tools;
mod wait;

use std::future::Future;
use std::net::SocketAddr;

use clap::Args as ClapArgs;
use flotilla_client::Client;
use flotilla_protocol::ids::Tenant;
use rmcp::ServiceExt;

pub use tools::JobTools;

/// Serve the job API to MCP hosts (stdio or Streamable HTTP).
#[derive(ClapArgs, Debug)]
pub struct ServeArgs {
    /// Speak MCP on stdin/stdout (for a host that starts this command).
    #[arg(long, conflicts_with_all = ["listen", "token_env", "tenant_tokens", "allowed_hosts", "oauth_issuer", "header_timeout_secs", "max_connections"])]
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
    /// OAuth resource-server mode: the authorization server's issuer URL.
    /// HTTP clients then send its access tokens, checked by introspection
    /// (RFC 7662) for this resource, the scopes and the tenant claim.
    #[arg(long, value_name = "URL", requires = "oauth_resource", conflicts_with_all = ["token_env", "tenant_tokens"])]
    pub oauth_issuer: Option<String>,
    /// This server's resource identifier (RFC 8707, 9728): the URL hosts use
    /// for the endpoint, e.g. `https://mcp.example.com/mcp`. Tokens must be
    /// issued for it (`aud`).
    #[arg(long, value_name = "URL", requires = "oauth_issuer")]
    pub oauth_resource: Option<String>,
    /// The AS's token introspection endpoint; default: the
    /// `introspection_endpoint` of its metadata (RFC 8414).
    #[arg(long, value_name = "URL", requires = "oauth_issuer")]
    pub oauth_introspection_url: Option<String>,
    /// Environment variable holding this server's client id at the AS (for introspection).
    #[arg(long, value_name = "VAR", default_value = "FLOTILLA_MCP_OAUTH_CLIENT_ID")]
    pub oauth_client_id_env: String,
    /// Environment variable holding this server's client secret at the AS.
    #[arg(long, value_name = "VAR", default_value = "FLOTILLA_MCP_OAUTH_CLIENT_SECRET")]
    pub oauth_client_secret_env: String,
    /// A scope every token must carry (403 insufficient_scope otherwise); repeatable.
    #[arg(long = "oauth-scope", value_name = "SCOPE", requires = "oauth_issuer")]
    pub oauth_scopes: Vec<String>,
    /// The token claim naming the tenant a token acts for; a token without
    /// it is refused.
    #[arg(long, value_name = "CLAIM", default_value = "flotilla_tenant")]
    pub oauth_tenant_claim: String,
    /// A tenant tokens may act for besides `--tenant`; repeatable.
    #[arg(long = "oauth-tenant", value_name = "TENANT", requires = "oauth_issuer")]
    pub oauth_tenants: Vec<String>,
    /// Seconds an HTTP connection may take to send a request's headers, also
    /// the longest an idle keep-alive connection stays open.
    #[arg(long, value_name = "SECS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    pub header_timeout_secs: u64,
    /// HTTP connections open at once; one more is answered 503.
    #[arg(long, value_name = "N", default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_connections: u64,
}

/// A server whose setup has been checked (tokens read, the OAuth
/// authorization server's metadata fetched), ready to serve.
pub struct Server {
    args: ServeArgs,
    tenant: Tenant,
    /// The HTTP transport's access rules; `None` over stdio.
    guard: Option<http::Access>,
    oauth: Option<oauth::ResourceServer>,
}

impl Server {
    /// Checks `args` for `tenant` before anything connects, so a refused
    /// setup says why at once.
    pub async fn new(args: ServeArgs, tenant: &Tenant) -> anyhow::Result<Self> {
        let guard = if args.stdio { None } else { Some(http::Access::new(&args, tenant)?) };
        let oauth = oauth::ResourceServer::new(&args, tenant).await?;
        Ok(Self { args, tenant: tenant.clone(), guard, oauth })
    }

    /// The HTTP address to bind (`--listen`), or `None` over stdio.
    pub fn listen(&self) -> Option<SocketAddr> {
        self.guard.as_ref().map(|_| self.args.listen)
    }

    /// Serves the job API through `api` (uploads capped at `max_upload`
    /// bytes, `[files] max_upload_bytes`): over stdio until the host closes
    /// it, or, with the `listener` the binary bound on [`Server::listen`],
    /// over Streamable HTTP until `shutdown` completes.
    pub async fn run(
        self,
        api: Client,
        max_upload: u64,
        listener: Option<tokio::net::TcpListener>,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let tools = JobTools::new(api, max_upload);
        match (self.guard, listener) {
            (Some(access), Some(listener)) => {
                let limits = flotilla_http_serve::Limits {
                    header_timeout: std::time::Duration::from_secs(self.args.header_timeout_secs),
                    max_connections: usize::try_from(self.args.max_connections).unwrap_or(usize::MAX),
                    connections_key: "flotilla mcp serve --max-connections",
                };
                http::serve(tools, listener, access, self.oauth, &self.tenant, limits, shutdown).await
            }
            (Some(_), None) => anyhow::bail!("flotilla mcp serve over HTTP needs a bound listener"),
            (None, _) => {
                let service = tools.serve(rmcp::transport::stdio()).await.map_err(|e| {
                    anyhow::anyhow!(
                        "MCP over stdio: the host's first request (initialize, or a 2026-07-28 request) failed: {e}"
                    )
                })?;
                service.waiting().await.map_err(|e| anyhow::anyhow!("MCP over stdio ended abnormally: {e}"))?;
                Ok(())
            }
        }
    }
}
