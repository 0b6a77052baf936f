//! OpenTelemetry export of traces and metrics over OTLP (HTTP/protobuf or
//! gRPC), for the processes that do the work: `flotilla orchestrator`,
//! `flotilla-worker` and `flotilla mcp serve` (docs/OPERATIONS.md
//! "Tracing").
//!
//! Off unless an endpoint is configured: `[telemetry] endpoint`, or the
//! standard `OTEL_EXPORTER_OTLP_ENDPOINT` (or `_TRACES_ENDPOINT`) alone, as
//! in every OpenTelemetry SDK. Keys of `[telemetry]` win over the `OTEL_*`
//! variables, which fill what is unset (protocol, headers, timeouts, batch
//! sizes, `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`).
//!
//! Export never blocks a task: spans go through the SDK's batch processor
//! (a bounded queue, `OTEL_BSP_MAX_QUEUE_SIZE`, 2 048 by default; a full
//! queue drops spans and the SDK warns once), and a batch the collector
//! did not take is counted as dropped and warned about once
//! ([`Export::dropped_spans`]).
//!
//! Only Flotilla's GenAI spans are exported (tracing target `gen_ai`,
//! [`crate::trace`]), never the libraries' own spans or log lines.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use flotilla_config::telemetry::TelemetryConfig;
use opentelemetry::KeyValue;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider, SpanData, SpanExporter};

/// The tracing target of every span and event exported over OTLP.
pub const TARGET: &str = "gen_ai";

/// Who is exporting: the default `service.name` and the
/// `service.instance.id` of this process.
#[derive(Clone, Debug)]
pub struct Process {
    /// `flotilla-orchestrator`, `flotilla-worker` or `flotilla-mcp-serve`,
    /// unless `[telemetry] service_name` or `OTEL_SERVICE_NAME` say otherwise.
    pub service_name: &'static str,
    /// The worker id, orchestrator id or a fresh UUID.
    pub instance_id: String,
}

/// How to export, resolved from `[telemetry]` and the environment.
#[derive(Clone, Debug, PartialEq)]
pub struct Resolved {
    /// The configured base URL; `None` lets the exporter read
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` and its per-signal variants itself.
    pub endpoint: Option<String>,
    /// gRPC rather than HTTP/protobuf.
    pub grpc: bool,
    /// `service.name`.
    pub service_name: String,
    /// Attributes from `[telemetry] resource_attributes`.
    pub resource_attributes: Vec<(String, String)>,
    /// Prompts, completions and tool payloads on spans.
    pub capture_content: bool,
    /// Between metric exports.
    pub metrics_interval: Duration,
}

/// Whether and how to export; `Ok(None)` when export is off.
/// `env` reads a variable (`std::env::var` in the binaries).
pub fn resolve(
    cfg: &TelemetryConfig,
    process: &Process,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Option<Resolved>, String> {
    let set = |k: &str| env(k).filter(|v| !v.trim().is_empty());
    if cfg.enabled == Some(false) || set("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
        return Ok(None);
    }
    let from_env = set("OTEL_EXPORTER_OTLP_ENDPOINT").or_else(|| set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"));
    if cfg.endpoint.is_none() && from_env.is_none() && cfg.enabled != Some(true) {
        return Ok(None);
    }
    let protocol = cfg.protocol.clone().or_else(|| set("OTEL_EXPORTER_OTLP_PROTOCOL"));
    let grpc = match protocol.as_deref() {
        None | Some("http/protobuf") => false,
        Some("grpc") => true,
        Some(other) => {
            return Err(format!(
                "OTEL_EXPORTER_OTLP_PROTOCOL={other:?} is not supported: use \"http/protobuf\" or \"grpc\""
            ));
        }
    };
    // `enabled = true` without any endpoint: the protocol's standard local port.
    let endpoint = cfg.endpoint.clone().or_else(|| {
        from_env.is_none().then(|| if grpc { "http://localhost:4317" } else { "http://localhost:4318" }.to_string())
    });
    let service_name =
        cfg.service_name.clone().or_else(|| set("OTEL_SERVICE_NAME")).unwrap_or_else(|| process.service_name.into());
    Ok(Some(Resolved {
        endpoint,
        grpc,
        service_name,
        resource_attributes: cfg.resource_attributes.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        capture_content: cfg.capture_content,
        metrics_interval: Duration::from_secs(cfg.metrics_interval.unwrap_or(30)),
    }))
}

static METRICS_INTERVAL: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();

/// The interval of metric exports, when this process exports over OTLP:
/// what reads gauges on a scrape must read them this often instead.
pub fn metrics_interval() -> Option<Duration> {
    METRICS_INTERVAL.get().copied()
}

/// The installed exporters of one process; [`Export::shutdown`] flushes
/// them on the way out.
pub struct Export {
    tracer_provider: SdkTracerProvider,
    meter_provider: SdkMeterProvider,
    dropped: Arc<AtomicU64>,
    capture_content: bool,
}

impl Export {
    /// Builds the exporters and installs the global meter provider (the
    /// tracer is handed to the tracing layer by `crate::logging`). Must run
    /// inside a Tokio runtime: the batch processors are tasks on it.
    pub fn start(resolved: &Resolved, process: &Process) -> Result<Self, String> {
        let resource = Resource::builder()
            .with_attributes(resolved.resource_attributes.iter().map(|(k, v)| KeyValue::new(k.clone(), v.clone())))
            .with_service_name(resolved.service_name.clone())
            .with_attribute(KeyValue::new("service.instance.id", process.instance_id.clone()))
            .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
            .build();
        let failed = |what: &str, e: &dyn std::fmt::Display| format!("cannot build the OTLP {what} exporter: {e}");
        let url = |path: &str| resolved.endpoint.as_ref().map(|base| format!("{}{path}", base.trim_end_matches('/')));
        let spans = if resolved.grpc {
            let b = opentelemetry_otlp::SpanExporter::builder().with_tonic();
            match &resolved.endpoint {
                Some(e) => b.with_endpoint(e.clone()).build(),
                None => b.build(),
            }
        } else {
            let b = opentelemetry_otlp::SpanExporter::builder().with_http();
            match url("/v1/traces") {
                Some(e) => b.with_endpoint(e).build(),
                None => b.build(),
            }
        }
        .map_err(|e| failed("span", &e))?;
        let metrics = if resolved.grpc {
            let b = opentelemetry_otlp::MetricExporter::builder().with_tonic();
            match &resolved.endpoint {
                Some(e) => b.with_endpoint(e.clone()).build(),
                None => b.build(),
            }
        } else {
            let b = opentelemetry_otlp::MetricExporter::builder().with_http();
            match url("/v1/metrics") {
                Some(e) => b.with_endpoint(e).build(),
                None => b.build(),
            }
        }
        .map_err(|e| failed("metric", &e))?;
        let dropped = Arc::new(AtomicU64::new(0));
        let counted = Counted { inner: spans, dropped: dropped.clone(), warned: Arc::default() };
        use opentelemetry_sdk::runtime::Tokio;
        let processor =
            opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor::builder(counted, Tokio)
                .build();
        let tracer_provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_id_generator(crate::trace::RootIds)
            .with_resource(resource.clone())
            .build();
        let reader =
            opentelemetry_sdk::metrics::periodic_reader_with_async_runtime::PeriodicReader::builder(metrics, Tokio)
                .with_interval(resolved.metrics_interval)
                .build();
        let meter_provider = SdkMeterProvider::builder().with_reader(reader).with_resource(resource).build();
        opentelemetry::global::set_meter_provider(meter_provider.clone());
        let _ = METRICS_INTERVAL.set(resolved.metrics_interval);
        Ok(Self { tracer_provider, meter_provider, dropped, capture_content: resolved.capture_content })
    }

    /// The tracer of Flotilla's spans.
    pub fn tracer(&self) -> SdkTracer {
        self.tracer_provider.tracer("flotilla")
    }

    /// Spans of batches the collector did not take.
    pub fn dropped_spans(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Whether spans carry prompts, completions and tool payloads.
    pub fn capture_content(&self) -> bool {
        self.capture_content
    }

    /// Exports what is queued (within the SDK's timeouts) and stops.
    pub fn shutdown(&self) {
        if let Err(e) = self.tracer_provider.shutdown() {
            tracing::warn!(error = %e, "OTLP span export did not flush on shutdown");
        }
        if let Err(e) = self.meter_provider.shutdown() {
            tracing::warn!(error = %e, "OTLP metric export did not flush on shutdown");
        }
        let dropped = self.dropped_spans();
        if dropped > 0 {
            tracing::warn!(dropped, "spans were dropped because the OTLP collector did not take them");
        }
    }
}

/// A span exporter that counts the spans of failed exports and warns once:
/// a collector that is down costs spans, never memory or a task's time.
#[derive(Debug)]
struct Counted<E> {
    inner: E,
    dropped: Arc<AtomicU64>,
    warned: Arc<AtomicBool>,
}

impl<E: SpanExporter> SpanExporter for Counted<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let n = batch.len() as u64;
        let result = self.inner.export(batch).await;
        if let Err(e) = &result {
            self.dropped.fetch_add(n, Ordering::Relaxed);
            if !self.warned.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    error = %e,
                    "the OTLP collector did not take a batch of spans; dropping spans until it does (warned once, counted)"
                );
            }
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn process() -> Process {
        Process { service_name: "flotilla-worker", instance_id: "w1".into() }
    }

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
    }

    #[test]
    fn export_is_off_without_an_endpoint_and_on_with_the_standard_variable_alone() {
        let cfg = TelemetryConfig::default();
        assert_eq!(resolve(&cfg, &process(), env(&[])).unwrap(), None);
        let on = resolve(&cfg, &process(), env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318")])).unwrap().unwrap();
        assert_eq!(on.endpoint, None, "the exporter reads the variable itself");
        assert_eq!(on.service_name, "flotilla-worker");
        assert!(!on.grpc);
        let off = TelemetryConfig { enabled: Some(false), ..Default::default() };
        assert_eq!(resolve(&off, &process(), env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318")])).unwrap(), None);
    }

    #[test]
    fn config_keys_win_over_the_otel_variables() {
        let cfg = TelemetryConfig {
            endpoint: Some("http://collector:4317".into()),
            protocol: Some("grpc".into()),
            service_name: Some("fleet-a".into()),
            ..Default::default()
        };
        let vars = [("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"), ("OTEL_SERVICE_NAME", "other")];
        let r = resolve(&cfg, &process(), env(&vars)).unwrap().unwrap();
        assert_eq!(
            (r.endpoint.as_deref(), r.grpc, r.service_name.as_str()),
            (Some("http://collector:4317"), true, "fleet-a")
        );
        let from_env = resolve(
            &TelemetryConfig::default(),
            &process(),
            env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c"), ("OTEL_SERVICE_NAME", "other")]),
        );
        assert_eq!(from_env.unwrap().unwrap().service_name, "other");
    }

    /// A collector that refuses every batch.
    #[derive(Debug)]
    struct Refusing;

    impl SpanExporter for Refusing {
        async fn export(&self, _batch: Vec<SpanData>) -> OTelSdkResult {
            Err(opentelemetry_sdk::error::OTelSdkError::InternalFailure("connection refused".into()))
        }
    }

    #[test]
    fn spans_a_collector_refuses_are_counted_and_the_warning_armed_once() {
        let (dropped, warned) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicBool::new(false)));
        let counted = Counted { inner: Refusing, dropped: dropped.clone(), warned: warned.clone() };
        let provider = SdkTracerProvider::builder().with_simple_exporter(counted).build();
        let tracer = provider.tracer("t");
        for _ in 0..3 {
            opentelemetry::trace::Tracer::in_span(&tracer, "s", |_| {});
        }
        let _ = provider.shutdown();
        assert_eq!(dropped.load(Ordering::Relaxed), 3, "each refused span counted");
        assert!(warned.load(Ordering::Relaxed), "the one warning was logged");
    }

    #[test]
    fn an_unknown_protocol_is_an_error_that_names_the_choices() {
        let e = resolve(
            &TelemetryConfig::default(),
            &process(),
            env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c"), ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")]),
        )
        .unwrap_err();
        assert!(e.contains("http/json") && e.contains("grpc"), "{e}");
    }
}
