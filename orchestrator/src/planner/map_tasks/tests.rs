//! `map_tasks` over in-memory job files and a fake dispatcher whose dispatch
//! keys outlive a "restart" the way the job store's do: ordering, the
//! in-flight bound, validation before any dispatch, and resume without
//! dispatching an item twice.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use flotilla_protocol::ids::{JobId, TaskId, Tenant};
use flotilla_protocol::{ErrorInfo, ErrorKind};
use tokio_util::sync::CancellationToken;

use super::results::ResultLine;
use super::run::ItemOutcome;
use super::*;

const CALL: &str = "call_1_0";

/// Dispatch keys as the job store keeps them: they survive a restart.
#[derive(Default)]
struct Keys(Mutex<HashMap<String, (TaskId, String)>>);

/// A dispatcher that completes every task at once, fails descriptions
/// containing "FAIL", and holds items at or past `block_from` until the call
/// is cancelled.
struct FakeDispatch {
    keys: Arc<Keys>,
    /// Keys published (first `start` of a key).
    published: Mutex<Vec<String>>,
    /// Every `start` call's key.
    starts: Mutex<Vec<String>>,
    in_flight: AtomicUsize,
    most_in_flight: AtomicUsize,
    block_from: Option<usize>,
    blocked: tokio::sync::watch::Sender<usize>,
}

impl FakeDispatch {
    fn new(keys: Arc<Keys>, block_from: Option<usize>) -> Arc<Self> {
        Arc::new(Self {
            keys,
            published: Mutex::default(),
            starts: Mutex::default(),
            in_flight: AtomicUsize::new(0),
            most_in_flight: AtomicUsize::new(0),
            block_from,
            blocked: tokio::sync::watch::channel(0).0,
        })
    }

    fn index_of(key: &str) -> usize {
        key.rsplit(':').next().and_then(|i| i.parse().ok()).expect("map:<id>:<index>")
    }
}

#[async_trait]
impl ItemDispatch for FakeDispatch {
    async fn start(&self, _: &ToolContext, ty: &str, description: String, key: &str) -> Result<TaskId, ToolError> {
        assert_eq!(ty, "finance");
        self.starts.lock().unwrap().push(key.to_string());
        let mut keys = self.keys.0.lock().unwrap();
        let (id, _) = keys.entry(key.to_string()).or_insert_with(|| {
            self.published.lock().unwrap().push(key.to_string());
            (TaskId::new(), format!("{key}|{description}"))
        });
        let n = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_in_flight.fetch_max(n, Ordering::SeqCst);
        Ok(*id)
    }

    async fn wait(&self, ctx: &ToolContext, task: TaskId) -> Result<ItemOutcome, ToolError> {
        let entry = self.keys.0.lock().unwrap().values().find(|(id, _)| *id == task).cloned();
        let (_, text) = entry.expect("waited for a started task");
        let (key, description) = text.split_once('|').unwrap();
        if self.block_from.is_some_and(|b| Self::index_of(key) >= b) {
            self.blocked.send_modify(|n| *n += 1);
            ctx.cancel.cancelled().await;
            return Err(ToolError::new(ErrorKind::Cancelled, "job cancelled"));
        }
        tokio::task::yield_now().await; // end out of start order
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        let failed = description.contains("FAIL");
        Ok(ItemOutcome {
            task_id: task,
            status: if failed { "failed" } else { "completed" }.into(),
            summary: if failed { String::new() } else { format!("done: {description}") },
            error: failed.then(|| ErrorInfo::new(ErrorKind::Business, "cost above revenue")),
            report_path: None,
        })
    }
}

struct Rig {
    files: JobFiles,
    job: JobId,
    dispatch: Arc<FakeDispatch>,
    tool: MapTasks,
}

fn rig(files: &JobFiles, job: JobId, dispatch: Arc<FakeDispatch>, max_in_flight: usize) -> Rig {
    let types = BTreeMap::from([(SubagentType::new("finance").unwrap(), "numbers".into())]);
    let tool = MapTasks { dispatch: dispatch.clone(), types, files: files.clone(), max_in_flight };
    Rig { files: files.clone(), job, dispatch, tool }
}

impl Rig {
    fn ctx(&self, cancel: &CancellationToken) -> ToolContext {
        ToolContext {
            job_id: self.job,
            task_id: None,
            tenant: Tenant::new("acme").unwrap(),
            call_id: CALL.into(),
            idempotency_key: format!("{}:{CALL}", self.job),
            traceparent: None,
            cancel: cancel.clone(),
            approvals: None,
        }
    }

    async fn put(&self, path: &str, text: &str) {
        self.files.write(&self.job, &FilePath::parse(path).unwrap(), text.as_bytes()).await.unwrap();
    }

    async fn call(&self, args: Value) -> Result<Value, ToolError> {
        self.tool.call(&self.ctx(&CancellationToken::new()), args).await
    }

    async fn results(&self, path: &str) -> Vec<ResultLine> {
        let bytes = self.files.read(&self.job, &FilePath::parse(path).unwrap()).await.unwrap();
        String::from_utf8(bytes).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    }

    fn published(&self) -> usize {
        self.dispatch.published.lock().unwrap().len()
    }
}

fn regions(n: usize) -> String {
    (0..n).map(|i| format!("{{\"region\": \"r{i}\", \"revenue\": {}, \"cost\": {}}}\n", 100 + i, 50 + i)).collect()
}

fn args(items: &str) -> Value {
    json!({
        "subagent_type": "finance",
        "description": "Margin of {{ item.region }}: revenue {{ item.revenue }}, cost {{ item.cost }}",
        "items": items,
    })
}

#[tokio::test]
async fn every_item_gets_one_task_and_one_results_line_in_item_order() {
    let rig = rig(&JobFiles::in_memory(1 << 24), JobId::new(), FakeDispatch::new(Arc::default(), None), 8);
    let mut text = regions(2500);
    text.push_str("{\"region\": \"FAIL\", \"revenue\": 1, \"cost\": 2}\n");
    rig.put("/inputs/regions.jsonl", &text).await;

    let out = rig.call(args("/inputs/regions.jsonl")).await.unwrap();

    let results_path = out["results"].as_str().unwrap().to_string();
    assert!(results_path.starts_with("/maps/call_1_0-") && results_path.ends_with(".jsonl"), "{results_path}");
    assert_eq!(
        (out["total"].clone(), out["completed"].clone(), out["failed"].clone()),
        (json!(2501), json!(2500), json!(1))
    );
    let lines = rig.results(&results_path).await;
    assert_eq!(lines.len(), 2501);
    assert!(lines.iter().enumerate().all(|(i, l)| l.index == i), "item order");
    assert_eq!(lines[7].item["region"], "r7");
    assert_eq!(lines[7].summary.as_deref(), Some("done: Margin of r7: revenue 107, cost 57"));
    assert_eq!(
        (lines[2500].status.as_str(), lines[2500].error.as_ref().unwrap().message.as_str()),
        ("failed", "cost above revenue")
    );
    assert_eq!(rig.published(), 2501, "one task per item");
    let most = rig.dispatch.most_in_flight.load(Ordering::SeqCst);
    assert!((2..=8).contains(&most), "at most max_in_flight outstanding, and more than one: {most}");
    // The parts are gone once the results file is written.
    let left: Vec<String> = rig.files.list(&rig.job).await.unwrap().into_iter().map(|f| f.path.to_string()).collect();
    assert_eq!(left.len(), 3, "{left:?}");

    // The same call replayed (a restart after the map ended) returns the same aggregate without a task.
    assert_eq!(rig.call(args("/inputs/regions.jsonl")).await.unwrap(), out);
    assert_eq!(rig.published(), 2501);
}

#[tokio::test]
async fn bad_input_is_a_validation_error_before_any_dispatch() {
    let rig = rig(&JobFiles::in_memory(1 << 20), JobId::new(), FakeDispatch::new(Arc::default(), None), 8);
    rig.put("/inputs/ok.jsonl", &regions(3)).await;
    rig.put("/inputs/bad_line.jsonl", &format!("{}{{\"region\": \n", regions(3))).await;
    rig.put("/inputs/no_cost.jsonl", &format!("{}{{\"region\": \"x\", \"revenue\": 1}}\n", regions(2))).await;
    rig.put("/inputs/empty.jsonl", "\n\n").await;

    let cases = [
        (args("/inputs/missing.jsonl"), "items file /inputs/missing.jsonl not found"),
        (args("/inputs/bad_line.jsonl"), "line 4 is not a JSON value"),
        (args("/inputs/no_cost.jsonl"), "line 3: "),
        (args("/inputs/empty.jsonl"), "holds no items"),
        (json!({"subagent_type": "legal", "description": "x", "items": "/inputs/ok.jsonl"}), "valid types: finance"),
        (
            json!({"subagent_type": "finance", "description": "{{ item.", "items": "/inputs/ok.jsonl"}),
            "description template",
        ),
        (json!({"subagent_type": "finance", "description": "x", "items": "in/ok.jsonl"}), "items \"in/ok.jsonl\""),
    ];
    for (a, needle) in cases {
        let e = rig.call(a).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::Validation, "{needle}: {e}");
        assert!(e.message.contains(needle), "{needle}: {}", e.message);
    }
    let e = rig.call(args("/inputs/no_cost.jsonl")).await.unwrap_err();
    assert!(e.message.contains("undefined") && e.message.contains("nothing was dispatched"), "{}", e.message);
    assert_eq!(rig.published(), 0);
    assert!(rig.dispatch.starts.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_map_interrupted_mid_way_resumes_from_its_watermark_and_starts_no_item_twice() {
    let (files, job, keys) = (JobFiles::in_memory(1 << 24), JobId::new(), Arc::new(Keys::default()));
    let first = rig(&files, job, FakeDispatch::new(keys.clone(), Some(1500)), 8);
    first.put("/inputs/regions.jsonl", &regions(2000)).await;

    // The orchestrator stops while items 1500..1508 are in flight.
    let cancel = CancellationToken::new();
    let ctx = first.ctx(&cancel);
    let mut blocked = first.dispatch.blocked.subscribe();
    let (call, stop) = (first.tool.call(&ctx, args("/inputs/regions.jsonl")), async {
        blocked.wait_for(|n| *n == 8).await.unwrap();
        cancel.cancel();
    });
    let (interrupted, ()) = tokio::join!(call, stop);
    assert_eq!(interrupted.unwrap_err().kind, ErrorKind::Cancelled);
    assert_eq!(first.published(), 1508);

    // A new orchestrator (same job files, same dispatch keys) replays the call.
    let second = rig(&files, job, FakeDispatch::new(keys, None), 8);
    let out = second.call(args("/inputs/regions.jsonl")).await.unwrap();

    assert_eq!((out["total"].clone(), out["completed"].clone()), (json!(2000), json!(2000)));
    let starts = second.dispatch.starts.lock().unwrap().clone();
    let resumed_from = starts.iter().map(|k| FakeDispatch::index_of(k)).min().unwrap();
    // A part holds the first 1000 lines released in order, or a few more when
    // one ending releases several (renders run on the blocking pool, so the
    // order items end in varies).
    assert!((1000..1500).contains(&resumed_from), "the stored part is not re-awaited: {resumed_from}");
    assert_eq!(second.published(), 492, "only items never dispatched are published");
    let lines = second.results(out["results"].as_str().unwrap()).await;
    assert_eq!(lines.len(), 2000);
    assert!(lines.iter().enumerate().all(|(i, l)| l.index == i && l.completed()));
    let ids: std::collections::HashSet<_> = lines.iter().map(|l| l.task_id).collect();
    assert_eq!(ids.len(), 2000, "one task per item across the restart");
}

#[test]
fn the_map_id_is_the_safe_call_id_plus_a_hash_of_the_arguments() {
    let a = map_id("call_1_0", &args("/a.jsonl"));
    assert!(a.starts_with("call_1_0-") && a.len() == "call_1_0-".len() + 8, "{a}");
    assert_eq!(a, map_id("call_1_0", &args("/a.jsonl")), "stable across a replay");
    assert_ne!(a, map_id("call_1_0", &args("/b.jsonl")), "a reused call id with other arguments is another map");
    assert!(map_id("../x/y", &json!({})).starts_with("xy-"));
    assert!(map_id("///", &json!({})).starts_with("map-"));
}

/// The hostile templates of a security review, as a model would send them:
/// each is a validation error naming its limit, before any dispatch.
#[tokio::test]
async fn a_template_over_its_fuel_or_output_limit_is_refused_before_any_dispatch() {
    let rig = rig(&JobFiles::in_memory(1 << 20), JobId::new(), FakeDispatch::new(Arc::default(), None), 8);
    rig.put("/inputs/ok.jsonl", &regions(3)).await;
    let hostile = [
        (r#"{% for i in range(4) %}{{ "x" * 100000000 }}{% endfor %}"#, "uses `*`"),
        ("{% set a = [1] %}{% set a = a + a %}{{ '' ~ a }}", "uses `set`"),
        ("{% for i in range(5000) %}{% for j in range(5000) %}{% endfor %}{% endfor %}x", "budget of 100000 fuel"),
        ("{% for i in range(5000) %}{{ item.region }} padding to pass 64 KiB{% endfor %}", "more than 65536 bytes"),
    ];
    for (description, needle) in hostile {
        let a = json!({"subagent_type": "finance", "description": description, "items": "/inputs/ok.jsonl"});
        let e = rig.call(a).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::Validation, "{description}: {e}");
        assert!(e.message.contains(needle), "{}", e.message);
    }
    assert_eq!(rig.published(), 0);
}

/// Items that are cheap one by one still add up: their renders count
/// against the budget of the whole call, and the check has a deadline.
#[test]
fn the_renders_of_all_items_count_against_one_budget_and_a_deadline() {
    let template =
        template::DescriptionTemplate::compile("{% for i in range(100) %}{% endfor %}{{ item.region }}").unwrap();
    let text = regions(50);
    let never = || false;
    let long = std::time::Duration::from_secs(3600);
    assert_eq!(validate(&text, &template, template::MAP_FUEL, long, &never), Ok(50));
    let e = validate(&text, &template, 1000, long, &never).unwrap_err();
    assert!(e.contains("budget of one map_tasks call (1000 fuel") && e.contains("stopped before item"), "{e}");
    let e = validate(&text, &template, template::MAP_FUEL, std::time::Duration::ZERO, &never).unwrap_err();
    assert!(e.contains("took longer than 0 s"), "{e}");
    let e = validate(&text, &template, template::MAP_FUEL, long, &|| true).unwrap_err();
    assert!(e.contains("cancelled"), "{e}");
}
