//! Logging setup shared by the binaries: human-readable by default,
//! `--log-format json` for collectors. `RUST_LOG` filters (default `info`).
//! With OTLP export on ([`crate::otel`]), the same subscriber also hands
//! Flotilla's GenAI spans (target `gen_ai`) to OpenTelemetry; those spans
//! never appear in log lines, and `RUST_LOG` does not filter them.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

use crate::otel::{Export, TARGET};

/// Log line format.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// One human-readable line per event.
    #[default]
    Text,
    /// One JSON object per event.
    Json,
}

impl std::str::FromStr for LogFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            other => Err(format!("unknown log format {other:?}: use text or json")),
        }
    }
}

/// Installs the global subscriber, writing to stderr. Safe to call twice.
/// Text lines are coloured only when stderr is a terminal and `NO_COLOR` is
/// unset: a log file or a pipe gets plain text.
/// `default_filter` applies when `RUST_LOG` is unset, e.g. `"info"` for
/// services and `"warn"` for short-lived CLI commands.
pub fn init(format: LogFormat, default_filter: &str) {
    init_with(format, default_filter, None);
}

/// Resolves `[telemetry]` and the `OTEL_*` variables, starts OTLP export
/// when it is on, and installs the subscriber ([`init_with`]). Runs inside
/// the Tokio runtime. `Err` is a start error for the operator: an
/// unsupported `OTEL_EXPORTER_OTLP_PROTOCOL`, an exporter that cannot be
/// built.
pub fn start(
    format: LogFormat,
    default_filter: &str,
    cfg: &flotilla_config::telemetry::TelemetryConfig,
    process: &crate::otel::Process,
) -> Result<Option<Export>, String> {
    let started = crate::otel::resolve(cfg, process, |k| std::env::var(k).ok())
        .and_then(|resolved| Ok((resolved.as_ref().map(|r| Export::start(r, process)).transpose()?, resolved)));
    let (export, resolved) = match started {
        Ok(started) => started,
        Err(e) => {
            // Logging still works for the error's own report.
            init(format, default_filter);
            return Err(e);
        }
    };
    init_with(format, default_filter, export.as_ref());
    if let Some(r) = &resolved {
        tracing::info!(
            endpoint = r.endpoint.as_deref().unwrap_or("from OTEL_EXPORTER_OTLP_ENDPOINT"),
            protocol = if r.grpc { "grpc" } else { "http/protobuf" },
            service_name = %r.service_name,
            capture_content = r.capture_content,
            "exporting traces and metrics over OTLP"
        );
    }
    Ok(export)
}

/// [`init`], also exporting the GenAI spans through `export`, when given.
pub fn init_with(format: LogFormat, default_filter: &str, export: Option<&Export>) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(format!("{default_filter},async_nats=warn,rmcp=warn")))
        .add_directive(format!("{TARGET}=off").parse().expect("a valid directive"));
    let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_ansi(ansi);
    let fmt = match format {
        LogFormat::Text => fmt.boxed(),
        LogFormat::Json => fmt.json().flatten_event(true).boxed(),
    };
    let otel = export.map(|e| {
        tracing_opentelemetry::layer()
            .with_tracer(e.tracer())
            .with_tracked_inactivity(false)
            .with_threads(false)
            .with_location(false)
            .with_target(false)
            .with_filter(tracing_subscriber::filter::filter_fn(|meta| meta.target() == TARGET))
    });
    let _ = tracing_subscriber::registry().with(otel).with(fmt.with_filter(filter)).try_init();
}
