//! Bounded planner context, and checkpoints that are
//! never skipped: a planner whose conversation passes `[planner]
//! context_tokens` compacts (a `compacted` job event), still completes with
//! the right answer, and no request it sent was over the bound; a
//! conversation too large for a KV value is checkpointed through the job
//! files bucket and read back whole.

use std::time::Duration;

use flotilla_agent::agent::Conversation;
use flotilla_agent::model::{ChatMessage, ToolCall};
use flotilla_bus::{Bus, Checkpoints};
use flotilla_config::{FilesConfig, NatsConfig};
use flotilla_protocol::ids::JobId;
use flotilla_protocol::{JobStatus, MAX_MESSAGE_BYTES};
use flotilla_testkit::{EventLog, NatsServer, RawNats, TestConfig, bin};

use flotilla_testkit::{Deployment, TIMEOUT};

const CONTEXT_TOKENS: u64 = 3000;

/// Regions the job chains through, with their expected margins.
const REGIONS: [(&str, u32, u32, &str); 8] = [
    ("a", 120, 75, "0.375"),
    ("c", 250, 190, "0.24"),
    ("d", 80, 20, "0.75"),
    ("e", 100, 100, "0.0"),
    ("f", 50, 60, "-0.2"),
    ("g", 200, 50, "0.75"),
    ("h", 40, 10, "0.75"),
    ("k", 500, 400, "0.2"),
];

/// The finance subagent: computes one margin with the MCP tool and answers
/// with every margin known so far (the `Known: .. End` of its description plus
/// its own) followed by ~300 tokens of detail, so the planner's conversation
/// outgrows its window after a few tasks.
const FINANCE: &str = r#"
[vars]
nums = "captures(input, 'region ([A-Za-z0-9_]+): revenue (-?[0-9]+), cost (-?[0-9]+)')"
known = "captures(input, 'Known: ([^ ]*) End')"

[[turns]]
[[turns.calls]]
tool = "finance_gross_margin"
args = '{"revenue": {{ nums[0][2] }}, "cost": {{ nums[0][3] }}}'

[[turns]]
content = "Known: {{ known[0][1] }}{{ nums[0][1] }}={{ last[0].value }}; End. Detail: {% for i in range(100) %}q{{ i }} {% endfor %}"
"#;

/// The planner: one todo list, then one task per turn, each handing the
/// previous report's `Known: .. End` to the next task (it reads only `last`, the
/// newest turn, which compaction keeps), then the final list as the answer.
fn planner_script() -> String {
    let known = "(captures(last | tojson, 'Known: ([^ ]*) End') | first)[1]";
    let mut s = String::from(
        r#"
[vars]
regions = "captures(input, '([A-Za-z0-9_]+): revenue (-?[0-9]+), cost (-?[0-9]+)')"

[[turns]]
[[turns.calls]]
tool = "write_todos"
args = '''{"todos": [{% for r in regions %}{"content": {{ ("Margin of " ~ r[1]) | tojson }}, "status": "pending"}{% if not loop.last %}, {% endif %}{% endfor %}]}'''
"#,
    );
    for i in 0..REGIONS.len() {
        let prior = if i == 0 { String::new() } else { format!("{{{{ {known} }}}}") };
        s.push_str(&format!(
            r#"
[[turns]]
[[turns.calls]]
tool = "task"
args = '''{{"subagent_type": "finance", "description": "Gross margin of region {{{{ regions[{i}][1] }}}}: revenue {{{{ regions[{i}][2] }}}}, cost {{{{ regions[{i}][3] }}}}. Known: {prior} End."}}'''
"#
        ));
    }
    s.push_str(&format!("\n[[turns]]\ncontent = \"{{{{ {known} }}}}\"\n"));
    s
}

fn config(url: &str, finance_latency_ms: u64) -> TestConfig {
    let mut c = TestConfig::new(url);
    c.scripted_model("planner", &planner_script());
    c.scripted_model("finance", &format!("latency_ms = {finance_latency_ms}\n{FINANCE}"));
    c.section(&format!(
        "[planner]\nmodel = \"planner\"\ntask_timeout = 60\nmax_steps = 40\ncontext_tokens = {CONTEXT_TOKENS}\n\
         report_tokens = 1000\n"
    ));
    c.section(&format!(
        "[mcp_servers.finance]\ncommand = \"{}\"\n[subagents.finance]\ndescription = \"Computes gross margins.\"\n\
         model = \"finance\"\ntools = [\"mcp:finance/gross_margin\"]\nconcurrency = 2\n",
        bin("finance-tools").display()
    ));
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planner_past_context_tokens_compacts_and_still_answers_right() {
    let d = Deployment::start(1, |url| config(url, 0)).await;
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let job = submit_chain(&d).await;
    let end = log.job_end(TIMEOUT).await;
    assert_eq!(end["event"], "completed", "{end}");
    log.drain();

    // The right answer: every margin, in order, computed by the subagents.
    let rec = d.status(job).await;
    assert_eq!(rec.status, JobStatus::Completed);
    assert_eq!(rec.answer.as_deref(), Some(expected().as_str()));

    // It compacted, from over the bound to under it.
    let compacted = log.events("compacted");
    assert!(!compacted.is_empty(), "no compacted event");
    for c in &compacted {
        let (before, after) = (c["before_tokens"].as_u64().unwrap(), c["after_tokens"].as_u64().unwrap());
        assert!(before > CONTEXT_TOKENS && after <= CONTEXT_TOKENS, "{c}");
        assert!(c["usage"]["model_calls"].as_u64().unwrap() >= 1, "{c}");
    }
    // Every request the planner's model received stayed under the bound: the
    // scripted model reports input tokens as tokens::count_request over the
    // request it was given (shared/agent/src/model/scripted.rs).
    let steps = log.events("planner_step");
    assert_eq!(steps.len(), REGIONS.len() + 2, "one step per turn of the script");
    let largest = steps.iter().map(|s| s["usage"]["input_tokens"].as_u64().unwrap()).max().unwrap();
    assert!(largest <= CONTEXT_TOKENS, "largest planner request {largest} tokens");
    assert_eq!(log.events("task_reported").len(), REGIONS.len());
    // The planner's usage includes the compaction calls.
    let compaction_calls: u64 = compacted.iter().map(|c| c["usage"]["model_calls"].as_u64().unwrap()).sum();
    assert_eq!(rec.planner_usage.model_calls, (REGIONS.len() + 2) as u64 + compaction_calls);
    println!(
        "context e2e: {} compactions, largest planner request {largest} tokens (bound {CONTEXT_TOKENS}), \
         before/after {:?}",
        compacted.len(),
        compacted.iter().map(|c| (c["before_tokens"].clone(), c["after_tokens"].clone())).collect::<Vec<_>>()
    );
}

async fn submit_chain(d: &Deployment) -> JobId {
    let input: Vec<String> = REGIONS.iter().map(|(n, r, c, _)| format!("{n}: revenue {r}, cost {c}")).collect();
    d.submit(&format!("Chain the gross margins: {}.", input.join("; "))).await
}

/// Every margin, in order: what the job must answer.
fn expected() -> String {
    REGIONS.iter().map(|(n, _, _, m)| format!("{n}={m};")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compacted_planner_resumes_from_its_checkpoint_after_an_orchestrator_kill() {
    // 300 ms per subagent model call: the job is still running when it is killed.
    let mut d = Deployment::start(1, |url| config(url, 300)).await;
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let job = submit_chain(&d).await;
    log.until(TIMEOUT, "the first compaction", |s, v| s.ends_with(".event") && v["event"] == "compacted").await;
    d.orchestrator.as_mut().unwrap().kill();
    d.start_orchestrator();
    let end = log.job_end(TIMEOUT).await;
    assert_eq!(end["event"], "completed", "{end}");
    log.drain();
    // Killed mid-job: the second orchestrator resumed it (a second `running`).
    assert_eq!(log.events("running").len(), 2, "the job was resumed, not finished before the kill");
    // The resumed planner continued the script at the right turn (the
    // checkpoint holds the compacted conversation and its compacted turns).
    let rec = d.status(job).await;
    assert_eq!(rec.answer.as_deref(), Some(expected().as_str()));
    // No task ran twice.
    let started: std::collections::HashSet<_> = log
        .seen
        .iter()
        .filter(|(_, v)| v["event"] == "started")
        .map(|(s, v)| flotilla_testkit::events::task_of(s, v))
        .collect();
    assert_eq!(started.len(), REGIONS.len());
    assert_eq!(log.events("started").len(), REGIONS.len(), "each task started once");
}

/// A conversation of `n` tool results of `size` bytes each.
fn big_conversation(n: usize, size: usize) -> Conversation {
    let mut conv = Conversation::new("You plan.", "A long job.");
    for i in 0..n {
        let id = format!("call_{i}");
        conv.messages.push(ChatMessage::Assistant {
            content: None,
            tool_calls: vec![ToolCall { id: id.clone(), name: "task".into(), arguments: serde_json::json!({"i": i}) }],
        });
        conv.messages.push(ChatMessage::Tool {
            tool_call_id: id,
            name: "task".into(),
            content: format!("report {i}: {}", "x".repeat(size)),
            is_error: false,
        });
    }
    conv.steps = n as u32;
    conv
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_over_the_kv_limit_goes_to_the_files_bucket_and_loads_whole() {
    let nats = NatsServer::start().await;
    let bus =
        Bus::connect(&NatsConfig { url: nats.url(), ..Default::default() }, "e2e-context", Duration::from_secs(10))
            .await
            .expect("connect");
    bus.ensure_topology().await.expect("topology");
    let _files = bus.job_files(&FilesConfig::default()).await.expect("files bucket");
    let checkpoints = Checkpoints::open(&bus).await.expect("checkpoints");
    let job = JobId::new();

    // 1.5 MiB of conversation: over the KV value limit (NATS max_payload).
    let large = big_conversation(30, 50 * 1024);
    let size = serde_json::to_vec(&large).unwrap().len();
    assert!(size > MAX_MESSAGE_BYTES, "{size}");
    checkpoints.save(&job, &large).await.expect("a large checkpoint is stored, not skipped");
    // The KV value is a small pointer to the object.
    let raw = RawNats::connect(&NatsConfig { url: nats.url(), ..Default::default() }).await;
    let kv = raw.js.get_key_value(bus.subjects.checkpoints_bucket()).await.expect("checkpoints bucket");
    let value = kv.get(job.to_string()).await.unwrap().expect("a value for the job");
    assert!(value.len() < 1024, "{} bytes", value.len());
    let pointer: serde_json::Value = serde_json::from_slice(&value).unwrap();
    assert_eq!(pointer["checkpoint_object"], format!("checkpoints/{job}"));
    // The stored form is the conversation plus its version field.
    let stored = pointer["size"].as_u64().unwrap() as usize;
    assert!((size..size + 16).contains(&stored), "{stored} bytes stored of {size}");
    // A restarted orchestrator (a fresh handle) reads it back whole.
    let fresh = Checkpoints::open(&bus).await.expect("checkpoints");
    assert_eq!(fresh.load(&job).await.as_ref(), Some(&large));

    // Compacted back under the limit: stored inline, the object removed.
    let small = big_conversation(2, 100);
    fresh.save(&job, &small).await.expect("inline save");
    assert_eq!(checkpoints.load(&job).await.as_ref(), Some(&small));
    let objects = raw.js.get_object_store(bus.subjects.files_bucket()).await.expect("files bucket");
    let gone = objects.info(format!("checkpoints/{job}")).await;
    assert!(gone.is_err() || gone.unwrap().deleted, "the stale object was removed");

    // Large again, then the job ends: remove takes the pointer and the object.
    fresh.save(&job, &large).await.expect("large save");
    fresh.remove(&job).await;
    assert_eq!(fresh.load::<Conversation>(&job).await, None);
    let gone = objects.info(format!("checkpoints/{job}")).await;
    assert!(gone.is_err() || gone.unwrap().deleted, "remove took the object");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subagent_past_its_types_context_tokens_compacts_and_still_answers_right() {
    const SUBAGENT_CONTEXT: u64 = 500;
    let d = Deployment::start(1, |url| {
        let mut c = TestConfig::new(url);
        c.scripted_model(
            "planner",
            "[[turns]]\n[[turns.calls]]\ntool = \"task\"\n\
             args = '{\"subagent_type\": \"finance\", \"description\": \"Margins of ten revenues, cost 50.\"}'\n\
             [[turns]]\ncontent = \"{{ last[0].value }}\"\n",
        );
        // Ten model turns, one margin each; the answer is the last one's.
        let mut finance = String::new();
        for revenue in [100, 110, 120, 130, 140, 150, 160, 170, 180, 200] {
            finance.push_str(&format!(
                "[[turns]]\n[[turns.calls]]\ntool = \"finance_gross_margin\"\n\
                 args = '{{\"revenue\": {revenue}, \"cost\": 50}}'\n"
            ));
        }
        finance.push_str("[[turns]]\ncontent = \"{{ last[0].value }}\"\n");
        c.scripted_model("finance", &finance);
        c.section("[planner]\nmodel = \"planner\"\ntask_timeout = 60\n");
        c.section(&format!(
            "[mcp_servers.finance]\ncommand = \"{}\"\n[subagents.finance]\ndescription = \"Computes gross margins.\"\n\
             model = \"finance\"\ntools = [\"mcp:finance/gross_margin\"]\nmax_steps = 20\n\
             context_tokens = {SUBAGENT_CONTEXT}\n",
            bin("finance-tools").display()
        ));
        c
    })
    .await;
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let job = d.submit("One long subagent task.").await;
    let end = log.job_end(TIMEOUT).await;
    assert_eq!(end["event"], "completed", "{end}");
    log.drain();
    let rec = d.status(job).await;
    // (200 - 50) / 200, from the last turn the subagent played after compacting.
    assert_eq!(rec.answer.as_deref(), Some("0.75"));
    // Every request the subagent's model got stayed under its type's bound...
    let calls = log.events("model_call");
    assert_eq!(calls.len(), 11, "one model_call event per step");
    let largest = calls.iter().map(|c| c["usage"]["input_tokens"].as_u64().unwrap()).max().unwrap();
    assert!(largest <= SUBAGENT_CONTEXT, "largest subagent request {largest} tokens");
    // ...which it could only be by compacting: the task's usage has model
    // calls beyond its 11 steps, the compaction calls.
    let task = &rec.tasks[0];
    assert!(task.usage.model_calls > 11, "no compaction call in {:?}", task.usage);
    println!("subagent context e2e: largest request {largest} tokens, {} model calls", task.usage.model_calls);
}
