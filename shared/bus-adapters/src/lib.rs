//! The bus behind two ports that lower crates define without knowing NATS:
//! the agent's [`AuditSink`] (records to the audit stream) and the MCP
//! client's [`TokenStore`] (the `flotilla mcp login` credentials in the
//! `<prefix>_mcp_tokens` KV bucket). Each impl is one delegation. A crate
//! of its own because the bus may depend on neither the agent nor the MCP
//! client, and the orchestrator and the worker, which both wire them, may
//! not depend on each other (docs/ARCHITECTURE.md).

use std::sync::Arc;

use async_trait::async_trait;
use flotilla_agent::audit::AuditSink;
use flotilla_bus::McpTokens;
use flotilla_bus::audit::BusAuditSink;
use flotilla_mcp::oauth::{TokenStore, TokenStoreError};
use flotilla_protocol::AuditRecord;

/// The audit stream as the agent's audit sink.
pub struct BusAudit(pub Arc<BusAuditSink>);

#[async_trait]
impl AuditSink for BusAudit {
    async fn write(&self, record: AuditRecord) {
        self.0.write(record).await;
    }
}

/// The `<prefix>_mcp_tokens` bucket as the MCP client's token store.
pub struct BusTokens(pub McpTokens);

#[async_trait]
impl TokenStore for BusTokens {
    async fn get(&self, server: &str) -> Result<Option<Vec<u8>>, TokenStoreError> {
        Ok(self.0.get(server).await?.map(Vec::from))
    }

    async fn put(&self, server: &str, record: Vec<u8>) -> Result<(), TokenStoreError> {
        Ok(self.0.put(server, record.into()).await?)
    }

    async fn remove(&self, server: &str) -> Result<(), TokenStoreError> {
        Ok(self.0.remove(server).await?)
    }
}
