//! Who may read the dashboard: an axum middleware in front of every route,
//! SSE and `/api/*` included (docs/OPERATIONS.md, "Dashboard").
//!
//! 1. The Host check. A page on `evil.example` whose name the attacker
//!    re-points at 127.0.0.1 (DNS rebinding) is same-origin with the
//!    dashboard as far as the victim's browser knows, and could read every
//!    tenant's jobs. Its requests still say `Host: evil.example`, so only the
//!    dashboard's own names are answered: loopback names, the `listen`
//!    address, and `[dashboard] allowed_hosts`. Anything else gets 421.
//! 2. The bearer token (`[dashboard] token_env`), when set: `Authorization:
//!    Bearer <token>`, or the cookie a browser gets by opening any page once
//!    with `?token=<token>` (a browser cannot add a header to the page's
//!    `fetch` and `EventSource` requests; the cookie is `HttpOnly` and
//!    `SameSite=Strict`, and the `?token=` visit is redirected to the same
//!    URL without it). Anything else gets 401. Comparisons run in constant
//!    time over SHA-256 digests, so neither the token's content nor its
//!    length leaks through timing.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use flotilla_agent::digest::sha256_hex;
use flotilla_config::DashboardConfig;

/// Names every dashboard answers to.
const LOOPBACK_NAMES: &[&str] = &["localhost", "127.0.0.1", "::1"];
/// The cookie holding a digest of the token (never the token itself).
const COOKIE: &str = "flotilla_dashboard";
/// Shortest token accepted: shorter ones can be guessed online.
const MIN_TOKEN_LEN: usize = 16;

/// The dashboard's access rules, fixed at start.
#[derive(Debug)]
pub struct Guard {
    /// Accepted host names: lowercase, no port, no brackets, no trailing dot.
    hosts: Vec<String>,
    /// SHA-256 of the token, when one is required.
    token: Option<String>,
    /// SHA-256 of the cookie value a valid `?token=` visit sets.
    cookie: Option<String>,
}

impl Guard {
    /// The rules for a dashboard on `listen`, reading the token from the
    /// environment now. Errors say which `[dashboard]` key to set.
    pub fn from_config(cfg: &DashboardConfig, listen: SocketAddr) -> anyhow::Result<Self> {
        let token = match &cfg.token_env {
            Some(var) => Some(read_token(var)?),
            None if listen.ip().is_loopback() || cfg.insecure_no_token => None,
            None => anyhow::bail!(
                "[dashboard] listen = \"{listen}\" is not a loopback address and the dashboard shows every tenant's \
                 jobs: set [dashboard] token_env = \"FLOTILLA_DASHBOARD_TOKEN\" (and that environment variable), or \
                 insecure_no_token = true if an authenticating reverse proxy is the only way in"
            ),
        };
        let mut hosts: Vec<String> = LOOPBACK_NAMES.iter().map(|h| h.to_string()).collect();
        if !listen.ip().is_unspecified() {
            hosts.push(normalize(&listen.ip().to_string()));
        }
        hosts.extend(cfg.allowed_hosts.iter().map(|h| normalize(h)));
        let cookie = token.as_deref().map(cookie_value);
        Ok(Self {
            hosts,
            token: token.map(|t| sha256_hex(t.as_bytes())),
            cookie: cookie.map(|c| sha256_hex(c.as_bytes())),
        })
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

fn read_token(var: &str) -> anyhow::Result<String> {
    let token = std::env::var(var).map_err(|_| {
        anyhow::anyhow!("[dashboard] token_env = \"{var}\" but the environment variable {var} is not set")
    })?;
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
fn cookie_value(token: &str) -> String {
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
fn same_digest(a: &str, b: &str) -> bool {
    a.len() == b.len() && std::hint::black_box(a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y))) == 0
}

/// How a request proved (or failed to prove) it knows the token.
enum Credential {
    Valid,
    /// A valid `?token=`: set the cookie and redirect to `location`.
    ValidQuery {
        location: String,
        cookie: String,
    },
    Missing,
    Wrong,
}

impl Guard {
    fn credential(&self, req: &Request) -> Credential {
        let (Some(token), Some(cookie)) = (&self.token, &self.cookie) else { return Credential::Valid };
        let headers = req.headers();
        if let Some(auth) = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()) {
            let given = auth.strip_prefix("Bearer ").unwrap_or_default().trim();
            return if same_digest(&sha256_hex(given.as_bytes()), token) {
                Credential::Valid
            } else {
                Credential::Wrong
            };
        }
        if let Some((given, rest)) = query_token(req) {
            if req.method() != Method::GET || !same_digest(&sha256_hex(given.as_bytes()), token) {
                return Credential::Wrong;
            }
            // One leading slash: `//host` would redirect to another site.
            let path = format!("/{}", req.uri().path().trim_start_matches('/'));
            let location = if rest.is_empty() { path.to_string() } else { format!("{path}?{rest}") };
            return Credential::ValidQuery { location, cookie: cookie_value(&given) };
        }
        match cookie_from(headers) {
            Some(c) if same_digest(&sha256_hex(c.as_bytes()), cookie) => Credential::Valid,
            Some(_) => Credential::Wrong,
            None => Credential::Missing,
        }
    }
}

/// The `token` query parameter (percent-decoding is not needed: tokens are
/// printable ASCII) and the rest of the query without it.
fn query_token(req: &Request) -> Option<(String, String)> {
    let query = req.uri().query()?;
    let mut token = None;
    let mut rest = Vec::new();
    for pair in query.split('&') {
        match pair.split_once('=') {
            Some(("token", v)) => token = Some(v.to_string()),
            _ => rest.push(pair),
        }
    }
    token.map(|t| (t, rest.join("&")))
}

fn cookie_from(headers: &HeaderMap) -> Option<String> {
    headers.get_all(header::COOKIE).iter().filter_map(|v| v.to_str().ok()).flat_map(|v| v.split(';')).find_map(|c| {
        let (name, value) = c.trim().split_once('=')?;
        (name == COOKIE).then(|| value.to_string())
    })
}

/// The middleware: Host check, then token check, then the route.
pub async fn check(State(guard): State<Arc<Guard>>, req: Request, next: Next) -> Response {
    if !guard.host_allowed(req.headers(), &req) {
        tracing::debug!(host = ?req.headers().get(header::HOST), "dashboard request for another host refused");
        return refuse(
            StatusCode::MISDIRECTED_REQUEST,
            "misdirected request: this Host is not one of the dashboard's names. To open the dashboard under \
             another name, add it to [dashboard] allowed_hosts in the orchestrator's config.\n",
        );
    }
    match guard.credential(&req) {
        Credential::Valid => next.run(req).await,
        Credential::ValidQuery { location, cookie } => {
            let cookie = format!("{COOKIE}={cookie}; HttpOnly; SameSite=Strict; Path=/");
            let mut r = StatusCode::SEE_OTHER.into_response();
            if let (Ok(l), Ok(c)) = (HeaderValue::from_str(&location), HeaderValue::from_str(&cookie)) {
                r.headers_mut().insert(header::LOCATION, l);
                r.headers_mut().insert(header::SET_COOKIE, c);
            }
            r
        }
        Credential::Missing | Credential::Wrong => {
            let mut r = refuse(
                StatusCode::UNAUTHORIZED,
                "this dashboard needs its token ([dashboard] token_env): send `Authorization: Bearer <token>`, or \
                 open any page once in the browser with ?token=<token>\n",
            );
            r.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer realm=\"flotilla\""));
            r
        }
    }
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

    #[test]
    fn digests_compare_equal_only_when_equal() {
        let a = sha256_hex(b"a");
        assert!(same_digest(&a, &sha256_hex(b"a")));
        assert!(!same_digest(&a, &sha256_hex(b"b")));
        assert!(!same_digest(&a, ""));
    }
}
