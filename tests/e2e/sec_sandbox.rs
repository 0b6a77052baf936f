//! The `execute` sandbox's resource and information boundaries: each test
//! replays an attack through real worker processes and the real bubblewrap
//! sandbox (docs/SANDBOX.md "Limits", "Users", "What a command can see").
//! The sandbox sections keep their defaults, so what is shown is what an
//! operator gets.

use std::path::{Path, PathBuf};

use flotilla_config::SandboxConfig;
use flotilla_protocol::ids::{JobId, Tenant};
use flotilla_protocol::{
    ApiReply, JobRecord, JobStatus, MAX_TASKS_PAGE, SCHEMA_VERSION, StatusRequest, SubmitReply, SubmitRequest,
};
use flotilla_testkit::{EventLog, TempDir, TestConfig};
use serde_json::Value;

use flotilla_testkit::{Deployment, TIMEOUT};

/// A planner that hands the job to the subagent type named by its input
/// (`hog` or else `shell`) once and answers with its report.
const PLANNER: &str = r#"
[[turns]]
[[turns.calls]]
tool = "task"
args = '{"subagent_type": "{% if "hog" in input %}hog{% else %}shell{% endif %}", "description": "go"}'
[[turns]]
content = "done"
"#;

/// `s` as a TOML basic string.
fn toml_string(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// A subagent that runs each of `commands` with `execute` (in one turn) and
/// answers with the results as a JSON list.
fn script(commands: &[&str], timeout: Option<u64>) -> String {
    let mut s = String::from("[[turns]]\n");
    for c in commands {
        let mut args = serde_json::json!({ "command": c });
        if let Some(t) = timeout {
            args["timeout"] = t.into();
        }
        s.push_str(&format!("[[turns.calls]]\ntool = \"execute\"\nargs = {}\n", toml_string(&args.to_string())));
    }
    s.push_str(
        "[[turns]]\ncontent = \"[{% for r in last %}{% if not loop.first %},{% endif %}{% if r.ok %}{{ r.value | tojson }}{% else %}{{ {'error': r.error} | tojson }}{% endif %}{% endfor %}]\"\n",
    );
    s
}

/// A `[subagents.<ty>]` section with a default sandbox under `root`.
fn section(ty: &str, root: &Path) -> String {
    format!(
        "[subagents.{ty}]\ndescription = \"Runs commands.\"\nmodel = \"{ty}\"\ntool_timeout = 250\n\
         [subagents.{ty}.sandbox]\nscratch_root = \"{}\"\n",
        root.display()
    )
}

async fn submit(d: &Deployment, tenant: &Tenant, input: &str) -> JobId {
    let req = SubmitRequest { v: SCHEMA_VERSION, input: input.into(), files: vec![], subagent_type: None };
    flotilla_testkit::eventually(TIMEOUT, "the orchestrator to accept a job", || {
        let req = req.clone();
        async move {
            let r: Result<ApiReply<SubmitReply>, _> =
                d.bus.request(tenant, "submit", &req, std::time::Duration::from_secs(5)).await;
            r.ok().map(|r| r.into_result().expect("submit refused").job_id)
        }
    })
    .await
}

/// The finished job's only task report, parsed as the JSON list of results.
async fn results(d: &Deployment, tenant: &Tenant, job: JobId) -> Vec<Value> {
    let req = StatusRequest {
        v: SCHEMA_VERSION,
        job_id: job,
        tasks_limit: Some(MAX_TASKS_PAGE),
        tasks_after: None,
        tasks_filter: None,
    };
    let r: ApiReply<JobRecord> =
        d.bus.request(tenant, "status", &req, std::time::Duration::from_secs(10)).await.expect("status");
    let rec = r.into_result().expect("status refused");
    assert_eq!(rec.status, JobStatus::Completed, "{rec:?}");
    let summary = &rec.tasks[0].summary;
    serde_json::from_str(summary).unwrap_or_else(|_| panic!("not a JSON list: {summary}"))
}

/// Runs one job of `tenant` and returns its results.
async fn run(d: &Deployment, tenant: &Tenant, input: &str) -> Vec<Value> {
    let mut log = EventLog::subscribe(&d.raw.client, &format!("flotilla.job.{tenant}.>")).await;
    let job = submit(d, tenant, input).await;
    assert_eq!(log.job_end(TIMEOUT).await["event"], "completed");
    results(d, tenant, job).await
}

fn config(url: &str, root: &Path, shell: &str, hog: Option<&str>) -> TestConfig {
    let mut c = TestConfig::new(url);
    c.scripted_model("planner", PLANNER).scripted_model("shell", shell);
    let mut sections = format!("[planner]\nmodel = \"planner\"\ntask_timeout = 300\n{}", section("shell", root));
    if let Some(hog) = hog {
        c.scripted_model("hog", hog);
        sections.push_str(&section("hog", root));
    }
    c.section(&sections);
    c
}

fn stderr(r: &Value) -> &str {
    r["stderr"].as_str().unwrap_or_default()
}

/// `/dev` was bubblewrap's writable tmpfs of half the host's RAM (600 MB went
/// to `/dev/shm` under a 512 MB `memory_mb`) and `/tmp` had no inode cap.
/// Each write below passes a default limit by a bounded amount and fails;
/// `/dev/null` and writes within the limits still work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_shm_dev_and_tmp_writes_stop_at_their_limits() {
    let root = TempDir::new("sec-sbx-tmpfs");
    let sb = SandboxConfig::default();
    let (shm, tmp, inodes) = (sb.shm_mb, sb.tmp_mb, sb.tmp_inodes);
    // Each file stays under file_size_mb (RLIMIT_FSIZE), so only the filesystem can refuse.
    assert!(shm + 4 < sb.file_size_mb && tmp / 2 + 4 < sb.file_size_mb);
    let commands = [
        format!(
            "head -c {}M /dev/zero > /dev/shm/small && echo small-ok && head -c {}M /dev/zero > /dev/shm/big",
            shm / 2,
            shm + 4
        ),
        "echo x > /dev/null && echo null-ok && echo x > /dev/planted".to_string(),
        format!("head -c {0}M /dev/zero > /tmp/a && echo a-ok && head -c {0}M /dev/zero > /tmp/b", tmp / 2 + 4),
        format!(
            "i=0; while [ $i -lt {} ]; do printf '' > /tmp/f$i || break; i=$((i+1)); done; echo $i; test $i -lt {}",
            inodes + 100,
            inodes + 100
        ),
    ];
    let shell = script(&commands.iter().map(String::as_str).collect::<Vec<_>>(), None);
    let d = Deployment::start(1, |url| config(url, root.path(), &shell, None)).await;
    let r = run(&d, &Tenant::default(), "go").await;
    assert_eq!(r.len(), 4, "{r:?}");
    // /dev/shm: usable, and full at shm_mb.
    assert_eq!(r[0]["stdout"], "small-ok\n", "{}", r[0]);
    assert!(r[0]["exit_code"] != 0 && stderr(&r[0]).contains("No space left on device"), "{}", r[0]);
    // /dev itself: read-only, its devices still work.
    assert_eq!(r[1]["stdout"], "null-ok\n", "{}", r[1]);
    assert!(r[1]["exit_code"] != 0 && stderr(&r[1]).contains("Read-only file system"), "{}", r[1]);
    // /tmp bytes: full at tmp_mb.
    assert_eq!(r[2]["stdout"], "a-ok\n", "{}", r[2]);
    assert!(r[2]["exit_code"] != 0 && stderr(&r[2]).contains("No space left on device"), "{}", r[2]);
    // /tmp inodes: full at tmp_inodes (its root dir is one of them).
    let created: u64 = r[3]["stdout"].as_str().unwrap_or_default().trim().parse().expect("a count");
    assert_eq!(r[3]["exit_code"], 0, "the loop stopped before its end: {}", r[3]);
    assert!(created + 1 >= inodes / 2 && created < inodes, "{created} files of {inodes} inodes: {}", r[3]);
    assert!(stderr(&r[3]).contains("No space left on device"), "{}", r[3]);
}

/// The hog forks until `RLIMIT_NPROC` stops it, writes `<uid> <forks>` to
/// `/scratch/held`, and holds every process until the test writes to the
/// FIFO `/scratch/go`. Only shell builtins and python: nothing forks after
/// the limit is reached.
const HOG: &str = r#"cat > /tmp/hog.py <<'PY'
import os, signal
os.mkfifo('/scratch/go')
n, why = 0, ''
while True:
    try:
        pid = os.fork()
    except OSError as e:
        why = e.strerror
        break
    if pid == 0:
        signal.pause()
        os._exit(0)
    n += 1
with open('/scratch/held.part', 'w') as f:
    f.write('%d %d' % (os.getuid(), n))
os.rename('/scratch/held.part', '/scratch/held')
open('/scratch/go').read()
print('held', n, why)
PY
python3 /tmp/hog.py"#;

/// `<uid> <forks>` the hog wrote, and the FIFO it waits on, once it holds.
fn held(root: &Path) -> Option<((u32, u64), PathBuf)> {
    for private in std::fs::read_dir(root).ok()?.flatten() {
        for task in std::fs::read_dir(private.path()).ok()?.flatten() {
            let Ok(text) = std::fs::read_to_string(task.path().join("held")) else { continue };
            let (uid, n) = text.split_once(' ')?;
            return Some(((uid.parse().ok()?, n.parse().ok()?), task.path().join("go")));
        }
    }
    None
}

/// Every sandbox ran as uid 65534, so `RLIMIT_NPROC` counted all tenants'
/// commands together: one tenant's command holding its processes made the
/// next tenant's `execute` fail ("Creating new namespace failed"). Now each
/// running task has a uid of its own (two worker processes, two subagent
/// types: the leases are host-wide), and the other tenant's command runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_tenant_at_its_process_limit_does_not_stop_another_tenants_execute() {
    let root = TempDir::new("sec-sbx-nproc");
    let sb = SandboxConfig::default();
    let (hog, probe) = (script(&[HOG], Some(240)), script(&["id -u && echo ran"], None));
    let d = Deployment::start(2, |url| config(url, root.path(), &probe, Some(&hog))).await;
    let (acme, globex) = (Tenant::new("acme").unwrap(), Tenant::new("globex").unwrap());
    let mut acme_log = EventLog::subscribe(&d.raw.client, "flotilla.job.acme.>").await;
    let hog_job = submit(&d, &acme, "hog").await;
    let ((hog_uid, forks), go) =
        flotilla_testkit::eventually(TIMEOUT, "the hog to hold its processes", || async { held(root.path()) }).await;
    assert!(forks > sb.max_processes / 2 && forks < sb.max_processes, "{forks} of {}", sb.max_processes);

    let r = run(&d, &globex, "probe").await;
    let released = tokio::task::spawn_blocking(move || std::fs::write(go, "go"));
    assert_eq!(r[0]["exit_code"], 0, "the other tenant's execute failed: {}", r[0]);
    let lines: Vec<&str> = r[0]["stdout"].as_str().unwrap_or_default().lines().collect();
    assert_eq!(lines.get(1), Some(&"ran"), "{}", r[0]);
    let probe_uid: u32 = lines[0].parse().unwrap();
    assert_ne!(probe_uid, hog_uid, "the two tenants' commands ran as one uid");
    let (first, count) = sb.uids().unwrap();
    for uid in [hog_uid, probe_uid] {
        assert!((first..first + count).contains(&uid), "uid {uid} outside uid_range {}", sb.uid_range);
    }

    released.await.unwrap().unwrap();
    assert_eq!(acme_log.job_end(TIMEOUT).await["event"], "completed");
    let r = results(&d, &acme, hog_job).await;
    let out = r[0]["stdout"].as_str().unwrap_or_default();
    assert!(out.starts_with(&format!("held {forks} Resource temporarily unavailable")), "{}", r[0]);
}

/// pid 1 of the sandbox is bubblewrap's reaper, a copy of bubblewrap with
/// its command line: it showed the scratch dir's host path and every
/// setting. Now bubblewrap reads its options from a memfd; pid 1's command
/// line and environment name no host path, and neither do `/tmp` and
/// `/dev/shm` in the mount table (the residue is in docs/SANDBOX.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pid_1_shows_no_host_paths_or_settings() {
    let root = TempDir::new("sec-sbx-pid1");
    let commands = [
        "tr '\\0' ' ' < /proc/1/cmdline",
        "tr '\\0' ' ' < /proc/1/environ; echo end",
        "grep -E ' /(tmp|dev/shm) ' /proc/self/mountinfo",
    ];
    let shell = script(&commands, None);
    let d = Deployment::start(1, |url| config(url, root.path(), &shell, None)).await;
    let r = run(&d, &Tenant::default(), "go").await;
    let cmdline = r[0]["stdout"].as_str().unwrap_or_default();
    assert!(cmdline.contains("--args 4 -- /bin/sh -c"), "pid 1 is bubblewrap reading a memfd: {}", r[0]);
    let root_path = root.path().display().to_string();
    let run_dir = SandboxConfig::default().run_dir.display().to_string();
    for (what, text) in [("cmdline", cmdline), ("mounts", r[2]["stdout"].as_str().unwrap_or_default())] {
        for secret in [root_path.as_str(), run_dir.as_str(), "--ro-bind", "--seccomp", "--size", "flotilla-sandbox"] {
            assert!(!text.contains(secret), "{what} shows {secret}: {text}");
        }
    }
    assert_eq!(r[1]["stdout"], "end\n", "pid 1's environment is empty: {}", r[1]);
    assert_eq!(r[2]["stdout"].as_str().unwrap_or_default().lines().count(), 2, "{}", r[2]);
}
