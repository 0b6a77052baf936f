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
/// an outgoing connection of a parallel test may take it in between. A port
/// is handed out once per process: two parallel tests that both found it
/// free before either server bound it would otherwise start two servers on
/// it, and the second would exit ("address already in use"); a server
/// restarted on its port keeps it too.
pub fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    for _ in 0..1000 {
        let port = fastrand::u16(20_000..32_000);
        if !given.contains(&port) && std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            given.insert(port);
            return port;
        }
    }
    panic!("no free port in 20000-32000 on 127.0.0.1")
}

/// Waits until a server `child` started accepts connections (`accepts`), for
/// at most 20 s; a server that exits meanwhile fails at once with its log
/// (`log`), not after the timeout.
pub async fn await_accepting<F, Fut>(what: &str, child: &mut std::process::Child, log: &std::path::Path, mut accepts: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    eventually(std::time::Duration::from_secs(20), &format!("{what} to accept connections"), || {
        if let Ok(Some(status)) = child.try_wait() {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            panic!("{what} exited with {status} before it accepted connections; its log:\n{text}");
        }
        let accepted = accepts();
        async move { accepted.await.then_some(()) }
    })
    .await
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_is_handed_out_once_however_often_it_is_still_free() {
        // 2 000 draws from 12 000 ports, none bound meanwhile: without the
        // record of ports given, some would repeat (the birthday bound).
        let ports: Vec<u16> = (0..2000).map(|_| free_port()).collect();
        let distinct: std::collections::BTreeSet<u16> = ports.iter().copied().collect();
        assert_eq!(distinct.len(), ports.len());
    }

    #[tokio::test]
    async fn a_server_that_exits_before_it_accepts_fails_at_once_with_its_log() {
        let dir = TempDir::new("exits");
        let log = dir.path().join("log");
        std::fs::write(&log, "listen tcp 127.0.0.1:1: bind: address already in use\n").unwrap();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let started = std::time::Instant::now();
        let waited =
            tokio::spawn(async move { await_accepting("the server", &mut child, &log, || async { false }).await });
        let panic = waited.await.expect_err("it fails").into_panic();
        let text = panic.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(text.contains("exited with") && text.contains("address already in use"), "{text}");
        assert!(started.elapsed() < std::time::Duration::from_secs(20), "failed before the timeout");
    }
}
