//! Who may use the dashboard and its HTTP API: an axum middleware in front
//! of every route, SSE and `/api/*` included (docs/OPERATIONS.md,
//! "Dashboard"; docs/HTTP_API.md).
//!
//! 1. The Host check. A page on `evil.example` whose name the attacker
//!    re-points at 127.0.0.1 (DNS rebinding) is same-origin with the
//!    dashboard as far as the victim's browser knows, and could read every
//!    tenant's jobs. Its requests still say `Host: evil.example`, so only the
//!    dashboard's own names are answered: loopback names, the `listen`
//!    address, and `[dashboard] allowed_hosts`. Anything else gets 421.
//! 2. The bearer token, when any is configured: the admin token
//!    (`[dashboard] token_env`, every tenant) or a tenant's
//!    (`[dashboard.tenants.<tenant>] token_env`, that tenant only), sent as
//!    `Authorization: Bearer <token>`, or the cookie a browser gets by
//!    signing in at `/login` (src/login.rs: a same-origin form
//!    POST, never a link; a browser cannot add a header to the page's
//!    `fetch` and `EventSource` requests; the cookie is `HttpOnly` and
//!    `SameSite=Strict`). Anything else gets 401, for a browser's page the
//!    sign-in form.
//!    Comparisons run in constant time over SHA-256 digests, so neither a
//!    token's content nor its length leaks through timing. The token decides
//!    the request's [`Principal`], which the handlers read.
//! 3. CSRF, for requests that change something and come from a browser
//!    (src/csrf.rs).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use flotilla_config::DashboardConfig;
use flotilla_protocol::digest::sha256_hex;
use flotilla_protocol::ids::Tenant;

use super::csrf::{self, Csrf, CsrfToken};
use super::login;

/// Names every dashboard answers to.
const LOOPBACK_NAMES: &[&str] = &["localhost", "127.0.0.1", "::1"];
/// The cookie holding a digest of the token (never the token itself).
pub(super) const COOKIE: &str = "flotilla_dashboard";
/// Shortest token accepted: shorter ones can be guessed online.
const MIN_TOKEN_LEN: usize = 16;
/// The CSRF session of requests when no token is configured.
const ANONYMOUS_SESSION: &str = "anonymous";

/// Who a request acts as, decided by its token (docs/HTTP_API.md, "Auth").
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Principal {
    /// No token is configured (a loopback listener, or `insecure_no_token`):
    /// reads see every tenant; writes act for the default tenant only.
    Anonymous,
    /// The admin token: sees every tenant, acts for any (`?tenant=`).
    Admin,
    /// A tenant's token: sees and acts on that tenant's jobs only.
    Tenant(Tenant),
}

/// The dashboard's access rules, fixed at start.
#[derive(Debug)]
pub struct Guard {
    /// Accepted host names: lowercase, no port, no brackets, no trailing dot.
    hosts: Vec<String>,
    /// SHA-256 of each token, with whom it stands for. Empty: no token.
    tokens: Vec<(String, Principal)>,
    /// SHA-256 of the cookie value a valid sign-in sets, per token.
    cookies: Vec<(String, Principal)>,
    /// Issues and checks the forms' CSRF tokens.
    csrf: Csrf,
}

impl Guard {
    /// The rules for a dashboard on `listen`, reading the tokens from the
    /// environment now. Errors say which `[dashboard]` key to set.
    pub fn from_config(cfg: &DashboardConfig, listen: SocketAddr) -> anyhow::Result<Self> {
        let mut tokens: Vec<(String, Principal)> = Vec::new();
        if let Some(var) = &cfg.token_env {
            tokens.push((read_token("[dashboard] token_env", var)?, Principal::Admin));
        }
        for (name, t) in &cfg.tenants {
            let tenant = Tenant::new(name.as_str())
                .map_err(|e| anyhow::anyhow!("[dashboard.tenants.{name}]: {name:?} is not a tenant name: {e}"))?;
            let key = format!("[dashboard.tenants.{name}] token_env");
            tokens.push((read_token(&key, &t.token_env)?, Principal::Tenant(tenant)));
        }
        for (i, (a, _)) in tokens.iter().enumerate() {
            if tokens[..i].iter().any(|(b, _)| a == b) {
                anyhow::bail!("two [dashboard] token_env variables hold the same token: give each its own");
            }
        }
        if tokens.is_empty() && !listen.ip().is_loopback() && !cfg.insecure_no_token {
            anyhow::bail!(
                "[dashboard] listen = \"{listen}\" is not a loopback address and the dashboard shows every tenant's \
                 jobs: set [dashboard] token_env = \"FLOTILLA_DASHBOARD_TOKEN\" (and that environment variable), or \
                 insecure_no_token = true if an authenticating reverse proxy is the only way in"
            );
        }
        let mut hosts: Vec<String> = LOOPBACK_NAMES.iter().map(|h| h.to_string()).collect();
        if !listen.ip().is_unspecified() {
            hosts.push(normalize(&listen.ip().to_string()));
        }
        hosts.extend(cfg.allowed_hosts.iter().map(|h| normalize(h)));
        let cookies = tokens.iter().map(|(t, p)| (sha256_hex(cookie_value(t).as_bytes()), p.clone())).collect();
        let tokens = tokens.into_iter().map(|(t, p)| (sha256_hex(t.as_bytes()), p)).collect();
        Ok(Self { hosts, tokens, cookies, csrf: Csrf::new() })
    }

    fn host_allowed(&self, headers: &HeaderMap, req: &Request) -> bool {
        let host = headers
            .get(header::HOST)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
            .or_else(|| req.uri().authority().map(|a| a.to_string()));
        host.and_then(|h| host_name(&h)).is_some_and(|h| self.hosts.contains(&h))
    }
}

/// The token in environment variable `var`, named by config key `key`.
/// Returns the token itself: [`Guard::from_config`] keeps only digests.
fn read_token(key: &str, var: &str) -> anyhow::Result<String> {
    let token = std::env::var(var)
        .map_err(|_| anyhow::anyhow!("{key} = \"{var}\" but the environment variable {var} is not set"))?;
    let token = token.trim().to_string();
    if token.len() < MIN_TOKEN_LEN {
        anyhow::bail!(
            "the dashboard token in {var} is shorter than {MIN_TOKEN_LEN} characters: use a random one, e.g. \
             `openssl rand -hex 32`"
        );
    }
    Ok(token)
}

/// What the cookie holds: derived from the token, so the browser's cookie
/// store never holds the token an API client would use.
pub(super) fn cookie_value(token: &str) -> String {
    sha256_hex(format!("flotilla dashboard cookie\n{token}").as_bytes())
}

/// `host[:port]` or `[v6][:port]` -> the comparable host name.
fn host_name(value: &str) -> Option<String> {
    let value = value.trim();
    let host = if let Some(rest) = value.strip_prefix('[') {
        rest.split_once(']')?.0
    } else {
        match value.rsplit_once(':') {
            Some((h, port)) if port.chars().all(|c| c.is_ascii_digit()) => h,
            _ => value,
        }
    };
    (!host.is_empty()).then(|| normalize(host))
}

fn normalize(host: &str) -> String {
    let h = host.trim().trim_start_matches('[').trim_end_matches(']').trim_end_matches('.').to_ascii_lowercase();
    // One spelling per IP address (e.g. `0:0:0:0:0:0:0:1` is `::1`).
    h.parse::<IpAddr>().map(|ip| ip.to_string()).unwrap_or(h)
}

/// Equal digests, compared without an early exit.
pub(super) fn same_digest(a: &str, b: &str) -> bool {
    a.len() == b.len() && std::hint::black_box(a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y))) == 0
}

/// How a request proved (or failed to prove) it knows a token.
enum Credential {
    /// `session` is `None` for a bearer token (no browser sends one by
    /// itself, so no CSRF check), else the CSRF session: the cookie, or
    /// [`ANONYMOUS_SESSION`] when no token is configured.
    Valid {
        principal: Principal,
        session: Option<String>,
    },
    Missing,
    Wrong,
}

impl Guard {
    /// Whom the token with SHA-256 `digest` stands for (the sign-in form).
    pub(super) fn principal_of_token(&self, digest: &str) -> Option<Principal> {
        Self::find(&self.tokens, digest)
    }

    /// Whom a token's digest stands for, comparing against every token.
    fn find(list: &[(String, Principal)], digest: &str) -> Option<Principal> {
        // No early exit: every configured digest is compared.
        list.iter().fold(None, |found, (d, p)| if same_digest(d, digest) { Some(p.clone()) } else { found })
    }

    fn credential(&self, req: &Request) -> Credential {
        if self.tokens.is_empty() {
            return Credential::Valid { principal: Principal::Anonymous, session: Some(ANONYMOUS_SESSION.into()) };
        }
        let headers = req.headers();
        if let Some(auth) = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()) {
            let given = auth.strip_prefix("Bearer ").unwrap_or_default().trim();
            return match Self::find(&self.tokens, &sha256_hex(given.as_bytes())) {
                Some(principal) => Credential::Valid { principal, session: None },
                None => Credential::Wrong,
            };
        }
        match cookie_from(headers) {
            Some(c) => match Self::find(&self.cookies, &sha256_hex(c.as_bytes())) {
                Some(principal) => Credential::Valid { principal, session: Some(c) },
                None => Credential::Wrong,
            },
            None => Credential::Missing,
        }
    }
}

fn cookie_from(headers: &HeaderMap) -> Option<String> {
    headers.get_all(header::COOKIE).iter().filter_map(|v| v.to_str().ok()).flat_map(|v| v.split(';')).find_map(|c| {
        let (name, value) = c.trim().split_once('=')?;
        (name == COOKIE).then(|| value.to_string())
    })
}

/// The refusal of a request whose Host is not one of the dashboard's names.
fn misdirected(req: &Request) -> Response {
    tracing::debug!(host = ?req.headers().get(header::HOST), "dashboard request for another host refused");
    refuse(
        StatusCode::MISDIRECTED_REQUEST,
        "misdirected request: this Host is not one of the dashboard's names. To open the dashboard under \
         another name, add it to [dashboard] allowed_hosts in the orchestrator's config.\n",
    )
}

/// The middleware of the public routes beside the dashboard (the A2A agent
/// card): the Host check alone. They need no token, but a page on a
/// rebound name must not read them, and a response that echoes the Host
/// (the card's URLs) must not carry a name the listener does not have.
pub async fn check_host(State(guard): State<Arc<Guard>>, req: Request, next: Next) -> Response {
    if !guard.host_allowed(req.headers(), &req) {
        return misdirected(&req);
    }
    next.run(req).await
}

/// The middleware: Host check, then token check, then (for a browser's
/// writes) the CSRF check, then the route with the request's [`Principal`]
/// and [`CsrfToken`] in its extensions.
pub async fn check(State(guard): State<Arc<Guard>>, req: Request, next: Next) -> Response {
    if !guard.host_allowed(req.headers(), &req) {
        return misdirected(&req);
    }
    if req.uri().path() == login::PATH && !guard.tokens.is_empty() {
        return login::handle(&guard, req).await;
    }
    match guard.credential(&req) {
        Credential::Valid { principal, session } => {
            let mut req = req;
            if let Some(session) = &session {
                if !is_safe(req.method()) && csrf::from_browser(req.headers()) {
                    req = match guard.csrf.check(session, req).await {
                        Ok(req) => req,
                        Err(why) => return refuse(StatusCode::FORBIDDEN, why),
                    };
                }
                req.extensions_mut().insert(CsrfToken(guard.csrf.token(session)));
            }
            req.extensions_mut().insert(principal);
            next.run(req).await
        }
        Credential::Missing | Credential::Wrong => {
            let mut r = if wants_page(&req) {
                let next = req.uri().path_and_query().map(|p| p.as_str()).unwrap_or("/");
                login::form_page(StatusCode::UNAUTHORIZED, next, None)
            } else {
                refuse(
                    StatusCode::UNAUTHORIZED,
                    "this dashboard needs a token ([dashboard] token_env or [dashboard.tenants.<tenant>] token_env): \
                     send `Authorization: Bearer <token>`, or sign in once in the browser at /login\n",
                )
            };
            r.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer realm=\"flotilla\""));
            r
        }
    }
}

/// A browser asking for a page (the sign-in form is the answer to a 401).
fn wants_page(req: &Request) -> bool {
    req.method() == Method::GET
        && req.headers().get(header::ACCEPT).and_then(|v| v.to_str().ok()).is_some_and(|a| a.contains("text/html"))
}

/// Methods that change nothing (the dashboard's GET routes only read).
fn is_safe(m: &Method) -> bool {
    matches!(*m, Method::GET | Method::HEAD | Method::OPTIONS)
}

fn refuse(status: StatusCode, text: &'static str) -> Response {
    let mut r = (status, text).into_response();
    r.headers_mut().insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    r.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_names_compare_without_port_case_brackets_or_trailing_dot() {
        assert_eq!(host_name("LocalHost:8080").as_deref(), Some("localhost"));
        assert_eq!(host_name("[::1]:80").as_deref(), Some("::1"));
        assert_eq!(host_name("[0:0:0:0:0:0:0:1]").as_deref(), Some("::1"));
        assert_eq!(host_name("dash.example.").as_deref(), Some("dash.example"));
        assert_eq!(host_name("127.0.0.1").as_deref(), Some("127.0.0.1"));
        assert_eq!(host_name("[::1"), None);
        assert_eq!(host_name(""), None);
    }

    #[test]
    fn a_non_loopback_listener_needs_a_token_or_an_explicit_opt_out() {
        let public: SocketAddr = "0.0.0.0:8080".parse().unwrap();
        let e = Guard::from_config(&DashboardConfig::default(), public).unwrap_err().to_string();
        assert!(e.contains("token_env") && e.contains("insecure_no_token"), "{e}");
        let cfg = DashboardConfig { insecure_no_token: true, ..Default::default() };
        assert!(Guard::from_config(&cfg, public).is_ok());
        let cfg =
            DashboardConfig { token_env: Some("FLOTILLA_TEST_UNSET_DASHBOARD_TOKEN".into()), ..Default::default() };
        let e = Guard::from_config(&cfg, "127.0.0.1:1".parse().unwrap()).unwrap_err().to_string();
        assert!(e.contains("FLOTILLA_TEST_UNSET_DASHBOARD_TOKEN is not set"), "{e}");
    }

    fn with_tokens(vars: &[(&str, &str)]) {
        for (k, v) in vars {
            // SAFETY: test-only variables, each name used by one test.
            unsafe { std::env::set_var(k, v) };
        }
    }

    fn bearer(token: &str) -> Request {
        Request::builder().header(header::AUTHORIZATION, format!("Bearer {token}")).body(Default::default()).unwrap()
    }

    #[test]
    fn each_token_stands_for_its_principal_and_a_shared_token_is_refused() {
        with_tokens(&[
            ("FLOTILLA_TEST_GUARD_ADMIN", "admin-token-0123456789"),
            ("FLOTILLA_TEST_GUARD_ACME", "acme-token-0123456789"),
            ("FLOTILLA_TEST_GUARD_SAME", "admin-token-0123456789"),
        ]);
        let mut cfg =
            DashboardConfig { token_env: Some("FLOTILLA_TEST_GUARD_ADMIN".into()), ..DashboardConfig::default() };
        let tenant = |var: &str| flotilla_config::DashboardTenant { token_env: var.into() };
        cfg.tenants.insert("acme".into(), tenant("FLOTILLA_TEST_GUARD_ACME"));
        let g = Guard::from_config(&cfg, "0.0.0.0:1".parse().unwrap()).expect("tokens satisfy a public listener");
        let who = |token: &str| match g.credential(&bearer(token)) {
            Credential::Valid { principal, session: None } => Some(principal),
            _ => None,
        };
        assert_eq!(who("admin-token-0123456789"), Some(Principal::Admin));
        assert_eq!(who("acme-token-0123456789"), Some(Principal::Tenant(Tenant::new("acme").unwrap())));
        assert_eq!(who("acme-token-0123456789x"), None);

        cfg.tenants.insert("globex".into(), tenant("FLOTILLA_TEST_GUARD_SAME"));
        let e = Guard::from_config(&cfg, "127.0.0.1:1".parse().unwrap()).unwrap_err().to_string();
        assert!(e.contains("same token"), "{e}");
        cfg.tenants.clear();
        cfg.tenants.insert("no such tenant!".into(), tenant("FLOTILLA_TEST_GUARD_ACME"));
        let e = Guard::from_config(&cfg, "127.0.0.1:1".parse().unwrap()).unwrap_err().to_string();
        assert!(e.contains("[dashboard.tenants.no such tenant!]"), "{e}");
    }

    #[test]
    fn digests_compare_equal_only_when_equal() {
        let a = sha256_hex(b"a");
        assert!(same_digest(&a, &sha256_hex(b"a")));
        assert!(!same_digest(&a, &sha256_hex(b"b")));
        assert!(!same_digest(&a, ""));
    }
}
