//! The Synadia Agent Protocol for NATS, version 0.3 (docs/PROTOCOLS.md,
//! "Synadia Agent Protocol for NATS"), both ways:
//!
//! - [`wire`]: subjects, envelope, chunks, heartbeat and error frame, the
//!   one codec of both ends;
//! - `host` (feature `host`, bound by `flotilla orchestrator` when
//!   `[agent_protocol] enabled = true`): Flotilla's job API as the protocol
//!   agent `flotilla`, one registration per served tenant;
//! - [`caller`] (a subagent type with `agent = { name, owner }`) runs a
//!   task as a prompt of that agent, for the worker.
//!
//! The host sits behind a feature because it is a client of the job API
//! (`flotilla-client`), which the worker, linking the caller, must not
//! reach (docs/ARCHITECTURE.md).

pub mod caller;
#[cfg(feature = "host")]
pub mod host;
pub mod wire;
