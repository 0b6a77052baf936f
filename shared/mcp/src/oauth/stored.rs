//! rmcp's per-server [`CredentialStore`] over a [`TokenStore`]:
//! `flotilla mcp login` saves what a person's sign-in obtained, a worker
//! loads it at its first session and saves refreshed tokens back, so every
//! worker of a type shares one grant. The record is rmcp's
//! `StoredCredentials` JSON; its tokens never leave rmcp's types except into
//! the store ([`StoredSummary`] is what may be shown).
//!
//! [`TokenStore`] is the port this crate defines so that it needs no NATS:
//! the binaries wire it to the `<prefix>_mcp_tokens` KV bucket of the bus
//! (`flotilla_bus::McpTokens`).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use oauth2::TokenResponse;
use rmcp::transport::auth::{AuthError, CredentialStore, StoredCredentials};

use super::CredentialStores;

/// Why a [`TokenStore`] operation failed, as the store tells it (it names the
/// server and the store, never the record).
pub type TokenStoreError = Box<dyn std::error::Error + Send + Sync>;

/// Where the credential records of `flotilla mcp login` are kept: one opaque
/// record per MCP server name, shared by every process of a deployment.
#[async_trait]
pub trait TokenStore: Send + Sync {
    /// The stored record of `server`, if any.
    async fn get(&self, server: &str) -> Result<Option<Vec<u8>>, TokenStoreError>;
    /// Replaces the record of `server`.
    async fn put(&self, server: &str, record: Vec<u8>) -> Result<(), TokenStoreError>;
    /// Removes the record of `server`.
    async fn remove(&self, server: &str) -> Result<(), TokenStoreError>;
}

/// The credential stores of the named servers, over one [`TokenStore`].
pub struct StoredCredentialStores {
    tokens: Arc<dyn TokenStore>,
    servers: BTreeSet<String>,
    /// Loads find nothing until this process saves: a login always asks
    /// the person again (rmcp loads before every request, so the record it
    /// saves must be found afterwards).
    skip_stored: Arc<AtomicBool>,
}

impl StoredCredentialStores {
    /// Stores for `servers` (the `authorization_code` servers this process uses).
    pub fn new(tokens: Arc<dyn TokenStore>, servers: impl IntoIterator<Item = String>) -> Self {
        Self { tokens, servers: servers.into_iter().collect(), skip_stored: Arc::default() }
    }

    /// For `flotilla mcp login`: a stored record is never reused, only replaced.
    pub fn for_login(self) -> Self {
        self.skip_stored.store(true, Ordering::Relaxed);
        self
    }
}

impl CredentialStores for StoredCredentialStores {
    fn for_server(&self, server: &str) -> Option<Arc<dyn CredentialStore>> {
        self.servers.contains(server).then(|| {
            Arc::new(ServerStore {
                tokens: self.tokens.clone(),
                server: server.to_string(),
                skip_stored: self.skip_stored.clone(),
            }) as Arc<dyn CredentialStore>
        })
    }
}

struct ServerStore {
    tokens: Arc<dyn TokenStore>,
    server: String,
    skip_stored: Arc<AtomicBool>,
}

fn internal(e: impl std::fmt::Display) -> AuthError {
    AuthError::InternalError(e.to_string())
}

#[async_trait]
impl CredentialStore for ServerStore {
    async fn load(&self) -> Result<Option<StoredCredentials>, AuthError> {
        if self.skip_stored.load(Ordering::Relaxed) {
            return Ok(None);
        }
        let Some(bytes) = self.tokens.get(&self.server).await.map_err(internal)? else { return Ok(None) };
        // serde_json's error names a position, never the value.
        let record = serde_json::from_slice(&bytes)
            .map_err(|e| internal(format!("the stored OAuth credentials of `{}` are unreadable: {e}", self.server)))?;
        Ok(Some(record))
    }

    async fn save(&self, credentials: StoredCredentials) -> Result<(), AuthError> {
        let bytes = serde_json::to_vec(&credentials).map_err(internal)?;
        self.tokens.put(&self.server, bytes).await.map_err(internal)?;
        self.skip_stored.store(false, Ordering::Relaxed);
        Ok(())
    }

    async fn clear(&self) -> Result<(), AuthError> {
        self.tokens.remove(&self.server).await.map_err(internal)
    }
}

/// What a stored record may show: no token, only its shape.
#[derive(Debug, PartialEq)]
pub struct StoredSummary {
    /// The OAuth client the grant belongs to.
    pub client_id: String,
    /// Scopes granted.
    pub scopes: Vec<String>,
    /// Unix seconds when the access token expires, when the server said.
    pub expires_at: Option<u64>,
    /// Whether a refresh token is stored (workers renew the access token with it).
    pub refreshable: bool,
}

impl StoredSummary {
    /// The summary of the record of `server` in `tokens`, if there is one.
    pub async fn load(tokens: &dyn TokenStore, server: &str) -> Result<Option<Self>, String> {
        let Some(bytes) = tokens.get(server).await.map_err(|e| e.to_string())? else { return Ok(None) };
        let record: StoredCredentials =
            serde_json::from_slice(&bytes).map_err(|e| format!("the stored record is unreadable: {e}"))?;
        Ok(Some(Self::of(&record)))
    }

    fn of(record: &StoredCredentials) -> Self {
        let token = record.token_response.as_ref();
        let expires_at = token
            .and_then(|t| t.expires_in())
            .zip(record.token_received_at)
            .map(|(lifetime, received)| received + lifetime.as_secs());
        StoredSummary {
            client_id: record.client_id.clone(),
            scopes: record.granted_scopes.clone(),
            expires_at,
            refreshable: token.is_some_and(|t| t.refresh_token().is_some()),
        }
    }
}
