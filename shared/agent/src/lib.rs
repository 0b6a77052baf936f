//! Flotilla's agent runtime, with no NATS and no HTTP: everything that runs
//! one agent (the planner or a subagent) and that can be tested in-process.
//!
//! - [`agent`]: the tool-call loop with its step, time and token limits.
//! - [`tool`]: the `Tool` trait, the `ToolSet` pipeline every call passes
//!   (validate, approve, time out, sanitize, evict, audit), the approval gate.
//! - [`model`]: the `ChatModel` trait and the scripted model (the HTTP
//!   providers, the cost stamp and the factory are `flotilla-models`).
//! - [`audit`]: audit records and the `AuditSink` they go to (the NATS sink is
//!   the bus's).
//! - [`sanitize`]: the one sanitizer of errors that leave a process.
//! - [`spans`]: the OpenTelemetry GenAI spans of model and tool calls.
//! - [`tokens`]: token counts and truncation with the o200k_base tokenizer.
//!
//! Job files are `flotilla-job-files`, the backoff policy `flotilla-retry`,
//! the sha256 hex `flotilla_protocol::digest`, the Prometheus families of
//! agent runs `flotilla_telemetry::metrics`.
//!
//! How the crates fit together: docs/ARCHITECTURE.md.

#![deny(missing_docs)]

pub mod agent;
pub mod audit;
pub mod model;
pub mod remote;
pub mod sanitize;
pub mod spans;
pub mod tokens;
pub mod tool;
