//! A throwaway deployment for one bench scenario, from the dev and test kit
//! (tests/kit/src/deployment.rs): its own nats-server on a free port (with
//! its monitoring port), orchestrator and workers from this build, config
//! and scripts in a temp dir, all killed and removed afterwards.

use std::time::{Duration, Instant};

use anyhow::Context;
use flotilla_bus::Bus;
use flotilla_config::NatsConfig;
use flotilla_protocol::{JobEventKind, ProgressKind};
use flotilla_testkit::{Deployment, NatsServer, TestConfig};
use futures::StreamExt;

use flotilla_client::Client;
use flotilla_client::events::{self, Event, Scope};

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

/// The bench's planner script, each model call taking `latency_ms`.
pub fn planner(latency_ms: u64) -> String {
    PLANNER.replace("{latency}", &latency_ms.to_string())
}

/// `n` regions in the demo's job format.
pub fn regions(n: usize) -> String {
    let parts: Vec<String> = (0..n).map(|i| format!("r{i}: revenue {}, cost {}", 100 + i, 50 + i)).collect();
    format!("Gross margin of each region: {}.", parts.join("; "))
}

/// A config for the NATS server at `url` with the server's own redelivery
/// settings (not the kit's short test ones), the scripted `planner` and a
/// `finance` model whose calls take `latency_ms`, and the `finance` subagent
/// with `slots` concurrency. `extra` is raw TOML after `[planner] model`:
/// further planner keys, then any other tables.
pub fn config(url: &str, planner: &str, latency_ms: u64, slots: usize, extra: &str) -> TestConfig {
    let finance = flotilla_testkit::scripts::finance_margin(latency_ms);
    config_with(url, planner, FinanceModel::Scripted(&finance), slots, extra)
}

/// The `finance` model of a bench config.
pub enum FinanceModel<'a> {
    /// Scripted, playing this script.
    Scripted(&'a str),
    /// An `openai` provider on this base URL (a local endpoint).
    OpenAi(&'a str),
}

/// [`config`] with the `finance` model `finance`.
pub fn config_with(url: &str, planner: &str, finance: FinanceModel<'_>, slots: usize, extra: &str) -> TestConfig {
    let nats = NatsConfig::default();
    let mut c = TestConfig::new(url);
    c.nats(nats.ack_wait, nats.max_deliver);
    c.scripted_model("planner", planner);
    match finance {
        FinanceModel::Scripted(script) => c.scripted_model("finance", script),
        FinanceModel::OpenAi(base_url) => c.section(&format!(
            "[models.finance]\nprovider = \"openai\"\nbase_url = \"{base_url}\"\nmodel = \"m\"\nmax_retries = 0\n"
        )),
    };
    c.section(&format!(
        r#"[planner]
model = "planner"
{extra}
[subagents.finance]
description = "Computes gross margins."
model = "finance"
tools = ["calculate_margin"]
concurrency = {slots}
"#
    ));
    c
}

/// One running scenario.
pub struct Rig {
    d: Deployment,
}

impl Rig {
    /// A client connection to the rig's NATS, for publishing tasks directly.
    pub fn bus(&self) -> &Bus {
        &self.d.bus
    }

    /// The rig's nats-server (its monitoring port counts bytes).
    pub fn nats(&self) -> &NatsServer {
        &self.d.nats
    }

    /// Starts nats-server, an orchestrator and `workers` workers with
    /// `slots` concurrency, every model call taking `latency_ms`.
    pub async fn start(workers: usize, slots: usize, latency_ms: u64) -> anyhow::Result<Self> {
        let planner = planner(latency_ms);
        let tenants = r#"# One tenant measured alone: its quotas must not be what the bench measures.
[tenants]
max_running_jobs = 1000
max_queued_jobs = 1000000
max_tasks_in_flight = 1000000
max_map_items = 1000000
api_rate = 1000000
api_burst = 1000000
"#;
        Self::launch(workers, |url| config(url, &planner, latency_ms, slots, tenants)).await
    }

    /// [`Rig::start`] with every process exporting traces and metrics over
    /// OTLP/HTTP to `endpoint`, with the SDK's default batching (a batch
    /// every 5 s or every 512 spans) and a metric export every second.
    pub async fn start_exporting(
        workers: usize,
        slots: usize,
        latency_ms: u64,
        endpoint: &str,
    ) -> anyhow::Result<Self> {
        let planner = planner(latency_ms);
        let telemetry = format!("[telemetry]\nendpoint = \"{endpoint}\"\nmetrics_interval = 1\n");
        Self::launch(workers, |url| config(url, &planner, latency_ms, slots, &telemetry)).await
    }

    /// Starts nats-server, an orchestrator and `workers` workers (named
    /// `worker-<i>`) on the config `make` writes for the server's url, then
    /// waits until every worker pulls.
    pub async fn launch(workers: usize, make: impl FnOnce(&str) -> TestConfig) -> anyhow::Result<Self> {
        let mut d = Deployment::start(0, make).await;
        for i in 1..=workers {
            d.add_worker(&format!("worker-{i}"));
        }
        let rig = Self { d };
        rig.wait_ready(workers).await?;
        Ok(rig)
    }

    /// Waits until the orchestrator answers and every worker has a pull pending.
    async fn wait_ready(&self, workers: usize) -> anyhow::Result<()> {
        let api = self.api();
        let deadline = Instant::now() + Duration::from_secs(30);
        while api.list(None, 1).await.is_err() {
            anyhow::ensure!(Instant::now() < deadline, "orchestrator did not start; logs: {}", self.logs());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let ty = flotilla_protocol::ids::SubagentType::new("finance")?;
        let queue = self.d.bus.tasks();
        loop {
            // The type's consumer appears once a worker has declared it.
            if queue.depth(&ty).await.is_ok_and(|d| d.waiting as usize >= workers) {
                return Ok(());
            }
            anyhow::ensure!(Instant::now() < deadline, "workers did not start; logs: {}", self.logs());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The client of the job API.
    pub fn api(&self) -> Client {
        Client::new(self.d.bus.clone(), Default::default())
    }

    /// Submits `input` and returns the wall time until the job completed.
    pub async fn run_job(&self, input: &str) -> anyhow::Result<Duration> {
        let api = self.api();
        let mut events = std::pin::pin!(events::follow(&self.d.bus, Scope::All, false).await?);
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
        let mut events = std::pin::pin!(events::follow(&self.d.bus, Scope::All, true).await?);
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
    /// of the process called `name` (`orchestrator`, `worker-<i>`), in KiB.
    pub fn memory_kib(&self, name: &str, key: &str) -> anyhow::Result<u64> {
        self.proc_kib(name, "status", key)
    }

    /// A line of `/proc/<pid>/<file>` in KiB (`smaps_rollup`'s `Anonymous:`:
    /// the memory the process does not share with others running the
    /// same binary).
    pub fn proc_kib(&self, name: &str, file: &str, key: &str) -> anyhow::Result<u64> {
        let proc = self.d.orchestrator.iter().chain(&self.d.workers).find(|p| p.name == name);
        let pid = proc.with_context(|| format!("no {name}"))?.pid();
        let status = std::fs::read_to_string(format!("/proc/{pid}/{file}"))?;
        let line = status.lines().find(|l| l.starts_with(key)).with_context(|| format!("no {key} in {file}"))?;
        Ok(line.split_whitespace().nth(1).unwrap_or("0").parse()?)
    }

    /// The processes' log files (removed with the rig unless
    /// `FLOTILLA_KEEP_TEST_DIRS` is set).
    pub fn logs(&self) -> String {
        let procs = self.d.orchestrator.iter().chain(&self.d.workers);
        procs.map(|p| p.log_path().display().to_string()).collect::<Vec<_>>().join(", ")
    }

    /// Starts one more worker called `name` and waits until it pulls.
    pub async fn add_worker(&mut self, name: &str) -> anyhow::Result<()> {
        let ty = flotilla_protocol::ids::SubagentType::new("finance")?;
        let before = self.d.bus.tasks().depth(&ty).await.map(|d| d.waiting).unwrap_or(0);
        self.d.add_worker(name);
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.d.bus.tasks().depth(&ty).await.is_ok_and(|d| d.waiting > before) {
            anyhow::ensure!(Instant::now() < deadline, "worker {name} did not start; logs: {}", self.logs());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    /// SIGKILLs the worker called `name`.
    pub fn kill_worker(&mut self, name: &str) -> anyhow::Result<()> {
        let w = self.d.workers.iter_mut().find(|p| p.name == name).with_context(|| format!("no {name}"))?;
        w.kill();
        Ok(())
    }

    /// Kills every process and removes the temp dirs.
    pub fn stop(self) {
        drop(self.d);
    }
}

/// What a job's events said until it completed.
pub struct JobEnd {
    /// The job's answer.
    pub answer: String,
    /// Tasks whose report was consolidated as completed.
    pub completed: usize,
    /// The input tokens of the planner's largest model request.
    pub max_input_tokens: u64,
}

/// Follows `events` (the job's, from before its submit) until the job
/// completes; an error when it fails, the stream ends or `timeout` passes.
pub async fn until_completed(
    mut events: impl futures::Stream<Item = anyhow::Result<Event>> + Unpin,
    timeout: Duration,
) -> anyhow::Result<JobEnd> {
    let (mut completed, mut max_input_tokens) = (0, 0);
    tokio::time::timeout(timeout, async {
        while let Some(ev) = events.next().await {
            if let Event::Job(j) = ev? {
                match j.kind {
                    JobEventKind::PlannerStep { usage, .. } => {
                        max_input_tokens = max_input_tokens.max(usage.input_tokens)
                    }
                    JobEventKind::TaskReported { status: flotilla_protocol::TaskStatus::Completed, .. } => {
                        completed += 1
                    }
                    JobEventKind::Completed { answer, .. } => {
                        return Ok(JobEnd { answer, completed, max_input_tokens });
                    }
                    JobEventKind::Failed { error } => anyhow::bail!("job failed: {error}"),
                    _ => {}
                }
            }
        }
        anyhow::bail!("event stream ended")
    })
    .await
    .with_context(|| format!("no end within {timeout:?}"))?
}
