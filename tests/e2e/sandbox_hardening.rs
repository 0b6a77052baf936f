//! Security hardening of the `execute` sandbox: each test replays
//! an attack through a real worker process and the real bubblewrap sandbox
//! (docs/SANDBOX.md).

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use flotilla_protocol::JobStatus;
use flotilla_testkit::{EventLog, TempDir, TestConfig, bin};
use serde_json::Value;

use flotilla_testkit::{Deployment, TIMEOUT};

/// A planner that hands the job to `shell` once and then stops.
const PLANNER: &str = r#"
[[turns]]
[[turns.calls]]
tool = "task"
args = '{"subagent_type": "shell", "description": "go"}'
[[turns]]
content = "done"
"#;

/// The `[subagents.shell]` section with `sandbox_extra` in its sandbox.
fn shell_section(root: &Path, sandbox_extra: &str) -> String {
    format!(
        r#"[planner]
model = "planner"
task_timeout = 120
[subagents.shell]
description = "Runs shell commands."
model = "shell"
tools = ["write_file", "execute"]
[subagents.shell.sandbox]
scratch_root = "{}"
{sandbox_extra}
"#,
        root.display()
    )
}

/// Runs the job and returns the shell subagent's answer, parsed as JSON.
async fn run_job(d: &Deployment) -> Value {
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let job = d.submit("go").await;
    assert_eq!(log.job_end(TIMEOUT).await["event"], "completed");
    let rec = d.status(job).await;
    assert_eq!(rec.status, JobStatus::Completed);
    serde_json::from_str(&rec.tasks[0].summary).unwrap_or_else(|_| panic!("not JSON: {}", rec.tasks[0].summary))
}

/// The last turn of a scripted subagent: its last call's result as JSON.
const LAST_AS_JSON: &str = r#"
[[turns]]
content = "{% set r = last[0] %}{% if r.ok %}{{ r.value | tojson }}{% else %}{{ {'error': r.error} | tojson }}{% endif %}"
"#;

/// A command replaces `/scratch/inputs` by a symlink to a host dir; the next
/// `execute` stages job files `/inputs/...` in. Before the fix the worker wrote
/// through the symlink: the host file was overwritten, a host dir created and
/// the host dir handed to uid 65534. Now that call fails with a validation
/// error naming the job path and the symlink, without running its command;
/// the symlink (only the link) is gone, so the retried call stages both files.
/// (`/inputs`, not `/data`: the sanitizer masks paths under host roots such as
/// `/data` in errors, shared/agent/src/sanitize/rules.rs, and the model's
/// view of the message is what is asserted.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn staging_in_never_follows_a_planted_symlink() {
    let (root, host) = (TempDir::new("sbx-symlink-root"), TempDir::new("sbx-symlink-host"));
    std::fs::write(host.path().join("existing.txt"), "original").unwrap();
    let owner_before = std::fs::metadata(host.path()).unwrap().uid();
    let shell = format!(
        r#"
[[turns]]
[[turns.calls]]
tool = "execute"
args = '{{"command": "ln -s {host} /scratch/inputs && echo planted"}}'
[[turns]]
[[turns.calls]]
tool = "write_file"
args = '{{"path": "/inputs/existing.txt", "content": "overwritten"}}'
[[turns.calls]]
tool = "write_file"
args = '{{"path": "/inputs/sub/new.txt", "content": "new"}}'
[[turns]]
[[turns.calls]]
tool = "execute"
args = '{{"command": "echo second > /scratch/ran"}}'
[[turns]]
[[turns.calls]]
tool = "execute"
args = '{{"command": "test ! -e /scratch/ran && test ! -L /scratch/inputs && cat /scratch/inputs/existing.txt /scratch/inputs/sub/new.txt"}}'
[[turns]]
content = "{{{{ {{'blocked': results[3], 'retried': results[4]}} | tojson }}}}"
"#,
        host = host.path().display()
    );
    let d = Deployment::start(1, |url| {
        let mut c = TestConfig::new(url);
        c.scripted_model("planner", PLANNER).scripted_model("shell", &shell);
        c.section(&shell_section(root.path(), r#"stage_in = ["/inputs/**"]"#));
        c
    })
    .await;
    let report = run_job(&d).await;
    let blocked = &report["blocked"];
    assert_eq!(blocked["ok"], false, "the call fails: {report}");
    assert_eq!(blocked["error"]["kind"], "validation", "{report}");
    let why = blocked["error"]["message"].as_str().unwrap_or_default();
    // The link's host target is masked by the sanitizer (the worker's log has it).
    let link = "/scratch/inputs was a symlink to [path] made by an earlier command";
    assert!(why.contains("cannot stage /inputs/existing.txt") && why.contains(link), "{why}");
    assert!(why.contains("was not run") && why.contains("retry"), "says what happened and what to do: {why}");
    // The retry ran (so the worker is alive), the first command did not, and both files were staged.
    let retried = &report["retried"]["value"];
    assert_eq!(retried["exit_code"], 0, "{report}");
    assert_eq!(retried["stdout"], "overwrittennew", "{report}");
    assert_eq!(retried["staged_in"], serde_json::json!(["/inputs/existing.txt", "/inputs/sub/new.txt"]), "{report}");
    assert_eq!(std::fs::read_to_string(host.path().join("existing.txt")).unwrap(), "original");
    let entries: Vec<_> = std::fs::read_dir(host.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(entries, ["existing.txt"], "no new entries in the host dir");
    assert_eq!(std::fs::metadata(host.path()).unwrap().uid(), owner_before, "the host dir keeps its owner");
    assert_eq!(std::fs::metadata(host.path().join("existing.txt")).unwrap().uid(), owner_before);
}

/// A worker started with fd 7 open (as a supervisor or shell may leave it).
struct WorkerWithFd7(Child);

impl WorkerWithFd7 {
    fn spawn(config: &str, fd7_file: &Path, log: &Path) -> Self {
        let out = std::fs::File::create(log).unwrap();
        let child = Command::new("sh")
            .args(["-c", r#"exec "$0" "$@" 7>>"$FD7_FILE""#])
            .arg(bin("flotilla-worker"))
            .args(["--config", config, "--id", "w-fd7", "--grace", "2"])
            .env("FD7_FILE", fd7_file)
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("start the worker");
        Self(child)
    }
}

impl Drop for WorkerWithFd7 {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Before the fix every descriptor the worker inherited reached the command.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inherited_descriptors_do_not_reach_the_sandbox() {
    let (root, files) = (TempDir::new("sbx-fd-root"), TempDir::new("sbx-fd"));
    let fd7 = files.path().join("fd7.txt");
    std::fs::write(&fd7, "").unwrap();
    let shell = format!(
        "[[turns]]\n[[turns.calls]]\ntool = \"execute\"\nargs = '{{\"command\": \"echo x >&7\"}}'\n{LAST_AS_JSON}"
    );
    let d = Deployment::start(0, |url| {
        let mut c = TestConfig::new(url);
        c.scripted_model("planner", PLANNER).scripted_model("shell", &shell);
        c.section(&shell_section(root.path(), ""));
        c
    })
    .await;
    let log = files.path().join("worker.log");
    let _worker = WorkerWithFd7::spawn(&d.config_arg(), &fd7, &log);
    let report = run_job(&d).await;
    let worker_log = std::fs::read_to_string(&log).unwrap_or_default();
    assert_ne!(report["exit_code"], 0, "{report}\n{worker_log}");
    assert!(report["stderr"].as_str().unwrap_or_default().contains("Bad file descriptor"), "{report}");
    assert_eq!(std::fs::read_to_string(&fd7).unwrap(), "", "nothing arrived through fd 7");
}

/// A command that leaves `/scratch` over `scratch_mb` gets a `limit` error,
/// and what it wrote is not staged out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_over_the_scratch_quota_gets_the_quota_error() {
    let root = TempDir::new("sbx-quota-root");
    let shell = format!(
        r#"
[[turns]]
[[turns.calls]]
tool = "execute"
args = '{{"command": "mkdir -p /scratch/out && head -c 3000000 /dev/zero > /scratch/out/big.bin && echo wrote"}}'
{LAST_AS_JSON}"#
    );
    let planner = r#"
[[turns]]
[[turns.calls]]
tool = "task"
args = '{"subagent_type": "shell", "description": "go"}'
[[turns]]
[[turns.calls]]
tool = "read_file"
args = '{"path": "/out/big.bin"}'
[[turns]]
content = "{% set r = last[0] %}{% if r.ok %}FOUND{% else %}{{ r.error.kind }}{% endif %}"
"#;
    let d = Deployment::start(1, |url| {
        let mut c = TestConfig::new(url);
        c.scripted_model("planner", planner).scripted_model("shell", &shell);
        c.section(&shell_section(root.path(), "scratch_mb = 1\nstage_out = [\"/out/**\"]"));
        c
    })
    .await;
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let job = d.submit("go").await;
    assert_eq!(log.job_end(TIMEOUT).await["event"], "completed");
    let rec = d.status(job).await;
    let report: Value = serde_json::from_str(&rec.tasks[0].summary).unwrap();
    assert_eq!(report["error"]["kind"], "limit", "{report}");
    let msg = report["error"]["message"].as_str().unwrap();
    assert!(msg.contains("scratch quota of 1 MiB") && msg.contains("subagents.shell.sandbox.scratch_mb"), "{msg}");
    assert_ne!(rec.answer.as_deref(), Some("FOUND"), "the file over quota was staged out");
}
