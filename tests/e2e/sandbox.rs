//! `execute` in a bubblewrap sandbox, through a real worker.
//! One subagent type has a sandbox and runs four commands in one turn; another
//! has none, so `execute` does not exist for it.

use flotilla_protocol::JobStatus;
use flotilla_testkit::{EventLog, TempDir, TestConfig};
use serde_json::Value;
use sha2::{Digest, Sha256};

use flotilla_testkit::{Deployment, TIMEOUT};

const PLANNER: &str = r#"
[[turns]]
[[turns.calls]]
tool = "task"
args = '{"subagent_type": "shell", "description": "probe the sandbox"}'
[[turns.calls]]
tool = "task"
args = '{"subagent_type": "plain", "description": "try to execute"}'

[[turns]]
content = "{% for r in last %}{% if r.ok %}{{ r.value }}{% else %}task failed: {{ r.error.message }}{% endif %}\n=====\n{% endfor %}"
"#;

/// Commands run by the sandboxed subagent, in call order.
fn commands(nats_port: u16, marker: u32) -> [String; 4] {
    [
        format!("bash -c 'exec 3<>/dev/tcp/127.0.0.1/{nats_port}' && echo connected || echo refused"),
        "echo x > /usr/flotilla-e2e || echo x > /etc/flotilla-e2e || echo x > /flotilla-e2e || (echo kept > /scratch/f && cat /scratch/f)".into(),
        format!("sleep {marker} & (setsid sleep {marker} &); sleep {marker}"),
        "head -c 5000 /dev/zero | tr '\\0' a".into(),
    ]
}

fn subagent_script(cmds: &[String; 4]) -> String {
    let mut s = String::from("[[turns]]\n");
    for (i, c) in cmds.iter().enumerate() {
        let timeout = if i == 2 { r#", "timeout": 1"# } else { "" };
        let args = serde_json::json!({"command": c}).to_string();
        let args = format!("{}{timeout}}}", &args[..args.len() - 1]);
        s.push_str(&format!("[[turns.calls]]\ntool = \"execute\"\nargs = {}\n", toml_string(&args)));
    }
    s.push_str(
        "\n[[turns]]\ncontent = \"{% for r in last %}{% if r.ok %}{{ r.value | tojson }}{% else %}{{ {'error': r.error} | tojson }}{% endif %}\\n{% endfor %}\"\n",
    );
    s
}

/// `s` as a TOML basic string.
fn toml_string(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn execute_runs_isolated_limited_and_audited() {
    let scratch_root = TempDir::new("sandbox-root");
    let marker = 900_000 + (uuid::Uuid::now_v7().as_u128() % 90_000) as u32;
    let mut cmds = None;
    let root = scratch_root.path().display().to_string();
    let d = Deployment::start(1, |url| {
        let port: u16 = url.rsplit(':').next().unwrap().parse().unwrap();
        let c4 = commands(port, marker);
        let mut c = TestConfig::new(url);
        c.scripted_model("planner", PLANNER)
            .scripted_model("shell", &subagent_script(&c4))
            .scripted_model("plain", "[[turns]]\n[[turns.calls]]\ntool = \"execute\"\nargs = '{\"command\": \"id\"}'\n[[turns]]\ncontent = \"{% set r = last[0] %}{{ r.error.kind }}: {{ r.error.message }}\"\n");
        c.section(&format!(
            r#"[planner]
model = "planner"
task_timeout = 120
[subagents.plain]
description = "No sandbox."
model = "plain"
[subagents.shell]
description = "Runs commands."
model = "shell"
[subagents.shell.sandbox]
timeout = 10
max_output_bytes = 1000
scratch_root = "{root}"
"#
        ));
        cmds = Some(c4);
        c
    })
    .await;
    let cmds = cmds.unwrap();
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let job = d.submit("probe").await;
    let end = log.job_end(TIMEOUT).await;
    assert_eq!(end["event"], "completed", "{end}");
    log.drain();
    let rec = d.status(job).await;
    assert_eq!(rec.status, JobStatus::Completed);
    let answer = rec.answer.unwrap();
    let parts: Vec<&str> = answer.split("=====\n").collect();
    let shell: Vec<Value> =
        parts[0].lines().filter(|l| !l.trim().is_empty()).map(|l| serde_json::from_str(l).expect(l)).collect();
    assert_eq!(shell.len(), 4, "{answer}");

    // 1. No network: the NATS port on the host loopback is unreachable.
    assert_eq!(shell[0]["stdout"], "refused\n", "{}", shell[0]);
    // 2. Writes outside /scratch fail; /scratch works.
    assert_eq!(shell[1]["stdout"], "kept\n", "{}", shell[1]);
    assert_eq!(shell[1]["exit_code"], 0);
    assert!(!std::path::Path::new("/usr/flotilla-e2e").exists() && !std::path::Path::new("/etc/flotilla-e2e").exists());
    // 3. The wall-time limit kills the command and everything it started.
    assert_eq!(shell[2]["error"]["kind"], "timeout", "{}", shell[2]);
    assert!(shell[2]["error"]["message"].as_str().unwrap().contains("1s wall-time limit"));
    let survivors = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|d| std::fs::read(d.ok()?.path().join("cmdline")).ok())
        .filter(|c| String::from_utf8_lossy(c).contains(&marker.to_string()))
        .count();
    assert_eq!(survivors, 0, "sleep {marker} survived");
    // 4. Output is cut at the cap and says so.
    assert_eq!(shell[3]["stdout"].as_str().unwrap().len(), 1000);
    assert_eq!(shell[3]["truncated"], true);
    assert_eq!(shell[0]["truncated"], false);

    // Without a sandbox the tool does not exist.
    assert!(parts[1].starts_with("validation: unknown tool \"execute\""), "{}", parts[1]);

    // Every execution is audited: digest of the command, outcome, duration.
    let executed: Vec<&Value> = log.events("executed");
    assert_eq!(executed.len(), 4);
    for (c, want_timeout) in cmds.iter().zip([false, false, true, false]) {
        let digest: String = Sha256::digest(c.as_bytes()).iter().map(|b| format!("{b:02x}")).collect();
        let e = executed.iter().find(|e| e["command_sha256"] == digest.as_str()).expect("audited");
        assert_eq!(e["timed_out"], want_timeout, "{e}");
        assert!(e["duration_ms"].as_u64().is_some());
    }
    // The task's scratch dir is gone with the task.
    use std::os::unix::fs::MetadataExt;
    let uid = std::fs::metadata("/proc/self").unwrap().uid();
    let private = scratch_root.path().join(format!("flotilla-sandbox-{uid}"));
    assert_eq!(std::fs::metadata(&private).unwrap().mode() & 0o7777, 0o711, "the worker's private root");
    let left: Vec<_> = std::fs::read_dir(&private).unwrap().collect();
    assert!(left.is_empty(), "scratch dirs left behind: {left:?}");
}

/// A subagent writes a job file, a sandboxed command reads it from
/// `/scratch`, writes a result and plants a symlink to a host file; the result
/// comes back as a job file, the symlink never does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn execute_stages_job_files_in_and_results_out() {
    let scratch_root = TempDir::new("sandbox-stage");
    let root = scratch_root.path().display().to_string();
    let d = Deployment::start(1, |url| {
        let mut c = TestConfig::new(url);
        c.scripted_model(
            "planner",
            r#"
[[turns]]
[[turns.calls]]
tool = "task"
args = '{"subagent_type": "shell", "description": "sum the numbers"}'
[[turns]]
[[turns.calls]]
tool = "ls"
args = '{"path": "/out"}'
[[turns.calls]]
tool = "read_file"
args = '{"path": "/out/sum.txt"}'
[[turns]]
content = "{% for r in last %}{% if r.ok %}{{ r.value }}{% else %}ERR {{ r.error.message }}{% endif %}\n=====\n{% endfor %}"
"#,
        )
        .scripted_model(
            "shell",
            r#"
[[turns]]
[[turns.calls]]
tool = "write_file"
args = '{"path": "/data/in.txt", "content": "3\n4\n5\n"}'
[[turns]]
[[turns.calls]]
tool = "execute"
args = '{"command": "mkdir -p /scratch/out && awk \"{s+=\\$1} END {print s}\" /scratch/data/in.txt > /scratch/out/sum.txt && ln -s /etc/passwd /scratch/out/leak && cat /scratch/out/sum.txt"}'
[[turns]]
content = "{% set r = last[0] %}{% if r.ok %}{{ r.value | tojson }}{% else %}{{ r.error | tojson }}{% endif %}"
"#,
        );
        c.section(&format!(
            r#"[planner]
model = "planner"
task_timeout = 120
[subagents.shell]
description = "Runs shell commands."
model = "shell"
tools = ["write_file", "execute"]
[subagents.shell.sandbox]
scratch_root = "{root}"
stage_in = ["/data/**"]
stage_out = ["/out/**"]
"#
        ));
        c
    })
    .await;
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let job = d.submit("go").await;
    assert_eq!(log.job_end(TIMEOUT).await["event"], "completed");
    let rec = d.status(job).await;
    assert_eq!(rec.status, JobStatus::Completed);
    let report: Value =
        serde_json::from_str(&rec.tasks[0].summary).expect("the subagent answered with the execute result");
    assert_eq!(report["exit_code"], 0, "{report}");
    assert_eq!(report["stdout"].as_str().unwrap().trim(), "12", "the command read the staged job file");
    assert_eq!(report["staged_in"], serde_json::json!(["/data/in.txt"]), "{report}");
    assert_eq!(report["staged_out"], serde_json::json!(["/out/sum.txt"]), "the symlink was not copied: {report}");
    let answer = rec.answer.unwrap();
    let parts: Vec<&str> = answer.split("=====").collect();
    assert!(parts[0].contains("sum.txt") && !parts[0].contains("leak"), "ls /out: {}", parts[0]);
    assert!(parts[1].contains("12"), "the planner reads the result as a job file: {}", parts[1]);
}
