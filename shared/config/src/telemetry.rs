//! `[telemetry]`: OpenTelemetry export of traces and metrics over OTLP
//! (docs/OPERATIONS.md "Tracing"). Off unless an endpoint is set here or in
//! the standard `OTEL_EXPORTER_OTLP_ENDPOINT` variable; the keys here win
//! over the `OTEL_*` variables, which fill whatever is unset
//! (`flotilla_telemetry::otel` resolves the two).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `[telemetry]`.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetryConfig {
    /// `false` turns export off even when `OTEL_EXPORTER_OTLP_ENDPOINT` is
    /// set; unset follows the endpoint.
    pub enabled: Option<bool>,
    /// The collector's base URL, e.g. `"http://127.0.0.1:4318"` (HTTP; the
    /// signal paths `/v1/traces` and `/v1/metrics` are appended) or
    /// `"http://127.0.0.1:4317"` (gRPC).
    pub endpoint: Option<String>,
    /// `"http/protobuf"` (the default) or `"grpc"`.
    pub protocol: Option<String>,
    /// `service.name` of every process reading this file; default
    /// `flotilla-orchestrator`, `flotilla-worker` or `flotilla-mcp-serve`.
    pub service_name: Option<String>,
    /// More resource attributes, e.g. `{ "deployment.environment.name" = "prod" }`.
    pub resource_attributes: BTreeMap<String, String>,
    /// Put prompts, completions, tool arguments and tool results on the
    /// spans (sanitized like every log line). Off by default: they can hold
    /// what a tenant would not show an operator.
    pub capture_content: bool,
    /// Seconds between metric exports (default 30).
    pub metrics_interval: Option<u64>,
}

impl TelemetryConfig {
    /// The checks a config needs before a process starts: a known protocol,
    /// an endpoint that is a URL.
    pub fn validate(&self) -> Result<(), crate::ConfigError> {
        if let Some(p) = self.protocol.as_deref().filter(|p| !matches!(*p, "http/protobuf" | "grpc")) {
            return Err(crate::invalid("telemetry.protocol", format!("{p:?} is not \"http/protobuf\" or \"grpc\"")));
        }
        if let Some(e) = self.endpoint.as_deref().filter(|e| !(e.starts_with("http://") || e.starts_with("https://"))) {
            return Err(crate::invalid(
                "telemetry.endpoint",
                format!("{e:?} is not an http:// or https:// URL (e.g. \"http://127.0.0.1:4318\")"),
            ));
        }
        if self.metrics_interval == Some(0) {
            return Err(crate::invalid("telemetry.metrics_interval", "must be at least 1 second"));
        }
        Ok(())
    }
}
