//! No tool input may make a worker allocate beyond its caps
//! (docs/TOOLS.md "Caps"): a worker runs under a memory limit, and a call
//! that blows it aborts the process, the task is redelivered and aborts the
//! next replica too.
//!
//! This binary installs a counting global allocator that also refuses any
//! allocation past [`CEILING`] (so a regression fails fast, as under
//! `RLIMIT_AS`, instead of eating the machine), then fuzzes every built-in
//! tool with proptest (valid-shaped and malformed arguments, huge numbers,
//! long strings, costly patterns) against in-memory job files and asserts
//! that no call's peak allocation exceeds [`PER_CALL`] plus the file cap.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use flotilla_agent::tool::ToolContext;
use flotilla_config::permissions::{Mode, Operation, PermissionRule, Permissions};
use flotilla_job_files::{FilePath, JobFiles};
use flotilla_protocol::ErrorKind;
use flotilla_protocol::ids::{JobId, TaskId};
use flotilla_tools::{self as builtin, FileToolEnv};
use proptest::prelude::*;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// Live bytes past which allocations fail (the process aborts).
const CEILING: usize = 1 << 30;
/// The job files' size cap in these tests.
const FILE_CAP: usize = 1 << 20;
/// Peak allocation one call may add, beyond the file cap.
const PER_CALL: usize = 64 << 20;

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
        if live > CEILING {
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
            return std::ptr::null_mut();
        }
        PEAK.fetch_max(live, Ordering::Relaxed);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: `ptr` came from `alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Runs `f` and returns its result with the peak bytes it added.
fn peak_of<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let base = LIVE.load(Ordering::SeqCst);
    PEAK.store(base, Ordering::SeqCst);
    let out = f();
    (out, PEAK.load(Ordering::SeqCst).saturating_sub(base))
}

struct Fixture {
    rt: tokio::runtime::Runtime,
    env: Arc<FileToolEnv>,
    ctx: ToolContext,
}

fn fixture() -> Fixture {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let files = JobFiles::in_memory(FILE_CAP as u64);
    let rules = [PermissionRule {
        operations: vec![Operation::Read, Operation::Write],
        paths: vec!["/secrets/**".into()],
        mode: Mode::Deny,
    }];
    let permissions = Permissions::compile(&rules, Mode::Allow).unwrap();
    let job = JobId::new();
    let seed = [
        ("/a.txt", "a".repeat(200_000)),
        ("/lines.txt", "\n".repeat(FILE_CAP)),
        ("/words.md", "alpha beta gamma\n".repeat(50_000)),
        ("/dir/sub/x.rs", "fn main() {}\n".into()),
        ("/secrets/key", "k".into()),
    ];
    rt.block_on(async {
        for (path, text) in seed {
            files.write(&job, &FilePath::parse(path).unwrap(), text.as_bytes()).await.unwrap();
        }
    });
    let ctx = ToolContext {
        job_id: job,
        task_id: Some(TaskId::new()),
        tenant: Default::default(),
        call_id: "fuzz".into(),
        idempotency_key: "fuzz".into(),
        traceparent: None,
        cancel: CancellationToken::new(),
        approvals: None,
    };
    Fixture { rt, env: Arc::new(FileToolEnv { files, permissions }), ctx }
}

/// One measured call at a time: the counters are process-wide and tests run
/// on parallel threads.
static SERIAL: Mutex<()> = Mutex::new(());

impl Fixture {
    fn call(&self, name: &str, args: Value) -> (Result<Value, flotilla_agent::tool::ToolError>, usize) {
        let tool = builtin::tool(name, &self.env).unwrap();
        let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        peak_of(|| self.rt.block_on(tool.call(&self.ctx, args)))
    }
}

/// The review's case: 200 KB of "a", old = "a", new = 20 KB, replace_all.
/// Before the fix this built a 4 GB string (here: past the ceiling, abort).
#[test]
fn edit_replace_all_blowup_is_refused_and_allocates_little() {
    let f = fixture();
    let args = json!({"path": "/a.txt", "old": "a", "new": "b".repeat(20_000), "replace_all": true});
    let (out, peak) = f.call("edit_file", args);
    let e = out.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Validation, "{e:?}");
    assert!(e.message.contains("4000000000 bytes") && e.message.contains(&format!("{FILE_CAP} bytes")), "{e:?}");
    // The counters are process-wide and the fuzz test's case generation runs
    // on another thread meanwhile: bound it far below the blow-up (4 GB), not
    // at the exact cost of this call.
    assert!(peak < 16 << 20, "peak allocation {peak} bytes");
}

fn path() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(json!("/a.txt")),
        Just(json!("/lines.txt")),
        Just(json!("/words.md")),
        Just(json!("/")),
        Just(json!("/dir")),
        Just(json!("/secrets/key")),
        Just(json!("/large_tool_results/x")),
        "/[a-z]{1,8}(/[a-z.]{1,8}){0,3}".prop_map(Value::from),
        ".{0,40}".prop_map(Value::from),
        Just(json!(42)),
    ]
}

fn text() -> impl Strategy<Value = Value> {
    prop_oneof![
        "[a-z \n]{0,20}".prop_map(Value::from),
        Just(json!("a")),
        Just(json!("\n")),
        (1usize..300_000).prop_map(|n| json!("b".repeat(n))),
        (1usize..3_000_000).prop_map(|n| json!("c".repeat(n))),
    ]
}

fn pattern() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(json!("a")),
        Just(json!(r"(\w+\s+){30}\p{Greek}")),
        Just(json!(r"\w{1000}\w{1000}")),
        Just(json!("(a*)*b")),
        Just(json!("**/*.{rs,md,txt}")),
        Just(json!("{a,{b,{c,{d,{e,f}}}}}*[!x]?")),
        (1usize..5_000).prop_map(|n| json!("(a|b)".repeat(n))),
        ".{0,30}".prop_map(Value::from),
    ]
}

fn number() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(json!(0)),
        Just(json!(u64::MAX)),
        Just(json!(-1)),
        Just(json!(1.5)),
        (0u64..2_000_000).prop_map(Value::from)
    ]
}

/// A tool name and arguments: mostly the right shape, sometimes not.
fn call() -> impl Strategy<Value = (String, Value)> {
    let name = prop::sample::select(builtin::ALL.to_vec()).prop_map(String::from);
    let mode = prop::sample::select(vec!["files_with_matches", "content", "count", "bogus"]);
    (name, path(), text(), text(), pattern(), pattern(), number(), number(), any::<bool>(), mode).prop_map(
        |(name, path, old, new, pat, glob, offset, limit, all, mode)| {
            let args = match name.as_str() {
                "ls" => json!({"path": path}),
                "read_file" => json!({"path": path, "offset": offset, "limit": limit}),
                "write_file" => json!({"path": path, "content": new}),
                "edit_file" => json!({"path": path, "old": old, "new": new, "replace_all": all}),
                "glob" => json!({"pattern": glob}),
                _ => json!({"pattern": pat, "path": path, "glob": glob, "output_mode": mode}),
            };
            (name, args)
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn no_tool_input_allocates_beyond_the_caps((name, args) in call()) {
        let f = fixture();
        // The arguments themselves are the model's, already in memory.
        let input = serde_json::to_string(&args).unwrap().len();
        let (_, peak) = f.call(&name, args);
        prop_assert!(peak <= PER_CALL + FILE_CAP + 4 * input, "{name}: peak {peak} bytes");
    }
}
