//! The built-in tools against in-memory job files: each test replays one
//! attack of the security review (docs/TOOLS.md, "Caps" and "Permissions").

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::grep::scan_for_test;
use super::*;
use flotilla_agent::tool::{ApprovalGate, ToolContext};
use flotilla_config::permissions::PermissionRule;
use flotilla_job_files::{MemoryBackend, ObjectBackend};
use flotilla_protocol::ids::{JobId, TaskId};

const CAP: u64 = 16 * 1024 * 1024;

struct Fixture {
    files: JobFiles,
    backend: Arc<MemoryBackend>,
    env: Arc<FileToolEnv>,
    job: JobId,
}

fn fixture(rules: &[PermissionRule]) -> Fixture {
    let backend = Arc::new(MemoryBackend::default());
    let files = JobFiles::new(backend.clone(), CAP);
    let permissions = Permissions::compile(rules, Mode::Allow).unwrap();
    Fixture { env: Arc::new(FileToolEnv { files: files.clone(), permissions }), files, backend, job: JobId::new() }
}

fn rule(ops: &[Operation], path: &str, mode: Mode) -> PermissionRule {
    PermissionRule { operations: ops.to_vec(), paths: vec![path.into()], mode }
}

fn ctx(job: JobId, approvals: Option<Arc<dyn ApprovalGate>>) -> ToolContext {
    ToolContext {
        job_id: job,
        task_id: Some(TaskId::new()),
        tenant: Default::default(),
        call_id: "call_1".into(),
        idempotency_key: "k".into(),
        traceparent: None,
        cancel: CancellationToken::new(),
        approvals,
    }
}

impl Fixture {
    async fn put(&self, path: &str, text: &str) {
        self.files.write(&self.job, &FilePath::parse(path).unwrap(), text.as_bytes()).await.unwrap();
    }

    async fn call(&self, c: &ToolContext, name: &str, args: Value) -> Result<Value, ToolError> {
        tool(name, &self.env).unwrap().call(c, args).await
    }

    async fn run(&self, name: &str, args: Value) -> Result<Value, ToolError> {
        self.call(&ctx(self.job, None), name, args).await
    }
}

/// Counts questions; approves or rejects; may write a file while a person "thinks".
struct Gate {
    asked: AtomicUsize,
    approve: bool,
}

#[async_trait]
impl ApprovalGate for Gate {
    async fn approve(&self, _: &ToolContext, _: &str, args: &Value) -> Result<Value, ToolError> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        if self.approve { Ok(args.clone()) } else { Err(ToolError::new(ErrorKind::Permission, "rejected by a person")) }
    }
}

fn gate(approve: bool) -> Arc<Gate> {
    Arc::new(Gate { asked: AtomicUsize::new(0), approve })
}

/// 200 KB of "a", old = "a", a 20 KB `new` would be 4.1 GB.
#[tokio::test]
async fn edit_replace_all_refuses_an_oversized_result_before_building_it() {
    let f = fixture(&[]);
    f.put("/big.txt", &"a".repeat(200_000)).await;
    let new = "b".repeat(20_000);
    let e =
        f.run("edit_file", json!({"path": "/big.txt", "old": "a", "new": new, "replace_all": true})).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Validation, "{e:?}");
    assert!(e.message.contains("4000000000 bytes") && e.message.contains(&format!("{CAP} bytes")), "{e:?}");
    let text = f.files.read(&f.job, &FilePath::parse("/big.txt").unwrap()).await.unwrap();
    assert_eq!(text.len(), 200_000, "the file is untouched");
    // Under the cap the same edit runs.
    f.put("/small.txt", "a-a").await;
    let ok = f.run("edit_file", json!({"path": "/small.txt", "old": "a", "new": "bb", "replace_all": true})).await;
    assert_eq!(ok.unwrap(), json!("edited /small.txt: 2 replacement(s)"));
}

#[tokio::test]
async fn reserved_dirs_refuse_agent_writes_and_name_the_prefix() {
    let f = fixture(&[]);
    let path = FilePath::parse("/large_tool_results/t1/report").unwrap();
    f.files.write_reserved(&f.job, &path, b"the real report\n").await.unwrap();
    for (name, args) in [
        ("write_file", json!({"path": "/large_tool_results/x", "content": "forged"})),
        ("write_file", json!({"path": "//large_tool_results/./t1/report", "content": "forged"})),
        ("edit_file", json!({"path": "/large_tool_results/t1/report", "old": "real", "new": "forged"})),
    ] {
        let e = f.run(name, args.clone()).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::Permission, "{name} {args}: {e:?}");
        assert!(e.message.contains("/large_tool_results is reserved"), "{e:?}");
    }
    // Even an approved interrupt cannot write there.
    let f2 = fixture(&[rule(&[Operation::Write], "/**", Mode::Interrupt)]);
    let g = gate(true);
    let e = f2
        .call(&ctx(f2.job, Some(g.clone())), "write_file", json!({"path": "/large_tool_results/x", "content": "x"}))
        .await
        .unwrap_err();
    assert_eq!((e.kind, g.asked.load(Ordering::SeqCst)), (ErrorKind::Permission, 0), "refused before asking");
    // Reading it back is fine; a name that only starts alike is not reserved.
    let page = f.run("read_file", json!({"path": "/large_tool_results/t1/report"})).await.unwrap();
    assert!(page.as_str().unwrap().contains("the real report"), "{page}");
    f.run("write_file", json!({"path": "/large_tool_results_mine/x", "content": "ok"})).await.unwrap();
}

#[tokio::test]
async fn tampered_report_is_an_error_for_every_reader() {
    let f = fixture(&[]);
    let path = FilePath::parse("/large_tool_results/t1/report").unwrap();
    f.files.write_reserved(&f.job, &path, b"the real report\n").await.unwrap();
    // Rewrite the object behind the runtime's back, keeping its metadata, as
    // anyone with raw access to the bucket could.
    let name = JobFiles::object_name(&f.job, &path);
    let (_, metadata) = f.backend.get(&name, CAP).await.unwrap().unwrap();
    f.backend.put(&name, b"the forged report\n", metadata).await.unwrap();
    let read = f.run("read_file", json!({"path": path.as_str()})).await.unwrap_err();
    assert!(read.message.contains("integrity check"), "{read:?}");
    let grep = f.run("grep", json!({"pattern": "forged", "path": "/large_tool_results"})).await.unwrap_err();
    assert!(grep.message.contains("integrity check"), "{grep:?}");
}

/// A denied path says `permission` whether or not it exists.
#[tokio::test]
async fn ls_of_a_denied_path_does_not_reveal_existence() {
    let f = fixture(&[rule(&[Operation::Read], "/secrets/**", Mode::Deny)]);
    f.put("/secrets/key", "k").await;
    f.put("/secrets/public/x", "x").await;
    for path in ["/secrets/key", "/secrets/nokey"] {
        let e = f.run("ls", json!({"path": path})).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::Permission, "{path}: {e:?}");
        let e = f.run("grep", json!({"pattern": "k", "path": path})).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::Permission, "{path}: {e:?}");
    }
    // A missing path the agent may read is still not_found.
    assert_eq!(f.run("ls", json!({"path": "/nothing"})).await.unwrap_err().kind, ErrorKind::NotFound);
}

/// Edit reads the file, so an interrupt read rule asks.
#[tokio::test]
async fn edit_under_an_interrupt_read_rule_asks_a_person() {
    let f = fixture(&[rule(&[Operation::Read], "/reports/**", Mode::Interrupt)]);
    f.put("/reports/q2.md", "draft").await;
    let args = json!({"path": "/reports/q2.md", "old": "draft", "new": "final"});
    let e = f.run("edit_file", args.clone()).await.unwrap_err();
    assert!(e.message.contains("read of /reports/q2.md needs human approval"), "{e:?}");
    let reject = gate(false);
    f.call(&ctx(f.job, Some(reject.clone())), "edit_file", args.clone()).await.unwrap_err();
    assert_eq!(reject.asked.load(Ordering::SeqCst), 1);
    let approve = gate(true);
    f.call(&ctx(f.job, Some(approve.clone())), "edit_file", args).await.unwrap();
    assert_eq!(approve.asked.load(Ordering::SeqCst), 1, "one question covers the write and the read");
    // Write interrupt + read interrupt: still one question.
    let both = fixture(&[rule(&[Operation::Read, Operation::Write], "/r/**", Mode::Interrupt)]);
    both.put("/r/a", "x").await;
    let g = gate(true);
    both.call(&ctx(both.job, Some(g.clone())), "edit_file", json!({"path": "/r/a", "old": "x", "new": "y"}))
        .await
        .unwrap();
    assert_eq!(g.asked.load(Ordering::SeqCst), 1);
}

/// Grep's decision on an interrupt path does not depend
/// on whether the file exists when it looks, so a file created between a
/// check and the listing cannot be read unapproved.
#[tokio::test]
async fn grep_on_an_interrupt_path_always_asks() {
    let f = fixture(&[rule(&[Operation::Read], "/reports/**", Mode::Interrupt)]);
    let args = json!({"pattern": "secret", "path": "/reports/q3.md", "output_mode": "content"});
    // Not there yet: still asked (before, no question was asked and a file
    // written meanwhile was read as if approved).
    let g = gate(false);
    f.call(&ctx(f.job, Some(g.clone())), "grep", args.clone()).await.unwrap_err();
    assert_eq!(g.asked.load(Ordering::SeqCst), 1);
    f.put("/reports/q3.md", "secret plan").await;
    let g = gate(false);
    f.call(&ctx(f.job, Some(g.clone())), "grep", args.clone()).await.unwrap_err();
    assert_eq!(g.asked.load(Ordering::SeqCst), 1);
    let g = gate(true);
    let found = f.call(&ctx(f.job, Some(g.clone())), "grep", args).await.unwrap();
    assert_eq!(found["matches"][0]["text"], "secret plan", "{found}");
    // Over the directory: interrupt files are skipped without asking.
    let g = gate(true);
    let tree = f.call(&ctx(f.job, Some(g.clone())), "grep", json!({"pattern": "secret"})).await.unwrap();
    assert_eq!((tree["files"].clone(), g.asked.load(Ordering::SeqCst)), (json!([]), 0), "{tree}");
}

/// A pathological pattern over a large file stops at the
/// deadline with `truncated` and a note instead of holding a thread.
#[test]
fn grep_stops_at_the_deadline_with_truncated() {
    let line = "word ".repeat(40);
    let text: String = (0..100_000).map(|i| format!("{i} {line}\n")).collect(); // ~20 MB
    let re = regex::Regex::new(r"(\w+\s+){30}\p{Greek}").unwrap();
    let out = scan_for_test(&re, &text, Instant::now() + Duration::from_millis(20), u64::MAX);
    assert_eq!(out["truncated"], true, "{out}");
    assert!(out["note"].as_str().unwrap().contains("deadline"), "{out}");
}

#[test]
fn grep_stops_at_the_byte_budget_with_truncated() {
    let out = scan_for_test(&regex::Regex::new("x").unwrap(), "x\n", Instant::now() + Duration::from_secs(60), 1);
    assert_eq!(out["truncated"], true, "{out}");
    assert!(out["note"].as_str().unwrap().contains("bytes searched"), "{out}");
}

#[tokio::test]
async fn oversized_patterns_are_validation_errors() {
    let f = fixture(&[]);
    f.put("/a", "a").await;
    let long = "a".repeat(MAX_PATTERN_BYTES + 1);
    for (name, args) in [
        ("grep", json!({"pattern": long})),
        ("glob", json!({"pattern": long})),
        ("grep", json!({"pattern": "a", "glob": long})),
        // Compiles into far more than the regex size cap.
        ("grep", json!({"pattern": r"\w{1000}\w{1000}"})),
    ] {
        let e = f.run(name, args).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::Validation, "{name}: {e:?}");
    }
}

#[tokio::test]
async fn read_file_pages_huge_offsets_and_many_lines() {
    let f = fixture(&[]);
    f.put("/lines", &"\n".repeat(1_000_000)).await;
    let page = f.run("read_file", json!({"path": "/lines", "offset": 999_999, "limit": 2000})).await.unwrap();
    assert!(page.as_str().unwrap().starts_with("1000000\t"), "{page}");
    let e = f.run("read_file", json!({"path": "/lines", "offset": usize::MAX})).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Validation);
}
