//! rmcp's per-server [`CredentialStore`] over the `<prefix>_mcp_tokens` KV
//! bucket ([`flotilla_bus::McpTokens`]): `flotilla mcp login` saves what a
//! person's sign-in obtained, a worker loads it at its first session and
//! saves refreshed tokens back, so every worker of a type shares one grant.
//! The record is rmcp's `StoredCredentials` JSON; its tokens never leave
//! rmcp's types except into the bucket ([`StoredSummary`] is what may be shown).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use flotilla_bus::McpTokens;
use oauth2::TokenResponse;
use rmcp::transport::auth::{AuthError, CredentialStore, StoredCredentials};

use super::CredentialStores;

/// The KV-backed stores of the named servers.
pub struct BusCredentialStores {
    tokens: McpTokens,
    servers: BTreeSet<String>,
    /// Loads find nothing until this process saves: a login always asks
    /// the person again (rmcp loads before every request, so the record it
    /// saves must be found afterwards).
    skip_stored: Arc<AtomicBool>,
}

impl BusCredentialStores {
    /// Stores for `servers` (the `authorization_code` servers this process uses).
    pub fn new(tokens: McpTokens, servers: impl IntoIterator<Item = String>) -> Self {
        Self { tokens, servers: servers.into_iter().collect(), skip_stored: Arc::default() }
    }

    /// For `flotilla mcp login`: a stored record is never reused, only replaced.
    pub fn for_login(self) -> Self {
        self.skip_stored.store(true, Ordering::Relaxed);
        self
    }
}

impl CredentialStores for BusCredentialStores {
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
    tokens: McpTokens,
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
        self.tokens.put(&self.server, bytes.into()).await.map_err(internal)?;
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
    pub async fn load(tokens: &McpTokens, server: &str) -> Result<Option<Self>, String> {
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
