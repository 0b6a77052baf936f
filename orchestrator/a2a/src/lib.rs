//! A2A v1.0, both ways (docs/PROTOCOLS.md, "A2A v1.0").
//!
//! - [`wire`]: the protocol's types in its ProtoJSON spelling, shared by both sides.
//! - [`client`]: a remote A2A agent as the backend of a subagent type, the
//!   worker's [`RemoteAgent`](flotilla_agent::remote::RemoteAgent).
//! - `server` (feature `server`, enabled only by `flotilla-cli`): Flotilla's
//!   job API as an A2A agent on the HTTP API's listener, over the job-API
//!   client. Behind a feature because the worker links this crate for the
//!   client and must not reach `flotilla-client` (docs/ARCHITECTURE.md).

#![deny(missing_docs)]

pub mod client;
pub mod wire;

#[cfg(feature = "server")]
pub mod server;
