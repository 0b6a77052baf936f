//! The tools of one agent, and the execution policy around every call:
//! lookup, JSON Schema validation, timeout, panic isolation.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{Tool, ToolContext, ToolError, ToolSpec};
use crate::protocol::ErrorKind;

/// Why a tool set could not be assembled.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ToolSetError {
    /// Two tools with one name: never a silent overwrite.
    #[error("duplicate tool name {name:?} (from {first} and {second})")]
    Duplicate {
        /// The name.
        name: String,
        /// Where the first came from.
        first: String,
        /// Where the second came from.
        second: String,
    },
    /// A tool's input schema is not a valid JSON Schema.
    #[error("tool {name:?} has an invalid input schema: {message}")]
    Schema {
        /// The tool.
        name: String,
        /// Why.
        message: String,
    },
}

struct Entry {
    tool: Arc<dyn Tool>,
    spec: ToolSpec,
    validator: jsonschema::Validator,
}

/// The outcome of one call, ready for the conversation.
#[derive(Clone, Debug)]
pub struct ToolOutcome {
    /// The value, or the error the model will read.
    pub result: Result<Value, ToolError>,
    /// How long it took.
    pub duration: Duration,
}

impl ToolOutcome {
    /// The JSON text the model reads: the value, or `{"error":{"kind","message"}}`.
    pub fn to_model_text(&self) -> String {
        match &self.result {
            Ok(Value::String(s)) => s.clone(),
            Ok(v) => v.to_string(),
            Err(e) => serde_json::json!({"error": {"kind": e.kind, "message": e.message}}).to_string(),
        }
    }
}

/// The tools of one agent.
pub struct ToolSet {
    tools: BTreeMap<String, Entry>,
    sources: BTreeMap<String, String>,
    timeout: Duration,
}

impl ToolSet {
    /// An empty set whose calls time out after `timeout`.
    pub fn new(timeout: Duration) -> Self {
        Self { tools: BTreeMap::new(), sources: BTreeMap::new(), timeout }
    }

    /// Adds a tool; `source` names where it came from for collision errors.
    pub fn add(&mut self, tool: Arc<dyn Tool>, source: &str) -> Result<(), ToolSetError> {
        let spec = tool.spec();
        if let Some(first) = self.sources.get(&spec.name) {
            return Err(ToolSetError::Duplicate { name: spec.name, first: first.clone(), second: source.to_string() });
        }
        let validator = jsonschema::validator_for(&spec.input_schema)
            .map_err(|e| ToolSetError::Schema { name: spec.name.clone(), message: e.to_string() })?;
        self.sources.insert(spec.name.clone(), source.to_string());
        self.tools.insert(spec.name.clone(), Entry { tool, spec, validator });
        Ok(())
    }

    /// Specs for the model, in name order.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools.values().map(|e| e.spec.clone()).collect()
    }

    /// Tool names, in order.
    pub fn names(&self) -> Vec<String> {
        self.tools.keys().cloned().collect()
    }

    /// Validates and runs one call. Never panics, never hangs past the timeout.
    pub async fn invoke(&self, ctx: &ToolContext, name: &str, args: &Value) -> ToolOutcome {
        let started = Instant::now();
        let result = self.invoke_inner(ctx, name, args).await;
        ToolOutcome { result, duration: started.elapsed() }
    }

    async fn invoke_inner(&self, ctx: &ToolContext, name: &str, args: &Value) -> Result<Value, ToolError> {
        let Some(entry) = self.tools.get(name) else {
            return Err(ToolError::validation(format!(
                "unknown tool {name:?}; available tools: {}",
                self.names().join(", ")
            )));
        };
        validate(&entry.validator, args)?;
        let tool = entry.tool.clone();
        let (ctx2, args2) = (ctx.clone(), args.clone());
        // Spawned so a panicking tool becomes a `bug` result, not a dead agent.
        let handle = tokio::spawn(async move { tool.call(&ctx2, args2).await });
        let abort = handle.abort_handle();
        let outcome = tokio::select! {
            r = handle => r,
            _ = tokio::time::sleep(self.timeout) => {
                abort.abort();
                return Err(ToolError::new(ErrorKind::Timeout, format!("tool {name} timed out after {}s", self.timeout.as_secs_f32())));
            }
            _ = ctx.cancel.cancelled() => {
                abort.abort();
                return Err(ToolError::new(ErrorKind::Cancelled, "cancelled"));
            }
        };
        match outcome {
            Ok(r) => r,
            Err(join) => {
                tracing::error!(tool = name, call_id = %ctx.call_id, traceparent = ?ctx.traceparent, error = %join, "tool panicked");
                Err(ToolError::new(
                    ErrorKind::Bug,
                    format!(
                        "internal error in tool {name}; reported under trace {}",
                        ctx.traceparent.as_deref().unwrap_or("-")
                    ),
                ))
            }
        }
    }
}

fn validate(validator: &jsonschema::Validator, args: &Value) -> Result<(), ToolError> {
    if !args.is_object() {
        return Err(ToolError::validation(format!(
            "arguments must be a JSON object, got: {}",
            truncate(&args.to_string(), 200)
        )));
    }
    let problems: Vec<String> = validator
        .iter_errors(args)
        .take(5)
        .map(|e| {
            let at = e.instance_path().to_string();
            if at.is_empty() { e.to_string() } else { format!("{at}: {e}") }
        })
        .collect();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(ToolError::validation(format!("invalid arguments: {}", problems.join("; "))))
    }
}

/// Cuts `s` to at most `max` bytes on a char boundary, marking the cut.
pub(crate) fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

#[cfg(test)]
mod tests {
    use super::*;
    use async_trait::async_trait;
    use serde_json::json;
    use tokio_util::sync::CancellationToken;

    struct Echo;
    #[async_trait]
    impl Tool for Echo {
        fn spec(&self) -> ToolSpec {
            ToolSpec {
                name: "echo".into(),
                description: "echo".into(),
                input_schema: json!({"type":"object","properties":{"x":{"type":"number"},"sleep_ms":{"type":"integer"},"panic":{"type":"boolean"}},"required":["x"],"additionalProperties":false}),
            }
        }
        async fn call(&self, _: &ToolContext, args: Value) -> Result<Value, ToolError> {
            if args["panic"] == json!(true) {
                panic!("boom at /secret/host/path");
            }
            if let Some(ms) = args["sleep_ms"].as_u64() {
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
            Ok(args["x"].clone())
        }
    }

    pub(crate) fn ctx() -> ToolContext {
        ToolContext {
            job_id: crate::ids::JobId::new(),
            task_id: None,
            tenant: Default::default(),
            call_id: "c1".into(),
            idempotency_key: "k".into(),
            traceparent: None,
            cancel: CancellationToken::new(),
            approvals: None,
        }
    }

    fn set() -> ToolSet {
        let mut s = ToolSet::new(Duration::from_millis(200));
        s.add(Arc::new(Echo), "builtin").unwrap();
        s
    }

    #[tokio::test]
    async fn validates_before_calling() {
        let s = set();
        let ok = s.invoke(&ctx(), "echo", &json!({"x": 2})).await;
        assert_eq!(ok.result.unwrap(), json!(2));
        for (args, needle) in [
            (json!({}), "\"x\" is a required property"),
            (json!({"x": "two"}), "/x"),
            (json!({"x": 1, "y": 1}), "Additional properties"),
            (json!("{not json"), "must be a JSON object"),
        ] {
            let e = s.invoke(&ctx(), "echo", &args).await.result.unwrap_err();
            assert_eq!(e.kind, ErrorKind::Validation);
            assert!(e.message.contains(needle), "{needle}: {}", e.message);
        }
        let e = s.invoke(&ctx(), "nope", &json!({})).await.result.unwrap_err();
        assert!(e.message.contains("available tools: echo"));
    }

    #[tokio::test]
    async fn times_out_and_isolates_panics() {
        let s = set();
        let e = s.invoke(&ctx(), "echo", &json!({"x": 1, "sleep_ms": 5000})).await.result.unwrap_err();
        assert_eq!(e.kind, ErrorKind::Timeout);
        let e = s.invoke(&ctx(), "echo", &json!({"x": 1, "panic": true})).await.result.unwrap_err();
        assert_eq!(e.kind, ErrorKind::Bug);
        assert!(!e.message.contains("/secret"), "{}", e.message);
    }

    #[test]
    fn duplicates_are_refused() {
        let mut s = set();
        let err = s.add(Arc::new(Echo), "mcp:x").unwrap_err().to_string();
        assert!(err.contains("builtin") && err.contains("mcp:x"), "{err}");
    }
}
