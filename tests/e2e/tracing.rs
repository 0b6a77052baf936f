//! OpenTelemetry export into a real tracing backend (Arize Phoenix, the
//! OTLP/HTTP receiver an operator would run): the demo job is one trace
//! whose spans come from the orchestrator and two workers, joined through
//! the task messages' traceparent, shaped by the GenAI conventions, with
//! token counts that add up to the job's recorded usage
//! (docs/OPERATIONS.md "Tracing").

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use flotilla_protocol::JobStatus;
use flotilla_testkit::phoenix::Phoenix;
use flotilla_testkit::{Deployment, EventLog, TIMEOUT, TestConfig, eventually};
use serde_json::Value;

const DEMO: &str = "Gross margin table for: north: revenue 120, cost 75; south: revenue 0, cost 30; \
                    east: revenue 250, cost 190; west: revenue 80, cost 20.";

fn attr<'a>(span: &'a Value, key: &str) -> &'a Value {
    &span["attributes"][key]
}

fn int(span: &Value, key: &str) -> u64 {
    attr(span, key).as_u64().unwrap_or_else(|| panic!("{key} is not an integer on {span}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_job_is_one_trace_across_three_processes_in_phoenix() {
    let phoenix = Phoenix::start().await;
    let endpoint = phoenix.url();
    // One slot a worker and 300 ms a model call: the four tasks need both workers.
    let d = Deployment::start(2, |url| {
        let mut c = TestConfig::demo(url, 1, 300);
        c.section(&format!("[telemetry]\nendpoint = \"{endpoint}\"\ncapture_content = true\nmetrics_interval = 1\n"));
        c
    })
    .await;
    eventually(TIMEOUT, "both workers to be live", || async {
        d.bus.live_workers().await.ok().filter(|w| w.len() == 2).map(|_| ())
    })
    .await;
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let job = d.submit(DEMO).await;
    let end = log.job_end(TIMEOUT).await;
    assert_eq!(end["event"], "completed", "{end}");
    let rec = d.status(job).await;
    assert_eq!(rec.status, JobStatus::Completed);
    let traceparent = rec.traceparent.clone().expect("the job has a traceparent");
    let trace_id = traceparent.split('-').nth(1).unwrap().to_string();
    let root_id = traceparent.split('-').nth(2).unwrap().to_string();

    // The planner's span ends after the job's outcome is stored; each
    // process's batch goes out within its schedule delay.
    let spans: Vec<Value> = eventually(Duration::from_secs(60), "the job's spans in Phoenix", || async {
        let spans: Vec<Value> =
            phoenix.spans().await.into_iter().filter(|s| s["context"]["trace_id"] == trace_id.as_str()).collect();
        let agents = spans.iter().filter(|s| s["name"] == "invoke_agent finance").count();
        let planner = spans.iter().any(|s| s["name"] == "invoke_agent planner");
        (agents == 4 && planner).then_some(spans)
    })
    .await;
    let by_id: HashMap<&str, &Value> = spans.iter().map(|s| (s["context"]["span_id"].as_str().unwrap(), s)).collect();
    let parent = |s: &Value| s["parent_id"].as_str().and_then(|p| by_id.get(p)).copied();
    let named = |name: &str| spans.iter().filter(move |s| s["name"] == name).collect::<Vec<_>>();

    // The job: the root, with the job's traceparent as its own span id.
    let planner = named("invoke_agent planner");
    assert_eq!(planner.len(), 1, "one planner run");
    let planner = planner[0];
    assert!(planner["parent_id"].is_null(), "the planner span is the trace's root: {planner}");
    assert_eq!(planner["context"]["span_id"], root_id.as_str());
    assert_eq!(attr(planner, "gen_ai.operation.name"), "invoke_agent");
    assert_eq!(attr(planner, "gen_ai.conversation.id"), job.to_string().as_str());
    assert_eq!(attr(planner, "flotilla.tenant"), "default");
    assert_eq!(attr(planner, "flotilla.status"), "completed");

    // Each planner step a chat span of the planner's model below it.
    let planner_chats: Vec<_> = named("chat planner").into_iter().filter(|s| parent(s) == Some(planner)).collect();
    assert_eq!(planner_chats.len() as u64, int(planner, "flotilla.model_calls"), "a chat span per planner step");
    for chat in &planner_chats {
        assert_eq!(attr(chat, "gen_ai.provider.name"), "flotilla.scripted");
        assert_eq!(attr(chat, "gen_ai.request.model"), "planner");
        assert!(attr(chat, "gen_ai.response.finish_reasons").is_string(), "{chat}");
        assert!(attr(chat, "gen_ai.input.messages").as_str().is_some_and(|m| m.contains("north")), "content captured");
    }

    // Each delegation an execute_tool task span whose child, in a worker
    // process, is invoke_agent finance.
    let delegations = named("execute_tool task");
    assert_eq!(delegations.len(), 4);
    let agents = named("invoke_agent finance");
    let mut parents = HashSet::new();
    let mut workers = HashSet::new();
    for agent in &agents {
        let p = parent(agent).unwrap_or_else(|| panic!("{agent} has no parent in the trace"));
        assert_eq!(p["name"], "execute_tool task");
        assert_eq!(parent(p), Some(planner));
        assert!(attr(p, "gen_ai.tool.call.id").is_string());
        parents.insert(p["context"]["span_id"].as_str().unwrap());
        workers.insert(attr(agent, "flotilla.worker.id").as_str().unwrap().to_string());
        assert_eq!(attr(agent, "gen_ai.conversation.id"), job.to_string().as_str());
        assert_eq!(attr(agent, "flotilla.attempt"), 1);
    }
    assert_eq!(parents.len(), 4, "one agent span below each delegation");
    assert_eq!(workers, HashSet::from(["w1".to_string(), "w2".to_string()]), "spans of both worker processes");

    // Inside each subagent: its chat spans and its MCP tool call.
    for name in ["chat finance", "execute_tool finance_gross_margin"] {
        let spans = named(name);
        assert!(!spans.is_empty(), "no {name} span");
        for s in spans {
            assert_eq!(parent(s).map(|p| &p["name"]), Some(&Value::from("invoke_agent finance")), "{name}: {s}");
        }
    }
    let failed: Vec<_> =
        named("execute_tool finance_gross_margin").into_iter().filter(|s| s["status_code"] == "ERROR").collect();
    assert_eq!(failed.len(), 1, "south's revenue 0 is a failed tool call");
    assert_eq!(attr(failed[0], "error.type"), "business");

    // The tokens on the chat spans are the job's recorded usage.
    let chats: Vec<_> = spans.iter().filter(|s| attr(s, "gen_ai.operation.name") == "chat").collect();
    let input: u64 = chats.iter().map(|s| int(s, "gen_ai.usage.input_tokens")).sum();
    let output: u64 = chats.iter().map(|s| int(s, "gen_ai.usage.output_tokens")).sum();
    assert_eq!((input, output), (rec.usage.input_tokens, rec.usage.output_tokens), "span tokens = job usage");
    assert_eq!(chats.len() as u64, rec.usage.model_calls);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_also_go_out_over_grpc() {
    let phoenix = Phoenix::start().await;
    let endpoint = phoenix.grpc_url();
    let d = Deployment::start(1, |url| {
        let mut c = TestConfig::demo(url, 4, 0);
        c.section(&format!("[telemetry]\nendpoint = \"{endpoint}\"\nprotocol = \"grpc\"\n"));
        c
    })
    .await;
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let job = d.submit(DEMO).await;
    assert_eq!(log.job_end(TIMEOUT).await["event"], "completed");
    let trace_id = d.status(job).await.traceparent.expect("traceparent").split('-').nth(1).unwrap().to_string();
    eventually(Duration::from_secs(60), "the job's spans over gRPC in Phoenix", || async {
        let spans = phoenix.spans().await;
        let ours =
            |name: &str| spans.iter().any(|s| s["name"] == name && s["context"]["trace_id"] == trace_id.as_str());
        (ours("invoke_agent planner") && ours("invoke_agent finance")).then_some(())
    })
    .await;
}
