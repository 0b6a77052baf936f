//! Logging setup shared by the binaries: human-readable by default,
//! `--log-format json` for collectors. `RUST_LOG` filters (default `info`).

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

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
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(format!("{default_filter},async_nats=warn,rmcp=warn")));
    let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}
