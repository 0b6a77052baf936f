//! Job files over a real nats-server's Object Store,
//! the built-in file tools, permissions and large-result eviction, driven
//! through the same `ToolSet` the agents use.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use flotilla_agent::tool::{ApprovalGate, Eviction, Tool, ToolContext, ToolError, ToolSet, ToolSpec};
use flotilla_bus::Bus;
use flotilla_config::permissions::{Mode, Operation, PermissionRule, Permissions};
use flotilla_config::{FilesConfig, NatsConfig};
use flotilla_job_files::{FilePath, JobFiles};
use flotilla_protocol::digest::sha256_hex;
use flotilla_protocol::ids::{JobId, TaskId};
use flotilla_protocol::{ErrorKind, FileRef};
use flotilla_testkit::NatsServer;
use flotilla_tools::{self as builtin, FileToolEnv};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

struct Env {
    nats: NatsServer,
    bus: Bus,
    files: JobFiles,
}

async fn env() -> Env {
    let nats = NatsServer::start().await;
    let bus =
        Bus::connect(&NatsConfig { url: nats.url(), ..Default::default() }, "files-test", Duration::from_secs(10))
            .await
            .expect("connect");
    let files = bus
        .job_files(&FilesConfig { max_file_bytes: 4 * 1024 * 1024, ..Default::default() })
        .await
        .expect("files bucket");
    Env { nats, bus, files }
}

fn tools(files: &JobFiles, rules: Vec<PermissionRule>, default: Mode) -> ToolSet {
    let env =
        Arc::new(FileToolEnv { files: files.clone(), permissions: Permissions::compile(&rules, default).unwrap() });
    let mut set = ToolSet::new(Duration::from_secs(30));
    for name in builtin::ALL {
        set.add(builtin::tool(name, &env).unwrap(), "builtin").unwrap();
    }
    set
}

fn ctx(job: JobId, approvals: Option<Arc<dyn ApprovalGate>>) -> ToolContext {
    let task = TaskId::new();
    ToolContext {
        job_id: job,
        task_id: Some(task),
        tenant: Default::default(),
        call_id: "call_1".into(),
        idempotency_key: format!("{task}:call_1"),
        traceparent: None,
        cancel: CancellationToken::new(),
        approvals,
    }
}

async fn ok(set: &ToolSet, c: &ToolContext, tool: &str, args: Value) -> Value {
    let out = set.invoke(c, tool, &args).await;
    out.result.unwrap_or_else(|e| panic!("{tool} {args}: {e}"))
}

async fn err(set: &ToolSet, c: &ToolContext, tool: &str, args: Value) -> ToolError {
    let out = set.invoke(c, tool, &args).await;
    out.result.expect_err(&format!("{tool} {args} should fail"))
}

fn rule(ops: &[Operation], paths: &[&str], mode: Mode) -> PermissionRule {
    PermissionRule { operations: ops.to_vec(), paths: paths.iter().map(|s| s.to_string()).collect(), mode }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traversal_corpus_never_escapes_the_job() {
    let e = env().await;
    let set = tools(&e.files, vec![], Mode::Allow);
    let (job, other) = (JobId::new(), JobId::new());
    let c = ctx(job, None);
    let long = format!("/{}", "n".repeat(10_000));
    let corpus = [
        "../escape",
        "/../escape",
        "/a/../../escape",
        "/..",
        "escape",
        "./escape",
        "/%2e%2e/escape",
        "/a/%2e%2e%2f%2e%2e%2fescape",
        "/%252e%252e/escape",
        "/a%00b",
        "/a\0b",
        "/a\\..\\escape",
        "/\u{FF0E}\u{FF0E}/escape",
        "/a\u{2215}..\u{2215}escape",
        &long,
        "",
    ];
    for path in corpus {
        for (tool, args) in [
            ("write_file", json!({"path": path, "content": "x"})),
            ("read_file", json!({"path": path})),
            ("ls", json!({"path": path})),
            ("edit_file", json!({"path": path, "old": "x", "new": "y"})),
            ("grep", json!({"pattern": "x", "path": path})),
        ] {
            let e = err(&set, &c, tool, args).await;
            assert_eq!(e.kind, ErrorKind::Validation, "{tool} {path:?}: {e}");
            assert!(e.message.starts_with("invalid path"), "{tool} {path:?}: {e}");
        }
    }
    // Legal but odd names stay inside the job.
    for path in ["/a/./b", "//c", "/.../d", "/é t/f"] {
        ok(&set, &c, "write_file", json!({"path": path, "content": "inside"})).await;
    }
    ok(&set, &ctx(other, None), "write_file", json!({"path": "/theirs", "content": "other job"})).await;

    // Zero escapes: every object in the bucket belongs to one of the two jobs,
    // and each job sees only its own files.
    let raw = flotilla_testkit::RawNats::connect(&NatsConfig { url: e.nats.url(), ..Default::default() }).await;
    let store = raw.js.get_object_store(e.bus.subjects.files_bucket()).await.unwrap();
    let names: Vec<String> = store.list().await.unwrap().map(|i| i.unwrap().name).collect().await;
    assert_eq!(names.len(), 5, "{names:?}");
    for n in &names {
        assert!(n.starts_with(&format!("{job}/")) || n.starts_with(&format!("{other}/")), "{n}");
    }
    let mine: Vec<String> = e.files.list(&job).await.unwrap().into_iter().map(|f| f.path.to_string()).collect();
    assert_eq!(mine, ["/.../d", "/a/b", "/c", "/é t/f"]);
    let listed = ok(&set, &c, "glob", json!({"pattern": "/**"})).await;
    assert!(!listed.to_string().contains("theirs"), "{listed}");
    assert_eq!(
        ok(&set, &ctx(other, None), "read_file", json!({"path": "/theirs"})).await,
        json!("     1\tother job\n")
    );
    let e2 = err(&set, &c, "read_file", json!({"path": "/theirs"})).await;
    assert_eq!(e2.kind, ErrorKind::NotFound);
}

/// Approves, rejects or edits, as the approvals engineer's gate would.
struct Gate(&'static str);
#[async_trait]
impl ApprovalGate for Gate {
    async fn approve(&self, _ctx: &ToolContext, tool: &str, args: &Value) -> Result<Value, ToolError> {
        match self.0 {
            "approve" => Ok(args.clone()),
            "edit-to-denied" => {
                let mut a = args.clone();
                a["path"] = json!("/secrets/key");
                Ok(a)
            }
            _ => Err(ToolError::new(ErrorKind::Permission, format!("{tool} rejected by a person"))),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permission_matrix() {
    use Operation::{Read, Write};
    let e = env().await;
    let job = JobId::new();
    let admin = tools(&e.files, vec![], Mode::Allow);
    let c = ctx(job, None);
    for p in ["/secrets/key", "/secrets/public/readme", "/reports/q2.md", "/notes.md", "/deep/x/y.md"] {
        ok(&admin, &c, "write_file", json!({"path": p, "content": format!("content of {p}\nneedle")})).await;
    }
    let set = tools(
        &e.files,
        vec![
            rule(&[Read, Write], &["/secrets/public/**"], Mode::Allow), // first match wins over the next rule
            rule(&[Read, Write], &["/secrets/**"], Mode::Deny),
            rule(&[Write], &["/reports/**"], Mode::Interrupt),
            rule(&[Read], &["/reports/**"], Mode::Interrupt),
        ],
        Mode::Allow,
    );

    // allow
    ok(&set, &c, "read_file", json!({"path": "/notes.md"})).await;
    // first match wins: /secrets/public is readable although /secrets/** is denied
    ok(&set, &c, "read_file", json!({"path": "/secrets/public/readme"})).await;
    // deny, for every tool, leaking no other path
    for (tool, args) in [
        ("read_file", json!({"path": "/secrets/key"})),
        ("write_file", json!({"path": "/secrets/new", "content": "x"})),
        ("edit_file", json!({"path": "/secrets/key", "old": "needle", "new": "pin"})),
        ("ls", json!({"path": "/secrets/key"})),
        ("grep", json!({"pattern": "needle", "path": "/secrets/key"})),
    ] {
        let e = err(&set, &c, tool, args.clone()).await;
        assert_eq!(e.kind, ErrorKind::Permission, "{tool}: {e}");
        let asked = args["path"].as_str().unwrap();
        assert!(e.message.contains(asked), "{e}");
        for other in ["/secrets/public", "/reports", "/notes"] {
            assert!(!e.message.contains(other), "{tool} leaked {other}: {e}");
        }
    }
    // listings leave denied files out silently
    let ls = ok(&set, &c, "ls", json!({"path": "/secrets"})).await;
    assert_eq!(ls["entries"], json!([{"path": "/secrets/public/", "dir": true}]), "{ls}");
    let globbed = ok(&set, &c, "glob", json!({"pattern": "/**"})).await.to_string();
    assert!(!globbed.contains("/secrets/key") && globbed.contains("/notes.md"), "{globbed}");
    let grepped = ok(&set, &c, "grep", json!({"pattern": "needle"})).await;
    assert_eq!(grepped["files"], json!(["/deep/x/y.md", "/notes.md", "/secrets/public/readme"]), "{grepped}");

    // interrupt without a gate: a permission error that says why
    let e1 = err(&set, &c, "write_file", json!({"path": "/reports/q3.md", "content": "x"})).await;
    assert_eq!(e1.kind, ErrorKind::Permission);
    assert!(e1.message.contains("needs human approval") && e1.message.contains("no approval gate"), "{e1}");
    // interrupt with a gate: approved runs, rejected is the gate's error, an edit into a denied path stays denied
    let approve = ctx(job, Some(Arc::new(Gate("approve"))));
    assert_eq!(
        ok(&set, &approve, "write_file", json!({"path": "/reports/q3.md", "content": "x"})).await,
        json!("created /reports/q3.md (1 bytes)")
    );
    ok(&set, &approve, "read_file", json!({"path": "/reports/q2.md"})).await;
    let reject = ctx(job, Some(Arc::new(Gate("reject"))));
    let e2 = err(&set, &reject, "read_file", json!({"path": "/reports/q2.md"})).await;
    assert!(e2.message.contains("rejected by a person"), "{e2}");
    let edit = ctx(job, Some(Arc::new(Gate("edit-to-denied"))));
    let e3 = err(&set, &edit, "read_file", json!({"path": "/reports/q2.md"})).await;
    assert_eq!(e3.kind, ErrorKind::Permission);
    // grep over the tree skips interrupt-guarded content without asking
    assert!(!grepped.to_string().contains("/reports/"), "{grepped}");

    // default deny: only the allowed subtree, for reads only
    let strict = tools(&e.files, vec![rule(&[Read], &["/deep/**"], Mode::Allow)], Mode::Deny);
    ok(&strict, &c, "read_file", json!({"path": "/deep/x/y.md"})).await;
    assert_eq!(err(&strict, &c, "read_file", json!({"path": "/notes.md"})).await.kind, ErrorKind::Permission);
    assert_eq!(
        err(&strict, &c, "write_file", json!({"path": "/deep/x/z.md", "content": "x"})).await.kind,
        ErrorKind::Permission
    );
    let ls = ok(&strict, &c, "ls", json!({})).await;
    assert_eq!(ls["entries"], json!([{"path": "/deep/", "dir": true}]), "{ls}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn builtin_tools_behave_as_documented() {
    let e = env().await;
    let set = tools(&e.files, vec![], Mode::Allow);
    let c = ctx(JobId::new(), None);
    assert_eq!(
        ok(&set, &c, "write_file", json!({"path": "/a.md", "content": "one\ntwo\ntwo\n"})).await,
        json!("created /a.md (12 bytes)")
    );
    assert_eq!(
        ok(&set, &c, "write_file", json!({"path": "/a.md", "content": "one\ntwo\ntwo\n"})).await,
        json!("overwrote /a.md (12 bytes)")
    );
    // edit_file: zero and several matches are errors that say which
    let none = err(&set, &c, "edit_file", json!({"path": "/a.md", "old": "three", "new": "3"})).await;
    assert!(none.message.contains("not found"), "{none}");
    let many = err(&set, &c, "edit_file", json!({"path": "/a.md", "old": "two", "new": "2"})).await;
    assert!(many.message.contains("occurs 2 times"), "{many}");
    ok(&set, &c, "edit_file", json!({"path": "/a.md", "old": "two", "new": "2", "replace_all": true})).await;
    ok(&set, &c, "edit_file", json!({"path": "/a.md", "old": "one", "new": "1"})).await;
    assert_eq!(ok(&set, &c, "read_file", json!({"path": "/a.md"})).await, json!("     1\t1\n     2\t2\n     3\t2\n"));
    // read_file pages and says where to continue
    let text: String = (1..=50).map(|i| format!("row {i}\n")).collect();
    ok(&set, &c, "write_file", json!({"path": "/t/rows.txt", "content": text})).await;
    let page = ok(&set, &c, "read_file", json!({"path": "/t/rows.txt", "offset": 10, "limit": 2})).await;
    assert_eq!(page, json!("    11\trow 11\n    12\trow 12\n[lines 11-12 of 50; continue with offset=12]"));
    let past = err(&set, &c, "read_file", json!({"path": "/t/rows.txt", "offset": 50})).await;
    assert!(past.message.contains("past the end"), "{past}");
    // binary detection
    e.files.write(&c.job_id, &FilePath::parse("/bin.dat").unwrap(), &[0x89, b'P', 0, 1, 2]).await.unwrap();
    let bin = err(&set, &c, "read_file", json!({"path": "/bin.dat"})).await;
    assert!(bin.message.contains("binary file (5 bytes)"), "{bin}");
    // size limit
    let big = "x".repeat(4 * 1024 * 1024 + 1);
    let too_big = err(&set, &c, "write_file", json!({"path": "/big", "content": big})).await;
    assert_eq!(too_big.kind, ErrorKind::Limit, "{too_big}");
    // ls, glob, grep modes and the truncated flag
    let ls = ok(&set, &c, "ls", json!({"path": "/"})).await;
    assert_eq!(
        ls["entries"],
        json!([{"path": "/a.md", "size": 6}, {"path": "/bin.dat", "size": 5}, {"path": "/t/", "dir": true}])
    );
    assert_eq!(ok(&set, &c, "glob", json!({"pattern": "**/*.txt"})).await["paths"], json!(["/t/rows.txt"]));
    assert_eq!(ok(&set, &c, "glob", json!({"pattern": "*.txt"})).await["paths"], json!([]), "* stays in /");
    let content =
        ok(&set, &c, "grep", json!({"pattern": "^row 4\\d$", "output_mode": "content", "glob": "*.txt"})).await;
    assert_eq!(content["matches"].as_array().unwrap().len(), 10);
    assert_eq!(content["matches"][0], json!({"path": "/t/rows.txt", "line": 40, "text": "row 40"}));
    assert_eq!(content["truncated"], json!(false));
    let count = ok(&set, &c, "grep", json!({"pattern": "row", "output_mode": "count"})).await;
    assert_eq!(count["counts"], json!([{"path": "/t/rows.txt", "count": 50}]));
    let many: String = (0..500).map(|i| format!("hit {i}\n")).collect();
    ok(&set, &c, "write_file", json!({"path": "/t/hits.txt", "content": many})).await;
    let capped = ok(&set, &c, "grep", json!({"pattern": "hit", "output_mode": "content"})).await;
    assert_eq!(capped["matches"].as_array().unwrap().len(), 200);
    assert_eq!(capped["truncated"], json!(true));
    let bad = err(&set, &c, "grep", json!({"pattern": "("})).await;
    assert!(bad.message.contains("invalid regex"), "{bad}");

    // Prompt cost (DESIGN.md performance targets): the schemas stay small.
    let chars = |names: &[&str]| -> usize {
        set.specs()
            .iter()
            .filter(|s| names.contains(&s.name.as_str()))
            .map(|s| serde_json::to_string(s).unwrap().len())
            .sum()
    };
    let (read_only, all) = (chars(builtin::READ_ONLY), chars(builtin::ALL));
    println!(
        "built-in tool specs: read-only {read_only} chars (~{} tokens), all six {all} chars (~{} tokens)",
        read_only / 4,
        all / 4
    );
    assert!(read_only <= 1400 && all <= 2200, "specs grew: {read_only} / {all} chars");
}

/// A custom tool that returns `size` bytes of numbered lines and records the
/// idempotency key it was given.
struct Big {
    size: usize,
    seen_key: std::sync::Mutex<Option<String>>,
}
#[async_trait]
impl Tool for Big {
    fn spec(&self) -> ToolSpec {
        ToolSpec { name: "big".into(), description: "big".into(), input_schema: json!({"type": "object"}) }
    }
    async fn call(&self, ctx: &ToolContext, _args: Value) -> Result<Value, ToolError> {
        *self.seen_key.lock().unwrap() = Some(ctx.idempotency_key.clone());
        Ok(Value::String(big_text(self.size)))
    }
}

fn big_text(size: usize) -> String {
    let mut s = String::with_capacity(size + 64);
    let mut i = 0;
    while s.len() < size {
        s.push_str(&format!("record {i:06} value {}\n", i * 7));
        i += 1;
    }
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_1mb_result_is_evicted_and_read_back() {
    let e = env().await;
    let mut set = tools(&e.files, vec![], Mode::Allow);
    let big = Arc::new(Big { size: 1_000_000, seen_key: Default::default() });
    set.add(big.clone(), "custom").unwrap();
    set.set_eviction(Eviction {
        files: e.files.clone(),
        max_bytes: FilesConfig::default().large_result_bytes().unwrap(),
        exempt: builtin::READ_ONLY.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>(),
    });
    let c = ctx(JobId::new(), None);
    let out = set.invoke(&c, "big", &json!({})).await;
    // Custom tools receive the idempotency key `<task>:<call id>`.
    assert_eq!(big.seen_key.lock().unwrap().as_deref(), Some(format!("{}:call_1", c.task_id.unwrap()).as_str()));
    let text = out.to_model_text();
    assert!(text.len() < 4000, "the model reads a reference, not 1 MB ({} bytes)", text.len());
    let value = out.result.unwrap();
    let reference: FileRef = serde_json::from_value(value["evicted"].clone()).unwrap();
    let original = big_text(1_000_000);
    assert_eq!(reference.path, format!("/large_tool_results/{}/call_1", c.task_id.unwrap()));
    assert_eq!(reference.size_bytes, original.len() as u64);
    assert_eq!(reference.lines, original.lines().count() as u64);
    assert_eq!(reference.sha256, sha256_hex(original.as_bytes()));
    assert!(reference.head.starts_with("record 000000 value 0\n"));
    assert!(original.ends_with(&reference.tail) && !reference.tail.is_empty());

    // Read back with read_file (paged) and grep, as the model would.
    let last = reference.lines as usize;
    let page = ok(&set, &c, "read_file", json!({"path": reference.path, "offset": last - 2, "limit": 10})).await;
    let expect_last = original.lines().last().unwrap();
    assert!(page.as_str().unwrap().ends_with(&format!("{last:>6}\t{expect_last}\n")), "{page}");
    let hit = ok(
        &set,
        &c,
        "grep",
        json!({"pattern": "^record 031337 ", "path": "/large_tool_results", "output_mode": "content"}),
    )
    .await;
    assert_eq!(hit["matches"], json!([{"path": reference.path, "line": 31338, "text": "record 031337 value 219359"}]));
    // The whole file round-trips byte for byte.
    let stored = e.files.read(&c.job_id, &FilePath::parse(&reference.path).unwrap()).await.unwrap();
    assert_eq!(sha256_hex(&stored), reference.sha256);
    // Small results are left alone.
    let small = Arc::new(Big { size: 100, seen_key: Default::default() });
    let mut s2 = ToolSet::new(Duration::from_secs(5));
    s2.add(small, "custom").unwrap();
    s2.set_eviction(Eviction { files: e.files.clone(), max_bytes: 80_000, exempt: BTreeSet::new() });
    assert!(s2.invoke(&c, "big", &json!({})).await.result.unwrap().is_string());
}
