//! The glue between `tracing` spans, OpenTelemetry span contexts and the W3C
//! `traceparent` Flotilla carries on every task message (docs/PROTOCOL.md),
//! so one job is one trace across the orchestrator and every worker
//! (docs/OPERATIONS.md "Tracing").
//!
//! Every function here is a no-op when no OTLP export is installed
//! ([`crate::otel`]): a span then has no OpenTelemetry context, and
//! callers keep the traceparent they had.

use std::cell::Cell;

use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The W3C traceparent of `span`, when it is exported.
pub fn traceparent_of(span: &tracing::Span) -> Option<String> {
    let cx = span.context();
    let sc = cx.span().span_context().clone();
    sc.is_valid().then(|| format!("00-{}-{}-{:02x}", sc.trace_id(), sc.span_id(), sc.trace_flags().to_u8()))
}

/// The traceparent of the current span, when it is exported, else
/// `fallback`: what a message published from inside a span carries.
pub fn current_or(fallback: Option<&str>) -> Option<String> {
    traceparent_of(&tracing::Span::current()).or_else(|| fallback.map(str::to_string))
}

/// Makes `span` a child of the (remote) span `traceparent` names: how a
/// worker's `invoke_agent` span joins the planner's `execute_tool task`
/// span of the same job.
pub fn set_parent(span: &tracing::Span, traceparent: &str) {
    if let Some(sc) = parse(traceparent, true) {
        let _ = span.set_parent(opentelemetry::Context::new().with_remote_span_context(sc));
    }
}

/// Makes `span` the root of the trace `traceparent` names, with its trace
/// and span ids: a job's first planner run is the span its stored
/// traceparent points at, so every task span of the job hangs below a
/// span the backend has. `span` must have been created with
/// `parent: None`.
pub fn start_as_root(span: &tracing::Span, traceparent: &str) {
    let Some(sc) = parse(traceparent, false) else { return };
    FORCED.set(Some((sc.trace_id(), sc.span_id())));
    // Starts the span now, taking the forced ids.
    let _ = span.context();
    FORCED.set(None);
}

fn parse(traceparent: &str, remote: bool) -> Option<SpanContext> {
    let trace = flotilla_protocol::trace::trace_id(traceparent)?;
    let mut parts = traceparent.split('-').skip(2);
    let (span, flags) = (parts.next()?, parts.next()?);
    let trace = TraceId::from_hex(trace).ok()?;
    let span = SpanId::from_hex(span).ok()?;
    let flags = TraceFlags::new(u8::from_str_radix(flags, 16).ok()?);
    Some(SpanContext::new(trace, span, flags, remote, TraceState::default()))
}

thread_local! {
    /// Ids the next span started on this thread takes ([`start_as_root`]).
    static FORCED: Cell<Option<(TraceId, SpanId)>> = const { Cell::new(None) };
}

/// Random ids, except for a span [`start_as_root`] is starting.
#[derive(Debug)]
pub(crate) struct RootIds;

impl IdGenerator for RootIds {
    fn new_trace_id(&self) -> TraceId {
        match FORCED.get() {
            Some((trace, _)) => trace,
            None => RandomIdGenerator::default().new_trace_id(),
        }
    }

    fn new_span_id(&self) -> SpanId {
        match FORCED.get() {
            Some((_, span)) => span,
            None => RandomIdGenerator::default().new_span_id(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_parses_into_its_span_context() {
        let tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let sc = parse(tp, true).unwrap();
        assert_eq!(sc.trace_id().to_string(), "0af7651916cd43dd8448eb211c80319c");
        assert_eq!(sc.span_id().to_string(), "b7ad6b7169203331");
        assert!(sc.is_sampled() && sc.is_remote());
        assert!(parse("garbage", true).is_none());
    }

    #[test]
    fn without_export_a_span_has_no_traceparent() {
        let span = tracing::info_span!("x");
        assert_eq!(traceparent_of(&span), None);
        assert_eq!(current_or(Some("00-a-b-01")).as_deref(), Some("00-a-b-01"));
    }
}
