//! What the Flotilla services (`flotilla`, `flotilla-worker`, and the
//! orchestrator and worker libraries they run) need around their work and
//! the client-side crates do not: [`logging`] (text or JSON, `RUST_LOG`),
//! [`otel`] (OTLP export of traces and metrics), [`trace`] (spans joined
//! across processes by the task messages' `traceparent`), [`metrics`] (the
//! Prometheus `/metrics` endpoint, and the agent metric families both
//! binaries feed), [`host`] (the one host-name lookup) and [`process`]
//! (the resident memory a worker's heartbeats carry). Kept out of the
//! agent, bus and client crates so they do not compile axum, the
//! OpenTelemetry SDK or tracing-subscriber.

#![deny(missing_docs)]

pub mod host;
pub mod logging;
pub mod metrics;
pub mod otel;
pub mod process;
pub mod trace;
