//! Human approval of tool calls through separate processes.
//! A scripted subagent calls `calculate_margin`, which its type lists under
//! `interrupt_on`; the test answers with the `flotilla` CLI as a person would.

use flotilla_protocol::ids::{JobId, Tenant};
use flotilla_protocol::{AuditAction, AuditOutcome, AuditRecord, JobStatus};
use flotilla_testkit::{EventLog, TestConfig, proc::run_cli};
use serde_json::Value;

use flotilla_testkit::{Deployment, TIMEOUT};

/// One finance task, then its report or why it failed (also used by
/// tests/e2e/http_api.rs).
pub(crate) const PLANNER: &str = r#"
[[turns]]
[[turns.calls]]
tool = "task"
args = '{"subagent_type": "finance", "description": "margin: revenue 120, cost 75"}'

[[turns]]
content = "{% set r = last[0] %}{% if r.ok %}{{ r.value }}{% else %}task failed: {{ r.error.message }}{% endif %}"
"#;

/// One `calculate_margin` call, then the margin or the error.
pub(crate) const SUBAGENT: &str = r#"
[vars]
nums = "captures(input, 'revenue (-?[0-9]+), cost (-?[0-9]+)')"

[[turns]]
[[turns.calls]]
tool = "calculate_margin"
args = '{"revenue": {{ nums[0][1] }}, "cost": {{ nums[0][2] }}}'

[[turns]]
content = "{% set r = last[0] %}{% if r.ok %}margin={{ r.value.margin }}{% else %}{{ r.error.kind }}: {{ r.error.message }}{% endif %}"
"#;

/// One finance subagent whose `calculate_margin` calls need approval.
pub(crate) fn config(url: &str, decisions: &str, approval_timeout: u64) -> TestConfig {
    let mut c = TestConfig::new(url);
    c.scripted_model("planner", PLANNER).scripted_model("finance", SUBAGENT);
    c.section(&format!(
        r#"[planner]
model = "planner"
task_timeout = 120
[subagents.finance]
description = "Computes gross margins."
model = "finance"
tools = ["calculate_margin"]
approval_timeout = {approval_timeout}
[subagents.finance.interrupt_on.calculate_margin]
decisions = {decisions}
"#
    ));
    c
}

/// Runs `flotilla <args> --config <cfg>` off the async runtime.
pub(crate) async fn cli(d: &Deployment, args: &[&str]) -> (i32, String, String) {
    let mut all: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    all.extend(["--config".into(), d.config_arg()]);
    tokio::task::spawn_blocking(move || {
        let refs: Vec<&str> = all.iter().map(String::as_str).collect();
        run_cli(&refs, &[("USER", "tester")])
    })
    .await
    .unwrap()
}

/// The requests `flotilla [--tenant T] approvals --json` lists (the API's
/// `{"approvals": [...]}`; a bare array as printed by older versions).
pub(crate) async fn listed(d: &Deployment, tenant: &str) -> Vec<Value> {
    let (code, out, err) = cli(d, &["--tenant", tenant, "approvals", "--json"]).await;
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let list = if v.is_array() { v } else { v["approvals"].clone() };
    list.as_array().unwrap_or_else(|| panic!("not a list: {out}")).clone()
}

pub(crate) async fn request(log: &mut EventLog) -> Value {
    log.until(TIMEOUT, "an approval request", |s, _| s.contains(".approval.")).await
}

async fn answer_of(d: &Deployment, log: &mut EventLog) -> String {
    let end = log.job_end(TIMEOUT).await;
    assert_eq!(end["event"], "completed", "{end}");
    log.drain();
    let rec = d.status(end["job_id"].as_str().unwrap().parse().unwrap()).await;
    assert_eq!(rec.status, JobStatus::Completed);
    rec.answer.unwrap_or_default()
}

fn progress<'a>(log: &'a EventLog, event: &str) -> Vec<&'a Value> {
    log.seen.iter().filter(|(s, v)| s.contains(".progress.") && v["event"] == event).map(|(_, v)| v).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approved_call_runs_after_a_person_approves_it() {
    let d = Deployment::start(1, |url| config(url, r#"["approve", "reject", "edit"]"#, 60)).await;
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let job = d.submit("one margin").await;
    let req = request(&mut log).await;
    assert_eq!(req["job_id"], job.to_string());
    assert_eq!(req["tool"], "calculate_margin");
    assert_eq!(req["args"], serde_json::json!({"revenue": 120, "cost": 75}));
    let call = req["call_id"].as_str().unwrap().to_string();

    // The pending request is listed for its tenant only.
    let open = listed(&d, "default").await;
    assert_eq!(open.len(), 1, "{open:?}");
    assert_eq!(open[0]["call_id"], call.as_str());
    assert_eq!(open[0]["decisions"], serde_json::json!(["approve", "reject", "edit"]));
    assert!(listed(&d, "acme").await.is_empty(), "another tenant sees nothing");
    let (code, _, err) = cli(&d, &["--tenant", "acme", "approve", &job.to_string(), &call, "--approve"]).await;
    assert_eq!(code, 2);
    assert!(err.contains("no approval request"), "another tenant cannot decide: {err}");

    // Nothing ran yet: the task waits for a person.
    log.drain();
    assert!(progress(&log, "tool_result").is_empty(), "the tool ran before approval");

    // The task named by its short id as `watch` displays it (last 8 characters).
    let task = req["task_id"].as_str().unwrap();
    let shown = &task[task.len() - 8..];
    let (code, out, err) = cli(&d, &["approve", &job.to_string(), &call, "--task", shown, "--approve"]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("approve call"), "{out}");
    assert_eq!(answer_of(&d, &mut log).await, "margin=0.375");

    let resolved = progress(&log, "approval_resolved");
    assert_eq!(resolved.len(), 1);
    assert_eq!(resolved[0]["outcome"], "approve");
    assert_eq!(resolved[0]["by"], "tester");
    let (code, _, err) = cli(&d, &["approve", &job.to_string(), &call, "--reject"]).await;
    assert_eq!(code, 2);
    assert!(err.contains("already answered (approve by tester)"), "{err}");
    assert!(listed(&d, "default").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejected_call_is_an_error_the_model_reads() {
    let d = Deployment::start(1, |url| config(url, r#"["approve", "reject"]"#, 60)).await;
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let job = d.submit("one margin").await.to_string();
    let call = request(&mut log).await["call_id"].as_str().unwrap().to_string();

    let (code, _, err) = cli(&d, &["approve", &job, &call, "--edit", r#"{"revenue": 1, "cost": 1}"#]).await;
    assert_eq!(code, 2);
    assert!(err.contains("edit is not allowed for calculate_margin (allowed: approve, reject)"), "{err}");

    let (code, _, err) = cli(&d, &["approve", &job, &call, "--reject", "--reason", "too risky"]).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        answer_of(&d, &mut log).await,
        "permission: a reviewer rejected this call to calculate_margin: too risky"
    );
    let results = progress(&log, "tool_result");
    assert_eq!(results.len(), 1);
    assert_eq!(results[0]["error_kind"], "permission", "the call did not run");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edited_call_runs_with_the_reviewers_arguments() {
    let d = Deployment::start(1, |url| config(url, r#"["approve", "reject", "edit"]"#, 60)).await;
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let job = d.submit("one margin").await.to_string();
    let call = request(&mut log).await["call_id"].as_str().unwrap().to_string();

    for (bad, why) in [
        (r#"{"revenue": "lots", "cost": 50}"#, "do not fit calculate_margin"),
        (r#"{"revenue": 200}"#, "\"cost\" is a required property"),
        ("not json", "--edit is not valid JSON"),
    ] {
        let (code, _, err) = cli(&d, &["approve", &job, &call, "--edit", bad]).await;
        assert_eq!(code, 2, "{bad} was accepted");
        assert!(err.contains(why), "{bad}: {err}");
    }
    let (code, _, err) = cli(&d, &["approve", &job, &call, "--edit", r#"{"revenue": 200, "cost": 50}"#]).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(answer_of(&d, &mut log).await, "margin=0.75");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unanswered_call_is_rejected_after_the_timeout() {
    let d = Deployment::start(1, |url| config(url, r#"["approve", "reject"]"#, 2)).await;
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let job = d.submit("one margin").await.to_string();
    let call = request(&mut log).await["call_id"].as_str().unwrap().to_string();
    assert_eq!(
        answer_of(&d, &mut log).await,
        "permission: no reviewer answered within 2s, so this call to calculate_margin was rejected and not run"
    );
    assert_eq!(progress(&log, "approval_resolved")[0]["outcome"], "expired");
    let (code, _, err) = cli(&d, &["approve", &job, &call, "--approve"]).await;
    assert_eq!(code, 2);
    assert!(err.contains("already answered (expired unanswered)"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answered_call_is_not_asked_again_after_the_worker_dies() {
    let mut d = Deployment::start(1, |url| config(url, r#"["approve", "reject", "edit"]"#, 60)).await;
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let job = d.submit("one margin").await.to_string();
    let call = request(&mut log).await["call_id"].as_str().unwrap().to_string();

    // The worker dies while waiting; the person answers while no worker runs.
    d.workers[0].kill();
    let (code, _, err) = cli(&d, &["approve", &job, &call, "--edit", r#"{"revenue": 100, "cost": 40}"#]).await;
    assert_eq!(code, 0, "{err}");

    // The redelivered task replays the same call and finds the answer in KV.
    d.add_worker("w2");
    assert_eq!(answer_of(&d, &mut log).await, "margin=0.6");
    // A progress body leaves out a first attempt (docs/PROTOCOL.md).
    let started: Vec<_> = progress(&log, "started").into_iter().map(|v| v["attempt"].as_u64().unwrap_or(1)).collect();
    assert_eq!(started, [1, 2], "the task ran twice");
    let asked = log.seen.iter().filter(|(s, _)| s.contains(".approval.")).count();
    assert_eq!(asked, 1, "asked once, not again on redelivery");
    assert_eq!(progress(&log, "approval_requested").len(), 1);
    assert_eq!(progress(&log, "approval_resolved").len(), 1, "only the second attempt saw the decision");
}

/// Two gated calls: the second waits for a person while the first has run.
const TWO_CALLS: &str = r#"
[[turns]]
[[turns.calls]]
tool = "calculate_margin"
args = '{"revenue": 120, "cost": 75}'

[[turns]]
[[turns.calls]]
tool = "calculate_margin"
args = '{"revenue": 100, "cost": 40}'

[[turns]]
content = "{% for r in results %}{% if r.ok %}{{ r.value.margin }}{% else %}{{ r.error.kind }}{% endif %};{% endfor %}"
"#;

/// An approval is used once, and a redelivered task does not replay the
/// call it was given for: the call ran and its result is in the task's step
/// journal (docs/RELIABILITY.md), so the new attempt neither runs it again
/// nor asks about it again. The call that was waiting when the worker died
/// waits on its same round, answered once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_is_used_once_and_a_redelivered_task_does_not_replay_the_approved_call() {
    let mut d = Deployment::start(1, |url| {
        let mut c = config(url, r#"["approve", "reject"]"#, 60);
        c.script("finance.toml", TWO_CALLS);
        c
    })
    .await;
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let job = d.submit("two margins").await.to_string();
    let first = request(&mut log).await["call_id"].as_str().unwrap().to_string();
    let (code, _, err) = cli(&d, &["approve", &job, &first, "--approve"]).await;
    assert_eq!(code, 0, "{err}");
    // The first call ran; the second waits. The worker dies now.
    let second = log
        .until(TIMEOUT, "the second request", |s, v| s.contains(".approval.") && v["call_id"] != first.as_str())
        .await["call_id"]
        .as_str()
        .unwrap()
        .to_string();
    d.workers[0].kill();
    d.add_worker("w2");
    // The redelivered task resumes at the waiting call.
    log.until(TIMEOUT, "the task to resume", |s, v| s.contains(".progress.") && v["event"] == "resumed").await;
    let (code, _, err) = cli(&d, &["approve", &job, &second, "--approve"]).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(answer_of(&d, &mut log).await, "0.375;0.6;", "both calls ran once, each with its approval");
    let asked_first =
        log.seen.iter().filter(|(s, v)| s.contains(".approval.") && v["call_id"] == first.as_str()).count();
    assert_eq!(asked_first, 1, "the approved call was asked about again");
    let (code, _, err) = cli(&d, &["approve", &job, &first, "--reject"]).await;
    assert_ne!(code, 0, "a used approval took a second decision");
    assert!(err.contains("already answered"), "{err}");
}

// An approval decision is audited exactly once, by the tool set
// that asked (shared/agent/src/tool/pipeline/approve.rs), with the decision's
// outcome; the worker's bus gate used to write a second record of its own.

/// The job's audit records once the worker's `calculate_margin` call record
/// is in: that record is published after the call's approval decision, on the
/// same connection, so every approval record is in the stream by then.
async fn audit_after_the_call(d: &Deployment, job: JobId) -> Vec<AuditRecord> {
    let tenant = Tenant::default();
    flotilla_testkit::eventually(TIMEOUT, "the calculate_margin call record", || {
        let (bus, tenant) = (d.bus.clone(), tenant.clone());
        async move {
            let records = flotilla_bus::audit::read(&bus, &tenant, &job).await.ok()?;
            let call = |r: &AuditRecord| r.action == AuditAction::ToolCall && r.tool == "calculate_margin";
            records.iter().any(call).then_some(records)
        }
    })
    .await
}

fn approvals(records: &[AuditRecord]) -> Vec<AuditOutcome> {
    records.iter().filter(|r| r.action == AuditAction::Approval).map(|r| r.outcome).collect()
}

/// The approval record's decision and reviewer.
fn decided_by(records: &[AuditRecord]) -> Vec<(Option<&str>, Option<&str>)> {
    records
        .iter()
        .filter(|r| r.action == AuditAction::Approval)
        .map(|r| (r.decision.as_deref(), r.by.as_deref()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_approved_call_leaves_one_approval_record() {
    let d = Deployment::start(1, |url| config(url, r#"["approve", "reject"]"#, 60)).await;
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let job = d.submit("one margin").await;
    let call = request(&mut log).await["call_id"].as_str().unwrap().to_string();
    let (code, out, err) = cli(&d, &["approve", &job.to_string(), &call, "--approve"]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(log.job_end(TIMEOUT).await["event"], "completed");

    let records = audit_after_the_call(&d, job).await;
    assert_eq!(approvals(&records), vec![AuditOutcome::Approved], "{records:#?}");
    // `cli` runs with USER=tester: the default reviewer name.
    assert_eq!(decided_by(&records), vec![(Some("approve"), Some("tester"))], "{records:#?}");

    // The planner's one `task` call is counted, in the
    // planner's row and in the job's total with the subagent's one call.
    let rec = d.status(job).await;
    assert_eq!(rec.planner_usage.tool_calls, 1, "{:?}", rec.planner_usage);
    assert_eq!(rec.usage.tool_calls, 2, "{:?}", rec.usage);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejection_is_audited_with_its_reviewer() {
    let d = Deployment::start(1, |url| config(url, r#"["approve", "reject"]"#, 60)).await;
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let job = d.submit("one margin").await;
    let call = request(&mut log).await["call_id"].as_str().unwrap().to_string();
    let (code, out, err) = cli(&d, &["approve", &job.to_string(), &call, "--reject", "--by", "ana"]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(log.job_end(TIMEOUT).await["event"], "completed");

    let records = audit_after_the_call(&d, job).await;
    assert_eq!(approvals(&records), vec![AuditOutcome::Rejected], "{records:#?}");
    assert_eq!(decided_by(&records), vec![(Some("reject"), Some("ana"))], "--by wins over $USER: {records:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_approval_is_one_rejected_record() {
    let d = Deployment::start(1, |url| config(url, r#"["approve", "reject"]"#, 1)).await;
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let job = d.submit("one margin").await;
    assert_eq!(log.job_end(TIMEOUT).await["event"], "completed");

    let records = audit_after_the_call(&d, job).await;
    assert_eq!(approvals(&records), vec![AuditOutcome::Rejected], "{records:#?}");
    assert_eq!(decided_by(&records), vec![(Some("expired"), None)], "nobody decided: {records:#?}");
}

/// `flotilla watch <job>` with its stdout on a terminal (a pty from
/// util-linux `script`, 300 columns so no line is cut), so the live view
/// draws; everything it writes arrives on the returned channel.
fn watch_in_a_terminal(d: &Deployment, job: JobId) -> (std::process::Child, std::sync::mpsc::Receiver<String>) {
    use std::io::Read;
    let flotilla = flotilla_testkit::proc::bin("flotilla");
    let command = format!("stty cols 300 rows 50; exec {} watch {job} --config {}", flotilla.display(), d.config_arg());
    let mut child = std::process::Command::new("script")
        .args(["-qefc", &command, "/dev/null"])
        .env("USER", "tester")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("util-linux script");
    let mut out = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = out.read(&mut buf) {
            if n == 0 || tx.send(String::from_utf8_lossy(&buf[..n]).into_owned()).is_err() {
                break;
            }
        }
    });
    (child, rx)
}

/// What the terminal showed until `needle` (panics after TIMEOUT).
fn shown_until(rx: &std::sync::mpsc::Receiver<String>, seen: &mut String, needle: &str) {
    let deadline = std::time::Instant::now() + TIMEOUT;
    while !seen.contains(needle) {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(chunk) => seen.push_str(&chunk),
            Err(_) => panic!("the terminal never showed {needle:?}; it showed:\n{seen}"),
        }
    }
}

/// The live view (not only `--plain`) says a call waits for a
/// person, with the command that answers it, then the decision; and a job
/// watched after it ended shows its task lines, not only the answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_live_view_shows_approval_needed_and_an_ended_job_its_tasks() {
    let d = Deployment::start(1, |url| config(url, r#"["approve", "reject"]"#, 60)).await;
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let job = d.submit("one margin").await;
    let call = request(&mut log).await["call_id"].as_str().unwrap().to_string();

    let (mut watch, rx) = watch_in_a_terminal(&d, job);
    let mut seen = String::new();
    let asked = format!(
        "approval needed: calculate_margin ({call}); answer with `flotilla approve {job} {call} --approve | --reject`"
    );
    tokio::task::block_in_place(|| shown_until(&rx, &mut seen, &asked));
    let (code, out, err) = cli(&d, &["approve", &job.to_string(), &call, "--approve"]).await;
    assert_eq!(code, 0, "{out}{err}");
    tokio::task::block_in_place(|| shown_until(&rx, &mut seen, "margin=0.375"));
    assert!(seen.contains(&format!("approval of calculate_margin ({call}): approve by tester")), "{seen}");
    let status = tokio::task::block_in_place(|| watch.wait()).unwrap();
    assert_eq!(status.code(), Some(0), "watch exits 0 for a job completed without failed tasks");

    // Watched again after its end: the picture, then the answer.
    let (mut again, rx) = watch_in_a_terminal(&d, job);
    assert_eq!(tokio::task::block_in_place(|| again.wait()).unwrap().code(), Some(0));
    let seen: String = rx.iter().collect();
    assert!(seen.contains(&format!("job {job}  completed  tasks 1 in all: 1 completed")), "{seen}");
    let task_line = seen.lines().find(|l| l.contains("✔ [")).unwrap_or_else(|| panic!("no task line: {seen}"));
    assert!(task_line.contains("finance    completed") && task_line.trim_end().ends_with("margin=0.375"), "{seen}");
    assert!(seen.trim_end().ends_with("margin=0.375"), "the answer comes last: {seen}");
}

/// `submit --wait` is not silent while the job waits for a person: stderr
/// names the waiting call once, with the command that answers it, and that
/// command (run as printed) lets the job finish.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_wait_says_which_call_waits_for_a_person_and_how_to_answer() {
    use std::io::{BufRead, BufReader, Read};
    use std::process::{Command, Stdio};

    let d = Deployment::start(1, |url| config(url, r#"["approve", "reject"]"#, 120)).await;
    d.orchestrator_ready().await;
    let mut wait = Command::new(flotilla_testkit::bin("flotilla"))
        .args(["--config", &d.config_arg(), "submit", "--wait", "margin: revenue 120, cost 75"])
        .env("USER", "tester")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run flotilla submit --wait");
    let (tx, rx) = std::sync::mpsc::channel();
    let stderr = BufReader::new(wait.stderr.take().unwrap());
    let reader = std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    // The notice, with the command to run; nothing has been decided yet.
    let notice = tokio::task::spawn_blocking(move || {
        let mut seen = Vec::new();
        loop {
            let line = rx.recv_timeout(TIMEOUT).unwrap_or_else(|_| panic!("no approval notice on stderr: {seen:?}"));
            if line.starts_with("waiting for a person: calculate_margin") {
                return (line, rx);
            }
            seen.push(line);
        }
    });
    let (notice, rx) = notice.await.unwrap();
    let command = notice.split('`').nth(1).unwrap_or_else(|| panic!("no command in {notice}"));
    assert!(command.ends_with("--approve | --reject"), "{notice}");
    let args: Vec<&str> = command.trim_end_matches(" | --reject").split_whitespace().skip(1).collect();
    let (code, out, err) = cli(&d, &args).await;
    assert_eq!(code, 0, "the printed command answers the request ({command}): {out}{err}");

    let (code, answer) = tokio::task::spawn_blocking(move || {
        let mut answer = String::new();
        wait.stdout.take().unwrap().read_to_string(&mut answer).unwrap();
        (wait.wait().unwrap().code(), answer)
    })
    .await
    .unwrap();
    assert_eq!(code, Some(0), "submit --wait ends once the job completes: {answer}");
    assert_eq!(answer.trim(), "margin=0.375");
    reader.join().unwrap();
    let notices = rx.try_iter().filter(|l| l.starts_with("waiting for a person")).count();
    assert_eq!(notices, 0, "one notice per request, not one per poll");
}
