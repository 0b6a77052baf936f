//! `flotilla-worker`: serves the subagent types of its static config. Start as
//! many as you like, on any host that reaches NATS: replicas of a type share
//! one durable consumer, so each task runs on exactly one of them at a time.

mod finance;
mod progress;
mod runtime;
mod task;
mod tools;
mod worker;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use flotilla_shared::bus::Bus;
use flotilla_shared::config::Settings;
use flotilla_shared::ids::SubagentType;
use flotilla_shared::telemetry::{self, LogFormat};
use tokio_util::sync::CancellationToken;

use crate::runtime::SubagentRuntime;
use crate::task::WorkerContext;

/// Flotilla worker: runs isolated subagents for the task queues of its types.
#[derive(Parser, Debug)]
#[command(version, about, long_about = None)]
struct Args {
    /// Config file (TOML). Env overrides: FLOTILLA_<SECTION>__<KEY>.
    #[arg(long, short, env = "FLOTILLA_CONFIG")]
    config: Option<PathBuf>,
    /// Subagent types to serve, comma separated (default: every [subagents.*] in the config).
    #[arg(long, value_delimiter = ',')]
    types: Vec<SubagentType>,
    /// Worker id shown in reports and progress (default: <host>-<pid>).
    #[arg(long)]
    id: Option<String>,
    /// Seconds to let running tasks finish on shutdown before handing them back.
    #[arg(long, default_value_t = 20)]
    grace: u64,
    /// Log format: text or json.
    #[arg(long, default_value = "text")]
    log_format: LogFormat,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    telemetry::init(args.log_format, "info");
    flotilla_shared::tls::install_crypto_provider();
    let settings = Settings::load(args.config.as_deref())?;
    let types: Vec<SubagentType> =
        if args.types.is_empty() { settings.subagents.keys().cloned().collect() } else { args.types.clone() };
    if types.is_empty() {
        anyhow::bail!("nothing to serve: the config has no [subagents.<type>] sections (pass --config)");
    }
    let runtimes = types
        .iter()
        .map(|ty| SubagentRuntime::build(&settings, ty).map(Arc::new))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let worker_id = args.id.unwrap_or_else(default_id);
    let bus = Bus::connect(&settings.nats, &format!("flotilla-worker {worker_id}"), Duration::from_secs(30)).await?;
    bus.ensure_topology().await.context("cannot declare JetStream topology")?;
    tracing::info!(%worker_id, types = ?types.iter().map(|t| t.as_str()).collect::<Vec<_>>(), "connected");

    let shutdown = CancellationToken::new();
    tokio::spawn(shutdown_on_signal(shutdown.clone()));
    let ctx = Arc::new(WorkerContext { bus, worker_id, shutdown });
    worker::run(ctx, runtimes, Duration::from_secs(args.grace)).await
}

fn default_id() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "worker".into());
    format!("{host}-{}", std::process::id())
}

async fn shutdown_on_signal(token: CancellationToken) {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    tracing::info!("shutting down");
    token.cancel();
}
