//! Each MCP HTTP session belongs to the credential that opened it
//! (docs/MCP.md, "HTTP security"). rmcp hands out a session id with the
//! `initialize` answer and then serves whoever sends it in
//! `Mcp-Session-Id`; without this binding a token of another tenant that
//! learnt the id could read the session's stream, call tools on it (as its
//! own tenant, but in a session that is not its own) or `DELETE` it.
//!
//! The auth middleware (src/http.rs, oauth.rs) marks each
//! request with its [`Owner`]; here a new session is recorded with the
//! owner of the request that opened it, and a request naming a session of
//! another owner, or one never handed out here, is answered exactly as
//! rmcp answers an unknown session (404 `Session not found`), so nobody
//! learns that the id exists. A `DELETE` is only passed on for the owner.
//!
//! A 2026-07-28 request has no session (each one carries its own `_meta`
//! and is authenticated on its own), so it names none and passes through
//! here untouched; rmcp hands out no session id for it to bind.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// The header rmcp names sessions with.
const SESSION_HEADER: &str = "mcp-session-id";
/// Bindings kept; past this the oldest session is forgotten, and refused
/// from then on like any unknown one (its host opens a new session).
const MAX_SESSIONS: usize = 10_000;

/// Who a request authenticated as: a digest of the static token, or the
/// OAuth subject with its tenant; empty without any token (one owner).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Owner(pub String);

/// The session ids handed out, with their owners.
#[derive(Default)]
pub struct Sessions {
    bound: Mutex<Bound>,
}

#[derive(Default)]
struct Bound {
    owners: HashMap<String, Owner>,
    /// Ids, oldest first, to forget past [`MAX_SESSIONS`].
    order: VecDeque<String>,
}

impl Sessions {
    fn owner_of(&self, id: &str) -> Option<Owner> {
        self.bound.lock().unwrap_or_else(|e| e.into_inner()).owners.get(id).cloned()
    }

    fn insert(&self, id: String, owner: Owner) {
        let mut b = self.bound.lock().unwrap_or_else(|e| e.into_inner());
        if b.owners.insert(id.clone(), owner).is_none() {
            b.order.push_back(id);
        }
        while b.order.len() > MAX_SESSIONS {
            if let Some(old) = b.order.pop_front() {
                b.owners.remove(&old);
            }
        }
    }

    fn forget(&self, id: &str) {
        let mut b = self.bound.lock().unwrap_or_else(|e| e.into_inner());
        if b.owners.remove(id).is_some() {
            b.order.retain(|i| i != id);
        }
    }
}

/// rmcp's own answer to an unknown session id.
fn not_found() -> Response {
    (StatusCode::NOT_FOUND, "Not Found: Session not found").into_response()
}

/// Middleware behind the auth check: see the module doc.
pub async fn bind(State(sessions): State<Arc<Sessions>>, req: Request, next: Next) -> Response {
    let owner = req.extensions().get::<Owner>().cloned().unwrap_or_default();
    let named = req.headers().get(SESSION_HEADER).and_then(|v| v.to_str().ok()).map(str::to_string);
    let Some(id) = named else {
        let response = next.run(req).await;
        if let Some(id) = response.headers().get(SESSION_HEADER).and_then(|v| v.to_str().ok()) {
            sessions.insert(id.to_string(), owner);
        }
        return response;
    };
    if sessions.owner_of(&id).is_none_or(|o| o != owner) {
        return not_found();
    }
    let delete = req.method() == Method::DELETE;
    let response = next.run(req).await;
    if (delete && response.status().is_success()) || response.status() == StatusCode::NOT_FOUND {
        sessions.forget(&id);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_binding_goes_first_past_the_cap() {
        let s = Sessions::default();
        for i in 0..=MAX_SESSIONS {
            s.insert(i.to_string(), Owner("a".into()));
        }
        assert_eq!(s.owner_of("0"), None);
        assert_eq!(s.owner_of("1"), Some(Owner("a".into())));
        s.forget("1");
        assert_eq!(s.owner_of("1"), None);
    }
}
