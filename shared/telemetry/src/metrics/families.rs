//! Prometheus metrics common to the orchestrator and the workers: model and
//! tool latency, tokens and cost per agent, fed by each binary from its agent
//! runs, and rendering a registry as OpenMetrics text.
//!
//! Each binary owns one [`Registry`], registers its own families next to
//! [`AgentMetrics`] and serves it with [`serve`](super::serve). The endpoint is off unless
//! an address is configured (`[metrics]` or `--metrics-addr`).

use std::time::Duration;

use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::{EncodeLabel, EncodeLabelSet, LabelSetEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use flotilla_protocol::{ErrorKind, Usage};

/// Content type of the OpenMetrics text format (Prometheus scrapes it natively).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Latency buckets in seconds: 1 ms to about 16 min.
pub fn latency_histogram() -> Histogram {
    Histogram::new([
        0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 1000.0,
    ])
}

/// `{agent}`: `planner` or a subagent type.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AgentLabel {
    /// `planner` or the subagent type.
    pub agent: String,
}

/// `{agent, direction}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TokenLabels {
    /// `planner` or the subagent type.
    pub agent: String,
    /// `input` or `output`.
    pub direction: String,
}

/// `{agent, tool, outcome}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ToolLabels {
    /// `planner` or the subagent type.
    pub agent: String,
    /// Tool name.
    pub tool: String,
    /// `ok` or the error kind (`validation`, `timeout`, ...).
    pub outcome: String,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// The labels of the OpenTelemetry GenAI client metrics, Prometheus-style
/// (dots as underscores), plus the Flotilla agent.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GenAiLabels {
    /// `chat`.
    pub gen_ai_operation_name: String,
    /// `openai`, `anthropic`, `flotilla.scripted`.
    pub gen_ai_provider_name: String,
    /// The model requested.
    pub gen_ai_request_model: String,
    /// `planner` or the subagent type.
    pub flotilla_agent: String,
}

/// [`GenAiLabels`] and `gen_ai_token_type` (`input` or `output`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GenAiTokenLabels {
    /// The call's labels.
    #[prometheus(flatten)]
    pub call: GenAiLabels,
    /// `input` or `output`.
    pub gen_ai_token_type: String,
}

/// The labels of `gen_ai_client_operation_duration`: [`GenAiLabels`], and
/// `error_type` (the error kind: `transient`, `timeout`, ...) when the call
/// failed. A successful call's series has no `error_type` label at all, as
/// the GenAI conventions set `error.type` only when the operation failed.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct GenAiDurationLabels {
    /// The call's labels.
    pub call: GenAiLabels,
    /// The error kind of a failed call.
    pub error_type: Option<&'static str>,
}

impl EncodeLabelSet for GenAiDurationLabels {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        self.call.encode(encoder)?;
        match self.error_type {
            Some(kind) => ("error_type", kind).encode(encoder.encode_label()),
            None => Ok(()),
        }
    }
}

/// Every error kind a failed call's labels are built for up front.
const ERROR_KINDS: [ErrorKind; 9] = [
    ErrorKind::Validation,
    ErrorKind::Business,
    ErrorKind::Permission,
    ErrorKind::Transient,
    ErrorKind::Timeout,
    ErrorKind::Limit,
    ErrorKind::Cancelled,
    ErrorKind::NotFound,
    ErrorKind::Bug,
];

/// The GenAI labels and attributes of one agent's model calls, built once
/// per agent ([`AgentMetrics::set_model`]) rather than on every call.
struct GenAiAgent {
    /// Of a successful call's duration.
    labels: GenAiDurationLabels,
    /// Input, then output.
    token_labels: [GenAiTokenLabels; 2],
    attributes: Vec<opentelemetry::KeyValue>,
    /// Input, then output.
    token_attributes: [Vec<opentelemetry::KeyValue>; 2],
    /// A failed call's duration labels and attributes, per error kind.
    failed: Vec<(ErrorKind, GenAiDurationLabels, Vec<opentelemetry::KeyValue>)>,
}

impl GenAiAgent {
    fn new(agent: &str, provider: &str, model: &str) -> Self {
        let labels = GenAiLabels {
            gen_ai_operation_name: "chat".into(),
            gen_ai_provider_name: provider.into(),
            gen_ai_request_model: model.into(),
            flotilla_agent: agent.into(),
        };
        let attributes = vec![
            opentelemetry::KeyValue::new("gen_ai.operation.name", "chat"),
            opentelemetry::KeyValue::new("gen_ai.provider.name", provider.to_string()),
            opentelemetry::KeyValue::new("gen_ai.request.model", model.to_string()),
            opentelemetry::KeyValue::new("flotilla.agent", agent.to_string()),
        ];
        let token = |kind: &'static str| {
            let mut a = attributes.clone();
            a.push(opentelemetry::KeyValue::new("gen_ai.token.type", kind));
            (GenAiTokenLabels { call: labels.clone(), gen_ai_token_type: kind.into() }, a)
        };
        let ((input, input_attrs), (output, output_attrs)) = (token("input"), token("output"));
        let failed = ERROR_KINDS.iter().map(|&kind| Self::failure(&labels, &attributes, kind)).collect();
        Self {
            labels: GenAiDurationLabels { call: labels, error_type: None },
            token_labels: [input, output],
            attributes,
            token_attributes: [input_attrs, output_attrs],
            failed,
        }
    }

    fn failure(
        labels: &GenAiLabels,
        attributes: &[opentelemetry::KeyValue],
        kind: ErrorKind,
    ) -> (ErrorKind, GenAiDurationLabels, Vec<opentelemetry::KeyValue>) {
        let mut a = attributes.to_vec();
        a.push(opentelemetry::KeyValue::new("error.type", kind.as_str()));
        (kind, GenAiDurationLabels { call: labels.clone(), error_type: Some(kind.as_str()) }, a)
    }
}

/// Bucket boundaries the GenAI conventions advise for token counts.
pub const TOKEN_BUCKETS: [f64; 14] = [
    1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0, 16777216.0,
    67108864.0,
];

/// Bucket boundaries the GenAI conventions advise for operation durations (s).
pub const DURATION_BUCKETS: [f64; 14] =
    [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92];

/// Model and tool call metrics of agent loops (planner or subagents), on
/// the Prometheus endpoint and, when the process exports over OTLP
/// (`crate::otel`), as OpenTelemetry instruments of the same names.
#[derive(Clone)]
pub struct AgentMetrics {
    model_latency: HistogramFamily<AgentLabel>,
    tokens: Family<TokenLabels, Counter>,
    cost: Family<AgentLabel, Counter<f64, std::sync::atomic::AtomicU64>>,
    tool_latency: HistogramFamily<ToolLabels>,
    genai_tokens: HistogramFamily<GenAiTokenLabels>,
    genai_duration: HistogramFamily<GenAiDurationLabels>,
    otel_tokens: opentelemetry::metrics::Histogram<u64>,
    otel_duration: opentelemetry::metrics::Histogram<f64>,
    /// The GenAI labels of each agent whose model is named.
    models: std::sync::Arc<std::sync::RwLock<std::collections::HashMap<String, std::sync::Arc<GenAiAgent>>>>,
}

impl AgentMetrics {
    /// Registers the families in `registry`:
    /// `flotilla_model_call_duration_seconds{agent}`,
    /// `flotilla_model_tokens_total{agent,direction}`,
    /// `flotilla_model_cost_usd_total{agent}`,
    /// `flotilla_tool_call_duration_seconds{agent,tool,outcome}`.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self {
            model_latency: Family::new_with_constructor(latency_histogram),
            tokens: Family::default(),
            cost: Family::default(),
            tool_latency: Family::new_with_constructor(latency_histogram),
            genai_tokens: Family::new_with_constructor(|| Histogram::new(TOKEN_BUCKETS)),
            genai_duration: Family::new_with_constructor(|| Histogram::new(DURATION_BUCKETS)),
            otel_tokens: crate::metrics::meter()
                .u64_histogram("gen_ai.client.token.usage")
                .with_unit("{token}")
                .with_description("Number of input and output tokens used")
                .with_boundaries(TOKEN_BUCKETS.to_vec())
                .build(),
            otel_duration: crate::metrics::meter()
                .f64_histogram("gen_ai.client.operation.duration")
                .with_unit("s")
                .with_description("GenAI operation duration")
                .with_boundaries(DURATION_BUCKETS.to_vec())
                .build(),
            models: Default::default(),
        };
        registry.register("flotilla_model_call_duration_seconds", "Model round-trip latency", m.model_latency.clone());
        registry.register("flotilla_model_tokens", "Tokens spent in model calls", m.tokens.clone());
        registry.register(
            "flotilla_model_cost_usd",
            "Cost of model calls in US dollars (priced models)",
            m.cost.clone(),
        );
        registry.register("flotilla_tool_call_duration_seconds", "Tool call latency", m.tool_latency.clone());
        registry.register(
            "gen_ai_client_token_usage",
            "Number of input and output tokens used",
            m.genai_tokens.clone(),
        );
        registry.register_with_unit(
            "gen_ai_client_operation_duration",
            "GenAI operation duration",
            prometheus_client::registry::Unit::Seconds,
            m.genai_duration.clone(),
        );
        m
    }

    /// Names the provider and model of `agent` (`planner` or a subagent
    /// type) for the GenAI metrics' labels.
    pub fn set_model(&self, agent: &str, provider: &str, model: &str) {
        self.models
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(agent.into(), std::sync::Arc::new(GenAiAgent::new(agent, provider, model)));
    }

    /// Records one model call of `agent`.
    pub fn model_call(&self, agent: &str, usage: &Usage, latency: Duration) {
        self.model_latency.get_or_create(&AgentLabel { agent: agent.into() }).observe(latency.as_secs_f64());
        let genai = self.genai(agent);
        self.genai_duration.get_or_create(&genai.labels).observe(latency.as_secs_f64());
        self.otel_duration.record(latency.as_secs_f64(), &genai.attributes);
        self.spent(agent, &genai, usage);
    }

    /// Records one failed model call of `agent`: its duration goes to the
    /// GenAI operation duration with `error_type` (`error.type` over OTLP)
    /// set to `kind`, as the GenAI conventions ask, so failures show how
    /// long they took without skewing the successful calls' latency
    /// (`flotilla_model_call_duration_seconds` counts round trips that
    /// answered). Tokens it reported are counted; none is usual.
    pub fn model_failed(&self, agent: &str, kind: ErrorKind, usage: &Usage, latency: Duration) {
        let genai = self.genai(agent);
        match genai.failed.iter().find(|(k, ..)| *k == kind) {
            Some((_, labels, attributes)) => {
                self.genai_duration.get_or_create(labels).observe(latency.as_secs_f64());
                self.otel_duration.record(latency.as_secs_f64(), attributes);
            }
            None => {
                let (_, labels, attributes) = GenAiAgent::failure(&genai.labels.call, &genai.attributes, kind);
                self.genai_duration.get_or_create(&labels).observe(latency.as_secs_f64());
                self.otel_duration.record(latency.as_secs_f64(), &attributes);
            }
        }
        if usage.input_tokens > 0 || usage.output_tokens > 0 || usage.cost_usd > 0.0 {
            self.spent(agent, &genai, usage);
        }
    }

    /// The GenAI labels of `agent`, `unknown` when its model was not named.
    fn genai(&self, agent: &str) -> std::sync::Arc<GenAiAgent> {
        let named = self.models.read().unwrap_or_else(std::sync::PoisonError::into_inner).get(agent).cloned();
        named.unwrap_or_else(|| std::sync::Arc::new(GenAiAgent::new(agent, "unknown", "")))
    }

    /// Counts the tokens and cost of one call.
    fn spent(&self, agent: &str, genai: &GenAiAgent, usage: &Usage) {
        for (direction, n) in [("input", usage.input_tokens), ("output", usage.output_tokens)] {
            self.tokens.get_or_create(&TokenLabels { agent: agent.into(), direction: direction.into() }).inc_by(n);
        }
        if usage.cost_usd > 0.0 {
            self.cost.get_or_create(&AgentLabel { agent: agent.into() }).inc_by(usage.cost_usd);
        }
        for (i, n) in [usage.input_tokens, usage.output_tokens].into_iter().enumerate() {
            self.genai_tokens.get_or_create(&genai.token_labels[i]).observe(n as f64);
            self.otel_tokens.record(n, &genai.token_attributes[i]);
        }
    }

    /// Records one tool call of `agent`; `error` is `None` on success.
    pub fn tool_call(&self, agent: &str, tool: &str, error: Option<ErrorKind>, duration: Duration) {
        let outcome = error.map(|k| k.to_string()).unwrap_or_else(|| "ok".into());
        self.tool_latency
            .get_or_create(&ToolLabels { agent: agent.into(), tool: tool.into(), outcome })
            .observe(duration.as_secs_f64());
    }
}

/// The registry as OpenMetrics text.
pub fn render(registry: &Registry) -> String {
    let mut out = String::new();
    // Writing into a String cannot fail.
    encode(&mut out, registry).expect("metrics encode into a String");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData, ResourceMetrics};
    use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
    use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider, Temporality};
    use std::sync::{Arc, Mutex};

    /// A histogram point as a collector receives it: name, sum, attributes.
    type Point = (String, f64, Vec<(String, String)>);

    /// What an OTLP collector would receive.
    #[derive(Clone, Default)]
    struct Collected(Arc<Mutex<Vec<Point>>>);

    impl PushMetricExporter for Collected {
        async fn export(&self, metrics: &ResourceMetrics) -> opentelemetry_sdk::error::OTelSdkResult {
            let mut out = self.0.lock().unwrap();
            for m in metrics.scope_metrics().flat_map(|s| s.metrics()) {
                let points: Vec<(f64, Vec<(String, String)>)> = match m.data() {
                    AggregatedMetrics::U64(MetricData::Histogram(h)) => {
                        h.data_points().map(|p| (p.sum() as f64, attrs(p.attributes()))).collect()
                    }
                    AggregatedMetrics::F64(MetricData::Histogram(h)) => {
                        h.data_points().map(|p| (p.sum(), attrs(p.attributes()))).collect()
                    }
                    _ => Vec::new(),
                };
                out.extend(points.into_iter().map(|(sum, a)| (m.name().to_string(), sum, a)));
            }
            Ok(())
        }
        fn force_flush(&self) -> opentelemetry_sdk::error::OTelSdkResult {
            Ok(())
        }
        fn shutdown_with_timeout(&self, _: Duration) -> opentelemetry_sdk::error::OTelSdkResult {
            Ok(())
        }
        fn temporality(&self) -> Temporality {
            Temporality::Cumulative
        }
    }

    fn attrs<'a>(kvs: impl Iterator<Item = &'a opentelemetry::KeyValue>) -> Vec<(String, String)> {
        let mut v: Vec<_> = kvs.map(|kv| (kv.key.to_string(), kv.value.to_string())).collect();
        v.sort();
        v
    }

    #[test]
    fn a_model_call_goes_out_as_the_genai_client_metrics() {
        let collected = Collected::default();
        let provider =
            SdkMeterProvider::builder().with_reader(PeriodicReader::builder(collected.clone()).build()).build();
        opentelemetry::global::set_meter_provider(provider.clone());
        // The meter provider is process-wide and the other tests of this binary run
        // alongside: an agent name of its own keeps their samples out of the assertions.
        let agent = "otlp-export-probe";
        let m = AgentMetrics::register(&mut Registry::default());
        m.set_model(agent, "openai", "gpt-4o-mini");
        let usage = Usage { input_tokens: 100, output_tokens: 7, model_calls: 1, ..Usage::default() };
        m.model_call(agent, &usage, Duration::from_millis(250));
        m.model_failed(agent, ErrorKind::Timeout, &Usage::default(), Duration::from_millis(500));
        provider.force_flush().unwrap();
        let got: Vec<Point> = collected
            .0
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, _, a)| a.iter().any(|(k, v)| k == "flotilla.agent" && v == agent))
            .cloned()
            .collect();
        let base = |extra: Option<&str>| {
            let mut a = vec![
                ("flotilla.agent".to_string(), agent.to_string()),
                ("gen_ai.operation.name".into(), "chat".into()),
                ("gen_ai.provider.name".into(), "openai".into()),
                ("gen_ai.request.model".into(), "gpt-4o-mini".into()),
            ];
            if let Some(t) = extra {
                a.push(("gen_ai.token.type".into(), t.into()));
            }
            a.sort();
            a
        };
        assert!(got.contains(&("gen_ai.client.token.usage".into(), 100.0, base(Some("input")))), "{got:?}");
        assert!(got.contains(&("gen_ai.client.token.usage".into(), 7.0, base(Some("output")))), "{got:?}");
        assert!(got.contains(&("gen_ai.client.operation.duration".into(), 0.25, base(None))), "{got:?}");
        let mut failed = base(None);
        failed.push(("error.type".into(), "timeout".into()));
        failed.sort();
        assert!(got.contains(&("gen_ai.client.operation.duration".into(), 0.5, failed)), "{got:?}");
        let usage_points = got.iter().filter(|(name, ..)| name == "gen_ai.client.token.usage").count();
        assert_eq!(usage_points, 2, "the failed call reported no tokens: {got:?}");
    }

    #[test]
    fn a_failed_model_call_is_an_operation_duration_sample_with_its_error_type() {
        let mut reg = Registry::default();
        let m = AgentMetrics::register(&mut reg);
        m.set_model("finance", "openai", "gpt-4o-mini");
        let usage = Usage { input_tokens: 100, output_tokens: 7, model_calls: 1, ..Usage::default() };
        m.model_call("finance", &usage, Duration::from_millis(20));
        m.model_failed("finance", ErrorKind::Transient, &Usage::default(), Duration::from_millis(1203));
        let text = render(&reg);
        let call = "gen_ai_operation_name=\"chat\",gen_ai_provider_name=\"openai\",gen_ai_request_model=\"gpt-4o-mini\",flotilla_agent=\"finance\"";
        let failed = format!("{call},error_type=\"transient\"");
        assert!(text.contains(&format!("gen_ai_client_operation_duration_seconds_count{{{failed}}} 1")), "{text}");
        assert!(text.contains(&format!("gen_ai_client_operation_duration_seconds_sum{{{failed}}} 1.203")), "{text}");
        assert!(
            text.contains(&format!("gen_ai_client_operation_duration_seconds_count{{{call}}} 1")),
            "the answered call's series has no error_type: {text}"
        );
        assert!(text.contains("flotilla_model_call_duration_seconds_count{agent=\"finance\"} 1"), "{text}");
        assert!(text.contains("flotilla_model_tokens_total{agent=\"finance\",direction=\"input\"} 100"), "{text}");
        assert!(
            text.contains(&format!("gen_ai_client_token_usage_count{{{call},gen_ai_token_type=\"input\"}} 1")),
            "{text}"
        );
    }

    #[test]
    fn every_error_kind_has_its_failure_labels_built_up_front() {
        let a = GenAiAgent::new("finance", "openai", "m");
        for kind in ERROR_KINDS {
            assert!(a.failed.iter().any(|(k, l, _)| *k == kind && l.error_type == Some(kind.as_str())), "{kind}");
        }
        assert_eq!(a.failed.len(), ERROR_KINDS.len());
    }

    #[test]
    fn agent_metrics_render_as_openmetrics() {
        let mut reg = Registry::default();
        let m = AgentMetrics::register(&mut reg);
        let usage = Usage { input_tokens: 100, output_tokens: 7, model_calls: 1, cost_usd: 0.5, ..Usage::default() };
        m.model_call("finance", &usage, Duration::from_millis(20));
        m.tool_call("finance", "calculate_margin", None, Duration::from_millis(2));
        m.tool_call("finance", "calculate_margin", Some(ErrorKind::Business), Duration::from_millis(2));
        let text = render(&reg);
        assert!(text.contains("flotilla_model_tokens_total{agent=\"finance\",direction=\"input\"} 100"), "{text}");
        assert!(text.contains("flotilla_model_call_duration_seconds_count{agent=\"finance\"} 1"), "{text}");
        assert!(text.contains("flotilla_model_cost_usd_total{agent=\"finance\"} 0.5"), "{text}");
        assert!(
            text.contains(
                "flotilla_tool_call_duration_seconds_count{agent=\"finance\",tool=\"calculate_margin\",outcome=\"business\"} 1"
            ),
            "{text}"
        );
        assert!(
            text.contains("gen_ai_client_token_usage_sum{gen_ai_operation_name=\"chat\",gen_ai_provider_name=\"unknown\",gen_ai_request_model=\"\",flotilla_agent=\"finance\",gen_ai_token_type=\"input\"} 100.0"),
            "{text}"
        );
        assert!(text.contains("gen_ai_client_operation_duration_seconds_count{"), "{text}");
        assert!(text.ends_with("# EOF\n"));
    }
}
