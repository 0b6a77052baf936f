//! End-to-end tests: one binary (fast to link), one module per feature.
//! Each test starts its own nats-server and processes, so tests run in parallel.

mod common;
mod walking_skeleton;
