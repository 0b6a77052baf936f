//! Arize Phoenix (`phoenix serve`, from PyPI): a tracing backend an operator
//! would run, receiving OTLP over HTTP on its own port, read back through
//! its REST API (`GET /v1/projects/<project>/spans`). Installed by
//! `scripts/install-deps --test` into `.flotilla/test-deps/phoenix`.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::{TempDir, free_port};

/// What to run when Phoenix is missing.
pub const INSTALL_HINT: &str =
    "run `scripts/install-deps --test` (installs Arize Phoenix into .flotilla/test-deps/phoenix)";

/// A running Phoenix server with its own empty database; killed on drop.
pub struct Phoenix {
    child: Child,
    port: u16,
    grpc: u16,
    log: PathBuf,
    _dir: TempDir,
}

impl Phoenix {
    /// Starts Phoenix on free ports and waits until `/healthz` answers.
    pub async fn start() -> Self {
        flotilla_config::tls::install_crypto_provider();
        let exe = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.flotilla/test-deps/phoenix/bin/phoenix");
        assert!(exe.is_file(), "{} is missing: {INSTALL_HINT}", exe.display());
        let dir = TempDir::new("phoenix");
        let (port, grpc) = (free_port(), free_port());
        let log = dir.path().join("phoenix.log");
        let out = std::fs::File::create(&log).expect("phoenix log");
        let child = Command::new(&exe)
            .arg("serve")
            .env("PHOENIX_WORKING_DIR", dir.path())
            .env("PHOENIX_HOST", "127.0.0.1")
            .env("PHOENIX_PORT", port.to_string())
            .env("PHOENIX_GRPC_PORT", grpc.to_string())
            .env("PHOENIX_TELEMETRY_ENABLED", "false")
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("log"))
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e} ({INSTALL_HINT})", exe.display()));
        let phoenix = Self { child, port, grpc, log, _dir: dir };
        let http = reqwest::Client::new();
        let url = format!("{}/healthz", phoenix.url());
        crate::eventually(Duration::from_secs(120), "Phoenix to answer /healthz", || {
            let (http, url) = (http.clone(), url.clone());
            async move { http.get(url).send().await.ok().filter(|r| r.status().is_success()).map(|_| ()) }
        })
        .await;
        phoenix
    }

    /// Its base URL: the OTLP/HTTP endpoint (`/v1/traces`) and the API.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Its OTLP/gRPC endpoint.
    pub fn grpc_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.grpc)
    }

    /// Every span of the `default` project, oldest pages first.
    pub async fn spans(&self) -> Vec<Value> {
        let http = reqwest::Client::new();
        let mut out = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let mut url = format!("{}/v1/projects/default/spans?limit=1000", self.url());
            if let Some(c) = &cursor {
                url.push_str(&format!("&cursor={c}"));
            }
            let Ok(r) = http.get(&url).send().await else { return out };
            // No project yet (nothing received): no spans.
            let Ok(page) = r.json::<Value>().await else { return out };
            out.extend(page["data"].as_array().cloned().unwrap_or_default());
            match page["next_cursor"].as_str() {
                Some(c) => cursor = Some(c.to_string()),
                None => return out,
            }
        }
    }

    /// What Phoenix printed.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Phoenix {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("----- log of phoenix -----\n{}\n----- end of phoenix -----", self.log());
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
