//! A worker never has a browser: for MCP servers with `grant =
//! "authorization_code"` it uses the credentials a person stored with
//! `flotilla mcp login <server>` in the KV bucket `<prefix>_mcp_tokens`, and
//! saves the tokens it refreshes back there for the other workers
//! (docs/MCP.md "OAuth"; the per-server read/update permission is in
//! deploy/nats/roles.conf).

use std::sync::Arc;

use anyhow::Context;
use flotilla_bus::{Bus, McpTokens};
use flotilla_config::mcp::OAuthGrant;
use flotilla_config::{McpTransport, Settings};
use flotilla_mcp::oauth::{StoredCredentialStores, set_runtime};

use flotilla_bus_adapters::BusTokens;

/// Installs the KV-backed credential stores of the config's
/// `authorization_code` servers, before any session opens. Nothing to do
/// (and no bucket opened) when there are none.
pub async fn install(bus: &Bus, settings: &Settings) -> anyhow::Result<()> {
    let servers: Vec<String> = settings
        .mcp_servers
        .values()
        .filter(|s| {
            matches!(&s.transport, McpTransport::Http { oauth: Some(o), .. } if o.grant == OAuthGrant::AuthorizationCode)
        })
        .map(|s| s.name.clone())
        .collect();
    if servers.is_empty() {
        return Ok(());
    }
    let tokens = McpTokens::open(bus).await.context("cannot open the bucket of `flotilla mcp login` credentials")?;
    set_runtime(None, Some(Arc::new(StoredCredentialStores::new(Arc::new(BusTokens(tokens)), servers))));
    Ok(())
}
