//! `flotilla-worker`: serves the subagent types of its static config. Start as
//! many as you like, on any host that reaches NATS: replicas of a type share
//! one durable consumer, so each task runs on exactly one of them at a time.
//!
//! Exit codes follow the `flotilla` table (docs/OPERATIONS.md, "Exit
//! codes"): 0 after a clean stop, 2 when it cannot start (usage,
//! configuration, NATS, a required MCP server), 1 when serving failed after
//! it started. Either error is one line on stderr, each cause once.
//!
//! This file is the arguments and the start-up wiring only; what a worker
//! does is the `flotilla_worker` library (workers/src/lib.rs).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use flotilla_bus::Bus;
use flotilla_config::Settings;
use flotilla_mcp::McpHub;
use flotilla_protocol::ids::SubagentType;
use flotilla_telemetry::logging::{self as telemetry, LogFormat};
use tokio_util::sync::CancellationToken;

use flotilla_worker::heartbeat::{self, Heartbeats, Identity};
use flotilla_worker::metrics::WorkerMetrics;
use flotilla_worker::runtime::SubagentRuntime;
use flotilla_worker::task::WorkerContext;
use flotilla_worker::{cancel, mcp_credentials, worker};

/// mimalloc rather than the system allocator: a task allocates and frees
/// many small objects across the runtime's threads, where glibc's malloc and
/// free took about a tenth of a worker's CPU (docs/PERFORMANCE.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Flotilla worker: runs isolated subagents for the task queues of its types.
#[derive(Parser, Debug)]
#[command(
    version,
    after_help = "Start as many as you like, on any host that reaches NATS: replicas of a\nsubagent type share its work queue. Configuration: docs/CONFIG.md."
)]
struct Args {
    /// Config file (TOML). Env overrides: `FLOTILLA_<SECTION>__<KEY>`.
    #[arg(long, short, env = "FLOTILLA_CONFIG")]
    config: Option<PathBuf>,
    /// Also import MCP servers from a Claude Desktop / Cursor `mcpServers` JSON file.
    #[arg(long, env = "FLOTILLA_MCP_CONFIG")]
    mcp_config: Option<PathBuf>,
    /// Subagent types to serve, comma separated (default: every [subagents.*] in the config).
    #[arg(long, value_delimiter = ',')]
    types: Vec<SubagentType>,
    /// Worker id shown in reports and progress (default: <host>-<pid>).
    #[arg(long)]
    id: Option<String>,
    /// Seconds to let running tasks finish after SIGTERM before handing the rest
    /// back (default: `[worker] grace`, 30).
    #[arg(long)]
    grace: Option<u64>,
    /// Log format: text or json.
    #[arg(long, default_value = "text")]
    log_format: LogFormat,
    /// Serve Prometheus metrics on this address (default: `[metrics] worker`; off when neither is set).
    /// Port 0 picks a free port; the URL is advertised in heartbeats.
    #[arg(long, env = "FLOTILLA_WORKER_METRICS_ADDR")]
    metrics_addr: Option<std::net::SocketAddr>,
    /// Seconds between heartbeats (default: `[worker] heartbeat`, 5).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=60))]
    heartbeat: Option<u64>,
}

/// Exit code when the worker cannot start (as `flotilla`'s usage,
/// configuration and connection errors; clap's usage errors exit 2 too).
const START_FAILED: i32 = 2;

/// Exit code when serving failed after a good start.
const RUN_FAILED: i32 = 1;

fn main() {
    let mut args = Args::parse();
    flotilla_config::tls::install_crypto_provider();
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    let worker_id = args.id.get_or_insert_with(heartbeat::default_id).clone();
    let settings = match Settings::load(args.config.as_deref()) {
        Ok(settings) => settings,
        Err(e) => {
            telemetry::init(args.log_format, "info");
            eprintln!("error: {e:#}");
            std::process::exit(START_FAILED);
        }
    };
    // OTLP export (docs/OPERATIONS.md "Tracing") runs on the runtime.
    let process = flotilla_telemetry::otel::Process { service_name: "flotilla-worker", instance_id: worker_id };
    let export =
        match runtime.block_on(async { telemetry::start(args.log_format, "info", &settings.telemetry, &process) }) {
            Ok(export) => export,
            Err(e) => {
                eprintln!("error: {e}");
                std::process::exit(START_FAILED);
            }
        };
    if let Some(export) = &export {
        flotilla_agent::spans::install(export.capture_content(), flotilla_telemetry::trace::traceparent_of);
    }
    let code = match runtime.block_on(run(args, settings)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            START_FAILED
        }
    };
    if let Some(export) = export {
        export.shutdown();
    }
    drop(runtime);
    std::process::exit(code);
}

/// Starts the worker (an error here is a failed start) and serves until
/// told to stop; returns the exit code of the run.
async fn run(args: Args, mut settings: Settings) -> anyhow::Result<i32> {
    if let Some(path) = &args.mcp_config {
        settings.import_mcp_config(path)?;
    }
    let types: Vec<SubagentType> =
        if args.types.is_empty() { settings.subagents.keys().cloned().collect() } else { args.types.clone() };
    if types.is_empty() {
        anyhow::bail!("nothing to serve: the config has no [subagents.<type>] sections (pass --config)");
    }
    let worker_id = args.id.unwrap_or_else(heartbeat::default_id);
    let bus = Bus::connect(&settings.nats, &format!("flotilla-worker {worker_id}"), Duration::from_secs(30)).await?;
    bus.ensure_topology().await.context("cannot declare JetStream topology")?;
    let files = bus.job_files(&settings.files).await.context("cannot open the job files bucket")?;
    mcp_credentials::install(&bus, &settings).await?;
    let mcp = Arc::new(McpHub::new(&settings.mcp_servers));
    let mcp_servers = flotilla_worker::tools::discover_mcp(&settings, &types, &mcp).await?;
    let runtimes = types
        .iter()
        .map(|ty| SubagentRuntime::build(&settings, ty, &files, &mcp, &bus).map(Arc::new))
        .collect::<anyhow::Result<Vec<_>>>()?;
    // A scripted model counts every request in o200k tokens: build the
    // tables now, off the runtime's threads. Other models report their own
    // usage, and budget checks rarely need the tables
    // (flotilla_agent::tokens::within), so an idle worker does not hold them.
    let scripted = types.iter().any(|ty| settings.subagents.get(ty).is_some_and(|c| settings.is_scripted(&c.model)));
    if scripted {
        tokio::task::spawn_blocking(flotilla_agent::tokens::warm_up).await?;
    }
    // Every tool call and approval of every served type goes to the audit stream.
    let audit = Arc::new(flotilla_bus_adapters::BusAudit(flotilla_bus::audit::BusAuditSink::new(bus.clone())));
    // Follow-up messages are followed per type before the first task is pulled.
    for rt in &runtimes {
        rt.inboxes.start(&bus).await;
    }
    for rt in &runtimes {
        rt.tools.set_auditor(flotilla_agent::audit::Auditor::new(audit.clone(), rt.ty.as_str(), &worker_id));
    }
    tracing::info!(%worker_id, types = ?types.iter().map(|t| t.as_str()).collect::<Vec<_>>(), "connected");

    let shutdown = CancellationToken::new();
    tokio::spawn(shutdown_on_signal(shutdown.clone()));
    mcp.spawn_recovery(mcp_servers, shutdown.clone());
    let metrics = Arc::new(WorkerMetrics::new());
    for rt in &runtimes {
        let model = rt.backend.identity();
        metrics.agent.set_model(rt.ty.as_str(), model.provider, model.model);
    }
    let metrics_url = match args.metrics_addr.or(settings.metrics.worker) {
        Some(addr) => {
            let router = flotilla_telemetry::metrics::router(metrics.registry.clone(), || async {});
            let key = if args.metrics_addr.is_some() { "--metrics-addr" } else { "[metrics] worker" };
            let bound = flotilla_telemetry::metrics::serve("worker metrics", addr, router, std::future::pending())
                .await
                .map_err(|e| anyhow::anyhow!(e.naming(key)))?;
            let host = if bound.ip().is_unspecified() { heartbeat::host_name() } else { bound.ip().to_string() };
            Some(format!("http://{host}:{}/metrics", bound.port()))
        }
        None => None,
    };
    let identity = Identity {
        worker_id: worker_id.clone(),
        types: runtimes.iter().map(|rt| (rt.ty.clone(), rt.config.concurrency as u32)).collect(),
        interval: Duration::from_secs(args.heartbeat.unwrap_or(settings.worker.heartbeat)),
        metrics_url,
    };
    for (ty, _) in &identity.types {
        metrics.declare(ty);
    }
    let hub = mcp.clone();
    let mcp_health: heartbeat::McpHealth =
        Arc::new(move || hub.health().into_iter().map(heartbeat::mcp_health_entry).collect());
    let heartbeats =
        Heartbeats::start(bus.clone(), identity, metrics.clone(), Some(mcp_health), shutdown.clone()).await;
    let service = announce(&bus, &worker_id, &types).await;
    let cancels = cancel::CancelWatch::start(&bus).await.context("cannot watch job cancellations")?;
    let hand_back = CancellationToken::new();
    let journal_carries_progress = flotilla_worker::journal::follow_carries_progress(&bus, shutdown.clone()).await;
    let ctx =
        Arc::new(WorkerContext { bus, worker_id, shutdown, hand_back, metrics, cancels, journal_carries_progress });
    let grace = Duration::from_secs(args.grace.unwrap_or(settings.worker.grace));
    let result = worker::run(ctx, runtimes, grace).await;
    if let Some(s) = service {
        s.stop().await;
    }
    heartbeats.finish().await;
    mcp.shutdown().await;
    match result {
        Ok(()) => Ok(0),
        Err(e) => {
            eprintln!("error: {e:#}");
            Ok(RUN_FAILED)
        }
    }
}

/// Answers the NATS service API as an instance of `flotilla-worker`, so NATS
/// tooling discovers the fleet. Optional: a role without `$SRV` permissions
/// (deploy/nats/roles.conf grants them) only loses the discovery.
async fn announce(bus: &Bus, worker_id: &str, types: &[SubagentType]) -> Option<flotilla_bus::Announcement> {
    let metadata = [
        ("worker_id", worker_id.to_string()),
        ("host", heartbeat::host_name()),
        ("types", types.iter().map(|t| t.as_str()).collect::<Vec<_>>().join(",")),
    ];
    let metadata = metadata.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    let announced = bus
        .announce_service("flotilla-worker", env!("CARGO_PKG_VERSION"), "Flotilla worker (subagent runtime)", metadata)
        .await;
    announced.map_err(|e| tracing::warn!(error = %e, "not discoverable through $SRV")).ok()
}

async fn shutdown_on_signal(token: CancellationToken) {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    tracing::info!("told to stop: draining");
    token.cancel();
}
