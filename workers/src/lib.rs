//! The Flotilla worker as a library: what a worker process runs, apart from
//! its argument parsing and start-up wiring (`main.rs`), so other programs
//! reuse the pieces and `flotilla config check` makes the worker's own
//! checks of a config ([`runtime::validate`]).
//!
//! - [`worker`]: the consume loops, one per served type, and the drain.
//! - [`task`]: one task delivery from receipt to report and ack.
//! - [`runtime`]: what the worker builds per served type (model, tools,
//!   sandbox, approvals) and the config checks that building makes.
//! - [`approval`]: the approval gate of `interrupt_on` tools.
//! - [`progress`]: a task's progress events.
//! - [`journal`]: a task's step journal, from which a later attempt resumes.
//! - [`heartbeat`], [`metrics`]: what the worker tells about itself.
//! - [`cancel`], [`inbox`]: job cancellations and follow-up messages reaching
//!   running tasks.
//! - [`tools`], [`mcp_context`], [`mcp_credentials`]: a type's tools, its MCP
//!   context and the MCP OAuth credentials.
//! - [`large_report`]: answers too long for a report message.
//! - [`remote`]: types backed by an agent elsewhere (docs/PROTOCOLS.md).
//!
//! It reaches NATS only through `flotilla-bus` (never async-nats itself),
//! and runs commands only through `flotilla-sandbox`. The demo's native tool
//! (`calculate_margin`, over the `finance-tools` crate) is compiled in only
//! with the `demo-tools` feature.

pub mod approval;
pub mod cancel;
pub mod heartbeat;
pub mod inbox;
pub mod journal;
pub mod large_report;
pub mod mcp_context;
pub mod mcp_credentials;
pub mod metrics;
pub mod progress;
pub mod remote;
pub mod runtime;
pub mod task;
pub mod tools;
pub mod worker;
