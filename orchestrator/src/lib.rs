//! The orchestrator library: everything the `flotilla orchestrator` service
//! does, with the `flotilla` binary (src/main.rs, src/cli/) a thin CLI on top.
//!
//! # Components and how they connect
//!
//! - [`service`]: the entry point. [`service::Orchestrator::connect`] opens the
//!   bus and the stores below; [`service::Orchestrator::run`] resumes the jobs a
//!   previous orchestrator left unfinished, then answers the job API
//!   (`<prefix>.api.<tenant>.{submit,status,list,cancel,approvals,approve}`)
//!   until its `shutdown` future completes. Each accepted job gets one planner
//!   task, at most `[planner] concurrency` at once (a semaphore permit per job).
//! - `planner`: one agent run per job, with `write_todos` and `task` as tools.
//!   `task` publishes a task message to the JetStream work queue and waits for
//!   the report through `reports`; the planner owns the job's lifecycle.
//! - `jobs`: the job store (jobs KV bucket). Every job-record change and every
//!   job event goes through it, so it is also where `metrics` counts.
//! - `reports`: routes task reports from the reports stream to the `task` call
//!   waiting for each, first report wins (exactly-once consolidation).
//! - checkpoints (`flotilla_bus::Checkpoints`): the planner's conversation
//!   after every turn, so a restarted orchestrator resumes a job where it stopped.
//! - `dead_letters`: turns tasks JetStream gave up on (`max_deliver`) into
//!   failed reports, so a planner never waits in silence.
//! - `approvals`: the `approvals`/`approve` API operations over the approvals
//!   bucket (docs/APPROVALS.md).
//! - `metrics`: Prometheus families fed by `jobs`, built as a router by the
//!   service ([`service::Orchestrator::metrics_router`]); binding and serving
//!   the socket is the binary's job (src/cli/endpoints.rs).
//! - [`reader`]: a read-only handle on every tenant's job records
//!   ([`service::Orchestrator::jobs_reader`]) for the web dashboard (the
//!   `flotilla-dashboard` crate, which the binary binds): HTTP serving stays
//!   out of this library. Clients, the dashboard among them, send the job
//!   API and follow job events through `flotilla-client`.
//!
//! The local all-in-one supervisor (`flotilla up`/`demo`) is not here: it
//! starts the binaries themselves as child processes, so it lives in the
//! binary (src/cli/supervisor.rs).

#![deny(missing_docs)]

mod approvals;
mod dead_letters;
#[cfg(test)]
mod fakes;
mod files_api;
mod jobs;
mod leases;
mod metrics;
mod planner;
mod ports;
pub mod reader;
mod reports;
mod runner;
pub mod service;
