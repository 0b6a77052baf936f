//! A running deployment of this build: nats-server, an orchestrator and
//! workers, with a client connection, for the e2e tests and each scenario of
//! `flotilla bench`. Everything is killed and removed on drop.

use std::path::PathBuf;
use std::time::Duration;

use flotilla_bus::Bus;
use flotilla_client::Client;
use flotilla_config::NatsConfig;
use flotilla_protocol::ids::{JobId, Tenant};
use flotilla_protocol::{JobRecord, MAX_TASKS_PAGE, SCHEMA_VERSION, StatusRequest, SubmitRequest};

use crate::{NatsServer, Proc, RawNats, TestConfig};

/// How long a test waits for a deployment to do one thing.
pub const TIMEOUT: Duration = Duration::from_secs(60);

/// How long one status request may take: the CLI's own budget. A status
/// lists the job's task keys, which for a 20 000-task job in a debug build
/// on a loaded 2-core machine took over 2 s.
const STATUS_TIMEOUT: Duration = Duration::from_secs(10);

/// The processes of one deployment and a connection to its NATS.
pub struct Deployment {
    /// Kept alive for the test; fault tests kill and restart it.
    pub nats: NatsServer,
    /// Kept alive so the config dir outlives the processes reading it.
    pub config: TestConfig,
    /// The written config file.
    pub config_path: PathBuf,
    /// The orchestrator process, while one runs.
    pub orchestrator: Option<Proc>,
    /// The worker processes, in the order started.
    pub workers: Vec<Proc>,
    /// A client connection of the same server, on the default prefix.
    pub bus: Bus,
    /// A plain NATS client of the same server, for observing subjects and
    /// inspecting streams as any NATS client could (tests/kit/src/raw.rs).
    pub raw: RawNats,
}

impl Deployment {
    /// nats-server + `workers` worker processes + an orchestrator, with `config`
    /// built by `make(nats_url)`.
    pub async fn start(workers: usize, make: impl FnOnce(&str) -> TestConfig) -> Self {
        let nats = NatsServer::start().await;
        let config = make(&nats.url());
        let config_path = config.write();
        let bus =
            Bus::connect(&NatsConfig { url: nats.url(), ..Default::default() }, "e2e-test", Duration::from_secs(10))
                .await
                .expect("connect");
        bus.ensure_topology().await.expect("topology");
        let raw = RawNats::connect(&NatsConfig { url: nats.url(), ..Default::default() }).await;
        let mut d = Self { nats, config, config_path, orchestrator: None, workers: Vec::new(), bus, raw };
        for i in 1..=workers {
            d.add_worker(&format!("w{i}"));
        }
        d.start_orchestrator();
        d
    }

    /// Waits until the orchestrator answers the API (its "ready" log line),
    /// for tests that then talk to it through the CLI, which does not retry.
    pub async fn orchestrator_ready(&self) {
        let o = self.orchestrator.as_ref().expect("an orchestrator");
        crate::eventually(TIMEOUT, "the orchestrator to be ready", || async {
            o.log().contains("orchestrator ready").then_some(())
        })
        .await;
    }

    /// The config path as a `--config` argument.
    pub fn config_arg(&self) -> String {
        self.config_path.display().to_string()
    }

    /// A worker with `--id id`.
    pub fn add_worker(&mut self, id: &str) {
        self.add_worker_with(id, &[]);
    }

    /// A worker with extra arguments (e.g. `--types finance`).
    pub fn add_worker_with(&mut self, id: &str, extra: &[&str]) {
        self.add_worker_env(id, extra, &[]);
    }

    /// A worker with extra arguments and environment variables.
    pub fn add_worker_env(&mut self, id: &str, extra: &[&str], env: &[(&str, &str)]) {
        let cfg = self.config_arg();
        let mut args = vec!["--config", &cfg, "--id", id, "--grace", "2"];
        args.extend_from_slice(extra);
        self.workers.push(Proc::spawn(id, "flotilla-worker", &args, env));
    }

    /// Starts an orchestrator (`flotilla orchestrator`).
    pub fn start_orchestrator(&mut self) {
        let cfg = self.config_arg();
        self.orchestrator = Some(Proc::spawn("orchestrator", "flotilla", &["orchestrator", "--config", &cfg], &[]));
    }

    /// Submits through the job API, retrying while the orchestrator starts.
    pub async fn submit(&self, input: &str) -> JobId {
        let req = SubmitRequest { v: SCHEMA_VERSION, input: input.into(), files: vec![], subagent_type: None };
        crate::eventually(TIMEOUT, "the orchestrator to accept a job", || {
            let req = req.clone();
            async move {
                let r = self.client().request(&req, Duration::from_secs(5)).await;
                r.ok().map(|r| r.into_result().expect("submit refused").job_id)
            }
        })
        .await
    }

    /// The job record with its first page of tasks.
    pub async fn status(&self, job: JobId) -> JobRecord {
        let req = StatusRequest {
            v: SCHEMA_VERSION,
            job_id: job,
            tasks_limit: Some(MAX_TASKS_PAGE),
            tasks_after: None,
            tasks_filter: None,
        };
        let r = self.client().request(&req, Duration::from_secs(10)).await.expect("status");
        r.into_result().expect("status refused").job
    }

    /// The job API of the default tenant (`flotilla-client`).
    pub fn client(&self) -> Client {
        Client::new(self.bus.clone(), Tenant::default())
    }
}

impl Deployment {
    /// The job record, or `None` while the API does not answer (e.g. during a NATS restart).
    pub async fn status_opt(&self, job: JobId) -> Option<JobRecord> {
        let req = StatusRequest {
            v: SCHEMA_VERSION,
            job_id: job,
            tasks_limit: Some(MAX_TASKS_PAGE),
            tasks_after: None,
            tasks_filter: None,
        };
        let r = self.client().request(&req, STATUS_TIMEOUT).await.ok()?;
        r.into_result().ok().map(|r| r.job)
    }

    /// Every dead letter so far: (reason header, payload).
    pub async fn dead_letters(&self) -> Vec<(String, Vec<u8>)> {
        let stream = self.raw.js.get_stream(self.bus.subjects.dead_letter_stream()).await.expect("dead letter stream");
        let last = stream.get_info().await.expect("info").state.last_sequence;
        let mut out = Vec::new();
        for seq in 1..=last {
            if let Ok(m) = stream.get_raw_message(seq).await {
                let reason = m.headers.get(flotilla_bus::REASON).map(|v| v.to_string()).unwrap_or_default();
                out.push((reason, m.payload.to_vec()));
            }
        }
        out
    }
}
