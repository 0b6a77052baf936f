//! Error kinds shared by tool results, task reports and API replies (the
//! error contract of docs/TOOLS.md): the kind tells the caller (a
//! model, the planner, a retry policy) what to do next.

use serde::{Deserialize, Serialize};

/// What kind of failure happened, and so what to do about it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// Arguments or input did not match the contract: fix them and try again.
    Validation,
    /// An expected business rule refused the request (e.g. revenue <= 0).
    Business,
    /// The caller may not do this. No resource details are given.
    Permission,
    /// Temporary infrastructure failure (429, 5xx, reset): retry with a bound.
    Transient,
    /// A deadline passed.
    Timeout,
    /// A budget (steps, tokens, size) was exhausted.
    Limit,
    /// Someone cancelled the work.
    Cancelled,
    /// The thing asked for does not exist.
    NotFound,
    /// A defect. Details are in the logs under the trace id, never here.
    Bug,
}

impl ErrorKind {
    /// Whether retrying the same request later can succeed.
    pub fn retryable(self) -> bool {
        matches!(self, ErrorKind::Transient | ErrorKind::Timeout)
    }

    /// The snake_case wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Validation => "validation",
            ErrorKind::Business => "business",
            ErrorKind::Permission => "permission",
            ErrorKind::Transient => "transient",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Limit => "limit",
            ErrorKind::Cancelled => "cancelled",
            ErrorKind::NotFound => "not_found",
            ErrorKind::Bug => "bug",
        }
    }
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An error as it travels on the bus.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ErrorInfo {
    /// The class of failure.
    pub kind: ErrorKind,
    /// An actionable, sanitized message.
    pub message: String,
    /// Whether the same request may succeed later.
    pub retryable: bool,
}

impl ErrorInfo {
    /// An error of `kind`; `retryable` follows the kind.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self { kind, message: message.into(), retryable: kind.retryable() }
    }
}

impl std::fmt::Display for ErrorInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} error: {}", self.kind, self.message)
    }
}

/// So a client keeps an error reply, kind and all, in its error chain (the
/// CLI prints it as `{"error": {"kind", "message"}}` under `--json`).
impl std::error::Error for ErrorInfo {}
