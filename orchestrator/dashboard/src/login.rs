//! How a browser gets the dashboard's cookie (docs/HTTP_API.md, "Auth"):
//! `GET /login` shows a form, and its same-origin `POST /login` with a valid
//! token sets the cookie and goes on to the page the person asked for.
//!
//! The cookie is never set from a link: a `?token=` in a URL is ignored, so
//! a link another tenant sends (or any page on another site) cannot switch
//! a browser into its tenant, where the person would then submit their jobs
//! and files (login CSRF). The `POST` must be same-origin by `Origin` /
//! `Sec-Fetch-Site` (src/csrf.rs): a page elsewhere can send
//! the form but not make it count. There is no session yet to tie a CSRF
//! token to, and none is needed: the only thing another site could log a
//! browser into is a token it knows, and same-origin proof stops that.

use axum::extract::{FromRequest, Request};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use flotilla_protocol::digest::sha256_hex;
use serde::Deserialize;

use super::guard::{COOKIE, Guard, cookie_value};

/// The path of the form and of its POST.
pub const PATH: &str = "/login";
/// Largest login form read.
const MAX_FORM_BYTES: usize = 8 * 1024;

/// The login form's fields.
#[derive(Deserialize)]
struct LoginForm {
    token: String,
    #[serde(default)]
    next: Option<String>,
}

/// `GET /login` or `POST /login`.
pub async fn handle(guard: &Guard, req: Request) -> Response {
    let next = next_of(req.uri().query());
    match *req.method() {
        Method::GET | Method::HEAD => form_page(StatusCode::OK, &next, None),
        Method::POST => post(guard, req).await,
        _ => (StatusCode::METHOD_NOT_ALLOWED, [(header::ALLOW, "GET, POST")]).into_response(),
    }
}

async fn post(guard: &Guard, req: Request) -> Response {
    if let Err(why) = super::csrf::same_origin(req.headers()) {
        return (StatusCode::FORBIDDEN, why).into_response();
    }
    let (parts, body) = req.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_FORM_BYTES).await else {
        return (StatusCode::PAYLOAD_TOO_LARGE, "the login form is larger than 8 KiB\n").into_response();
    };
    let req = Request::from_parts(parts, axum::body::Body::from(bytes));
    let form = match axum::Form::<LoginForm>::from_request(req, &()).await {
        Ok(axum::Form(f)) => f,
        Err(e) => {
            return (StatusCode::BAD_REQUEST, format!("{}: expected the fields token and next\n", e.body_text()))
                .into_response();
        }
    };
    let next = form.next.as_deref().map(local_path).unwrap_or_else(|| "/".into());
    let token = form.token.trim();
    if guard.principal_of_token(&sha256_hex(token.as_bytes())).is_none() {
        return form_page(StatusCode::UNAUTHORIZED, &next, Some("that token is not one of this dashboard's"));
    }
    let cookie = format!("{COOKIE}={}; HttpOnly; SameSite=Strict; Path=/", cookie_value(token));
    let mut r = StatusCode::SEE_OTHER.into_response();
    if let (Ok(l), Ok(c)) = (HeaderValue::from_str(&next), HeaderValue::from_str(&cookie)) {
        r.headers_mut().insert(header::LOCATION, l);
        r.headers_mut().insert(header::SET_COOKIE, c);
    }
    r
}

/// `?next=` of the form page (raw: a path is shown back into a hidden field).
fn next_of(query: Option<&str>) -> String {
    let raw = query.and_then(|q| q.split('&').find_map(|p| p.strip_prefix("next=")));
    let decoded = raw.map(|r| {
        let bytes = r.replace('+', " ");
        percent_decode(&bytes)
    });
    decoded.as_deref().map(local_path).unwrap_or_else(|| "/".into())
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && let Some(v) = s.get(i + 1..i + 3).and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `next` if it is a path on this dashboard, else `/`: `//host` or
/// `/\host` would send the browser to another site.
fn local_path(next: &str) -> String {
    let ok = next.starts_with('/')
        && !next.starts_with("//")
        && !next.starts_with("/\\")
        && !next.chars().any(|c| c.is_control());
    if ok { next.to_string() } else { "/".into() }
}

/// The sign-in page, for `GET /login` and for a 401 a browser reads.
pub fn form_page(status: StatusCode, next: &str, error: Option<&str>) -> Response {
    let next = super::view::escape(next);
    let error =
        error.map(|e| format!("<p id=\"error\" class=\"err\">{}</p>", super::view::escape(e))).unwrap_or_default();
    let page = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>sign in · Flotilla</title></head>\
         <body><main><h2>Flotilla dashboard</h2>{error}\
         <form id=\"login-form\" method=\"post\" action=\"{PATH}\">\
         <label>token <input id=\"login-token\" type=\"password\" name=\"token\" autocomplete=\"current-password\"></label>\
         <input type=\"hidden\" name=\"next\" value=\"{next}\">\
         <button id=\"login\" type=\"submit\">sign in</button></form>\
         <p>The token is the admin token ([dashboard] token_env) or a tenant's \
         ([dashboard.tenants.&lt;tenant&gt;] token_env). API clients send <code>Authorization: Bearer</code> instead.</p>\
         </main></body></html>"
    );
    let mut r = (status, Html(page)).into_response();
    r.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_stays_on_this_dashboard() {
        assert_eq!(local_path("/jobs/1?x=1"), "/jobs/1?x=1");
        for evil in ["//evil.example/", "/\\evil.example", "https://evil.example/", "jobs", "/a\r\nSet-Cookie: x"] {
            assert_eq!(local_path(evil), "/", "{evil:?}");
        }
        assert_eq!(next_of(Some("next=%2Fjobs%2F1")), "/jobs/1");
        assert_eq!(next_of(Some("next=%2F%2Fevil.example")), "/");
        assert_eq!(next_of(None), "/");
    }
}
