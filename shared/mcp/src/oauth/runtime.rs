//! What a process brings to OAuth besides config: who can answer an
//! authorization URL (a person's browser, or the conformance suite's
//! auto-redirecting endpoint) and where refresh tokens from an earlier
//! `flotilla mcp login` live. Set once per process, because it is a property
//! of the process (a worker never has a browser), not of a server.

use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use rmcp::transport::auth::{AuthError, CredentialStore, StoredCredentials};

/// Takes the user agent through an authorization URL and returns the
/// redirect URL the authorization server sent it back to (with `code`, `state`).
#[async_trait]
pub trait Authorizer: Send + Sync {
    /// `server` is the config name; `url` the authorization URL.
    async fn authorize(&self, server: &str, url: &str) -> Result<String, String>;
}

/// Per-server credential stores (rmcp's [`CredentialStore`]) holding the
/// refresh tokens of `authorization_code` servers.
pub trait CredentialStores: Send + Sync {
    /// The store for `server`, if this process keeps one.
    fn for_server(&self, server: &str) -> Option<Arc<dyn CredentialStore>>;
}

struct Runtime {
    authorizer: Option<Arc<dyn Authorizer>>,
    stores: Option<Arc<dyn CredentialStores>>,
}

static RUNTIME: OnceLock<Runtime> = OnceLock::new();

/// Sets this process's authorizer and credential stores; the first call wins.
pub fn set_runtime(authorizer: Option<Arc<dyn Authorizer>>, stores: Option<Arc<dyn CredentialStores>>) -> bool {
    RUNTIME.set(Runtime { authorizer, stores }).is_ok()
}

pub(super) fn has_authorizer() -> bool {
    RUNTIME.get().is_some_and(|r| r.authorizer.is_some())
}

pub(super) async fn authorize(server: &str, url: &str) -> Result<String, String> {
    match RUNTIME.get().and_then(|r| r.authorizer.clone()) {
        Some(a) => a.authorize(server, url).await,
        None => Err("this process cannot open a browser".into()),
    }
}

pub(super) fn store_for(server: &str) -> Option<Shared> {
    RUNTIME.get().and_then(|r| r.stores.as_ref()).and_then(|s| s.for_server(server)).map(Shared)
}

/// rmcp wants a sized store; this forwards to the shared one.
pub(super) struct Shared(Arc<dyn CredentialStore>);

#[async_trait]
impl CredentialStore for Shared {
    async fn load(&self) -> Result<Option<StoredCredentials>, AuthError> {
        self.0.load().await
    }
    async fn save(&self, credentials: StoredCredentials) -> Result<(), AuthError> {
        self.0.save(credentials).await
    }
    async fn clear(&self) -> Result<(), AuthError> {
        self.0.clear().await
    }
}
