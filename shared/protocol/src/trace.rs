//! W3C trace context (`traceparent`) helpers. Flotilla carries the trace id
//! from the planner's job run to every task message (in the header and the
//! body) so the log lines of planner and workers for one job share it.

/// A new root traceparent: version 00, random trace and span ids, sampled.
pub fn new_traceparent() -> String {
    format!("00-{:032x}-{:016x}-01", random_nonzero(), span_id())
}

/// 122 random bits (a version 4 UUID), never all zero as W3C requires.
fn random_nonzero() -> u128 {
    uuid::Uuid::new_v4().as_u128()
}

/// A random, non-zero 64-bit span id.
fn span_id() -> u64 {
    (random_nonzero() as u64).max(1)
}

/// A child of `parent`: same trace id, new span id. Falls back to a new root
/// when `parent` is not a valid traceparent.
pub fn child_of(parent: &str) -> String {
    match trace_id(parent) {
        Some(trace) => format!("00-{trace}-{:016x}-01", span_id()),
        None => new_traceparent(),
    }
}

/// The 32-hex-digit trace id of a valid traceparent.
pub fn trace_id(traceparent: &str) -> Option<&str> {
    let mut parts = traceparent.split('-');
    let (version, trace, span, flags) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
    (hex(version, 2) && hex(trace, 32) && hex(span, 16) && hex(flags, 2) && parts.next().is_none()).then_some(trace)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn children_keep_the_trace_id() {
        let root = new_traceparent();
        let t = trace_id(&root).unwrap().to_string();
        let child = child_of(&root);
        assert_eq!(trace_id(&child), Some(t.as_str()));
        assert_ne!(child, root);
        assert_eq!(trace_id("garbage"), None);
        assert!(trace_id(&child_of("garbage")).is_some());
    }
}
