//! The pipeline's order is behaviour: these tests run calls through the real
//! order ([`super::invoke`] via [`ToolSet::invoke`]) and, where the order
//! matters, through a swapped one, to show what the documented order protects.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use flotilla_protocol::{AuditAction, AuditOutcome, AuditRecord, ErrorKind};
use serde_json::json;

use super::approve::Approve;
use super::audit::Audit;
use super::timeout::Timeout;
use super::validate::Validate;
use super::*;
use crate::audit::{Auditor, MemoryAuditSink};
use crate::tool::{Tool, ToolSet, ToolSpec};

/// Returns `x`; sleeps `sleep_s` first; fails with `fail`'s text when given.
struct Echo;
#[async_trait]
impl Tool for Echo {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "echo".into(),
            description: "echo".into(),
            input_schema: json!({"type":"object","properties":{"x":{"type":"number"},"sleep_s":{"type":"integer"},"fail":{"type":"string"}},"required":["x"]}),
        }
    }
    async fn call(&self, _: &ToolContext, args: Value) -> Result<Value, ToolError> {
        if let Some(s) = args["sleep_s"].as_u64() {
            tokio::time::sleep(Duration::from_secs(s)).await;
        }
        match args["fail"].as_str() {
            Some(text) => Err(ToolError::business(text)),
            None => Ok(args["x"].clone()),
        }
    }
}

/// Approves as asked after `delay` (of the test's paused clock), counting questions.
#[derive(Default)]
struct Reviewer {
    asked: AtomicUsize,
    delay: Duration,
}
#[async_trait]
impl ApprovalGate for Reviewer {
    async fn approve(&self, _: &ToolContext, _: &str, args: &Value) -> Result<Value, ToolError> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(self.delay).await;
        Ok(args.clone())
    }
}

fn ctx(gate: Option<Arc<Reviewer>>) -> ToolContext {
    let mut c = crate::tool::set::tests::ctx();
    c.approvals = gate.map(|g| g as Arc<dyn ApprovalGate>);
    c
}

/// An `echo` set with a 1 s timeout, audited into the returned sink.
fn audited(gated: bool) -> (ToolSet, Arc<MemoryAuditSink>) {
    let mut set = ToolSet::new(Duration::from_secs(1));
    set.add(Arc::new(Echo), "builtin").unwrap();
    if gated {
        set.require_approval("echo").unwrap();
    }
    let sink = Arc::new(MemoryAuditSink::default());
    set.set_auditor(Auditor::new(sink.clone(), "a", "w"));
    (set, sink)
}

fn of(sink: &MemoryAuditSink, action: AuditAction) -> Vec<AuditRecord> {
    sink.records().into_iter().filter(|r| r.action == action).collect()
}

/// Passes calls on, noting `name` on the way in and out.
struct Trace(&'static str, Arc<Mutex<Vec<String>>>);
#[async_trait]
impl Layer for Trace {
    async fn handle<'a>(&self, call: Call<'a>, next: Next<'a>) -> Reply {
        self.1.lock().unwrap().push(format!("{} in", self.0));
        let reply = next.run(call).await;
        self.1.lock().unwrap().push(format!("{} out", self.0));
        reply
    }
}

/// Stops every call with its own verdict.
struct Refuse;
#[async_trait]
impl Layer for Refuse {
    async fn handle<'a>(&self, _: Call<'a>, _: Next<'a>) -> Reply {
        Reply::refused(ToolError::business("refused"))
    }
}

#[tokio::test]
async fn layers_run_outside_in_and_a_verdict_stops_the_layers_and_tool_inside_it() {
    let (set, _) = audited(false);
    let log = Arc::new(Mutex::new(Vec::new()));
    let (outer, inner) = (Trace("outer", log.clone()), Trace("inner", log.clone()));
    let c = ctx(None);
    let args = json!({"x": 1, "fail": "the tool ran"});
    let ran = Next::new(&[&outer, &inner]).run(set.call(&c, "echo", &args)).await;
    assert_eq!(ran.outcome.result.unwrap_err().message, "the tool ran");
    assert!(ran.from_tool);
    assert_eq!(*log.lock().unwrap(), ["outer in", "inner in", "inner out", "outer out"]);
    log.lock().unwrap().clear();
    let stopped = Next::new(&[&outer, &Refuse, &inner]).run(set.call(&c, "echo", &args)).await;
    assert_eq!(stopped.outcome.result.unwrap_err().message, "refused", "the tool ran behind a verdict");
    assert!(!stopped.from_tool);
    assert_eq!(*log.lock().unwrap(), ["outer in", "outer out"]);
}

#[tokio::test]
async fn a_validation_failure_is_audited_but_never_reaches_the_gate() {
    let (set, sink) = audited(true);
    let reviewer = Arc::new(Reviewer::default());
    let c = ctx(Some(reviewer.clone()));
    let bad = json!({"x": "one"});
    let e = set.invoke(&c, "echo", &bad).await.result.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Validation);
    assert_eq!(reviewer.asked.load(Ordering::SeqCst), 0, "a person was asked about a call that cannot run");
    let calls = of(&sink, AuditAction::ToolCall);
    assert_eq!(calls.len(), 1);
    assert_eq!((calls[0].outcome, calls[0].error_kind), (AuditOutcome::Error, Some(ErrorKind::Validation)));
    assert!(of(&sink, AuditAction::Approval).is_empty());

    // Approval before validation would put the malformed call to a person.
    let policy = set.policy();
    let approve = Approve { gated: policy.gated, auditor: None };
    let _ = Next::new(&[&approve, &Validate]).run(set.call(&c, "echo", &bad)).await;
    assert_eq!(reviewer.asked.load(Ordering::SeqCst), 1);

    // Auditing inside validation would leave the refused call unrecorded.
    let audit = Audit(policy.auditor);
    let _ = Next::new(&[&Validate, &audit]).run(set.call(&ctx(None), "echo", &bad)).await;
    assert_eq!(of(&sink, AuditAction::ToolCall).len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_timed_out_call_is_audited_once_with_the_pipelines_own_message() {
    let (set, sink) = audited(false);
    let outcome = set.invoke(&ctx(None), "echo", &json!({"x": 1, "sleep_s": 3600})).await;
    let e = outcome.result.unwrap_err();
    assert_eq!((e.kind, e.message.as_str()), (ErrorKind::Timeout, "tool echo timed out after 1s"));
    let calls = of(&sink, AuditAction::ToolCall);
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0].error_kind, Some(ErrorKind::Timeout));
    // The tool's own error text, by contrast, is sanitized before anyone reads it.
    let leaky = json!({"x": 1, "fail": "cannot open /home/alice/.ssh/id_rsa"});
    let e = set.invoke(&ctx(None), "echo", &leaky).await.result.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Business);
    assert!(!e.message.contains("/home/alice"), "{}", e.message);
    assert_eq!(of(&sink, AuditAction::ToolCall).len(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_persons_wait_before_a_gated_call_does_not_count_against_the_tool_timeout() {
    let (set, sink) = audited(true);
    // The reviewer takes 2 s (paused clock: no real wait); the tool may run 1 s.
    let reviewer = Arc::new(Reviewer { delay: Duration::from_secs(2), ..Default::default() });
    let c = ctx(Some(reviewer.clone()));
    let args = json!({"x": 5});
    assert_eq!(set.invoke(&c, "echo", &args).await.result.unwrap(), json!(5));
    assert_eq!(of(&sink, AuditAction::Approval).len(), 1);

    // With the timeout outside approval, the same wait fails the call.
    let policy = set.policy();
    let (timeout, approve) = (Timeout(policy.timeout), Approve { gated: policy.gated, auditor: None });
    let e = Next::new(&[&timeout, &approve]).run(set.call(&c, "echo", &args)).await.outcome.result.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Timeout);
    assert_eq!(reviewer.asked.load(Ordering::SeqCst), 2);
}
