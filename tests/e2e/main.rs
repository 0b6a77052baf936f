//! End-to-end tests: one binary (fast to link), one module per feature.
//! Each test starts its own nats-server and processes, so tests run in parallel.

mod approvals;
mod async_tasks;
mod bad_input;
mod clean_ends;
mod cli_pipe;
mod cluster;
mod common;
mod context;
mod deploy_manifests;
mod draining;
mod durability;
mod failover;
mod files;
mod history;
mod job_files;
mod job_io;
mod map_tasks;
mod mcp;
mod mcp_conformance;
mod mcp_context;
mod operations;
mod real_models;
mod sandbox;
mod sandbox_hardening;
mod scale;
mod sec_dashboard;
mod sec_limits;
mod sec_mcp_http;
mod sec_roles;
mod security;
mod service_api;
mod tls;
mod tools_reserved;
mod versions;
mod walking_skeleton;
