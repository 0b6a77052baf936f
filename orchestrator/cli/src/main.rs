//! `flotilla`: the command line of Flotilla, a thin layer over the
//! orchestrator library (`flotilla_orchestrator`, src/lib.rs): argument
//! parsing, configuration loading, logging and dispatch to one file per
//! subcommand under src/commands/.
//!
//! - `flotilla orchestrator` runs the library's service and serves its HTTP
//!   endpoints ([`commands::orchestrator`], [`commands::endpoints`]), the web dashboard
//!   among them (the `flotilla-dashboard` crate, over the library's
//!   read-only job reader).
//! - `flotilla mcp serve` runs the `flotilla-mcp-server` crate ([`commands::mcp`]).
//! - `flotilla up` / `flotilla demo` run a local deployment (`flotilla-local`, orchestrator/local/).
//! - `submit`, `status`, `jobs`, `watch`, ... are clients of the job API
//!   through `flotilla-client` ([`commands`]).

mod commands;

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use flotilla_config::Settings;
use flotilla_protocol::ids::Tenant;
use flotilla_telemetry::logging::{self as telemetry, LogFormat};

/// Flotilla: a planner agent delegating tasks over NATS to horizontally scaled
/// worker processes.
#[derive(Parser, Debug)]
#[command(name = "flotilla", version, after_help = AFTER_HELP)]
struct Cli {
    /// Config file (TOML). Default for `up` and `demo`: deploy/local/flotilla.toml.
    /// Env overrides: `FLOTILLA_<SECTION>__<KEY>`, e.g. `FLOTILLA_NATS__URL`.
    #[arg(long, short, global = true, env = "FLOTILLA_CONFIG")]
    config: Option<PathBuf>,
    /// Log format: text or json.
    #[arg(long, global = true, default_value = "text")]
    log_format: LogFormat,
    /// Also import MCP servers from a Claude Desktop / Cursor `mcpServers` JSON
    /// file (workers started by `up`/`demo` inherit it).
    #[arg(long, global = true, env = "FLOTILLA_MCP_CONFIG")]
    mcp_config: Option<PathBuf>,
    /// Tenant whose jobs client commands act on.
    #[arg(long, global = true, env = "FLOTILLA_TENANT", default_value = "default")]
    tenant: Tenant,
    /// Print JSON: one object per reply (the API's shape), one line per
    /// event for `watch`; errors as {"error": {"kind", "message"}} on stdout.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the demo job through a local deployment and print its answer.
    Demo(commands::demo::Args),
    /// Start nats-server (or reuse one), the orchestrator and workers locally.
    Up(commands::up::Args),
    /// Run the orchestrator service (planner and job API).
    Orchestrator,
    /// Submit a job; prints its id (with --wait, its answer; the id on stderr).
    Submit(commands::submit::Args),
    /// Show one job: status, todos, tasks and reports, usage, answer.
    Status(commands::status::Args),
    /// List jobs.
    Jobs(commands::jobs::Args),
    /// Follow a job's progress live (or every job).
    Watch(commands::watch::Args),
    /// List live workers from their heartbeats.
    ///
    /// One line per worker and served type. RSS is the worker process's
    /// resident memory (`-` when its platform does not tell); MCP servers and
    /// sandboxed commands it starts are not in it. `--json` prints
    /// `{"workers": [...]}`, each worker's latest heartbeat, with `rss_bytes`
    /// and, per type, `busy_ms` (docs/PROTOCOL.md, WorkerHeartbeat).
    Workers(commands::workers::Args),
    /// Show each subagent type's task queue: pending, in flight, redelivered,
    /// dead letters, oldest waiting.
    ///
    /// One line per type that a worker ever served (its durable consumer
    /// exists), whether or not a worker serves it now. PENDING: stored, not
    /// yet delivered to any worker. IN FLIGHT: delivered, not acknowledged
    /// (running, or due for redelivery after its worker went silent or handed
    /// it back). REDELIVERED: of those, delivered more than once. DEAD: tasks
    /// of the type on the dead-letter stream (kept 30 days). OLDEST WAITING:
    /// the age of the oldest pending task, `-` when none waits.
    ///
    /// Read from NATS directly, so it needs a credential that may read the
    /// tasks and dead-letter streams (an operator's or the orchestrator's,
    /// not a tenant client's). `--json` prints `{"queues": [...]}`, each a
    /// QueueStats (docs/PROTOCOL.md).
    Queues(commands::queues::Args),
    /// Cancel a job: planner, queued tasks and running subagents.
    Cancel(commands::cancel::Args),
    /// List tool calls waiting for a person's approval.
    Approvals(commands::approvals::Args),
    /// Approve, reject or edit a tool call waiting for approval.
    Approve(commands::approve::Args),
    /// Measure overhead, throughput, fan-out and footprint on this machine.
    Bench(commands::bench::Args),
    /// Read and write a job's files: ls, get, put.
    Files(commands::files::Args),
    /// Show a job's audit trail: every tool call and approval.
    Audit(commands::audit::Args),
    /// Debug MCP servers without a model: list tools, call one, check health.
    Mcp(commands::mcp::Args),
    /// Check a config: `flotilla config check [--connect]`.
    Config(commands::config_check::Args),
    /// Check model endpoints: `flotilla models check [name]` sends each one
    /// tiny tool-calling request (docs/MODELS.md).
    Models(commands::models::Args),
    /// Print a shell completion script, e.g. `flotilla completions bash >
    /// ~/.local/share/bash-completion/completions/flotilla`.
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
}

const AFTER_HELP: &str = "\
Quick start (from the repository root):
  flotilla demo                          run the demo job end to end and print its answer
  flotilla up                            local nats-server + orchestrator + workers until Ctrl-C
  flotilla submit --wait \"north: revenue 120, cost 75\"
  flotilla watch <job>                   live progress; --json for JSON lines

Job ids: the whole id or a unique prefix of at least 4 characters.
Exit codes (both flotilla and flotilla-worker): 0 ok (a waited or watched job
completed, no task failed), 3 it completed with failed tasks, 1 it failed or
was cancelled, 2 a usage, configuration, connection or other error
(docs/OPERATIONS.md). --json: scripting output, docs/OPERATIONS.md.
Configuration: docs/CONFIG.md. Bus subjects and messages: docs/PROTOCOL.md.";

const LOCAL_CONFIG: &str = "deploy/local/flotilla.toml";

fn main() {
    let mut cli = Cli::try_parse().unwrap_or_else(|e| usage_error(e));
    if let Some(p) = cli.mcp_config.take() {
        // Absolute, and exported so the workers `up`/`demo` start import it too.
        let p = std::path::absolute(&p).unwrap_or(p);
        // SAFETY: still single-threaded: no runtime or other thread exists yet.
        unsafe { std::env::set_var("FLOTILLA_MCP_CONFIG", &p) };
        cli.mcp_config = Some(p);
    }
    let service = matches!(cli.command, Command::Orchestrator | Command::Up(_));
    flotilla_config::tls::install_crypto_provider();
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    let export = start_telemetry(&cli, &runtime, if service { "info" } else { "warn" });
    let json = cli.json;
    let code = match runtime.block_on(run(cli)) {
        Ok(code) => code,
        // The reader of stdout went away (`| head -1`): done, not an error.
        Err(e) if commands::out::is_broken_pipe(&e) => 0,
        Err(e) => report(&e, json),
    };
    if let Some(export) = export {
        export.shutdown();
    }
    std::process::exit(code);
}

/// Installs logging and, for the commands that do a job's work
/// (`orchestrator`, `mcp serve`), OTLP export when `[telemetry]` or the
/// `OTEL_*` variables turn it on (docs/OPERATIONS.md "Tracing"). A config
/// that does not load is reported by the command itself, later.
fn start_telemetry(
    cli: &Cli,
    runtime: &tokio::runtime::Runtime,
    default_filter: &str,
) -> Option<flotilla_telemetry::otel::Export> {
    let service_name = match &cli.command {
        Command::Orchestrator => "flotilla-orchestrator",
        Command::Mcp(args) if args.serves() => "flotilla-mcp-serve",
        _ => {
            telemetry::init(cli.log_format, default_filter);
            return None;
        }
    };
    let Ok(settings) = Settings::load(cli.config.as_deref()) else {
        telemetry::init(cli.log_format, default_filter);
        return None;
    };
    let instance_id = format!("{}-{}", flotilla_telemetry::host::host_name(), std::process::id());
    let process = flotilla_telemetry::otel::Process { service_name, instance_id };
    match runtime.block_on(async { telemetry::start(cli.log_format, default_filter, &settings.telemetry, &process) }) {
        Ok(export) => {
            if let Some(e) = &export {
                flotilla_agent::spans::install(e.capture_content(), flotilla_telemetry::trace::traceparent_of);
            }
            export
        }
        Err(e) => std::process::exit(report(&anyhow::anyhow!(e), cli.json)),
    }
}

/// Prints a failed command's error once, as one line on stderr or, under
/// `--json`, as `{"error": {"kind", "message"}}` on stdout
/// (src/commands/error.rs); returns the exit code of every error.
fn report(e: &anyhow::Error, json: bool) -> i32 {
    if json && commands::out::json(&commands::error::to_json(e)).is_ok() {
        return commands::error::ERROR_EXIT;
    }
    eprintln!("error: {}", commands::error::message(e));
    commands::error::ERROR_EXIT
}

/// A command line clap refused: under `--json` the error object (kind
/// `usage`) on stdout and exit 2; otherwise clap's own message (also exit 2),
/// and `--help`/`--version` as usual.
fn usage_error(e: clap::Error) -> ! {
    use clap::error::ErrorKind;
    let shown = matches!(
        e.kind(),
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    );
    if !shown && std::env::args_os().any(|a| a == "--json") {
        let text = e.to_string();
        let first = text.lines().next().unwrap_or_default().trim_start_matches("error: ").to_string();
        let error = commands::error::CliError::new("usage", first);
        let _ = commands::out::json(&commands::error::to_json(&error.into()));
        std::process::exit(commands::error::ERROR_EXIT);
    }
    e.exit()
}

async fn run(cli: Cli) -> anyhow::Result<i32> {
    let local = || -> anyhow::Result<PathBuf> {
        match &cli.config {
            Some(p) => Ok(p.clone()),
            None if std::path::Path::new(LOCAL_CONFIG).is_file() => Ok(PathBuf::from(LOCAL_CONFIG)),
            None => anyhow::bail!("no config: pass --config FILE (run from the repository root to use {LOCAL_CONFIG})"),
        }
    };
    match cli.command {
        Command::Demo(args) => {
            let path = local()?;
            commands::demo::run(load(Some(&path), cli.mcp_config.as_deref())?, &path, args).await
        }
        Command::Bench(args) => commands::bench::run(args).await,
        Command::Completions { shell } => {
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut <Cli as clap::CommandFactory>::command(), "flotilla", &mut script);
            commands::out::out!("{}", String::from_utf8_lossy(&script))?;
            Ok(0)
        }
        Command::Up(args) => {
            let path = local()?;
            commands::up::run(load(Some(&path), cli.mcp_config.as_deref())?, &path, args).await
        }
        Command::Config(args) => {
            commands::config_check::run(local().ok().as_deref(), cli.mcp_config.as_deref(), cli.json, args).await
        }
        command => {
            let settings = load(cli.config.as_deref(), cli.mcp_config.as_deref())?;
            let (tenant, json) = (&cli.tenant, cli.json);
            match command {
                Command::Orchestrator => commands::orchestrator::run(settings).await,
                Command::Submit(a) => commands::submit::run(&settings, tenant, a, json).await,
                Command::Status(a) => commands::status::run(&settings, tenant, a, json).await,
                Command::Files(a) => commands::files::run(&settings, tenant, a, json).await,
                Command::Jobs(a) => commands::jobs::run(&settings, tenant, a, json).await,
                Command::Watch(a) => commands::watch::run(&settings, tenant, a, json).await,
                Command::Workers(a) => commands::workers::run(&settings, tenant, a, json).await,
                Command::Queues(a) => commands::queues::run(&settings, tenant, a, json).await,
                Command::Cancel(a) => commands::cancel::run(&settings, tenant, a, json).await,
                Command::Approvals(a) => commands::approvals::run(&settings, tenant, a, json).await,
                Command::Approve(a) => commands::approve::run(&settings, tenant, a, json).await,
                Command::Audit(a) => commands::audit::run(&settings, tenant, a, json).await,
                Command::Mcp(a) => commands::mcp::run(&settings, tenant, a, json).await,
                Command::Models(a) => commands::models::run(&settings, a, json).await,
                Command::Demo(_)
                | Command::Up(_)
                | Command::Bench(_)
                | Command::Completions { .. }
                | Command::Config(_) => {
                    unreachable!("handled above")
                }
            }
        }
    }
}

/// The config file plus, when given, an imported `mcpServers` JSON file.
fn load(path: Option<&std::path::Path>, mcp_config: Option<&std::path::Path>) -> anyhow::Result<Settings> {
    let mut settings = Settings::load(path)?;
    if let Some(p) = mcp_config {
        settings.import_mcp_config(p)?;
    }
    Ok(settings)
}

/// Completes on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    /// `flotilla --version` names the command people type, not the package.
    #[test]
    fn version_and_help_name_the_flotilla_command() {
        let cmd = super::Cli::command();
        assert_eq!(cmd.get_name(), "flotilla");
        assert_eq!(cmd.render_version().trim(), format!("flotilla {}", env!("CARGO_PKG_VERSION")));
    }

    /// `flotilla completions <shell>` parses, and its script completes the
    /// subcommands and their flags.
    #[test]
    fn completion_scripts_name_every_subcommand() {
        for shell in ["bash", "zsh", "fish"] {
            let cli = super::Cli::try_parse_from(["flotilla", "completions", shell]).expect("parses");
            let super::Command::Completions { shell } = cli.command else { panic!("not completions") };
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut super::Cli::command(), "flotilla", &mut script);
            let script = String::from_utf8(script).unwrap();
            for word in ["submit", "watch", "jobs", "files", "tenant", "wait"] {
                assert!(script.contains(word), "{shell} script lacks {word}");
            }
        }
        assert!(super::Cli::try_parse_from(["flotilla", "completions", "tcsh"]).is_err(), "unknown shells are refused");
    }

    /// `--json` is one global flag, accepted before or after the command,
    /// and job ids may be prefixes (a nonsense one says why).
    #[test]
    fn json_is_global_and_jobs_take_prefixes() {
        for args in [&["flotilla", "--json", "status", "0195f3a2"][..], &["flotilla", "status", "0195f3a2", "--json"]] {
            let cli = super::Cli::try_parse_from(args).expect("parses");
            assert!(cli.json, "{args:?}");
        }
        let cli = super::Cli::try_parse_from(["flotilla", "files", "ls", "0195", "--json"]).expect("parses");
        assert!(cli.json);
        let e = super::Cli::try_parse_from(["flotilla", "watch", "abc"]).unwrap_err().to_string();
        assert!(e.contains("at least 4 characters") && !e.contains("invalid length"), "{e}");
        super::Cli::command().debug_assert();
    }
}
