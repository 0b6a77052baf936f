//! What both binaries (`flotilla`, `flotilla-worker`) need around their
//! work and nothing else does: [`logging`] (text or JSON, `RUST_LOG`),
//! [`metrics`] (the Prometheus `/metrics` endpoint, and the agent metric
//! families both binaries feed) and [`host`] (the one host-name lookup). Kept out of the library crates so they do
//! not compile axum or tracing-subscriber.

#![deny(missing_docs)]

pub mod host;
pub mod logging;
pub mod metrics;
