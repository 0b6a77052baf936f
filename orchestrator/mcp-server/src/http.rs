//! Streamable HTTP for `flotilla mcp serve`: rmcp's service at `/mcp` behind
//! three checks (docs/MCP.md, "Use Flotilla from an MCP host"):
//!
//! 1. The bearer token, when `--token-env VAR` names one: every request must
//!    send `Authorization: Bearer <token>` or gets 401 with
//!    `WWW-Authenticate: Bearer`. Digests are compared in constant time, as
//!    the dashboard does (orchestrator/dashboard/src/guard.rs). With `--oauth-issuer`
//!    the AS's access tokens are checked instead (src/oauth.rs).
//!    Without either the server only starts on a loopback address, since
//!    whoever reaches it can submit and cancel this tenant's jobs.
//! 2. DNS rebinding: rmcp answers only requests whose `Host` is a loopback
//!    name, the listen address or an `--allowed-host` (403 otherwise), and
//!    whose `Origin`, when a browser sends one, names one of those hosts over
//!    http or https (the same rule as the dashboard's Host check).
//! 3. A session belongs to the credential that opened it
//!    (src/sessions.rs).
//!
//! The token (or OAuth) check and the session binding are axum layers in
//! front of rmcp's service, and rmcp's Host and Origin checks come first in
//! its handler, so all of them hold for every request to `/mcp` whatever
//! its revision: a stateless 2026-07-28 request, which has no session and
//! no `initialize` before it, is checked exactly as a request of a 2025
//! session is, and the tools act for the tenant of its own credential.

use std::future::Future;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use flotilla_protocol::digest::sha256_hex;
use flotilla_protocol::ids::Tenant;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};

use super::oauth::ResourceServer;
use super::sessions::{Owner, Sessions};
use super::{JobTools, ServeArgs};

/// Names every server answers to.
const LOOPBACK_NAMES: &[&str] = &["localhost", "127.0.0.1", "::1"];
/// Shortest token accepted: shorter ones can be guessed online.
const MIN_TOKEN_LEN: usize = 16;

/// The tenant a request's token stands for, put in the request's extensions
/// for the tools to act as (src/tools.rs `JobTools::api`).
#[derive(Clone, Debug)]
pub struct Caller(pub Tenant);

/// Who may call, fixed at start.
#[derive(Clone, Debug)]
pub struct Access {
    /// SHA-256 of each token, with the tenant it acts for. Empty: no token
    /// (loopback only), every request acts for `--tenant`.
    tokens: Vec<(String, Tenant)>,
    /// Host names (or `host:port`) accepted in `Host` and `Origin`.
    hosts: Vec<String>,
}

impl Access {
    /// Reads the tokens now (`--token-env` for `tenant`, each
    /// `--tenant-token TENANT=VAR` for its tenant); refuses a non-loopback
    /// address without any, and one token standing for two tenants.
    pub fn new(args: &ServeArgs, tenant: &Tenant) -> anyhow::Result<Self> {
        let mut tokens: Vec<(String, Tenant)> = Vec::new();
        if let Some(var) = &args.token_env {
            tokens.push((sha256_hex(read_token(var)?.as_bytes()), tenant.clone()));
        }
        for spec in &args.tenant_tokens {
            let (name, var) = spec.split_once('=').ok_or_else(|| {
                anyhow::anyhow!("--tenant-token {spec:?}: write TENANT=VAR, e.g. acme=ACME_MCP_TOKEN")
            })?;
            let t = Tenant::new(name)
                .map_err(|e| anyhow::anyhow!("--tenant-token {spec:?}: {name:?} is not a tenant name: {e}"))?;
            tokens.push((sha256_hex(read_token(var)?.as_bytes()), t));
        }
        for (i, (a, _)) in tokens.iter().enumerate() {
            if tokens[..i].iter().any(|(b, _)| a == b) {
                anyhow::bail!("two token variables hold the same token: give each tenant its own");
            }
        }
        if tokens.is_empty() && args.oauth_issuer.is_none() && !args.listen.ip().is_loopback() {
            anyhow::bail!(
                "--listen {} is not a loopback address and anyone who reaches it could submit and cancel jobs: \
                 pass --token-env VAR (and set VAR to a token of at least {MIN_TOKEN_LEN} characters) or --oauth-issuer URL",
                args.listen
            );
        }
        let mut hosts: Vec<String> = LOOPBACK_NAMES.iter().map(|h| h.to_string()).collect();
        if !args.listen.ip().is_unspecified() && !args.listen.ip().is_loopback() {
            hosts.push(args.listen.ip().to_string());
        }
        hosts.extend(args.allowed_hosts.iter().map(|h| h.trim().trim_end_matches('.').to_lowercase()));
        // Hosts reach an OAuth resource at the URL its tokens name.
        if let Some(host) =
            args.oauth_resource.as_deref().and_then(|r| reqwest::Url::parse(r).ok()?.host_str().map(str::to_lowercase))
        {
            hosts.push(host.trim_start_matches('[').trim_end_matches(']').to_string());
        }
        Ok(Self { tokens, hosts })
    }

    /// Browser origins allowed: each accepted host, http or https, any port.
    fn origins(&self) -> Vec<String> {
        let bracket = |h: &str| if h.contains(':') && !h.starts_with('[') { format!("[{h}]") } else { h.to_string() };
        let mut origins = Vec::new();
        for h in &self.hosts {
            // `host:port` entries name their port; bare names and IPv6 take any.
            let with_port = h.parse::<std::net::Ipv6Addr>().is_err() && h.contains(':');
            let authority = if with_port { h.clone() } else { format!("{}:*", bracket(h)) };
            origins.push(format!("http://{authority}"));
            origins.push(format!("https://{authority}"));
        }
        origins
    }

    /// Whom `req` acts for: `Some(None)` when no token is configured (the
    /// server's `--tenant`), `Some(Some((tenant, digest)))` for a known
    /// token, `None` for a missing or unknown one.
    fn caller(&self, req: &Request) -> Option<Option<(Tenant, String)>> {
        if self.tokens.is_empty() {
            return Some(None);
        }
        let sent = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
            .map(|t| sha256_hex(t.trim().as_bytes()));
        let sent = sent?;
        // Every digest is compared, so timing does not tell which matched.
        let mut found = None;
        for (digest, tenant) in &self.tokens {
            if same_digest(&sent, digest) {
                found = Some((tenant.clone(), digest.clone()));
            }
        }
        found.map(Some)
    }
}

/// The token in environment variable `var`.
fn read_token(var: &str) -> anyhow::Result<String> {
    let token = std::env::var(var)
        .map_err(|_| anyhow::anyhow!("--token-env {var}: environment variable {var} is not set (or not UTF-8)"))?;
    let token = token.trim().to_string();
    if token.len() < MIN_TOKEN_LEN {
        anyhow::bail!(
            "--token-env {var}: the token is shorter than {MIN_TOKEN_LEN} characters; use a longer random one"
        );
    }
    Ok(token)
}

/// Equal digests, compared without an early exit.
fn same_digest(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// 401 unless the request carries a token; marks it with its [`Caller`].
async fn check(State(access): State<Arc<Access>>, mut req: Request, next: Next) -> Response {
    if let Some(caller) = access.caller(&req) {
        if let Some((tenant, digest)) = caller {
            req.extensions_mut().insert(Caller(tenant));
            req.extensions_mut().insert(Owner(format!("token {digest}")));
        }
        return next.run(req).await;
    }
    let body = "missing or wrong bearer token: send Authorization: Bearer <token> (flotilla mcp serve --token-env)";
    (StatusCode::UNAUTHORIZED, [(header::WWW_AUTHENTICATE, "Bearer")], body).into_response()
}

/// Serves `/mcp` on `listener` (bound by the binary) until `shutdown` completes.
pub async fn serve(
    tools: JobTools,
    listener: tokio::net::TcpListener,
    access: Access,
    oauth: Option<ResourceServer>,
    tenant: &Tenant,
    limits: flotilla_http_serve::Limits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let stop = tokio_util::sync::CancellationToken::new();
    let config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(access.hosts.clone())
        .with_allowed_origins(access.origins())
        .with_cancellation_token(stop.child_token());
    let service =
        StreamableHttpService::new(move || Ok(tools.clone()), Arc::new(LocalSessionManager::default()), config);
    let sessions = Arc::new(Sessions::default());
    let mcp = axum::Router::new()
        .route_service("/mcp", service)
        .layer(axum::middleware::from_fn_with_state(sessions, super::sessions::bind));
    let (app, auth) = match oauth {
        Some(rs) => {
            let (doc, paths) = (axum::Json(rs.metadata()), rs.metadata_paths());
            let mut app = mcp.layer(axum::middleware::from_fn_with_state(Arc::new(rs), super::oauth::check));
            for path in paths {
                let doc = doc.clone();
                app = app.route(&path, axum::routing::get(move || async move { doc }));
            }
            (app, "OAuth access tokens required")
        }
        None => {
            let auth = if access.tokens.is_empty() { "no token (loopback only)" } else { "bearer token required" };
            (mcp.layer(axum::middleware::from_fn_with_state(Arc::new(access), check)), auth)
        }
    };
    let bound = listener.local_addr()?;
    eprintln!("flotilla mcp serve: MCP on http://{bound}/mcp, default tenant {tenant}, {auth}");
    let shutdown = async move {
        shutdown.await;
        stop.cancel();
    };
    flotilla_http_serve::serve(listener, app, limits, shutdown).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(listen: &str, token_env: Option<&str>, hosts: &[&str]) -> ServeArgs {
        ServeArgs {
            stdio: false,
            listen: listen.parse().unwrap(),
            token_env: token_env.map(str::to_string),
            tenant_tokens: vec![],
            allowed_hosts: hosts.iter().map(|h| h.to_string()).collect(),
            oauth_issuer: None,
            oauth_resource: None,
            oauth_introspection_url: None,
            oauth_client_id_env: String::new(),
            oauth_client_secret_env: String::new(),
            oauth_scopes: vec![],
            oauth_tenant_claim: String::new(),
            oauth_tenants: vec![],
            header_timeout_secs: 10,
            max_connections: 256,
        }
    }

    fn default_tenant() -> Tenant {
        Tenant::default()
    }

    fn access(args: &ServeArgs) -> anyhow::Result<Access> {
        Access::new(args, &default_tenant())
    }

    #[test]
    fn off_loopback_needs_a_token_and_short_tokens_are_refused() {
        let e = access(&args("0.0.0.0:8765", None, &[])).unwrap_err().to_string();
        assert!(e.contains("--token-env"), "{e}");
        assert!(access(&args("127.0.0.1:8765", None, &[])).is_ok());
        let e = access(&args("127.0.0.1:8765", Some("FLOTILLA_MCP_SERVE_UNSET_VAR"), &[])).unwrap_err();
        assert!(e.to_string().contains("is not set"), "{e}");
    }

    #[test]
    fn origins_name_each_host_on_any_port_and_keep_given_ports() {
        let a = access(&args("127.0.0.1:8765", None, &["MCP.example.com.", "box:9000"])).unwrap();
        let o = a.origins();
        for want in ["http://localhost:*", "https://127.0.0.1:*", "http://[::1]:*", "https://mcp.example.com:*"] {
            assert!(o.contains(&want.to_string()), "{want} in {o:?}");
        }
        assert!(o.contains(&"http://box:9000".to_string()), "{o:?}");
    }

    #[test]
    fn oauth_mode_may_listen_off_loopback_and_answers_to_the_resources_host() {
        let mut a = args("0.0.0.0:8765", None, &[]);
        a.oauth_issuer = Some("https://as.example".into());
        a.oauth_resource = Some("https://MCP.example.com/mcp".into());
        let hosts = access(&a).unwrap().hosts;
        assert!(hosts.contains(&"mcp.example.com".to_string()), "{hosts:?}");
    }

    #[test]
    fn tenant_tokens_need_a_tenant_and_a_variable() {
        let mut a = args("127.0.0.1:8765", None, &[]);
        a.tenant_tokens = vec!["acme".into()];
        let e = Access::new(&a, &default_tenant()).unwrap_err().to_string();
        assert!(e.contains("TENANT=VAR"), "{e}");
        a.tenant_tokens = vec!["not a tenant!=X".into()];
        let e = Access::new(&a, &default_tenant()).unwrap_err().to_string();
        assert!(e.contains("is not a tenant name"), "{e}");
    }

    #[test]
    fn digests_compare_whole() {
        assert!(same_digest("ab", "ab"));
        assert!(!same_digest("ab", "ac") && !same_digest("ab", "abc"));
    }
}
