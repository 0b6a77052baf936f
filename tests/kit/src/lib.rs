//! The dev and test kit: real `nats-server` (JetStream on) on a free loopback
//! port, real `flotilla` and `flotilla-worker` processes of this build,
//! scripted configs, a whole [`Deployment`], temp dirs, all cleaned up on
//! drop. A failing test prints each process's log (see [`Proc::log`]). One
//! kit serves the e2e tests (tests/e2e) and `flotilla bench`
//! (orchestrator/bench), so both run the processes the same way.
//!
//! Binaries come from the workspace's target dir: run `cargo build --bins`
//! before `cargo test` (the README's test command does). The kit drives the
//! processes only from outside, as an operator would: it must not depend on
//! the orchestrator or worker crates, only on the protocol, config and bus.

pub mod anthropic;
pub mod chat_endpoint;
pub mod config;
pub mod deployment;
pub mod events;
pub mod floor;
pub mod metered;
pub mod nats;
pub mod nats_conf;
pub mod phoenix;
pub mod planner_script;
pub mod proc;
pub mod raw;
pub mod scripts;

pub use config::TestConfig;
pub use deployment::{Deployment, TIMEOUT};
pub use events::EventLog;
pub use nats::NatsServer;
pub use proc::{Proc, bin};
pub use raw::RawNats;

use std::path::PathBuf;

/// A fresh temp dir under the system temp dir, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// Creates `flotilla-<tag>-<uuid>`.
    pub fn new(tag: &str) -> Self {
        let p = std::env::temp_dir().join(format!("flotilla-{tag}-{}", uuid::Uuid::now_v7()));
        std::fs::create_dir_all(&p).expect("temp dir");
        Self(p)
    }
    /// The path.
    pub fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if std::env::var_os("FLOTILLA_KEEP_TEST_DIRS").is_none() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// A free TCP port on 127.0.0.1, chosen below the kernel's ephemeral range
/// (32768+): a port from `bind(0)` is released before the server binds it, and
/// an outgoing connection of a parallel test may take it in between.
pub fn free_port() -> u16 {
    for _ in 0..1000 {
        let port = fastrand::u16(20_000..32_000);
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in 20000-32000 on 127.0.0.1")
}

/// Polls `check` until it returns `Some` or `timeout` passes (for external
/// state that has no event to await, such as a port starting to accept).
pub async fn eventually<T, F, Fut>(timeout: std::time::Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out after {timeout:?} waiting for {what}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}
