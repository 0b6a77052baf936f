//! CSRF protection for the dashboard's writes from a browser: its HTML forms
//! (submit, cancel, approve/reject/edit) and any script calling the API with
//! the dashboard's cookie (docs/OPERATIONS.md, "Dashboard"; docs/HTTP_API.md).
//!
//! A page on another site can make the victim's browser send a form POST to
//! the dashboard; the browser may attach the dashboard's cookie (old
//! browsers ignore `SameSite`), and with no token configured at all nothing
//! but this check stands between that page and a cancelled job. So every
//! request that changes something and comes from a browser (it carries an
//! `Origin`, `Sec-Fetch-Site` or `Cookie` header) must pass both:
//!
//! 1. **Same origin.** `Origin`, when sent, names the dashboard's own
//!    `Host` (which the Host check already limited to the dashboard's
//!    names); `Sec-Fetch-Site`, when sent, says `same-origin`; at least one
//!    of them is sent (every current browser sends both on a POST).
//! 2. **The CSRF token**, in the form field `csrf` or the `X-CSRF-Token`
//!    header: a SHA-256 of a random secret drawn at start and the session
//!    (the token cookie, or one shared session when no token is
//!    configured). Pages carry it in their forms; another site cannot read
//!    a page (same-origin policy) to learn it. A restart draws a new
//!    secret: reload the page.
//!
//! A request with a bearer token skips both: a browser never adds an
//! `Authorization` header by itself, so such a request was written by
//! someone holding the token. A request with none of the three headers is
//! a non-browser client (curl on the same host, when no token is
//! configured): it skips them too, since nothing a page does can send a
//! POST without `Origin` from a current browser.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderMap, header};
use flotilla_protocol::digest::sha256_hex;

/// The form field and header carrying the token.
pub const FIELD: &str = "csrf";
/// The header carrying the token, for scripts.
pub const HEADER: &str = "x-csrf-token";
/// Largest form body read for its token (the submit box's text included).
const MAX_FORM_BYTES: usize = 1024 * 1024;

/// The CSRF token of the request's session, for the pages' forms.
#[derive(Clone, Debug)]
pub struct CsrfToken(pub String);

/// Issues and checks tokens with one secret per process.
#[derive(Debug)]
pub struct Csrf {
    secret: String,
}

impl Csrf {
    /// A fresh random secret (two v4 UUIDs: 244 random bits).
    pub fn new() -> Self {
        Self { secret: format!("{}{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple()) }
    }

    /// The token for `session`.
    pub fn token(&self, session: &str) -> String {
        sha256_hex(format!("flotilla csrf\n{}\n{session}", self.secret).as_bytes())
    }

    /// Checks a browser's write: same origin, and the session's token in the
    /// header or the form body (read whole, then handed on unchanged).
    pub async fn check(&self, session: &str, req: Request) -> Result<Request, &'static str> {
        same_origin(req.headers())?;
        let expected = sha256_hex(self.token(session).as_bytes());
        let matches = |given: &str| super::guard::same_digest(&sha256_hex(given.trim().as_bytes()), &expected);
        if let Some(given) = req.headers().get(HEADER).and_then(|v| v.to_str().ok()) {
            return if matches(given) { Ok(req) } else { Err(WRONG_TOKEN) };
        }
        let form = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
        if !form {
            return Err(WRONG_TOKEN);
        }
        let (parts, body) = req.into_parts();
        let bytes =
            axum::body::to_bytes(body, MAX_FORM_BYTES).await.map_err(|_| "form body too large or unreadable\n")?;
        match form_field(&bytes, FIELD) {
            Some(given) if matches(&given) => Ok(Request::from_parts(parts, Body::from(bytes))),
            _ => Err(WRONG_TOKEN),
        }
    }
}

const WRONG_TOKEN: &str = "refused: this write carries no valid CSRF token (reload the dashboard page and try again; \
                           API clients send `Authorization: Bearer <token>` instead)\n";

/// Whether a request comes from a browser (see the module doc).
pub fn from_browser(headers: &HeaderMap) -> bool {
    headers.contains_key(header::ORIGIN)
        || headers.contains_key("sec-fetch-site")
        || headers.contains_key(header::COOKIE)
}

/// Same-origin evidence: `Origin` names our `Host`, `Sec-Fetch-Site` says so.
pub(super) fn same_origin(headers: &HeaderMap) -> Result<(), &'static str> {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(|v| v.trim().to_ascii_lowercase());
    let (origin, site, host) = (text("origin"), text("sec-fetch-site"), text("host"));
    if origin.is_none() && site.is_none() {
        return Err("refused: a browser write without an Origin or Sec-Fetch-Site header\n");
    }
    if let Some(o) = origin {
        let authority = o.strip_prefix("http://").or_else(|| o.strip_prefix("https://"));
        if authority.is_none() || authority != host.as_deref() {
            return Err("refused: cross-site request (its Origin is not this dashboard)\n");
        }
    }
    if site.is_some_and(|s| s != "same-origin") {
        return Err("refused: cross-site request (Sec-Fetch-Site is not same-origin)\n");
    }
    Ok(())
}

/// The raw value of `name` in a urlencoded form (tokens are hex: no
/// percent-decoding needed).
fn form_field(body: &[u8], name: &str) -> Option<String> {
    let text = std::str::from_utf8(body).ok()?;
    text.split('&').find_map(|pair| pair.split_once('=').filter(|(k, _)| *k == name).map(|(_, v)| v.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::{HeaderValue, Method};

    fn post(headers: &[(&'static str, &str)], body: &str) -> Request {
        let mut r = Request::builder().method(Method::POST).uri("/actions/submit");
        for (k, v) in headers {
            r = r.header(*k, HeaderValue::from_str(v).unwrap());
        }
        r.body(Body::from(body.to_string())).unwrap()
    }

    const FORM: (&str, &str) = ("content-type", "application/x-www-form-urlencoded");

    #[tokio::test]
    async fn a_same_origin_form_with_the_token_passes_with_its_body_intact() {
        let c = Csrf::new();
        let body = format!("input=hello+world&csrf={}", c.token("s1"));
        let req = post(&[("host", "127.0.0.1:8080"), ("origin", "http://127.0.0.1:8080"), FORM], &body);
        let req = c.check("s1", req).await.expect("passes");
        let bytes = axum::body::to_bytes(req.into_body(), 1 << 20).await.unwrap();
        assert_eq!(bytes, body.as_bytes());
    }

    #[tokio::test]
    async fn another_origin_a_missing_token_or_another_session_is_refused() {
        let c = Csrf::new();
        let token = c.token("s1");
        let body = format!("csrf={token}");
        let host = ("host", "127.0.0.1:8080");
        let cases = [
            (vec![host, ("origin", "http://evil.example"), FORM], body.clone(), "s1", "cross-site"),
            (vec![host, ("origin", "null"), FORM], body.clone(), "s1", "cross-site"),
            (vec![host, ("sec-fetch-site", "cross-site"), FORM], body.clone(), "s1", "Sec-Fetch-Site"),
            (vec![host, ("cookie", "x=1"), FORM], body.clone(), "s1", "without an Origin"),
            (vec![host, ("origin", "http://127.0.0.1:8080"), FORM], "input=x".into(), "s1", "CSRF token"),
            (vec![host, ("origin", "http://127.0.0.1:8080"), FORM], body.clone(), "s2", "CSRF token"),
            (vec![host, ("origin", "http://127.0.0.1:8080")], body.clone(), "s1", "CSRF token"),
        ];
        for (headers, body, session, why) in cases {
            let e = c.check(session, post(&headers, &body)).await.expect_err("refused");
            assert!(e.contains(why), "{headers:?}: {e}");
        }
        let req = post(&[host, ("sec-fetch-site", "same-origin"), (HEADER, &token)], "{}");
        assert!(c.check("s1", req).await.is_ok(), "a script's header token passes");
    }

    #[test]
    fn only_requests_with_browser_headers_count_as_from_a_browser() {
        let mut h = HeaderMap::new();
        assert!(!from_browser(&h), "curl");
        h.insert(header::ORIGIN, HeaderValue::from_static("http://x"));
        assert!(from_browser(&h));
    }
}
