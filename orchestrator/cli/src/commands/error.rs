//! How a failed command reports itself: once, on one line, with a kind a
//! script can branch on (docs/OPERATIONS.md, "Scripting with --json").
//!
//! The message is anyhow's `{:#}` chain: each layer adds what it was doing
//! and keeps the error below as its source, without formatting that source
//! into its own message (the layers that did, `BusError` in
//! shared/bus/src/lib.rs and `ConfigError::Load` in shared/config/src/lib.rs,
//! print their cause themselves and keep no source), so every cause appears
//! once. The kind is the first one found walking the chain from the outside:
//! the API's error kinds (`ErrorInfo`, shared/protocol/src/error.rs) as they
//! came back, plus `usage`, `config` and `connection` for what fails before
//! or without a reply. Every error exits 2 (the exit-code table in
//! [`super::exit_code`]).

use flotilla_bus::{BusError, BusErrorKind};
use flotilla_config::ConfigError;
use flotilla_protocol::ErrorInfo;
use serde_json::{Value, json};

/// Exit code of every command that failed with an error.
pub const ERROR_EXIT: i32 = 2;

/// An error the CLI itself finds, with its kind (e.g. an ambiguous task id
/// prefix, which also lists its candidates; an ambiguous job id prefix is
/// the client's `Unresolved`).
#[derive(Debug)]
pub struct CliError {
    /// One of the kinds of [`kind_of`].
    pub kind: &'static str,
    /// What is wrong and what to do.
    pub message: String,
    /// The job ids an ambiguous prefix matches (empty otherwise).
    pub candidates: Vec<String>,
}

impl CliError {
    /// An error of `kind`.
    pub fn new(kind: &'static str, message: impl Into<String>) -> Self {
        Self { kind, message: message.into(), candidates: Vec::new() }
    }
}

impl std::fmt::Display for CliError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for CliError {}

/// The error's one line: every layer's message, each cause once.
pub fn message(e: &anyhow::Error) -> String {
    format!("{e:#}")
}

/// The kind of `e`: `usage`, `config`, `connection`, or one of the API's
/// error kinds (`validation`, `permission`, `not_found`, `transient`,
/// `timeout`, `limit`, ...). An error nothing classifies (a check of the
/// command line's values) is `validation`.
pub fn kind_of(e: &anyhow::Error) -> &'static str {
    for cause in e.chain() {
        if let Some(c) = cause.downcast_ref::<CliError>() {
            return c.kind;
        }
        if let Some(r) = cause.downcast_ref::<flotilla_client::Unresolved>() {
            return r.kind.as_str();
        }
        if let Some(info) = cause.downcast_ref::<ErrorInfo>() {
            return info.kind.as_str();
        }
        if cause.downcast_ref::<ConfigError>().is_some() {
            return "config";
        }
        if let Some(bus) = cause.downcast_ref::<BusError>() {
            return match bus.kind() {
                BusErrorKind::Permission => "permission",
                BusErrorKind::TooLarge => "limit",
                BusErrorKind::NotFound => "not_found",
                _ => "connection",
            };
        }
        if let Some(mcp) = cause.downcast_ref::<flotilla_mcp::McpError>() {
            return mcp.kind().as_str();
        }
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            return match io.kind() {
                std::io::ErrorKind::NotFound => "not_found",
                std::io::ErrorKind::PermissionDenied => "permission",
                _ => "transient",
            };
        }
    }
    "validation"
}

/// `{"error": {"kind", "message"}}` (plus `candidates` for an ambiguous
/// job id prefix): what a command prints on stdout under `--json`.
pub fn to_json(e: &anyhow::Error) -> Value {
    let mut error = json!({"kind": kind_of(e), "message": message(e)});
    let candidates = e.chain().find_map(|c| {
        c.downcast_ref::<CliError>()
            .map(|c| &c.candidates)
            .or_else(|| c.downcast_ref::<flotilla_client::Unresolved>().map(|r| &r.candidates))
    });
    if let Some(candidates) = candidates.filter(|c| !c.is_empty()) {
        error["candidates"] = json!(candidates);
    }
    json!({ "error": error })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_error_replies_keep_their_kind_under_context() {
        let e = anyhow::Error::new(ErrorInfo::new(flotilla_protocol::ErrorKind::NotFound, "no job 0195"))
            .context("cancel refused");
        assert_eq!(kind_of(&e), "not_found");
        assert_eq!(
            to_json(&e),
            json!({"error": {"kind": "not_found", "message": "cancel refused: not_found error: no job 0195"}})
        );
    }

    #[test]
    fn an_ambiguous_prefix_lists_its_candidates() {
        let mut c = CliError::new("validation", "job id prefix 0195 matches 2 jobs");
        c.candidates = vec!["a".into(), "b".into()];
        let v = to_json(&anyhow::Error::new(c));
        assert_eq!(v["error"]["candidates"], json!(["a", "b"]));
        assert_eq!(v["error"]["kind"], "validation");
    }

    /// A config file that does not parse, and a bus that cannot be
    /// reached: each cause once on the line, and the right kind.
    #[test]
    fn config_and_bus_errors_print_each_cause_once() {
        let dir = std::env::temp_dir().join(format!("flotilla-cli-error-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("bad.toml");
        std::fs::write(&path, "[nats\nurl = \"x\"\n").unwrap();
        let e = anyhow::Error::new(flotilla_config::Settings::load(Some(&path)).unwrap_err());
        let line = message(&e);
        assert_eq!(line.matches("unclosed table").count(), 1, "{line}");
        assert_eq!(kind_of(&e), "config");
        std::fs::write(&path, "[nats]\nbogus = 1\n").unwrap();
        let line = message(&anyhow::Error::new(flotilla_config::Settings::load(Some(&path)).unwrap_err()));
        assert_eq!(line.matches("unknown field `bogus`").count(), 1, "{line}");
        std::fs::remove_dir_all(&dir).unwrap();

        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let e =
            anyhow::Error::new(BusError::new("cannot reach NATS at nats://127.0.0.1:1", refused)).context("connecting");
        assert_eq!(kind_of(&e), "connection");
        assert_eq!(message(&e).matches("refused").count(), 1, "{}", message(&e));
    }

    #[test]
    fn local_file_errors_and_plain_checks_have_kinds() {
        let e = anyhow::Error::new(std::io::Error::from(std::io::ErrorKind::NotFound)).context("reading a.csv");
        assert_eq!(kind_of(&e), "not_found");
        assert_eq!(kind_of(&anyhow::anyhow!("--edit is not valid JSON")), "validation");
    }
}
