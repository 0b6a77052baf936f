//! OAuth credentials of `authorization_code` MCP servers (docs/MCP.md
//! "OAuth"): `flotilla mcp login <server>` stores what a person's sign-in
//! obtained, and workers load it (and save refreshed tokens back) so they
//! never need a browser. One key per server name in `<prefix>_mcp_tokens`,
//! so NATS permissions can grant each worker type the servers it uses and
//! nothing else (deploy/nats/roles.conf).
//!
//! The value is rmcp's `StoredCredentials` as JSON, opaque here (this crate
//! does not depend on the MCP client; shared/mcp/src/oauth/stored.rs reads
//! it through its `TokenStore` port, implemented over this type in
//! shared/bus-adapters/src/lib.rs). It holds a refresh token: it is never
//! logged, and errors name the server and bucket only.

use async_nats::jetstream::kv;
use bytes::Bytes;

use crate::{Bus, BusError};

/// The credential records, one per MCP server.
#[derive(Clone)]
pub struct McpTokens {
    kv: kv::Store,
    bucket: String,
}

impl McpTokens {
    /// Opens the bucket (declared by the orchestrator, or by this process
    /// when it manages the topology).
    pub async fn open(bus: &Bus) -> Result<Self, BusError> {
        Ok(Self { kv: bus.mcp_tokens_bucket().await?, bucket: bus.subjects.mcp_tokens_bucket() })
    }

    /// The stored record of `server`, if any.
    pub async fn get(&self, server: &str) -> Result<Option<Bytes>, BusError> {
        let key = self.key(server)?;
        self.kv.get(key).await.map_err(|e| self.error("cannot read", server, e))
    }

    /// Replaces the record of `server`.
    pub async fn put(&self, server: &str, record: Bytes) -> Result<(), BusError> {
        let key = self.key(server)?;
        self.kv.put(key, record).await.map(drop).map_err(|e| self.error("cannot store", server, e))
    }

    /// Removes the record of `server`.
    pub async fn remove(&self, server: &str) -> Result<(), BusError> {
        let key = self.key(server)?;
        self.kv.purge(key).await.map_err(|e| self.error("cannot remove", server, e))
    }

    fn error(&self, what: &str, server: &str, e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> BusError {
        BusError::new(format!("{what} the OAuth credentials of MCP server `{server}` in KV bucket {}", self.bucket), e)
    }

    /// `server` as a key: one subject token (no `.`, `*`, `>`), so a
    /// permission on `$KV.<bucket>.<server>` covers exactly that server.
    fn key<'a>(&self, server: &'a str) -> Result<&'a str, BusError> {
        if valid_key(server) {
            return Ok(server);
        }
        Err(BusError::new(
            format!("MCP server name `{server}` cannot be a key of KV bucket {}", self.bucket),
            "OAuth credentials are stored per server name, which must be 1-64 letters, digits, '-' or '_'",
        ))
    }
}

fn valid_key(server: &str) -> bool {
    (1..=64).contains(&server.len()) && server.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_single_token_names_are_keys() {
        for ok in ["interactive", "tracker-2", "a_b"] {
            assert!(super::valid_key(ok), "{ok}");
        }
        for bad in ["", "a.b", "a*", ">", "a b", "ü", &"x".repeat(65)] {
            assert!(!super::valid_key(bad), "{bad}");
        }
    }
}
