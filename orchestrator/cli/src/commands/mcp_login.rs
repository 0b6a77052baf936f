//! `flotilla mcp login <server>`: a person signs in once to an MCP server
//! whose `[mcp_servers.<name>.oauth]` says `grant = "authorization_code"`,
//! and the credentials (with their refresh token) go to the NATS KV bucket
//! `<prefix>_mcp_tokens`, where workers load them: a worker never has a
//! browser (docs/MCP.md "OAuth").
//!
//! The flow is the session's own (shared/mcp/src/oauth/): connecting to the
//! server meets its 401, discovery finds the authorization server, and the
//! [`Authorizer`] installed here prints the authorization URL and waits for
//! the browser's redirect on the configured `redirect_uri`, which must be a
//! loopback `http` address (RFC 8252 section 7.3: nothing else on the
//! network can receive the code). The code is exchanged with PKCE, and
//! rmcp saves the credentials through [`StoredCredentialStores`]. What is
//! printed afterwards names server, client, scopes and expiry, never a token.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use axum::extract::State;
use axum::http::Uri;
use clap::Args as ClapArgs;
use flotilla_bus::{Bus, McpTokens};
use flotilla_bus_adapters::BusTokens;
use flotilla_config::mcp::OAuthGrant;
use flotilla_config::{McpTransport, Settings};
use flotilla_mcp::McpHub;
use flotilla_mcp::oauth::{Authorizer, StoredCredentialStores, StoredSummary, set_runtime};
use tokio::sync::oneshot;

use super::error::CliError;
use super::out::{self, outln};

/// Sign in to an `authorization_code` MCP server once and store the
/// credentials in NATS for the workers.
///
/// Prints the authorization URL: open it in a browser, sign in, and the
/// authorization server redirects to the server's `redirect_uri` (default
/// http://127.0.0.1:8976/callback), where this command listens. It then
/// stores the credentials in the KV bucket `<prefix>_mcp_tokens` (key: the
/// server name), replacing any earlier ones, and prints the granted scopes
/// and expiry. Workers renew the access token with the refresh token and
/// save the renewed one back. The NATS credential of the config must be
/// allowed to write the bucket (the orchestrator's in deploy/nats/roles.conf;
/// tenants' are not). Exit 2 when the server is not
/// `authorization_code`, the redirect URI is not loopback http, or nobody
/// signs in within --timeout.
#[derive(ClapArgs, Debug)]
pub struct LoginArgs {
    /// Server name (`[mcp_servers.<name>]` with `grant = "authorization_code"`).
    server: String,
    /// Seconds to wait for the browser's redirect.
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..=3600))]
    timeout: u64,
}

/// Runs the login; `json`: the result as one JSON object.
pub async fn run(settings: &Settings, args: LoginArgs, json: bool) -> anyhow::Result<i32> {
    let server = &args.server;
    let Some(entry) = settings.mcp_servers.get(server) else {
        let known: Vec<&str> = settings.mcp_servers.keys().map(String::as_str).collect();
        return Err(
            CliError::new("config", format!("no MCP server `{server}` in the config (configured: {known:?})")).into()
        );
    };
    let oauth = match &entry.transport {
        McpTransport::Http { oauth: Some(o), .. } if o.grant == OAuthGrant::AuthorizationCode => o,
        _ => {
            return Err(CliError::new(
                "config",
                format!(
                    "MCP server `{server}` does not use grant = \"authorization_code\" \
                     (mcp_servers.{server}.oauth.grant): only those need a person to sign in; \
                     the other grants authorize without `flotilla mcp login`"
                ),
            )
            .into());
        }
    };
    let redirect = reqwest::Url::parse(&oauth.redirect_uri)?;
    let addr = loopback(&redirect).ok_or_else(|| {
        CliError::new(
            "config",
            format!(
                "mcp_servers.{server}.oauth.redirect_uri must be http on a loopback address \
                 (http://127.0.0.1:<port>/<path>, http://localhost:..., http://[::1]:...), not `{redirect}`: \
                 this command receives the authorization code there"
            ),
        )
    })?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {addr} for the redirect to {redirect}: {e}"))?;

    let bus = Bus::connect(&settings.nats, "flotilla-cli", Duration::from_secs(5)).await?;
    let tokens = McpTokens::open(&bus).await?;
    // A name that cannot be a key, or a credential that may not read the
    // bucket, fails now rather than after the person signed in.
    tokens.get(server).await?;
    let tokens = Arc::new(BusTokens(tokens));
    let stores = StoredCredentialStores::new(tokens.clone(), [server.clone()]).for_login();
    let timeout = Duration::from_secs(args.timeout);
    let authorizer =
        Arc::new(Loopback { listener: Mutex::new(Some(listener)), redirect: redirect.clone(), timeout, json });
    set_runtime(Some(authorizer.clone()), Some(Arc::new(stores)));

    // The session's connect budget must cover the person's sign-in.
    let mut entry = entry.clone();
    entry.init_timeout += timeout;
    let hub = McpHub::new(&BTreeMap::from([(server.clone(), entry)]));
    let connected = async { hub.server(server)?.discover().await }.await;
    hub.shutdown().await;
    connected?;
    if authorizer.listener.lock().unwrap_or_else(|p| p.into_inner()).is_some() {
        // No sign-in took place, so a record in the bucket is an earlier one.
        anyhow::bail!(
            "MCP server `{server}` answered without asking for authorization (no 401 to `initialize`): \
             nothing to sign in to, nothing stored"
        );
    }

    let summary = StoredSummary::load(tokens.as_ref(), server)
        .await
        .map_err(anyhow::Error::msg)?
        .ok_or_else(|| anyhow::anyhow!("signed in, but no credentials were stored for `{server}`"))?;
    let bucket = bus.subjects.mcp_tokens_bucket();
    let expires = summary.expires_at.map(rfc3339);
    if json {
        out::json(&serde_json::json!({
            "server": server, "bucket": bucket, "client_id": summary.client_id, "scopes": summary.scopes,
            "expires_at": expires, "refresh_token": summary.refreshable,
        }))?;
    } else {
        outln!("Signed in to MCP server `{server}`; credentials stored in KV bucket {bucket} (key {server}).")?;
        outln!("  client: {}", summary.client_id)?;
        outln!("  scopes: {}", if summary.scopes.is_empty() { "(none)".into() } else { summary.scopes.join(" ") })?;
        outln!("  access token expires: {}", expires.as_deref().unwrap_or("(not said)"))?;
        if summary.refreshable {
            outln!("  refresh token: stored; workers renew the access token with it")?;
        } else {
            outln!("  refresh token: none; workers can use the server until the access token expires")?;
        }
    }
    Ok(0)
}

/// The socket address of a loopback `http` redirect URI.
fn loopback(uri: &reqwest::Url) -> Option<SocketAddr> {
    if uri.scheme() != "http" {
        return None;
    }
    let ip = match uri.host_str()? {
        "localhost" => IpAddr::V4(Ipv4Addr::LOCALHOST),
        host => host.trim_start_matches('[').trim_end_matches(']').parse().ok()?,
    };
    ip.is_loopback().then(|| SocketAddr::new(ip, uri.port_or_known_default().unwrap_or(80)))
}

fn rfc3339(unix: u64) -> String {
    time::OffsetDateTime::from_unix_timestamp(unix as i64)
        .ok()
        .and_then(|t| t.format(&time::format_description::well_known::Rfc3339).ok())
        .unwrap_or_else(|| unix.to_string())
}

/// Prints the authorization URL and takes the one redirect on the loopback listener.
struct Loopback {
    /// Taken by the first authorization (a login is one sign-in).
    listener: Mutex<Option<tokio::net::TcpListener>>,
    redirect: reqwest::Url,
    timeout: Duration,
    json: bool,
}

type Callback = Arc<Mutex<Option<oneshot::Sender<String>>>>;

#[async_trait]
impl Authorizer for Loopback {
    async fn authorize(&self, server: &str, url: &str) -> Result<String, String> {
        let listener = self
            .listener
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .ok_or("the server asked for a second sign-in in one login; run the command again")?;
        let (tx, rx) = oneshot::channel();
        let sender: Callback = Arc::new(Mutex::new(Some(tx)));
        let app = axum::Router::new().route(self.redirect.path(), axum::routing::get(callback)).with_state(sender);
        let serving = tokio::spawn(async move { axum::serve(listener, app).await });
        let secs = self.timeout.as_secs();
        // Under --json the URL goes to stderr, so stdout stays one JSON object.
        let prompt = format!(
            "Open this URL in a browser to sign in to MCP server `{server}`:\n{url}\n\
             Waiting up to {secs}s for the redirect to {} ...",
            self.redirect
        );
        if self.json {
            eprintln!("{prompt}");
        } else {
            outln!("{prompt}").map_err(|e| e.to_string())?;
        }
        let received = tokio::time::timeout(self.timeout, rx).await;
        serving.abort();
        let query = match received {
            Ok(Ok(query)) => query,
            Ok(Err(_)) => return Err("the callback listener stopped".into()),
            Err(_) => return Err(format!("nobody signed in within {secs}s (--timeout)")),
        };
        let mut redirect = self.redirect.clone();
        redirect.set_query(Some(&query));
        Ok(redirect.into())
    }
}

/// The redirect: hands its query (`code`, `state`, `iss`, or `error`) over once.
async fn callback(State(sender): State<Callback>, uri: Uri) -> &'static str {
    let Some(query) = uri.query().filter(|q| q.contains("code=") || q.contains("error=")) else {
        return "This address receives the sign-in redirect of `flotilla mcp login`.";
    };
    if let Some(tx) = sender.lock().unwrap_or_else(|p| p.into_inner()).take() {
        let _ = tx.send(query.to_string());
    }
    "Signed in: you can close this window; `flotilla mcp login` stores the credentials."
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_http_redirects_are_accepted() {
        let addr = |u: &str| loopback(&reqwest::Url::parse(u).unwrap()).map(|a| a.to_string());
        assert_eq!(addr("http://127.0.0.1:8976/callback").as_deref(), Some("127.0.0.1:8976"));
        assert_eq!(addr("http://localhost:9000/cb").as_deref(), Some("127.0.0.1:9000"));
        assert_eq!(addr("http://[::1]:9000/cb").as_deref(), Some("[::1]:9000"));
        assert_eq!(addr("http://127.0.0.1/cb").as_deref(), Some("127.0.0.1:80"));
        for refused in ["https://127.0.0.1:8976/cb", "http://10.0.0.5:8976/cb", "http://example.com/cb"] {
            assert_eq!(addr(refused), None, "{refused}");
        }
    }
}
