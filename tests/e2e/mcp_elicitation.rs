//! An MCP server's `elicitation/create` answered by a person
//! through Flotilla approvals (docs/APPROVALS.md, "Elicitation"). A real
//! worker runs a scripted subagent that calls finance-tools' test tool
//! `confirm_transfer`; the server asks `{approve, note = "none"}`; the test
//! answers with the `flotilla` CLI and reads, in the task's report, what the
//! server received.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use flotilla_agent::tool::{
    ApprovalGate, ElicitationAnswer, ElicitationAsk, ElicitationVerdict, ToolContext, ToolError, ToolSet,
};
use flotilla_mcp::McpHub;
use flotilla_mcp::config::{self, RawMcpServer};
use flotilla_protocol::ids::Tenant;
use flotilla_protocol::{AuditAction, AuditRecord, JobStatus};
use flotilla_testkit::{EventLog, NatsServer, Proc, TestConfig, bin, eventually, free_port};
use serde_json::{Value, json};

use crate::approvals::{cli, listed, request};
use flotilla_testkit::{Deployment, TIMEOUT};

const PLANNER: &str = r#"
[[turns]]
[[turns.calls]]
tool = "task"
args = '{"subagent_type": "payments", "description": "transfer 50 to acme"}'

[[turns]]
content = "{% set r = last[0] %}{% if r.ok %}{{ r.value }}{% else %}task failed: {{ r.error.message }}{% endif %}"
"#;

/// One `confirm_transfer` call, then what the server reported it received.
const SUBAGENT: &str = r#"
[[turns]]
[[turns.calls]]
tool = "confirm_transfer"
args = '{"amount": 50, "to": "acme"}'

[[turns]]
content = "{% set r = last[0] %}{% if r.ok %}server got {{ r.value }}{% else %}{{ r.error.kind }}: {{ r.error.message }}{% endif %}"
"#;

/// The payments subagent using finance-tools at `server` (a TOML table body:
/// `command`/`args` or `url`). `call_timeout` is far below the time a person
/// takes: its clock stops while a question waits.
fn config(url: &str, server: &str, approval_timeout: u64) -> TestConfig {
    let mut c = TestConfig::new(url);
    c.scripted_model("planner", PLANNER).scripted_model("payments", SUBAGENT);
    c.section(&format!(
        r#"[planner]
model = "planner"
task_timeout = 120
[mcp_servers.finance]
{server}
prefix = false
call_timeout = 2
[subagents.payments]
description = "Moves money."
model = "payments"
tools = ["mcp:finance/confirm_transfer"]
approval_timeout = {approval_timeout}
"#
    ));
    c
}

fn stdio() -> String {
    format!("command = \"{}\"\nargs = [\"--test-tools\"]", bin("finance-tools").display())
}

async fn answer(d: &Deployment, log: &mut EventLog) -> String {
    let end = log.job_end(TIMEOUT).await;
    assert_eq!(end["event"], "completed", "{end}");
    let rec = d.status(end["job_id"].as_str().unwrap().parse().unwrap()).await;
    assert_eq!(rec.status, JobStatus::Completed);
    rec.answer.unwrap_or_default()
}

/// The server's report of what it received, parsed from the answer.
fn received(answer: &str) -> Value {
    let text = answer.split_once("server got ").unwrap_or_else(|| panic!("no server report: {answer}")).1;
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{e}: {answer}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_answers_the_servers_question_with_validated_content_and_defaults() {
    let d = Deployment::start(1, |url| config(url, &stdio(), 60)).await;
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let job = d.submit("pay acme").await.to_string();
    let req = request(&mut log).await;
    assert_eq!(req["kind"], "elicitation", "{req}");
    assert_eq!(req["tool"], "confirm_transfer");
    assert_eq!(req["server"], "finance");
    assert_eq!(req["message"], "Transfer 50 to acme?");
    assert_eq!(req["args"], json!({"amount": 50, "to": "acme"}));
    assert_eq!(req["requested_schema"]["properties"]["note"]["default"], "none", "{req}");
    assert_eq!(req["requested_schema"]["required"], json!(["approve"]));
    assert_eq!(req["decisions"], json!(["accept", "decline", "cancel"]));
    let call = req["call_id"].as_str().unwrap().to_string();
    assert!(call.ends_with("-elicit"), "{call}");

    let open = listed(&d, "default").await;
    assert_eq!(open.len(), 1, "{open:?}");
    assert_eq!(open[0]["message"], "Transfer 50 to acme?");
    assert!(listed(&d, "acme").await.is_empty(), "another tenant sees nothing");
    let acme = ["--tenant", "acme", "approve", &job, &call, "--content", r#"{"approve": false}"#];
    let (code, _, err) = cli(&d, &acme).await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("no approval request"), "another tenant cannot answer: {err}");
    let (code, table, _) = cli(&d, &["approvals"]).await;
    assert_eq!(code, 0);
    assert!(table.contains("finance asks: Transfer 50 to acme?"), "{table}");

    // Content that does not fit the requested schema is refused, nothing recorded.
    let (code, _, err) = cli(&d, &["approve", &job, &call, "--content", r#"{"approve": "yes"}"#]).await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("does not fit the schema finance asked for") && err.contains("approve"), "{err}");
    let (code, _, err) = cli(&d, &["approve", &job, &call, "--approve"]).await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("approve is not allowed"), "{err}");
    assert_eq!(listed(&d, "default").await.len(), 1, "still open after refused answers");

    let (code, out, err) = cli(&d, &["approve", &job, &call, "--content", r#"{"approve": true}"#]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("accept call"), "{out}");
    let got = received(&answer(&d, &mut log).await);
    assert_eq!(got, json!({"action": "accept", "content": {"approve": true, "note": "none"}}), "default applied");

    // The audit trail has the answer's decision and a digest, never the
    // content. The call's own record is published after the answer's.
    let job = job.parse().unwrap();
    let records = eventually(TIMEOUT, "the confirm_transfer call record", || {
        let bus = d.bus.clone();
        async move {
            let records = flotilla_bus::audit::read(&bus, &Tenant::default(), &job).await.ok()?;
            let call = |r: &AuditRecord| r.action == AuditAction::ToolCall && r.tool == "confirm_transfer";
            records.iter().any(call).then_some(records)
        }
    })
    .await;
    let answers: Vec<&AuditRecord> = records.iter().filter(|r| r.action == AuditAction::Approval).collect();
    assert_eq!(answers.len(), 1, "{records:?}");
    assert_eq!(answers[0].decision.as_deref(), Some("accept"));
    assert_eq!(answers[0].by.as_deref(), Some("tester"));
    let given = json!({"approve": true});
    assert_eq!(answers[0].args_sha256, flotilla_agent::audit::args_digest(&given));
    assert!(!serde_json::to_string(&records).unwrap().contains("\"note\""), "content leaked: {records:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decline_over_streamable_http_reaches_the_server() {
    // Over HTTP the question arrives on the tools/call POST's SSE stream,
    // which names the call it belongs to.
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let _srv = Proc::spawn("finance-http", "finance-tools", &["--http", &addr, "--test-tools"], &[]);
    eventually(TIMEOUT, "finance-tools to listen", || {
        let addr = addr.clone();
        async move { tokio::net::TcpStream::connect(addr).await.ok().map(|_| ()) }
    })
    .await;
    let server = format!("url = \"http://{addr}/mcp\"");
    let d = Deployment::start(1, |url| config(url, &server, 60)).await;
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let job = d.submit("pay acme").await.to_string();
    let req = request(&mut log).await;
    assert_eq!(req["kind"], "elicitation", "{req}");
    let call = req["call_id"].as_str().unwrap().to_string();
    let (code, out, err) = cli(&d, &["approve", &job, &call, "--decline"]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(received(&answer(&d, &mut log).await), json!({"action": "decline", "content": null}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nobody_answering_in_time_declines() {
    // 3 s unanswered, above the server's 2 s call_timeout.
    let d = Deployment::start(1, |url| config(url, &stdio(), 3)).await;
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    d.submit("pay acme").await;
    let req = request(&mut log).await;
    assert_eq!(req["kind"], "elicitation", "{req}");
    assert_eq!(received(&answer(&d, &mut log).await), json!({"action": "decline", "content": null}));
    let expired = log
        .seen
        .iter()
        .any(|(s, v)| s.contains(".progress.") && v["event"] == "approval_resolved" && v["outcome"] == "expired");
    assert!(expired, "an approval_resolved event with outcome expired");
}

/// A cancelled job cancels its question: it leaves the listing, answering
/// it is refused, and the server is answered `cancel`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_job_cancels_the_question() {
    let d = Deployment::start(1, |url| config(url, &stdio(), 60)).await;
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let job = d.submit("pay acme").await.to_string();
    let call = request(&mut log).await["call_id"].as_str().unwrap().to_string();
    let (code, out, err) = cli(&d, &["cancel", &job, "--reason", "fraud check"]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(listed(&d, "default").await.is_empty(), "a cancelled job's question is still listed");
    let (code, _, err) = cli(&d, &["approve", &job, &call, "--content", r#"{"approve": true}"#]).await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("was cancelled with its job (fraud check)"), "{err}");
    assert_eq!(log.job_end(TIMEOUT).await["event"], "cancelled");
    let worker = &d.workers[0];
    eventually(TIMEOUT, "the worker to answer the server cancel", || {
        let answered = worker.log().contains("elicitation cancelled with its task");
        async move { answered.then_some(()) }
    })
    .await;
}

/// `accept`, `decline` and `cancel` answer servers' questions; a tool call
/// gated with them would run with content nobody checked, so the worker
/// refuses such a config at start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elicitation_decisions_are_refused_for_tool_calls() {
    let nats = NatsServer::start().await;
    let mut c = config(&nats.url(), &stdio(), 60);
    c.section("[subagents.payments.interrupt_on.confirm_transfer]\ndecisions = [\"approve\", \"accept\"]\n");
    let path = c.write();
    let mut w =
        Proc::spawn("worker", "flotilla-worker", &["--config", path.to_str().unwrap(), "--types", "payments"], &[]);
    eventually(TIMEOUT, "the worker to refuse its config", || {
        let done = !w.running();
        async move { done.then_some(()) }
    })
    .await;
    let log = w.log();
    assert!(
        log.contains("subagents.payments.interrupt_on.confirm_transfer.decisions")
            && log.contains("accept answers an MCP server's question"),
        "{log}"
    );
}

/// Answers each question with the asking call's id, once both calls' questions
/// are pending, so the two calls are in flight on one session together.
struct ByCall(tokio::sync::Barrier);

#[async_trait::async_trait]
impl ApprovalGate for ByCall {
    async fn approve(&self, _: &ToolContext, _: &str, args: &Value) -> Result<Value, ToolError> {
        Ok(args.clone())
    }

    async fn elicit(&self, ctx: &ToolContext, _: &str, _: &Value, _: &ElicitationAsk) -> ElicitationVerdict {
        if tokio::time::timeout(TIMEOUT, self.0.wait()).await.is_err() {
            return ElicitationVerdict::declined("expired");
        }
        let content = json!({"approve": true, "note": ctx.call_id});
        ElicitationVerdict { answer: ElicitationAnswer::Accept(content), decision: "accept".into(), by: None }
    }
}

/// Two concurrent calls on one Streamable HTTP session: each question goes
/// to the call whose POST stream carried it, not to "the" call in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_over_http_each_get_their_own_answer() {
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let _srv = Proc::spawn("finance-http", "finance-tools", &["--http", &addr, "--test-tools"], &[]);
    eventually(TIMEOUT, "finance-tools to listen", || {
        let addr = addr.clone();
        async move { tokio::net::TcpStream::connect(addr).await.ok().map(|_| ()) }
    })
    .await;
    let raw = RawMcpServer { url: Some(format!("http://{addr}/mcp")), ..Default::default() };
    let settings = config::validate("finance", raw, Path::new(".")).unwrap_or_else(|p| panic!("{}", p.message));
    let hub = McpHub::new(&[("finance".to_string(), settings)].into_iter().collect());
    hub.discover(&["finance".to_string()].into()).await[0].1.as_ref().expect("discovery");
    let mut set = ToolSet::new(Duration::from_secs(30));
    for t in hub.tools_for("finance", Some("confirm_transfer")).unwrap() {
        set.add(t, "mcp:finance/confirm_transfer").unwrap();
    }
    let gate: Arc<dyn ApprovalGate> = Arc::new(ByCall(tokio::sync::Barrier::new(2)));
    let ctx = |call: &str| ToolContext {
        job_id: flotilla_protocol::ids::JobId::new(),
        task_id: None,
        tenant: Default::default(),
        call_id: call.into(),
        idempotency_key: format!("task:{call}"),
        traceparent: None,
        cancel: Default::default(),
        approvals: Some(gate.clone()),
    };
    let (a, b) = (ctx("call-a"), ctx("call-b"));
    let args = json!({"amount": 5, "to": "acme"});
    let (ra, rb) = tokio::join!(
        set.invoke(&a, "finance_confirm_transfer", &args),
        set.invoke(&b, "finance_confirm_transfer", &args)
    );
    for (r, call) in [(ra, "call-a"), (rb, "call-b")] {
        let text = r.result.unwrap_or_else(|e| panic!("{call}: {e:?}"));
        let got: Value = serde_json::from_str(text.as_str().unwrap()).unwrap();
        assert_eq!(got, json!({"action": "accept", "content": {"approve": true, "note": call}}), "{call}");
    }
    assert_eq!(hub.health()[0].sessions_opened, 1, "both calls shared one session");
    hub.shutdown().await;
}
