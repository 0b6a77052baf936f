use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::*;
use crate::agent::{Agent, Limits, NoObserver};
use crate::model::ModelResponse;
use crate::model::scripted::ScriptedModel;
use crate::tool::{Tool, ToolContext, ToolError, ToolSet};
use flotilla_protocol::ids::{JobId, Tenant};

fn call(id: &str, name: &str) -> ToolCall {
    ToolCall { id: id.into(), name: name.into(), arguments: json!({"n": id}) }
}

fn result(id: &str, name: &str, content: String) -> ChatMessage {
    ChatMessage::Tool { tool_call_id: id.into(), name: name.into(), content, is_error: false }
}

/// System, job text, then `turns` turns of two parallel calls with ~300-token
/// results each; turn 1 also writes the todos.
fn long_conversation(turns: usize) -> Vec<ChatMessage> {
    let mut m = vec![
        ChatMessage::System { content: "You plan.".into() },
        ChatMessage::User { content: "Compute every margin.".into() },
    ];
    for t in 0..turns {
        let (a, b) = (format!("c{t}a"), format!("c{t}b"));
        let second = if t == 1 { "write_todos" } else { "task" };
        m.push(ChatMessage::Assistant { content: None, tool_calls: vec![call(&a, "task"), call(&b, second)] });
        m.push(result(&a, "task", format!("report {t}: ") + &"margin figures ".repeat(150)));
        m.push(result(&b, second, format!("[{{\"content\":\"todo of turn {t}\",\"status\":\"pending\"}}]")));
    }
    m
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

#[test]
fn units_never_separate_a_call_from_its_results() {
    let mut m = long_conversation(2);
    m.push(ChatMessage::User { content: "follow-up".into() });
    m.push(ChatMessage::Assistant { content: Some("done".into()), tool_calls: vec![] });
    assert_eq!(units(&m, 2), vec![2..5, 5..8, 8..9, 9..10]);
}

#[test]
fn selection_keeps_head_todos_and_the_newest_whole_turns() {
    let m = long_conversation(12);
    let total = count_request(&m, &[]) as u64;
    let budget = 3000;
    assert!(total > budget, "{total}");
    let plan = Plan::select(&m, &[], budget);
    assert_eq!(plan.head, 0..2);
    assert_eq!(plan.older.start, 2);
    assert_eq!(plan.older.end, plan.kept.start);
    assert!(!plan.older.is_empty() && !plan.kept.is_empty());
    // The kept part starts at a model turn, never at a tool result.
    assert!(matches!(m[plan.kept.start], ChatMessage::Assistant { .. }));
    // The todos were written in turn 1, which is summarised: they are carried over.
    let (todo_call, todo_result) = plan.todos.clone().expect("the todos survive");
    assert_eq!(todo_call.id, "c1b");
    assert!(matches!(&todo_result, ChatMessage::Tool { content, .. } if content.contains("todo of turn 1")));

    let out = plan.assemble(&m, "the summary", &[], budget);
    assert_eq!(&out[..2], &m[..2]);
    assert!(matches!(&out[2], ChatMessage::User { content } if content.starts_with(SUMMARY_HEADER)
        && content.ends_with("the summary")));
    assert!(matches!(&out[3], ChatMessage::Assistant { tool_calls, .. } if tool_calls[0].id == "c1b"));
    assert_eq!(out[4], todo_result);
    assert_eq!(&out[5..], &m[plan.kept.clone()]);
    assert!(count_request(&out, &[]) as u64 <= budget);
}

#[test]
fn an_overlong_summary_is_cut_to_fit() {
    let m = long_conversation(12);
    let plan = Plan::select(&m, &[], 3000);
    let out = plan.assemble(&m, &"verbose ".repeat(5000), &[], 3000);
    assert!(count_request(&out, &[]) <= 3000);
    assert!(matches!(&out[2], ChatMessage::User { content } if content.starts_with(SUMMARY_HEADER)));
}

/// Records each call's purpose and request size, answers from a script.
struct Recording {
    inner: ScriptedModel,
    seen: Mutex<Vec<(Purpose, usize)>>,
    /// The last message of each request.
    last: Mutex<Vec<String>>,
}

impl Recording {
    fn new(script: &str) -> Self {
        Self { inner: ScriptedModel::from_str("s", script).unwrap(), seen: Mutex::default(), last: Mutex::default() }
    }
}

#[async_trait]
impl ChatModel for Recording {
    async fn complete(&self, request: ModelRequest<'_>) -> Result<ModelResponse, crate::model::ModelError> {
        let size = count_request(request.messages, request.tools);
        self.seen.lock().unwrap().push((request.purpose, size));
        if let Some(ChatMessage::User { content }) = request.messages.last() {
            self.last.lock().unwrap().push(content.clone());
        }
        self.inner.complete(request).await
    }
}

#[derive(Default)]
struct Compactions(Mutex<Vec<(u64, u64, Usage)>>);

#[async_trait]
impl AgentObserver for Compactions {
    async fn on_compacted(&self, before: u64, after: u64, usage: Usage) {
        self.0.lock().unwrap().push((before, after, usage));
    }
}

#[tokio::test]
async fn fit_summarises_older_turns_with_a_compaction_call_and_keeps_the_turn_count() {
    let model = Recording::new("[[turns]]\ncontent = \"x\"\n");
    let budget = ContextBudget { tokens: 3000, prompt: "Summarise.".into() };
    let mut conv = Conversation { messages: long_conversation(12), ..Conversation::default() };
    let turns = assistant_turns(&conv.messages);
    let observer = Compactions::default();
    fit(&model, &budget, &mut conv, &[], &ctx(), &observer).await.unwrap();

    let seen = model.seen.lock().unwrap().clone();
    assert!(!seen.is_empty());
    for (purpose, size) in &seen {
        assert_eq!(*purpose, Purpose::Compaction);
        assert!(*size <= 3000, "each compaction call fits the window too: {size}");
    }
    let (before, after, usage) = observer.0.lock().unwrap()[0];
    assert!(before > 3000 && after <= 3000, "{before} -> {after}");
    assert_eq!(after, count_request(&conv.messages, &[]) as u64);
    assert_eq!(usage.model_calls, seen.len() as u64);
    assert_eq!(conv.usage.model_calls, seen.len() as u64, "the compaction calls are in the run's usage");
    assert_eq!(conv.steps, 0, "but are not steps");
    let ChatMessage::User { content } = &conv.messages[2] else { panic!("{:?}", conv.messages[2]) };
    // The scripted digest names the summarised calls by id.
    assert!(content.contains("Earlier turns, digested") && content.contains("[c0a]"), "{content}");
    assert_eq!(conv.compacted_turns + assistant_turns(&conv.messages), turns);

    // Under the budget now: a second fit does nothing.
    let snapshot = conv.clone();
    fit(&model, &budget, &mut conv, &[], &ctx(), &observer).await.unwrap();
    assert_eq!(conv, snapshot);
}

#[tokio::test]
async fn a_head_larger_than_the_budget_is_a_limit_error_naming_the_key() {
    let model = ScriptedModel::from_str("s", "[[turns]]\ncontent = \"x\"\n").unwrap();
    let budget = ContextBudget { tokens: 50, prompt: "Summarise.".into() };
    let mut conv = Conversation::new("system ".repeat(100), "job");
    let e = fit(&model, &budget, &mut conv, &[], &ctx(), &NoObserver).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Limit);
    assert!(e.message.contains("context_tokens"), "{}", e.message);
}

/// Returns ~400 tokens of text.
struct Big;

#[async_trait]
impl Tool for Big {
    fn spec(&self) -> ToolSpec {
        ToolSpec { name: "big".into(), description: "d".into(), input_schema: json!({"type":"object"}) }
    }
    async fn call(&self, _: &ToolContext, args: Value) -> Result<Value, ToolError> {
        Ok(json!({"region": args["region"], "detail": "quarterly figures ".repeat(130)}))
    }
}

#[tokio::test]
async fn a_long_run_compacts_stays_under_its_budget_and_finishes_its_script() {
    // Eight turns of a large result each, then an answer built from the last one.
    let mut script = String::new();
    for i in 0..8 {
        script.push_str(&format!("[[turns]]\n[[turns.calls]]\ntool = \"big\"\nargs = '{{\"region\": \"r{i}\"}}'\n\n"));
    }
    script.push_str("[[turns]]\ncontent = \"last region {{ last[0].value.region }}, step {{ step }}\"\n");
    let model = Arc::new(Recording::new(&script));
    let mut tools = ToolSet::new(Duration::from_secs(5));
    tools.add(Arc::new(Big), "test").unwrap();
    let a = Agent {
        model: model.clone(),
        tools: Arc::new(tools),
        limits: Limits {
            max_steps: 20,
            timeout: Duration::from_secs(30),
            max_tokens: None,
            context: Some(ContextBudget { tokens: 1500, prompt: "Summarise.".into() }),
        },
        policy: Default::default(),
        output: None,
    };
    let mut conv = Conversation::new("sys", "go");
    let observer = Compactions::default();
    let answer = a.run(&mut conv, &ctx(), &observer).await.unwrap();
    assert_eq!(answer, "last region r7, step 8");
    assert_eq!(conv.steps, 9);
    let seen = model.seen.lock().unwrap().clone();
    let compactions = seen.iter().filter(|(p, _)| *p == Purpose::Compaction).count();
    let events = observer.0.lock().unwrap().clone();
    assert!(!events.is_empty() && compactions >= events.len(), "{seen:?}");
    assert_eq!(events.iter().map(|(_, _, u)| u.model_calls).sum::<u64>(), compactions as u64);
    let largest = seen.iter().filter(|(p, _)| *p == Purpose::Step).map(|(_, n)| *n).max().unwrap();
    assert!(largest <= 1500, "largest step request {largest} tokens");
    assert_eq!(conv.usage.model_calls, 9 + compactions as u64);
}

#[tokio::test]
async fn a_huge_older_part_is_summarised_in_chunks_that_each_fit_the_window() {
    let model = Recording::new("[[turns]]\ncontent = \"x\"\n");
    let budget = ContextBudget { tokens: 3000, prompt: "Summarise.".into() };
    // 60 turns of ~300-token results: about six times the window.
    let mut conv = Conversation { messages: long_conversation(60), ..Conversation::default() };
    assert!(count_request(&conv.messages, &[]) > 6 * 3000);
    fit(&model, &budget, &mut conv, &[], &ctx(), &NoObserver).await.unwrap();
    let seen = model.seen.lock().unwrap().clone();
    assert!(seen.len() > 1, "a transcript six windows long takes several calls");
    assert!(seen.iter().all(|(p, n)| *p == Purpose::Compaction && *n <= 3000), "{seen:?}");
    assert!(count_request(&conv.messages, &[]) <= 3000);
    // Every summarised turn went into one of the calls, cut, not dropped.
    let transcript = model.last.lock().unwrap().join("\n");
    let older = conv.compacted_turns as usize;
    assert!(older > 40, "{older}");
    for t in [0, older / 2, older - 1] {
        assert!(transcript.contains(&format!("[c{t}a]")), "turn {t} missing from the transcript");
    }
}

#[test]
fn an_overflow_is_taken_from_the_summary_not_from_the_kept_turns() {
    let m = long_conversation(12);
    let plan = Plan::select(&m, &[], 3000);
    // A budget a little below what select planned for: the kept turns stay
    // whole and the summary gives up the difference.
    let full = plan.assemble(&m, &"verbose ".repeat(5000), &[], 3000);
    let total = count_request(&full, &[]) as u64;
    let tighter = total - 40;
    let out = plan.assemble(&m, &"verbose ".repeat(5000), &[], tighter);
    assert!(count_request(&out, &[]) as u64 <= tighter);
    assert_eq!(out.len(), full.len(), "no kept turn was dropped");
    assert_eq!(out.last(), m.last());
    let summary = |o: &[ChatMessage]| match &o[2] {
        ChatMessage::User { content } => tokens::count(content),
        other => panic!("{other:?}"),
    };
    assert!(summary(&out) < summary(&full));
}
