//! The tools of one agent and the settings of the execution policy around
//! every call: timeout, approval requirements, eviction, auditor. The policy
//! itself is the pipeline of layers in tool/pipeline/mod.rs, which
//! [`ToolSet::invoke`] runs each call through.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::pipeline::{self, Call, Policy};
use super::{Tool, ToolContext, ToolError, ToolSpec};
use crate::model::ChatMessage;
#[cfg(test)]
use flotilla_protocol::ErrorKind;

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
    /// An approval requirement names a tool the set does not have.
    #[error("no tool {name:?} to require approval for (tools: {available})")]
    UnknownTool {
        /// The name.
        name: String,
        /// The tools there are.
        available: String,
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

/// One tool of the set, with its schema compiled once.
pub(super) struct Entry {
    /// What the calls run.
    pub(super) tool: Arc<dyn Tool>,
    /// Its spec as the tool declares it (what validation and approvals use).
    spec: ToolSpec,
    /// What the model is told about it: the spec with a schema cut to what
    /// a model needs (`model_schema`).
    model: ToolSpec,
    /// Listed to the model only once the conversation holds a call of this
    /// tool ([`ToolSet::list_after`]); callable at any time.
    listed_after: Option<String>,
    /// Its input schema, compiled.
    pub(super) validator: jsonschema::Validator,
}

/// The outcome of one call, ready for the conversation.
#[derive(Clone, Debug)]
pub struct ToolOutcome {
    /// The value, or the error the model will read.
    pub result: Result<Value, ToolError>,
    /// How long it took.
    pub duration: Duration,
    /// What the tool kept for the application, never shown to the model
    /// (see [`Tool::call_with_artifact`]).
    pub artifact: Option<Value>,
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
    eviction: Option<super::Eviction>,
    /// Tools whose calls go through [`ToolContext::approvals`] first.
    gated: std::collections::BTreeSet<String>,
    /// Where every call and approval decision is recorded (set once, after
    /// the process has connected to the bus).
    auditor: std::sync::OnceLock<crate::audit::Auditor>,
}

/// A Flotilla tool's input schema as the model reads it (an MCP server's
/// reaches the model as the server listed it): without
/// `"additionalProperties": false` and `"minLength": 1`, which cost prompt
/// tokens on every request and add nothing a model needs. The set still
/// validates every call against the full schema, so a call with an unknown
/// or empty field is refused all the same, with the reason.
pub fn model_schema(schema: &Value) -> Value {
    match schema {
        Value::Object(o) => Value::Object(
            o.iter()
                .filter(|(k, v)| match k.as_str() {
                    "additionalProperties" => **v != Value::Bool(false),
                    "minLength" => v.as_u64() != Some(1),
                    _ => true,
                })
                .map(|(k, v)| (k.clone(), model_schema(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(model_schema).collect()),
        other => other.clone(),
    }
}

impl ToolSet {
    /// An empty set whose calls time out after `timeout`.
    pub fn new(timeout: Duration) -> Self {
        Self {
            tools: BTreeMap::new(),
            sources: BTreeMap::new(),
            timeout,
            eviction: None,
            gated: Default::default(),
            auditor: Default::default(),
        }
    }

    /// Records every call (and approval decision) of this set through
    /// `auditor` from now on. Takes `&self` so a shared set can be audited once
    /// the bus is up; returns false (and changes nothing) when already set.
    pub fn set_auditor(&self, auditor: crate::audit::Auditor) -> bool {
        self.auditor.set(auditor).is_ok()
    }

    /// The auditor, for code that records approval decisions itself.
    pub fn auditor(&self) -> Option<&crate::audit::Auditor> {
        self.auditor.get()
    }

    /// Evicts oversized results to the job's files (see [`super::Eviction`]).
    pub fn set_eviction(&mut self, eviction: super::Eviction) {
        self.eviction = Some(eviction);
    }

    /// Makes every call of `name` wait for the context's approval gate before
    /// it runs (human in the loop). The wait does not count against the tool
    /// timeout; arguments edited by the reviewer are validated again.
    pub fn require_approval(&mut self, name: &str) -> Result<(), ToolSetError> {
        if !self.tools.contains_key(name) {
            return Err(ToolSetError::UnknownTool { name: name.into(), available: self.names().join(", ") });
        }
        self.gated.insert(name.to_string());
        Ok(())
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
        // A third party's schema reaches the model as its server listed it
        // (JSON Schema 2020-12 whole: `$schema`, `$defs`, `additionalProperties`,
        // docs/MCP.md); only Flotilla's own schemas are trimmed.
        let model = if source.starts_with(flotilla_config::tool_ref::MCP_PREFIX) {
            spec.clone()
        } else {
            ToolSpec { input_schema: model_schema(&spec.input_schema), ..spec.clone() }
        };
        self.tools.insert(spec.name.clone(), Entry { tool, spec, model, listed_after: None, validator });
        Ok(())
    }

    /// Lists `name` to the model only once its conversation holds a call of
    /// `after` (or was compacted, which may have folded that call away):
    /// tools that only matter after another (following an asynchronous
    /// task after `start_task`) cost no prompt before it. The tool stays
    /// callable throughout.
    pub fn list_after(&mut self, name: &str, after: &str) -> Result<(), ToolSetError> {
        for n in [name, after] {
            if !self.tools.contains_key(n) {
                return Err(ToolSetError::UnknownTool { name: n.into(), available: self.names().join(", ") });
            }
        }
        if let Some(entry) = self.tools.get_mut(name) {
            entry.listed_after = Some(after.to_string());
        }
        Ok(())
    }

    /// Specs as the tools declare them, in name order.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools.values().map(|e| e.spec.clone()).collect()
    }

    /// What the model is shown before its next turn, in name order: every
    /// tool listed by now ([`ToolSet::list_after`]), with schemas cut to
    /// what a model needs (`model_schema`).
    pub fn model_specs(&self, messages: &[ChatMessage], compacted: bool) -> Vec<ToolSpec> {
        let called = |tool: &str| {
            messages.iter().any(|m| match m {
                ChatMessage::Assistant { tool_calls, .. } => tool_calls.iter().any(|c| c.name == tool),
                _ => false,
            })
        };
        self.tools
            .values()
            .filter(|e| compacted || e.listed_after.as_deref().is_none_or(called))
            .map(|e| e.model.clone())
            .collect()
    }

    /// How many tools the set has.
    pub fn len(&self) -> usize {
        self.tools.len()
    }

    /// Whether the set has no tool.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// Tool names, in order.
    pub fn names(&self) -> Vec<String> {
        self.tools.keys().cloned().collect()
    }

    /// Whether `name`'s identical calls may return something new
    /// ([`Tool::repeatable`]); false for a name the set lacks.
    pub fn repeatable(&self, name: &str) -> bool {
        self.tools.get(name).is_some_and(|e| e.tool.repeatable())
    }

    /// Whether a call of `name` changes nothing outside its result
    /// ([`Tool::read_only`]) and needs no person's approval (a decision is
    /// tied to the call the journal records); false for a name the set lacks.
    pub fn read_only(&self, name: &str) -> bool {
        self.tools.get(name).is_some_and(|e| e.tool.read_only()) && !self.gated.contains(name)
    }

    /// Validates and runs one call through the pipeline
    /// (tool/pipeline/mod.rs). Never panics, never hangs past the timeout.
    pub async fn invoke(&self, ctx: &ToolContext, name: &str, args: &Value) -> ToolOutcome {
        pipeline::invoke(&self.policy(), self.call(ctx, name, args)).await
    }

    /// The settings the pipeline's layers read.
    pub(super) fn policy(&self) -> Policy<'_> {
        Policy {
            auditor: self.auditor.get(),
            eviction: self.eviction.as_ref(),
            gated: &self.gated,
            timeout: self.timeout,
        }
    }

    /// A call of `name` on this set, before any layer saw it.
    pub(super) fn call<'a>(&'a self, ctx: &'a ToolContext, name: &'a str, args: &'a Value) -> Call<'a> {
        Call::new(&self.tools, ctx, name, args)
    }
}

#[cfg(test)]
pub(crate) mod tests {
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
            job_id: flotilla_protocol::ids::JobId::new(),
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

    /// A second tool, `echo` under another name.
    struct Named(&'static str);
    #[async_trait]
    impl Tool for Named {
        fn spec(&self) -> ToolSpec {
            ToolSpec { name: self.0.into(), ..Echo.spec() }
        }
        async fn call(&self, ctx: &ToolContext, args: Value) -> Result<Value, ToolError> {
            Echo.call(ctx, args).await
        }
    }

    /// A read-only tool, `echo` under another name.
    struct Reads;
    #[async_trait]
    impl Tool for Reads {
        fn spec(&self) -> ToolSpec {
            ToolSpec { name: "reads".into(), ..Echo.spec() }
        }
        async fn call(&self, ctx: &ToolContext, args: Value) -> Result<Value, ToolError> {
            Echo.call(ctx, args).await
        }
        fn read_only(&self) -> bool {
            true
        }
    }

    #[test]
    fn a_call_is_read_only_when_its_tool_says_so_and_no_person_must_approve_it() {
        let mut s = set();
        s.add(Arc::new(Reads), "builtin").unwrap();
        assert!(s.read_only("reads"));
        assert!(!s.read_only("echo"), "a tool has effects unless it says otherwise");
        assert!(!s.read_only("nope"), "a name the set lacks");
        s.require_approval("reads").unwrap();
        assert!(!s.read_only("reads"), "an approval is tied to the call the journal records first");
    }

    #[tokio::test]
    async fn a_tool_listed_after_another_is_shown_once_that_one_was_called_and_callable_before() {
        let mut s = set();
        s.add(Arc::new(Named("follow")), "builtin").unwrap();
        s.list_after("follow", "echo").unwrap();
        let names = |specs: Vec<ToolSpec>| specs.into_iter().map(|t| t.name).collect::<Vec<_>>();
        let fresh = [ChatMessage::User { content: "hi".into() }];
        assert_eq!(names(s.model_specs(&fresh, false)), ["echo"]);
        assert_eq!(names(s.model_specs(&fresh, true)), ["echo", "follow"], "a compacted conversation lists all");
        let called = [ChatMessage::Assistant {
            content: None,
            tool_calls: vec![crate::model::ToolCall {
                id: "1".into(),
                name: "echo".into(),
                arguments: json!({"x": 1}),
            }],
        }];
        assert_eq!(names(s.model_specs(&called, false)), ["echo", "follow"]);
        // Unlisted is not unavailable.
        assert_eq!(s.invoke(&ctx(), "follow", &json!({"x": 2})).await.result.unwrap(), json!(2));
        assert!(matches!(s.list_after("nope", "echo"), Err(ToolSetError::UnknownTool { .. })));
    }

    #[tokio::test]
    async fn the_model_reads_a_shorter_schema_and_calls_are_still_checked_against_the_whole_one() {
        let s = set();
        let shown = &s.model_specs(&[], false)[0].input_schema;
        assert!(shown.get("additionalProperties").is_none(), "{shown}");
        assert_eq!(shown["required"], json!(["x"]));
        assert_eq!(s.specs()[0].input_schema["additionalProperties"], json!(false), "the declared spec is kept");
        let extra = s.invoke(&ctx(), "echo", &json!({"x": 1, "y": 2})).await;
        assert_eq!(extra.result.unwrap_err().kind, ErrorKind::Validation, "an unknown field is still refused");
        assert_eq!(
            model_schema(&json!({"type": "string", "minLength": 1, "maxLength": 9})),
            json!({"type": "string", "maxLength": 9})
        );
    }

    /// An MCP server's JSON Schema 2020-12 schema (`$schema`, `$defs` with
    /// `$anchor`, `$ref`, `prefixItems`, `if`/`then`, `additionalProperties`)
    /// reaches the model byte for byte, and the validator applies every one
    /// of those keywords.
    #[tokio::test]
    async fn an_mcp_schema_reaches_the_model_whole_and_is_validated_as_2020_12() {
        let schema = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "$defs": {"address": {"$anchor": "addr", "type": "object",
                "properties": {"city": {"type": "string", "minLength": 1}}, "required": ["city"],
                "additionalProperties": false}},
            "properties": {
                "home": {"$ref": "#/$defs/address"},
                "point": {"type": "array", "prefixItems": [{"type": "number"}, {"type": "string"}], "items": false},
                "kind": {"enum": ["a", "b"]},
                "x": {"type": "number"}
            },
            "if": {"properties": {"kind": {"const": "a"}}, "required": ["kind"]},
            "then": {"required": ["point"]},
            "required": ["x"],
            "additionalProperties": false
        });
        struct Remote(Value);
        #[async_trait]
        impl Tool for Remote {
            fn spec(&self) -> ToolSpec {
                ToolSpec { name: "remote".into(), description: "r".into(), input_schema: self.0.clone() }
            }
            async fn call(&self, _: &ToolContext, args: Value) -> Result<Value, ToolError> {
                Ok(args["x"].clone())
            }
        }
        let mut s = ToolSet::new(Duration::from_millis(200));
        s.add(Arc::new(Remote(schema.clone())), "mcp:srv/remote").unwrap();
        assert_eq!(s.model_specs(&[], false)[0].input_schema, schema, "the model reads the server's schema");
        let fine = json!({"x": 1, "kind": "a", "point": [1, "n"], "home": {"city": "Oslo"}});
        assert_eq!(s.invoke(&ctx(), "remote", &fine).await.result.unwrap(), json!(1));
        for (args, why) in [
            (json!({"x": 1, "home": {"city": ""}}), "$ref into $defs"),
            (json!({"x": 1, "home": {"city": "Oslo", "zip": 1}}), "additionalProperties in $defs"),
            (json!({"x": 1, "point": ["n", 1]}), "prefixItems"),
            (json!({"x": 1, "point": [1, "n", 3]}), "items: false after prefixItems"),
            (json!({"x": 1, "kind": "a"}), "if/then"),
            (json!({"x": 1, "y": 2}), "additionalProperties"),
        ] {
            let e = s.invoke(&ctx(), "remote", &args).await.result.unwrap_err();
            assert_eq!(e.kind, ErrorKind::Validation, "{why}: {args}");
        }
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
        // A generous timeout, so a loaded machine cannot turn the panic into a timeout.
        let mut s = ToolSet::new(Duration::from_secs(30));
        s.add(Arc::new(Echo), "builtin").unwrap();
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

    struct Gate(Result<Value, ToolError>);
    #[async_trait]
    impl crate::tool::ApprovalGate for Gate {
        async fn approve(&self, _: &ToolContext, _: &str, _: &Value) -> Result<Value, ToolError> {
            self.0.clone()
        }
    }

    #[tokio::test]
    async fn gated_calls_wait_for_the_gate_and_edits_are_revalidated() {
        let mut s = set();
        assert!(matches!(s.require_approval("nope"), Err(ToolSetError::UnknownTool { .. })));
        s.require_approval("echo").unwrap();
        let with = |g: Result<Value, ToolError>| {
            let mut c = ctx();
            c.approvals = Some(Arc::new(Gate(g)));
            c
        };
        // No gate: refused, never run.
        let e = s.invoke(&ctx(), "echo", &json!({"x": 1})).await.result.unwrap_err();
        assert_eq!(e.kind, ErrorKind::Permission);
        let ok = s.invoke(&with(Ok(json!({"x": 7}))), "echo", &json!({"x": 1})).await;
        assert_eq!(ok.result.unwrap(), json!(7), "edited arguments are the ones run");
        let e = s.invoke(&with(Err(ToolError::new(ErrorKind::Permission, "no"))), "echo", &json!({"x": 1})).await;
        assert_eq!(e.result.unwrap_err().message, "no");
        let e = s.invoke(&with(Ok(json!({"x": "seven"}))), "echo", &json!({"x": 1})).await.result.unwrap_err();
        assert_eq!(e.kind, ErrorKind::Validation);
        assert!(e.message.contains("edited arguments"), "{}", e.message);
    }

    /// A tool that asks the context's gate from inside its call, as a file
    /// permission rule with mode `interrupt` does, then returns `x`.
    struct Interrupting;
    #[async_trait]
    impl Tool for Interrupting {
        fn spec(&self) -> ToolSpec {
            ToolSpec {
                name: "interrupting".into(),
                description: "asks inside".into(),
                input_schema: json!({"type":"object","properties":{"x":{"type":"number"}},"required":["x"]}),
            }
        }
        async fn call(&self, ctx: &ToolContext, args: Value) -> Result<Value, ToolError> {
            let gate = ctx.approvals.as_ref().expect("a gate");
            gate.approve(ctx, "write_file", &json!({"path": "/a"})).await?;
            Ok(args["x"].clone())
        }
    }

    /// A gate that says when it is asked and decides when the test says so.
    struct Person {
        asked: tokio::sync::Notify,
        decision: tokio::sync::Mutex<Option<tokio::sync::oneshot::Receiver<Result<Value, ToolError>>>>,
    }
    #[async_trait]
    impl crate::tool::ApprovalGate for Person {
        async fn approve(&self, _: &ToolContext, _: &str, _: &Value) -> Result<Value, ToolError> {
            self.asked.notify_one();
            let rx = self.decision.lock().await.take().expect("asked once");
            rx.await.expect("the test decides")
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_person_deciding_inside_a_call_does_not_count_against_the_tool_timeout() {
        let mut s = ToolSet::new(Duration::from_secs(1));
        s.add(Arc::new(Interrupting), "builtin").unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let person = Arc::new(Person { asked: Default::default(), decision: tokio::sync::Mutex::new(Some(rx)) });
        let mut c = ctx();
        c.approvals = Some(person.clone());
        let call = tokio::spawn(async move { s.invoke(&c, "interrupting", &json!({"x": 4})).await });
        person.asked.notified().await;
        // The person takes 2 s (paused clock: time passes, no real wait).
        tokio::time::sleep(Duration::from_secs(2)).await;
        let _ = tx.send(Ok(json!({"path": "/a"})));
        let outcome = call.await.unwrap();
        assert_eq!(outcome.result.unwrap(), json!(4), "the 1 s tool timeout fired while a person decided");
    }

    #[tokio::test(start_paused = true)]
    async fn the_tool_timeout_still_bounds_the_tool_outside_approval_waits() {
        let s = set();
        let e = s.invoke(&ctx(), "echo", &json!({"x": 1, "sleep_ms": 5000})).await.result.unwrap_err();
        assert_eq!(e.kind, ErrorKind::Timeout);
    }

    #[tokio::test]
    async fn every_approval_decision_is_audited_once_with_its_outcome() {
        let sink = Arc::new(crate::audit::MemoryAuditSink::default());
        let mut s = set();
        s.add(Arc::new(Interrupting), "builtin").unwrap();
        s.require_approval("echo").unwrap();
        s.set_auditor(crate::audit::Auditor::new(sink.clone(), "a", "w"));
        let with = |g: Result<Value, ToolError>| {
            let mut c = ctx();
            c.approvals = Some(Arc::new(Gate(g)));
            c
        };
        let expired = ToolError::new(ErrorKind::Permission, "no reviewer answered within 1s");
        s.invoke(&with(Ok(json!({"x": 1}))), "echo", &json!({"x": 1})).await.result.unwrap();
        s.invoke(&with(Ok(json!({"x": 2}))), "echo", &json!({"x": 1})).await.result.unwrap();
        s.invoke(&with(Err(expired)), "echo", &json!({"x": 1})).await.result.unwrap_err();
        s.invoke(&with(Err(ToolError::transient("bus down"))), "echo", &json!({"x": 1})).await.result.unwrap_err();
        // Asked from inside an ungated tool (a permission rule): audited too.
        s.invoke(&with(Ok(json!({"path": "/a"}))), "interrupting", &json!({"x": 1})).await.result.unwrap();
        use flotilla_protocol::{AuditAction, AuditOutcome};
        let approvals: Vec<(String, AuditOutcome)> = sink
            .records()
            .into_iter()
            .filter(|r| r.action == AuditAction::Approval)
            .map(|r| (r.tool, r.outcome))
            .collect();
        let expected = [
            ("echo", AuditOutcome::Approved),
            ("echo", AuditOutcome::Edited),
            ("echo", AuditOutcome::Rejected),
            ("write_file", AuditOutcome::Approved),
        ];
        assert_eq!(approvals, expected.map(|(t, o)| (t.to_string(), o)), "no record for a gate that did not decide");
    }
}
