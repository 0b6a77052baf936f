//! A throwaway deployment for one bench scenario: its own nats-server on a
//! free port, orchestrator and workers from this build, config and scripts in
//! a temp dir that is removed afterwards.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use flotilla_bus::Bus;
use flotilla_client::events::{self, Event, Scope};
use flotilla_config::Settings;
use flotilla_protocol::{JobEventKind, ProgressKind};
use futures::StreamExt;

use crate::cli::supervisor::Supervisor;
use flotilla_client::Client as ApiClient;

const PLANNER: &str = r#"
latency_ms = {latency}
[vars]
regions = "captures(input, '([A-Za-z][A-Za-z0-9_-]*): revenue (-?[0-9]+(?:[.][0-9]+)?), cost (-?[0-9]+(?:[.][0-9]+)?)')"
[[turns]]
[[turns.calls]]
tool = "write_todos"
args = '''{"todos": [{% for r in regions %}{"content": {{ r[1] | tojson }}, "status": "in_progress"}{% if not loop.last %}, {% endif %}{% endfor %}]}'''
[[turns]]
[[turns.calls]]
tool = "task"
for_each = "regions"
args = '''{"subagent_type": "finance", "description": {{ ("Compute the gross margin of region " ~ item[1] ~ ": revenue " ~ item[2] ~ ", cost " ~ item[3]) | tojson }}}'''
[[turns]]
content = "{% for r in last %}{{ r.value }} {% endfor %}"
"#;

/// The zero-latency-capable finance subagent: one `calculate_margin` call, then its margin.
pub const FINANCE: &str = r#"
latency_ms = {latency}
[vars]
nums = "captures(input, 'revenue (-?[0-9]+(?:[.][0-9]+)?), cost (-?[0-9]+(?:[.][0-9]+)?)')"
[[turns]]
[[turns.calls]]
tool = "calculate_margin"
args = '{"revenue": {{ nums[0][1] }}, "cost": {{ nums[0][2] }}}'
[[turns]]
content = "{{ last[0].value.margin }}"
"#;

/// `n` regions in the demo's job format.
pub fn regions(n: usize) -> String {
    let parts: Vec<String> = (0..n).map(|i| format!("r{i}: revenue {}, cost {}", 100 + i, 50 + i)).collect();
    format!("Gross margin of each region: {}.", parts.join("; "))
}

/// One running scenario.
pub struct Rig {
    sup: Supervisor,
    dir: PathBuf,
    /// Client connection to the rig's NATS.
    bus: Bus,
    settings: Settings,
    /// A nats-server the scenario started itself (e.g. with monitoring on).
    own_nats: Option<tokio::process::Child>,
    /// The HTTP monitoring port of `own_nats`, when it has one.
    pub monitor_port: Option<u16>,
}

impl Rig {
    /// A client connection to the rig's NATS, for publishing tasks directly.
    pub fn bus(&self) -> &Bus {
        &self.bus
    }

    /// Starts nats-server, an orchestrator and `workers` workers with
    /// `slots` concurrency, every model call taking `latency_ms`.
    pub async fn start(workers: usize, slots: usize, latency_ms: u64) -> anyhow::Result<Self> {
        let dir = std::env::temp_dir().join(format!("flotilla-bench-{}", uuid::Uuid::now_v7()));
        std::fs::create_dir_all(&dir)?;
        let port = free_port()?;
        std::fs::write(dir.join("planner.toml"), PLANNER.replace("{latency}", &latency_ms.to_string()))?;
        std::fs::write(dir.join("finance.toml"), FINANCE.replace("{latency}", &latency_ms.to_string()))?;
        let config = format!(
            r#"[nats]
url = "nats://127.0.0.1:{port}"
[models.planner]
provider = "scripted"
script = "planner.toml"
[models.finance]
provider = "scripted"
script = "finance.toml"
[planner]
model = "planner"
[subagents.finance]
description = "Computes gross margins."
model = "finance"
tools = ["calculate_margin"]
concurrency = {slots}
[local]
workers = {workers}
state_dir = "state"
# One tenant measured alone: its quotas must not be what the bench measures.
[tenants]
max_running_jobs = 1000
max_queued_jobs = 1000000
max_tasks_in_flight = 1000000
max_map_items = 1000000
api_rate = 1000000
api_burst = 1000000
"#
        );
        Self::launch(dir, &config, workers, None).await
    }

    /// Writes `config` as `<dir>/flotilla.toml` and starts its deployment
    /// (nats-server too, unless `own_nats` already serves its url), then
    /// waits until `workers` workers pull. The rig owns `dir` and `own_nats`.
    pub async fn launch(
        dir: PathBuf,
        config: &str,
        workers: usize,
        own_nats: Option<tokio::process::Child>,
    ) -> anyhow::Result<Self> {
        let path = dir.join("flotilla.toml");
        std::fs::write(&path, config)?;
        let settings = Settings::load(Some(&path))?;
        let sup = Supervisor::start(&settings, &path).await.context("bench deployment")?;
        let bus = Bus::connect(&settings.nats, "flotilla-bench", Duration::from_secs(10)).await?;
        bus.ensure_topology().await?;
        let rig = Self { sup, dir, bus, settings, own_nats, monitor_port: None };
        rig.wait_ready(workers).await?;
        Ok(rig)
    }

    /// Waits until the orchestrator answers and every worker has a pull pending.
    async fn wait_ready(&self, workers: usize) -> anyhow::Result<()> {
        let api = self.api();
        let deadline = Instant::now() + Duration::from_secs(30);
        while api.list(None, 1).await.is_err() {
            anyhow::ensure!(
                Instant::now() < deadline,
                "orchestrator did not start; logs in {}",
                self.sup.log_dir().display()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let ty = flotilla_protocol::ids::SubagentType::new("finance")?;
        let queue = self.bus.tasks();
        loop {
            // The type's consumer appears once a worker has declared it.
            if queue.depth(&ty).await.is_ok_and(|d| d.waiting as usize >= workers) {
                return Ok(());
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "workers did not start; logs in {}",
                self.sup.log_dir().display()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The client of the job API.
    pub fn api(&self) -> ApiClient {
        ApiClient::new(self.bus.clone(), Default::default())
    }

    /// Submits `input` and returns the wall time until the job completed.
    pub async fn run_job(&self, input: &str) -> anyhow::Result<Duration> {
        let api = self.api();
        let mut events = std::pin::pin!(events::follow(&self.bus, Scope::All, false).await?);
        let started = Instant::now();
        api.submit(input.to_string()).await?;
        while let Some(ev) = events.next().await {
            if let Event::Job(j) = ev? {
                match j.kind {
                    JobEventKind::Completed { .. } => return Ok(started.elapsed()),
                    JobEventKind::Failed { error } => anyhow::bail!("bench job failed: {error}"),
                    _ => {}
                }
            }
        }
        anyhow::bail!("event stream ended")
    }

    /// Input tokens of the first planner and first subagent model calls.
    pub async fn first_call_tokens(&self, input: &str) -> anyhow::Result<(u64, u64)> {
        let mut events = std::pin::pin!(events::follow(&self.bus, Scope::All, true).await?);
        self.api().submit(input.to_string()).await?;
        let (mut planner, mut subagent) = (None, None);
        while let Some(ev) = events.next().await {
            match ev? {
                Event::Job(j) => match j.kind {
                    JobEventKind::PlannerStep { step: 1, usage, .. } => planner = Some(usage.input_tokens),
                    JobEventKind::Completed { .. } | JobEventKind::Failed { .. } => break,
                    _ => {}
                },
                Event::Progress(p) => {
                    if let ProgressKind::ModelCall { step: 1, usage, .. } = p.kind {
                        subagent.get_or_insert(usage.input_tokens);
                    }
                }
            }
        }
        Ok((planner.unwrap_or_default(), subagent.unwrap_or_default()))
    }

    /// Resident memory of the first worker, in KiB.
    pub fn worker_rss_kib(&self) -> anyhow::Result<u64> {
        self.memory_kib("worker-1", "VmRSS:")
    }

    /// A `/proc/<pid>/status` memory line (`VmRSS:`, `VmHWM:` for the peak)
    /// of the child called `name`, in KiB.
    pub fn memory_kib(&self, name: &str, key: &str) -> anyhow::Result<u64> {
        let pid = self.sup.pid(name).with_context(|| format!("no {name}"))?;
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
        let line = status.lines().find(|l| l.starts_with(key)).with_context(|| format!("no {key}"))?;
        Ok(line.split_whitespace().nth(1).unwrap_or("0").parse()?)
    }

    /// The rig's temp dir (config, scripts, state).
    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    /// Where the children's logs are.
    pub fn log_dir(&self) -> &std::path::Path {
        self.sup.log_dir()
    }

    /// Stops every process and removes the temp dir.
    pub async fn stop(mut self) {
        let _ = &self.settings;
        self.sup.stop(Duration::from_secs(10)).await;
        if let Some(mut nats) = self.own_nats.take() {
            let _ = nats.kill().await;
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A free TCP port on loopback.
pub fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}
