use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};

use super::*;
use crate::model::ModelResponse;
use crate::model::scripted::ScriptedModel;
use crate::tool::{Tool, ToolError, ToolSpec};

/// Sleeps, then returns `x`; fails with a business error when `x` < 0.
struct Slow {
    running: AtomicUsize,
    peak: AtomicUsize,
}

#[async_trait]
impl Tool for Slow {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "slow".into(),
            description: "d".into(),
            input_schema: json!({"type":"object","properties":{"x":{"type":"number"}},"required":["x"]}),
        }
    }
    async fn call(&self, _: &ToolContext, args: Value) -> Result<Value, ToolError> {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(50)).await;
        self.running.fetch_sub(1, Ordering::SeqCst);
        if args["x"].as_f64().unwrap() < 0.0 {
            Err(ToolError::business("x must not be negative"))
        } else {
            Ok(json!({"x": args["x"]}))
        }
    }
}

const SCRIPT: &str = r#"
[[turns]]
[[turns.calls]]
tool = "slow"
for_each = "[1, -1, 3]"
args = '{"x": {{ item }}}'
[[turns.calls]]
tool = "slow"
args = '{"y": 1}'

[[turns]]
content = "{% for r in last %}{% if r.ok %}true{% else %}false{% endif %}:{% if r.ok %}{{ r.value.x }}{% else %}{{ r.error.kind }}{% endif %} {% endfor %}"
"#;

fn agent(script: &str, max_steps: u32) -> (Agent, Arc<Slow>) {
    let slow = Arc::new(Slow { running: AtomicUsize::new(0), peak: AtomicUsize::new(0) });
    let mut tools = ToolSet::new(Duration::from_secs(5));
    tools.add(slow.clone(), "test").unwrap();
    let a = Agent {
        model: Arc::new(ScriptedModel::from_str("s", script).unwrap()),
        tools: Arc::new(tools),
        limits: Limits { max_steps, timeout: Duration::from_secs(10), max_tokens: None, context: None },
        policy: Default::default(),
        output: None,
    };
    (a, slow)
}

fn ctx() -> RunContext {
    RunContext {
        job_id: JobId::new(),
        task_id: None,
        tenant: Tenant::default(),
        traceparent: None,
        cancel: CancellationToken::new(),
        approvals: None,
        inbox: None,
        span: tracing::Span::none(),
    }
}

#[derive(Default)]
struct Recorder {
    events: Mutex<Vec<String>>,
    checkpoints: AtomicUsize,
}

#[async_trait]
impl AgentObserver for Recorder {
    async fn model_called(&self, step: u32, _: Usage, _: Duration) {
        self.events.lock().unwrap().push(format!("model{step}"));
    }
    async fn tool_finished(&self, call: &ToolCall, o: &ToolOutcome) {
        self.events.lock().unwrap().push(format!("{}:{}", call.id, o.result.is_ok()));
    }
    async fn checkpoint(&self, _: &Conversation) {
        self.checkpoints.fetch_add(1, Ordering::SeqCst);
    }
}

#[tokio::test]
async fn parallel_calls_fail_independently() {
    let (a, slow) = agent(SCRIPT, 5);
    let mut conv = Conversation::new("sys", "go");
    let rec = Recorder::default();
    let answer = a.run(&mut conv, &ctx(), &rec).await.unwrap();
    assert_eq!(answer, "true:1 false:business true:3 false:validation ");
    assert_eq!(slow.peak.load(Ordering::SeqCst), 3, "the three valid calls ran concurrently");
    assert_eq!(conv.steps, 2);
    assert_eq!(conv.usage.model_calls, 2);
    assert_eq!(conv.usage.tool_calls, 4);
    assert_eq!(rec.checkpoints.load(Ordering::SeqCst), 3);
    assert_eq!(rec.events.lock().unwrap().first().unwrap(), "model1");
}

/// Returns `x` at once, except `x` = 0, which waits for `release`.
#[derive(Default)]
struct Held {
    running: AtomicUsize,
    peak: AtomicUsize,
    finished: tokio::sync::watch::Sender<usize>,
    release: tokio::sync::Notify,
}

#[async_trait]
impl Tool for Held {
    fn spec(&self) -> ToolSpec {
        ToolSpec { name: "held".into(), description: "d".into(), input_schema: json!({"type": "object"}) }
    }
    async fn call(&self, _: &ToolContext, args: Value) -> Result<Value, ToolError> {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
        if args["x"] == 0 {
            self.release.notified().await;
        } else {
            tokio::task::yield_now().await;
        }
        self.running.fetch_sub(1, Ordering::SeqCst);
        self.finished.send_modify(|n| *n += 1);
        Ok(args["x"].clone())
    }
}

#[tokio::test]
async fn a_turns_calls_run_at_most_max_parallel_calls_at_once_and_a_long_one_holds_back_no_other() {
    let script = r#"
[[turns]]
[[turns.calls]]
tool = "held"
for_each = "range(6)"
args = '{"x": {{ item }}}'
[[turns]]
content = "{% for r in last %}{{ r.value }} {% endfor %}"
"#;
    let held = Arc::new(Held::default());
    let mut tools = ToolSet::new(Duration::from_secs(60));
    tools.add(held.clone(), "test").unwrap();
    let a = Agent {
        model: Arc::new(ScriptedModel::from_str("s", script).unwrap()),
        tools: Arc::new(tools),
        limits: Limits { max_steps: 5, timeout: Duration::from_secs(60), max_tokens: None, context: None },
        policy: ToolPolicy { max_parallel_calls: 2, ..Default::default() },
        output: None,
    };
    let mut finished = held.finished.subscribe();
    let run = async {
        let mut conv = Conversation::new("sys", "go");
        a.run(&mut conv, &ctx(), &NoObserver).await
    };
    let release = async {
        // Calls 1 to 5 end while call 0 still runs: a slot that frees
        // starts the next call, whatever the calls before it do.
        finished.wait_for(|n| *n == 5).await.unwrap();
        assert_eq!(held.running.load(Ordering::SeqCst), 1, "call 0 still runs");
        held.release.notify_one();
    };
    let (answer, ()) = tokio::time::timeout(Duration::from_secs(30), async { tokio::join!(run, release) })
        .await
        .expect("calls behind the held one never started");
    assert_eq!(answer.unwrap(), "0 1 2 3 4 5 ", "results in call order");
    assert_eq!(held.peak.load(Ordering::SeqCst), 2, "at most two at once, and two did run together");
}

#[tokio::test]
async fn step_limit_and_cancellation_end_the_run() {
    let looping = "[[turns]]\n[[turns.calls]]\ntool = \"slow\"\nargs = '{\"x\": 1}'\n".repeat(5);
    let (a, _) = agent(&looping, 2);
    let err = a.run(&mut Conversation::new("s", "u"), &ctx(), &NoObserver).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::Limit);
    assert!(err.message.contains("step limit"), "{}", err.message);

    let (a, _) = agent(&looping, 5);
    let c = ctx();
    c.cancel.cancel();
    let err = a.run(&mut Conversation::new("s", "u"), &c, &NoObserver).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::Cancelled);
}

#[tokio::test]
async fn a_checkpointed_conversation_resumes_its_pending_calls() {
    let (a, _) = agent(SCRIPT, 5);
    let mut conv = Conversation::new("sys", "go");
    // Simulate a crash right after the first model turn was checkpointed.
    let first = a.model.complete(ModelRequest::new(&conv.messages, &[])).await.unwrap();
    conv.steps = 1;
    conv.messages.push(ChatMessage::Assistant { content: None, tool_calls: first.tool_calls });
    let saved: Conversation = serde_json::from_str(&serde_json::to_string(&conv).unwrap()).unwrap();
    let mut resumed = saved;
    let answer = a.run(&mut resumed, &ctx(), &NoObserver).await.unwrap();
    assert_eq!(answer, "true:1 false:business true:3 false:validation ");
    assert_eq!(resumed.steps, 2, "the resumed run made one more model call, not two");
}

/// Sleeps for an hour; says on a oneshot whether its future finished or was
/// dropped (aborted) before that.
struct Hour {
    ended: Mutex<Option<tokio::sync::oneshot::Sender<&'static str>>>,
}

/// Reports "dropped" unless disarmed by the tool finishing.
struct Ended(Option<tokio::sync::oneshot::Sender<&'static str>>);
impl Drop for Ended {
    fn drop(&mut self) {
        if let Some(tx) = self.0.take() {
            let _ = tx.send("dropped");
        }
    }
}

#[async_trait]
impl Tool for Hour {
    fn spec(&self) -> ToolSpec {
        ToolSpec { name: "hour".into(), description: "d".into(), input_schema: json!({"type":"object"}) }
    }
    async fn call(&self, _: &ToolContext, _: Value) -> Result<Value, ToolError> {
        let mut ended = Ended(self.ended.lock().unwrap().take());
        tokio::time::sleep(Duration::from_secs(3600)).await;
        if let Some(tx) = ended.0.take() {
            let _ = tx.send("finished");
        }
        Ok(json!({}))
    }
}

#[tokio::test(start_paused = true)]
async fn the_wall_time_limit_aborts_running_tool_calls() {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let mut tools = ToolSet::new(Duration::from_secs(7200));
    tools.add(Arc::new(Hour { ended: Mutex::new(Some(tx)) }), "test").unwrap();
    let a = Agent {
        model: Arc::new(
            ScriptedModel::from_str("s", "[[turns]]\n[[turns.calls]]\ntool = \"hour\"\nargs = '{}'\n").unwrap(),
        ),
        tools: Arc::new(tools),
        limits: Limits { max_steps: 5, timeout: Duration::from_secs(1), max_tokens: None, context: None },
        policy: Default::default(),
        output: None,
    };
    let err = a.run(&mut Conversation::new("s", "u"), &ctx(), &NoObserver).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::Timeout, "{}", err.message);
    // Bounded: an abort drops the tool's future at once; a detached tool
    // would instead finish after its hour (the paused clock gets there).
    let ended = tokio::time::timeout(Duration::from_secs(60), rx).await.expect("the tool task still runs");
    assert_eq!(ended.unwrap(), "dropped", "the tool ran on after its agent gave up");
}

/// Records every request's messages, answers each step from a script.
struct Recording {
    inner: ScriptedModel,
    requests: Mutex<Vec<(crate::model::Purpose, Vec<ChatMessage>)>>,
}

#[async_trait]
impl ChatModel for Recording {
    async fn complete(
        &self,
        request: ModelRequest<'_>,
    ) -> Result<crate::model::ModelResponse, crate::model::ModelError> {
        self.requests.lock().unwrap().push((request.purpose, request.messages.to_vec()));
        self.inner.complete(request).await
    }
}

/// Pushes a follow-up message into the inbox while its first call runs.
struct Nudge(Arc<MessageInbox>);

#[async_trait]
impl Tool for Nudge {
    fn spec(&self) -> ToolSpec {
        ToolSpec { name: "nudge".into(), description: "d".into(), input_schema: json!({"type":"object"}) }
    }
    async fn call(&self, _: &ToolContext, _: Value) -> Result<Value, ToolError> {
        self.0.push("Also include the east region.");
        self.0.push("And round to two decimals.");
        Ok(json!({"ok": true}))
    }
}

#[tokio::test]
async fn inbox_messages_reach_the_next_model_call_as_user_messages_once() {
    let inbox = Arc::new(MessageInbox::default());
    let mut tools = ToolSet::new(Duration::from_secs(5));
    tools.add(Arc::new(Nudge(inbox.clone())), "test").unwrap();
    let script = "[[turns]]\n[[turns.calls]]\ntool = \"nudge\"\nargs = '{}'\n\n[[turns]]\ncontent = \"step two\"\n";
    let model =
        Arc::new(Recording { inner: ScriptedModel::from_str("s", script).unwrap(), requests: Mutex::default() });
    let a = Agent {
        model: model.clone(),
        tools: Arc::new(tools),
        limits: Limits { max_steps: 5, timeout: Duration::from_secs(10), max_tokens: None, context: None },
        policy: Default::default(),
        output: None,
    };
    let mut c = ctx();
    c.inbox = Some(inbox.clone());
    inbox.push("Use the 2025 figures.");
    let rec = Recorder::default();
    let mut conv = Conversation::new("sys", "go");
    assert_eq!(a.run(&mut conv, &c, &rec).await.unwrap(), "step two");
    let requests = model.requests.lock().unwrap().clone();
    let users = |m: &[ChatMessage]| -> Vec<String> {
        m.iter()
            .filter_map(|m| if let ChatMessage::User { content } = m { Some(content.clone()) } else { None })
            .collect()
    };
    // Waiting before the first call: it is there, after the task text.
    assert_eq!(users(&requests[0].1), ["go", "Use the 2025 figures."]);
    // Pushed during the tool call: delivered after its result, each once, in order.
    assert_eq!(
        users(&requests[1].1),
        ["go", "Use the 2025 figures.", "Also include the east region.", "And round to two decimals."]
    );
    assert!(matches!(requests[1].1.last(), Some(ChatMessage::User { .. })));
    assert!(inbox.take().is_empty());
    // The added messages were checkpointed: 2 inbox takes + 2 model turns + 1 tool result.
    assert_eq!(rec.checkpoints.load(Ordering::SeqCst), 5);
    assert_eq!(users(&conv.messages).len(), 4);
}

/// Answers with one `key` call whose id is `call_0` on each of two turns (as
/// small models do), then with text.
struct ReusesCallIds(AtomicUsize);

#[async_trait]
impl ChatModel for ReusesCallIds {
    async fn complete(&self, _: ModelRequest<'_>) -> Result<ModelResponse, crate::model::ModelError> {
        let turn = self.0.fetch_add(1, Ordering::SeqCst);
        let tool_calls = if turn < 2 {
            vec![ToolCall { id: "call_0".into(), name: "key".into(), arguments: json!({}) }]
        } else {
            Vec::new()
        };
        Ok(ModelResponse { content: Some("done".into()), tool_calls, usage: Default::default() })
    }
}

/// Records the call key of every call.
#[derive(Default)]
struct Keys(Mutex<Vec<String>>);

#[async_trait]
impl Tool for Keys {
    fn spec(&self) -> ToolSpec {
        ToolSpec { name: "key".into(), description: "d".into(), input_schema: json!({"type": "object"}) }
    }
    async fn call(&self, ctx: &ToolContext, _: Value) -> Result<Value, ToolError> {
        self.0.lock().unwrap().push(ctx.call_key().to_string());
        Ok(json!(ctx.idempotency_key))
    }
}

/// A call id reused in a later turn is a new call, with its
/// own idempotency (and dispatch) key, never an alias of the earlier one.
#[tokio::test]
async fn a_call_id_reused_in_a_later_turn_gets_its_own_key() {
    let keys = Arc::new(Keys::default());
    let mut tools = ToolSet::new(Duration::from_secs(5));
    tools.add(keys.clone(), "test").unwrap();
    let agent = Agent {
        model: Arc::new(ReusesCallIds(AtomicUsize::new(0))),
        tools: Arc::new(tools),
        limits: Limits { max_steps: 5, timeout: Duration::from_secs(10), max_tokens: None, context: None },
        // The same call twice in a row: a repeat, which this test must run.
        policy: ToolPolicy { loop_detection: false, ..Default::default() },
        output: None,
    };
    let ctx = ctx();
    let mut conv = Conversation::new("sys", "job");
    agent.run(&mut conv, &ctx, &Recorder::default()).await.unwrap();
    let keys = keys.0.lock().unwrap().clone();
    assert_eq!(keys, ["1:call_0", "2:call_0"], "scoped by the step that issued the call");
}

/// Calls `slow` with `{"x": 3}` on every turn, like a small model that does
/// not trust the result; counts its turns.
struct Repeats(AtomicUsize);

#[async_trait]
impl ChatModel for Repeats {
    async fn complete(&self, _: ModelRequest<'_>) -> Result<ModelResponse, crate::model::ModelError> {
        let turn = self.0.fetch_add(1, Ordering::SeqCst);
        let call = ToolCall { id: format!("call_{turn}"), name: "slow".into(), arguments: json!({"x": 3}) };
        Ok(ModelResponse { content: None, tool_calls: vec![call], usage: Default::default() })
    }
}

fn repeating_agent(policy: ToolPolicy) -> (Agent, Arc<Repeats>, Arc<Slow>) {
    let slow = Arc::new(Slow { running: AtomicUsize::new(0), peak: AtomicUsize::new(0) });
    let model = Arc::new(Repeats(AtomicUsize::new(0)));
    let mut tools = ToolSet::new(Duration::from_secs(5));
    tools.add(slow.clone(), "test").unwrap();
    let limits = Limits { max_steps: 10, timeout: Duration::from_secs(10), max_tokens: None, context: None };
    (Agent { model: model.clone(), tools: Arc::new(tools), limits, policy, output: None }, model, slow)
}

/// A conversation checkpointed after its answering turn resumes to that
/// answer without a model call; a follow-up that arrived since gets a turn.
#[tokio::test]
async fn a_conversation_that_ends_in_its_answer_resumes_without_a_model_call() {
    let (agent, model, _) = repeating_agent(ToolPolicy { stop_at_tools: vec!["slow".into()], ..Default::default() });
    let mut conv = Conversation::new("sys", "go");
    conv.messages.push(ChatMessage::Assistant { content: Some("the table".into()), tool_calls: vec![] });
    conv.steps = 4;
    assert_eq!(agent.run(&mut conv, &ctx(), &NoObserver).await.unwrap(), "the table");
    assert_eq!(model.0.load(Ordering::SeqCst), 0, "no model call: the answer was already there");
    assert_eq!(conv.messages.len(), 3, "nothing added");

    let inbox = Arc::new(MessageInbox::default());
    inbox.push("one more region");
    let with_inbox = RunContext { inbox: Some(inbox), ..ctx() };
    agent.run(&mut conv, &with_inbox, &NoObserver).await.unwrap();
    assert_eq!(model.0.load(Ordering::SeqCst), 1, "the follow-up got its model call");
}

/// A model repeating one call ends after 3 model calls (of
/// 10 allowed) with an error naming the call; the tool ran once and the
/// repeat was answered with the earlier result and the note.
#[tokio::test]
async fn a_model_repeating_a_call_is_stopped_after_three_turns() {
    let (agent, model, _) = repeating_agent(ToolPolicy::default());
    let mut conv = Conversation::new("sys", "go");
    let e = agent.run(&mut conv, &ctx(), &NoObserver).await.unwrap_err();
    assert_eq!(model.0.load(Ordering::SeqCst), 3, "model calls");
    assert_eq!(e.kind, ErrorKind::Limit);
    assert!(e.message.contains(r#"slow({"x":3}) 3 times"#), "{}", e.message);
    assert_eq!(conv.usage.tool_calls, 1, "the tool ran once");
    let tool_texts: Vec<&str> = conv
        .messages
        .iter()
        .filter_map(|m| match m {
            ChatMessage::Tool { content, .. } => Some(content.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(tool_texts, [r#"{"x":3}"#.to_string(), tool_policy::repeat_text(r#"{"x":3}"#)]);
}

/// With `stop_at_tools`, the tool's successful result is the
/// answer after one model call; without loop detection and a stop, the same
/// model uses every step.
#[tokio::test]
async fn a_stop_at_tool_ends_the_run_with_its_result() {
    let (agent, model, _) = repeating_agent(ToolPolicy { stop_at_tools: vec!["slow".into()], ..Default::default() });
    let mut conv = Conversation::new("sys", "go");
    assert_eq!(agent.run(&mut conv, &ctx(), &NoObserver).await.unwrap(), r#"{"x":3}"#);
    assert_eq!(model.0.load(Ordering::SeqCst), 1, "one model call");

    let (agent, model, slow) = repeating_agent(ToolPolicy { loop_detection: false, ..Default::default() });
    let e = agent.run(&mut Conversation::new("sys", "go"), &ctx(), &NoObserver).await.unwrap_err();
    assert!(e.message.contains("step limit"), "{}", e.message);
    assert_eq!(model.0.load(Ordering::SeqCst), 10);
    assert_eq!(slow.peak.load(Ordering::SeqCst), 1);
}

fn schema_agent(script: &str) -> Agent {
    let schema = json!({"type": "object", "properties": {"margin": {"type": "number"}}, "required": ["margin"]});
    Agent {
        model: Arc::new(ScriptedModel::from_str("s", script).unwrap()),
        tools: Arc::new(ToolSet::new(Duration::from_secs(5))),
        limits: Limits { max_steps: 5, timeout: Duration::from_secs(10), max_tokens: None, context: None },
        policy: Default::default(),
        output: Some(Arc::new(OutputSchema::new(schema).unwrap())),
    }
}

/// A valid answer passes as compact JSON; an invalid one
/// gets one repair turn (the model reads what is wrong), then a second miss
/// fails the run with a validation error.
#[tokio::test]
async fn an_answer_must_match_the_output_schema_after_at_most_one_repair_turn() {
    let valid = schema_agent("[[turns]]\ncontent = '{ \"margin\": 0.375 }'\n");
    let mut conv = Conversation::new("sys", "go");
    assert_eq!(valid.run(&mut conv, &ctx(), &NoObserver).await.unwrap(), r#"{"margin":0.375}"#);

    let repaired = schema_agent("[[turns]]\ncontent = 'about 0.375'\n[[turns]]\ncontent = '{\"margin\": 0.375}'\n");
    let mut conv = Conversation::new("sys", "go");
    assert_eq!(repaired.run(&mut conv, &ctx(), &NoObserver).await.unwrap(), r#"{"margin":0.375}"#);
    assert_eq!(conv.steps, 2);
    let repair = conv
        .messages
        .iter()
        .rev()
        .find_map(|m| match m {
            ChatMessage::User { content } => Some(content.clone()),
            _ => None,
        })
        .unwrap();
    assert!(repair.starts_with(output_schema::REPAIR_HEADER) && repair.contains("not JSON"), "{repair}");

    let invalid = schema_agent("[[turns]]\ncontent = 'about 0.375'\n[[turns]]\ncontent = '{\"margin\": \"high\"}'\n");
    let e = invalid.run(&mut Conversation::new("sys", "go"), &ctx(), &NoObserver).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Validation);
    assert!(e.message.contains("after one repair turn") && e.message.contains("margin"), "{}", e.message);
}

/// Keeps every step the loop hands over, as a journal would.
#[derive(Default)]
struct StepLog(Mutex<Vec<Step>>);

#[async_trait]
impl AgentObserver for StepLog {
    async fn step(&self, step: &Step) {
        self.0.lock().unwrap().push(step.clone());
    }
}

#[tokio::test]
async fn a_run_folded_from_its_steps_resumes_with_no_turn_asked_and_no_call_run_again() {
    let (a, slow) = agent(SCRIPT, 5);
    let log = StepLog::default();
    let whole = a.run(&mut Conversation::new("sys", "go"), &ctx(), &log).await.unwrap();
    let steps = log.0.lock().unwrap().clone();
    // Turn 1, its four results, turn 2 (the answer).
    assert_eq!(steps.len(), 6, "{steps:?}");
    assert!(matches!(&steps[5], Step::Turn { .. }));
    // The worker died after turn 1 and two of its results: fold those.
    let mut conv = Conversation::new("sys", "go");
    for s in &steps[..3] {
        let text = serde_json::to_string(&s).unwrap();
        conv.apply(serde_json::from_str(&text).unwrap());
    }
    assert_eq!(conv.mark_interrupted(), 2);
    let ran_before = slow.peak.load(Ordering::SeqCst);
    let rec = Recorder::default();
    let answer = a.run(&mut conv, &ctx(), &rec).await.unwrap();
    assert_eq!(answer, whole, "the same answer as the run that never stopped");
    assert_eq!(conv.steps, 2, "one model call more: turn 1 was not asked again");
    assert_eq!(conv.usage.tool_calls, 4, "two calls ran before, two after");
    let events = rec.events.lock().unwrap().clone();
    assert_eq!(events.iter().filter(|e| e.starts_with("model")).count(), 1, "{events:?}");
    assert_eq!(events.iter().filter(|e| e.contains(':')).count(), 2, "only the two unanswered calls ran: {events:?}");
    assert!(ran_before > 0);
    let noted = conv
        .messages
        .iter()
        .filter(|m| matches!(m, ChatMessage::Tool { content, .. } if content.contains(steps::INTERRUPTED_NOTE)))
        .count();
    assert_eq!(noted, 2, "the calls that may have started say so");
    assert!(conv.interrupted.is_empty());
}

#[tokio::test]
async fn a_run_folded_to_its_answering_turn_ends_without_a_model_call() {
    let (a, _) = agent(SCRIPT, 5);
    let log = StepLog::default();
    let whole = a.run(&mut Conversation::new("sys", "go"), &ctx(), &log).await.unwrap();
    let mut conv = Conversation::new("sys", "go");
    for s in log.0.lock().unwrap().iter().cloned() {
        conv.apply(s);
    }
    let rec = Recorder::default();
    assert_eq!(a.run(&mut conv, &ctx(), &rec).await.unwrap(), whole);
    assert!(rec.events.lock().unwrap().is_empty(), "nothing ran again");
}

#[tokio::test]
async fn a_note_reaches_the_model_after_the_pending_calls_and_is_a_step() {
    let (a, _) = agent(SCRIPT, 5);
    let log = StepLog::default();
    a.run(&mut Conversation::new("sys", "go"), &ctx(), &log).await.unwrap();
    let mut conv = Conversation::new("sys", "go");
    conv.apply(log.0.lock().unwrap()[0].clone());
    conv.note = Some("scratch is new".into());
    let steps = StepLog::default();
    a.run(&mut conv, &ctx(), &steps).await.unwrap();
    let at = |pred: &dyn Fn(&ChatMessage) -> bool| conv.messages.iter().position(pred).unwrap();
    let note = at(&|m| matches!(m, ChatMessage::User { content } if content == "scratch is new"));
    let last_result = conv.messages.iter().rposition(|m| matches!(m, ChatMessage::Tool { .. })).unwrap();
    assert_eq!(note, last_result + 1, "after the turn's results, before the next turn");
    assert!(steps.0.lock().unwrap().iter().any(|s| matches!(s, Step::Note { content } if content == "scratch is new")));
    assert!(conv.note.is_none());
}

/// Plays a script, but the call of step `fails_at` fails with `kind` after
/// `after`, as a provider that refuses a request does.
struct FailsAt {
    inner: ScriptedModel,
    fails_at: usize,
    kind: ErrorKind,
    after: Duration,
    calls: AtomicUsize,
}

#[async_trait]
impl ChatModel for FailsAt {
    async fn complete(&self, request: ModelRequest<'_>) -> Result<ModelResponse, crate::model::ModelError> {
        if self.calls.fetch_add(1, Ordering::SeqCst) + 1 == self.fails_at {
            tokio::time::sleep(self.after).await;
            return Err(crate::model::ModelError {
                kind: self.kind,
                model: "s".into(),
                message: "503 Service Unavailable".into(),
            });
        }
        self.inner.complete(request).await
    }
}

/// One model call announced: its step, the error kind when it failed, its
/// latency and usage.
type Announced = (u32, Option<ErrorKind>, Duration, Usage);

/// Every model call announced, succeeded or failed, in order.
#[derive(Default)]
struct Calls(Mutex<Vec<Announced>>);

#[async_trait]
impl AgentObserver for Calls {
    async fn model_called(&self, step: u32, usage: Usage, latency: Duration) {
        self.0.lock().unwrap().push((step, None, latency, usage));
    }
    async fn model_failed(&self, step: u32, kind: ErrorKind, latency: Duration, usage: Usage) {
        self.0.lock().unwrap().push((step, Some(kind), latency, usage));
    }
}

#[tokio::test]
async fn a_failed_model_call_is_announced_with_its_step_kind_and_latency() {
    let (mut a, _) = agent(SCRIPT, 5);
    a.model = Arc::new(FailsAt {
        inner: ScriptedModel::from_str("s", SCRIPT).unwrap(),
        fails_at: 2,
        kind: ErrorKind::Transient,
        after: Duration::from_millis(30),
        calls: AtomicUsize::new(0),
    });
    let calls = Calls::default();
    let mut conv = Conversation::new("sys", "go");
    let err = a.run(&mut conv, &ctx(), &calls).await.unwrap_err();
    assert_eq!(err.kind, ErrorKind::Transient);
    let calls = calls.0.lock().unwrap().clone();
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert_eq!((calls[0].0, calls[0].1), (1, None));
    let (step, kind, latency, usage) = calls[1];
    assert_eq!((step, kind), (2, Some(ErrorKind::Transient)), "the step that was asked, and why it failed");
    assert!(latency >= Duration::from_millis(30), "measured to the failure: {latency:?}");
    assert_eq!(usage, Usage::default(), "a failed call bills nothing it did not report");
    assert_eq!((conv.steps, conv.usage.model_calls), (1, 1), "a failed call is not a step");
}
