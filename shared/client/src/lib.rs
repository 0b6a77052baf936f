//! The typed client of Flotilla's job API (docs/PROTOCOL.md, "Job API"):
//! what the `flotilla` CLI, the web dashboard, `flotilla mcp serve` and the
//! bench send to the orchestrator, written once.
//!
//! - [`Client`] (client.rs): one tenant's job API over the bus; every
//!   operation is [`Client::call`] with its request type, which names the
//!   operation and its reply ([`flotilla_protocol::Op`]), plus the common
//!   ones by name (status, list, cancel, approvals, resolve).
//! - files.rs: the one upload path (parts with `files_put`, then a submit
//!   naming them) and checked downloads.
//! - [`jobref`]: a job as a person names it (whole id or short id).
//! - [`events`]: the one reader of the events stream (a job's events from
//!   its first, or a tenant's from now on), and [`EndWatch`], which follows
//!   a job until it ends even when its terminal event never arrives.
//! - [`render`]: an event as the one line `flotilla watch` prints.
//!
//! It speaks to the orchestrator only through the bus (`flotilla-bus`) and
//! the wire types (`flotilla-protocol`): it must not depend on the
//! orchestrator library, an HTTP stack or a CLI parser, so every front end
//! can use it.

#![deny(missing_docs)]

mod client;
pub mod events;
mod files;
pub mod jobref;
pub mod render;

pub use client::{Client, TIMEOUT, Unresolved, api_result};
pub use events::{EndWatch, Event, Scope};
pub use files::{FILE_TIMEOUT, NewFile};
pub use jobref::JobRef;
