//! # flotilla-shared
//!
//! The crate both sides of Flotilla build on. The planner (in
//! `flotilla-orchestrator`) and the workers (in `flotilla-worker`) differ only
//! in which tools they give the same agent loop and where its tasks come from.
//!
//! - [`ids`] and [`subjects`]: typed ids and every bus name, built in one place.
//! - [`protocol`]: the versioned messages (tasks, reports, progress, job events,
//!   job records, API requests/replies) and their checked decoding.
//! - [`config`]: the TOML + environment configuration, validated into settings.
//! - [`model`]: the chat-model trait and its providers (`openai`, `scripted`).
//! - [`tool`]: the tool trait, error contract and the per-agent tool set that
//!   validates arguments against each tool's JSON Schema.
//! - [`agent`]: the tool-call loop with step, time and token limits.
//! - [`files`]: the job files every agent of a job shares (JetStream Object
//!   Store), with the path policy; [`builtin`]: the file tools over them;
//!   [`permissions`]: the rules those tools enforce.
//! - [`mcp`]: MCP servers as tools (rmcp): stdio and Streamable HTTP
//!   sessions, discovery, timeouts, reconnect-once, health.
//! - [`bus`]: connecting to NATS and declaring the JetStream streams and buckets.
//! - [`telemetry`]: logging setup shared by the binaries.
//! - [`metrics`]: Prometheus families shared by the binaries and the `/metrics` endpoint.
//! - [`trace`]: W3C traceparent helpers carried from planner to workers.
//! - [`tls`]: installs the one rustls crypto provider (`ring`) before any
//!   HTTPS client is built.
//! - [`audit`]: the audit record of every tool call and approval, written
//!   through one sink; [`sanitize`]: the one sanitizer for error text that
//!   reaches a model or a report.
#![deny(missing_docs)]

pub use flotilla_agent::{agent, digest, files, retry, sanitize, tool};
pub use flotilla_config::{permissions, tls};
pub use flotilla_protocol::{ids, subjects, trace};
pub use {flotilla_config as config, flotilla_protocol as protocol};

/// Audit records (agent crate) and their NATS sink and reader (bus).
pub mod audit {
    pub use flotilla_bus::audit::{BusAuditSink, read};
    pub use flotilla_agent::audit::*;
}

/// The model trait and models (agent crate), the OpenAI-compatible provider
/// and the factory of every provider (`flotilla-model-openai`).
pub mod model {
    pub use flotilla_agent::model::*;
    pub use flotilla_model_openai as openai;
    pub use flotilla_model_openai::build;
}

pub use flotilla_tools as builtin;
pub use flotilla_bus as bus;
pub use flotilla_mcp as mcp;
pub mod metrics;
pub mod telemetry;
