//! Long jobs survive worker, orchestrator and NATS failures; every
//! bad input gets a clear answer. Faults are injected into real processes.

use std::collections::HashMap;
use std::time::Duration;

use flotilla_protocol::{JobStatus, TaskStatus};
use flotilla_testkit::{EventLog, TestConfig, eventually, proc::run_cli};
use serde_json::Value;

use flotilla_testkit::{Deployment, TIMEOUT};

/// `n` regions in the demo job format.
pub fn regions(n: usize) -> String {
    let parts: Vec<String> = (0..n).map(|i| format!("r{i}: revenue {}, cost {}", 100 + i, 50 + i)).collect();
    format!("Margins: {}.", parts.join("; "))
}

fn is_started(s: &str, v: &Value) -> bool {
    s.contains(".progress.") && v["event"] == "started"
}

fn is_dispatched(s: &str, v: &Value) -> bool {
    s.ends_with(".event") && v["event"] == "task_dispatched"
}

/// Takes `stream` off its subjects (onto one nobody publishes to, its
/// republish dropped with them), as while a cluster elects a new leader for
/// it: publishes find no stream. Returns the new config and the subjects
/// it had, to put back.
async fn stream_off(d: &Deployment, stream: &str) -> (async_nats::jetstream::stream::Config, Vec<String>) {
    let mut config = d.raw.js.get_stream(stream).await.expect("the stream").cached_info().config.clone();
    let subjects = std::mem::replace(&mut config.subjects, vec![format!("flotilla.outage.{stream}")]);
    config.republish = None;
    d.raw.js.update_stream(&config).await.expect("stream off");
    (config, subjects)
}

/// Takes the journal stream of `d`'s single worker off its subjects once
/// the orchestrator and the worker are ready (both declare the topology,
/// which would undo the outage): every append fails and is retried for
/// its budget (5 s) before the worker gives it up. Then submits one task
/// and waits for its report; returns the job's events and the worker's
/// log at that moment.
async fn one_task_with_the_journal_off(d: &Deployment) -> (EventLog, String) {
    d.orchestrator_ready().await;
    eventually(TIMEOUT, "the worker to be ready", || async {
        d.workers[0].log().contains("worker ready").then_some(())
    })
    .await;
    stream_off(d, &d.bus.subjects.journal_stream()).await;
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    d.submit("a: revenue 10, cost 5").await;
    log.until(TIMEOUT, "the task's report", |s, v| s.ends_with(".event") && v["event"] == "task_reported").await;
    let at_report = d.workers[0].log();
    (log, at_report)
}

/// The worker's log once it has acked its task (`task finished`).
async fn log_once_acked(d: &Deployment) -> String {
    eventually(TIMEOUT, "the task's ack", || async {
        let text = d.workers[0].log();
        text.contains("task finished").then_some(text)
    })
    .await
}

fn starts_per_task(log: &EventLog) -> HashMap<String, usize> {
    let mut m = HashMap::new();
    for (s, v) in &log.seen {
        if is_started(s, v) {
            *m.entry(flotilla_testkit::events::task_of(s, v)).or_default() += 1;
        }
    }
    m
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_crashes_lose_no_task_and_count_none_twice() {
    // ack_wait 2 s: a killed worker's tasks come back quickly.
    let mut d = Deployment::start(3, |url| {
        let mut c = TestConfig::demo(url, 4, 60);
        c.nats(2, 10);
        c
    })
    .await;
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let started = std::time::Instant::now();
    let job = d.submit(&regions(100)).await;
    // Three SIGKILLs at random moments of the run, each replaced by a fresh worker.
    let mut kills: Vec<usize> = (0..3).map(|_| fastrand::usize(5..90)).collect();
    kills.sort_unstable();
    let mut killed = Vec::new();
    for (i, at) in kills.iter().copied().enumerate() {
        log.until_count(TIMEOUT, at, "task starts", is_started).await;
        let mut w = d.workers.remove(fastrand::usize(..d.workers.len()));
        killed.push(w.name.clone());
        w.kill();
        d.add_worker(&format!("replacement-{i}"));
    }
    let end = log.job_end(Duration::from_secs(120)).await;
    assert_eq!(end["event"], "completed", "{end}");
    log.drain();
    let rec = d.status(job).await;
    assert_eq!(rec.status, JobStatus::Completed);
    assert_eq!(rec.tasks.len(), 100);
    assert!(rec.tasks.iter().all(|t| t.status == Some(TaskStatus::Completed)), "every task completed");
    assert_eq!(log.events("task_reported").len(), 100, "each report consolidated exactly once");
    let redelivered: Vec<_> = rec.tasks.iter().filter(|t| t.attempt > 1).collect();
    assert!(!redelivered.is_empty(), "the killed workers had tasks in flight that another worker finished");
    for t in &redelivered {
        assert!(!killed.contains(t.worker_id.as_ref().unwrap()), "finished by a live worker: {t:?}");
    }
    assert!(rec.answer.unwrap().contains("| r0 | 100 | 50 | 0.5 |"));
    eprintln!(
        "figures: 100 tasks, 3 workers x 4 slots, SIGKILL after task starts {kills:?}: {} tasks redelivered and finished elsewhere, {} task starts in all, 100 reports consolidated, job {:.1} s",
        redelivered.len(),
        log.events("started").len(),
        started.elapsed().as_secs_f64()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nats_restart_mid_job_is_survived() {
    let mut d = Deployment::start(2, |url| TestConfig::demo(url, 4, 300)).await;
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let job = d.submit(&regions(12)).await;
    log.until_count(TIMEOUT, 2, "task starts", is_started).await;
    d.nats.restart().await; // SIGKILL, then the same port and store
    let rec = eventually(Duration::from_secs(90), "the job to end after the NATS restart", || async {
        let r = d.status_opt(job).await?;
        r.status.is_terminal().then_some(r)
    })
    .await;
    assert_eq!(rec.status, JobStatus::Completed, "{:?}", rec.error);
    assert_eq!(rec.tasks.len(), 12);
    assert!(rec.tasks.iter().all(|t| t.status == Some(TaskStatus::Completed)));
    for w in &mut d.workers {
        assert!(w.running(), "{} survived the outage", w.name);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_tasks_keep_their_worker_and_free_their_slot_while_reports_wait_out_a_reports_stream_outage() {
    // ack_wait 2 s: a task whose worker stopped its in-progress acks, or gave
    // its report up, would be delivered again within the outage. One slot:
    // the second task can start only once the first gave its slot back.
    let d = Deployment::start(1, |url| {
        let mut c = TestConfig::demo(url, 1, 300);
        c.nats(2, 10);
        c
    })
    .await;
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let job = d.submit("a: revenue 10, cost 5; b: revenue 20, cost 5").await;
    log.until_count(TIMEOUT, 1, "the first task's start", is_started).await;
    // The outage: the reports stream stops taking report subjects, as while
    // a cluster elects a new leader for it (publishes find no stream).
    let (mut config, subjects) = stream_off(&d, &d.bus.subjects.reports_stream()).await;
    log.until(TIMEOUT, "the first task's finished event", |s, v| s.contains(".progress.") && v["event"] == "finished")
        .await;
    let finished = std::time::Instant::now();
    // Its report cannot be stored (its retries last 30 s), yet its slot is free.
    log.until_count(Duration::from_secs(20), 2, "the second task's start during the outage", is_started).await;
    let worker_log = eventually(TIMEOUT, "the report publish to fail", || async {
        let text = d.workers[0].log();
        (text.contains("report publish failed; retrying") || text.contains("report not stored")).then_some(text)
    })
    .await;
    // The outage lasts three times ack_wait past the first task's end: the
    // fault's length, not a wait for an event.
    tokio::time::sleep(Duration::from_secs(6).saturating_sub(finished.elapsed())).await;
    log.drain();
    assert_eq!(log.events("started").len(), 2, "no task was delivered again during the outage");
    assert!(!worker_log.contains("report not stored"), "no report was given up: {worker_log}");
    config.subjects = subjects;
    d.raw.js.update_stream(&config).await.expect("reports stream on");
    let end = log.job_end(TIMEOUT).await;
    assert_eq!(end["event"], "completed", "{end}");
    log.drain();
    let rec = d.status(job).await;
    assert_eq!(rec.tasks.len(), 2);
    for task in &rec.tasks {
        assert_eq!(task.status, Some(TaskStatus::Completed), "{task:?}");
        assert_eq!(task.attempt, 1, "the first attempt's report, stored after the outage: {task:?}");
    }
    assert_eq!(log.events("started").len(), 2, "each task started once");
    assert!(!d.workers[0].log().contains("report not stored"), "no report was given up");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tasks_report_does_not_wait_for_its_journal_and_the_task_is_acked_after_it() {
    // The demo's MCP `gross_margin`: its server's `readOnlyHint` is no
    // operator's word, so the turn calling it is awaited.
    let d = Deployment::start(1, |url| TestConfig::demo(url, 1, 0)).await;
    let (mut log, at_report) = one_task_with_the_journal_off(&d).await;
    // The tool-calling turn was given up before the tool ran; the tool
    // result, whose ack the answering turn's append waits for, is still
    // being retried when the report is stored: the report did not wait.
    let given_up = |text: &str| text.matches("step not journaled").count();
    assert_eq!(given_up(&at_report), 1, "only the tool-calling turn given up by the report: {at_report}");
    assert!(!at_report.contains("task finished"), "the task is acked only once its journal is settled: {at_report}");
    let worker_log = log_once_acked(&d).await;
    let (gave_up, finished) =
        (worker_log.find("step not journaled").unwrap(), worker_log.find("task finished").unwrap());
    assert!(gave_up < finished);
    assert_eq!(given_up(&worker_log[..finished]), 2, "the tool result given up before the ack: {worker_log}");
    assert_eq!(log.job_end(TIMEOUT).await["event"], "completed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_of_read_only_calls_is_journaled_behind_the_loop_and_the_task_is_acked_after_it() {
    // The finance type's native `calculate_margin` is read-only.
    let d = Deployment::start(1, |url| TestConfig::demo_native(url, 1, 0)).await;
    assert_journaled_behind_the_loop(&d).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_tool_the_operator_lists_as_read_only_is_journaled_behind_the_loop() {
    // The demo's MCP `gross_margin`, listed by the operator. Its server
    // annotates it `readOnlyHint`, which alone changes nothing:
    // `a_tasks_report_does_not_wait_for_its_journal_and_the_task_is_acked_after_it`
    // runs the same tool unlisted, and its turn is awaited.
    let d = Deployment::start(1, |url| {
        let mut c = TestConfig::demo(url, 1, 0);
        c.section_replace(
            "[mcp_servers.finance]\n",
            "[mcp_servers.finance]\nread_only_tools = [\"gross_margin\", \"grossmargin\"]\n",
        );
        c
    })
    .await;
    assert_journaled_behind_the_loop(&d).await;
    // A listed name the server does not offer (a typo) is named at discovery.
    let log = d.workers[0].log();
    let warning = log.lines().find(|l| l.contains("read_only_tools names a tool this server does not offer"));
    assert!(warning.is_some_and(|l| l.contains("grossmargin") && l.contains("gross_margin")), "{log}");
}

/// One task's tool-calling turn and tool result appended behind the loop
/// while the journal stream is off: the report is stored with no entry
/// given up yet (an awaited turn is given up after 5 s, before its tool
/// runs), then both are given up in the loop's order before the task's ack.
async fn assert_journaled_behind_the_loop(d: &Deployment) {
    let (mut log, at_report) = one_task_with_the_journal_off(d).await;
    // The tool ran and the report was stored while the tool-calling turn's
    // append was still retried (5 s): nothing waited for it.
    assert_eq!(at_report.matches("step not journaled").count(), 0, "{at_report}");
    assert!(!at_report.contains("task finished"), "the task is acked only once its journal is settled: {at_report}");
    // Given up in the loop's order, the turn first, both before the ack.
    let worker_log = log_once_acked(d).await;
    let finished = worker_log.find("task finished").unwrap();
    let given_up: Vec<&str> = worker_log[..finished]
        .lines()
        .filter(|l| l.contains("step not journaled"))
        .map(|l| ["model_turn", "tool_result"].into_iter().find(|entry| l.contains(entry)).unwrap_or(l))
        .collect();
    assert_eq!(given_up, ["model_turn", "tool_result"], "{worker_log}");
    assert_eq!(log.job_end(TIMEOUT).await["event"], "completed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orchestrator_crash_resumes_the_job_without_dispatching_twice() {
    let mut d = Deployment::start(2, |url| TestConfig::demo(url, 4, 400)).await;
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let job = d.submit(&regions(10)).await;
    log.until_count(TIMEOUT, 5, "dispatches", is_dispatched).await;
    d.orchestrator.as_mut().unwrap().kill();
    d.start_orchestrator();
    let end = log.job_end(TIMEOUT).await;
    assert_eq!(end["event"], "completed", "{end}");
    log.drain();
    let rec = d.status(job).await;
    assert_eq!(rec.tasks.len(), 10, "no task dispatched twice: {:?}", rec.tasks);
    assert!(rec.tasks.iter().all(|t| t.status == Some(TaskStatus::Completed)));
    let starts = starts_per_task(&log);
    assert_eq!(starts.len(), 10);
    assert!(starts.values().all(|n| *n == 1), "every task delivered once: {starts:?}");
    assert!(rec.answer.unwrap().contains("| r9 | 109 | 59 |"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_the_planner_queued_tasks_and_running_subagents() {
    // 2 workers × 2 slots, 10 s per model call: 4 tasks run, 4 wait in the queue.
    let d = Deployment::start(2, |url| TestConfig::demo(url, 2, 10_000)).await;
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let job = d.submit(&regions(8)).await;
    log.until_count(TIMEOUT, 4, "task starts", is_started).await;
    let cancel = ["--config", &d.config_arg(), "cancel", &job.to_string(), "--reason", "change freeze", "--json"];
    let (code, out, err) = run_cli(&cancel, &[]);
    assert_eq!(code, 0, "{out}{err}");
    let reply: Value = serde_json::from_str(&out).unwrap();
    let end = log.job_end(Duration::from_secs(10)).await;
    assert_eq!(end["event"], "cancelled", "{end}");
    // Every running subagent stops within seconds and says so.
    log.until_count(Duration::from_secs(5), 4, "cancelled finishes", |s, v| {
        s.contains(".progress.") && v["event"] == "finished" && v["status"] == "cancelled"
    })
    .await;
    // Queued messages were purged (running ones may already have been acked by
    // their cancelled workers, so the count varies); none of the job's is left.
    assert!(reply["purged_tasks"].as_u64().is_some(), "{reply}");
    let stream = d.raw.js.get_stream(d.bus.subjects.tasks_stream()).await.unwrap();
    let left = stream.info_with_subjects(d.bus.subjects.tasks_of_job(&job)).await.unwrap();
    let left: Vec<_> = futures::StreamExt::collect::<Vec<_>>(left).await;
    assert!(left.is_empty(), "no task of the job left in the work queue: {left:?}");
    assert_eq!(log.events("started").len(), 4, "no queued task started after the cancel");
    let rec = d.status(job).await;
    assert_eq!(rec.status, JobStatus::Cancelled);
    // Every task entry ended, cancelled with the reason given: the 4 running
    // (their workers' reports may come after the job ended) and the 4 purged.
    assert_eq!(rec.tasks.len(), 8);
    for t in &rec.tasks {
        assert_eq!(t.status, Some(TaskStatus::Cancelled), "{t:?}");
        let error = t.error.as_ref().map(|e| e.message.as_str()).unwrap_or_default();
        assert!(error.contains("change freeze") || error.contains("cancel"), "{t:?}");
    }
    let purged = rec.tasks.iter().filter(|t| t.error.as_ref().is_some_and(|e| e.message.contains("change freeze")));
    assert!(purged.count() >= 4, "the queued tasks carry the reason: {:?}", rec.tasks);
    assert_eq!((rec.task_counts.running, rec.task_counts.pending, rec.task_counts.cancelled), (0, 0, 8));
    let (code, _, err) = run_cli(&["--config", &d.config_arg(), "cancel", &job.to_string()], &[]);
    assert_eq!(code, 2);
    assert!(err.contains("already cancelled"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_endpoint_that_stays_down_ends_in_a_failed_report_and_a_dead_letter() {
    let dead_port = flotilla_testkit::free_port();
    let d = Deployment::start(1, |url| {
        let mut c = TestConfig::demo(url, 2, 0);
        c.nats(5, 2);
        c.section(&format!(
            "[models.down]\nprovider = \"openai\"\nbase_url = \"http://127.0.0.1:{dead_port}/v1\"\nmodel = \"m\"\nmax_retries = 0\n\
             [subagents.research]\ndescription = \"Looks things up.\"\nmodel = \"down\"\n"
        ));
        c.one_task_planner("research", "find it");
        c
    })
    .await;
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let job = d.submit("anything").await;
    assert_eq!(log.job_end(TIMEOUT).await["event"], "completed");
    let rec = d.status(job).await;
    let task = &rec.tasks[0];
    assert_eq!(task.status, Some(TaskStatus::Failed));
    assert_eq!(task.attempt, 2, "retried once (max_deliver 2), then reported");
    let answer = rec.answer.unwrap();
    assert!(answer.starts_with("transient: "), "{answer}");
    let dl = d.dead_letters().await;
    assert_eq!(dl.len(), 1, "{dl:?}");
    assert!(dl[0].0.contains("gave up after 2 attempts"), "{dl:?}");
    // Counted as the research type's, the one the worker gave up on.
    let queues = d.client().queues().await.expect("queues");
    let dead: Vec<(&str, u64)> = queues.iter().map(|q| (q.subagent_type.as_str(), q.dead_letters)).collect();
    assert_eq!(dead, [("finance", 0), ("research", 1)], "{queues:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_that_kills_every_worker_still_gets_a_failed_report() {
    // Every delivery's worker is SIGKILLed; after max_deliver JetStream gives
    // up and the orchestrator turns the advisory into a failed report.
    let mut d = Deployment::start(1, |url| {
        let mut c = TestConfig::demo(url, 1, 30_000);
        c.nats(1, 2);
        c
    })
    .await;
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let job = d.submit("only: revenue 10, cost 5").await;
    for i in 1..=2 {
        log.until_count(TIMEOUT, i, "task starts", is_started).await;
        d.workers.remove(0).kill();
        d.add_worker(&format!("next-{i}"));
    }
    let end = log.job_end(TIMEOUT).await;
    assert_eq!(end["event"], "completed", "{end}");
    let rec = d.status(job).await;
    let t = &rec.tasks[0];
    assert_eq!(t.status, Some(TaskStatus::Failed));
    assert_eq!(t.worker_id.as_deref(), Some("orchestrator"));
    assert!(t.error.as_ref().unwrap().message.contains("given up after 2 deliveries"), "{t:?}");
    assert!(rec.answer.unwrap().contains("failed: "), "the planner saw the failure");
    assert_eq!(d.dead_letters().await.len(), 1);
    // The orchestrator stored it as the finance type's dead letter.
    let queues = d.client().queues().await.expect("queues");
    assert_eq!(queues.iter().map(|q| (q.subagent_type.as_str(), q.dead_letters)).collect::<Vec<_>>(), [("finance", 1)]);
    // Its full report exists like every task's, written on the workers' behalf.
    let report = format!("/reports/{}.md", t.task_id);
    let (code, text, err) = crate::approvals::cli(&d, &["files", "get", &job.to_string(), &report]).await;
    assert_eq!(code, 0, "files get {report}: {err}");
    assert!(text.contains("failed") && text.contains("given up after 2 deliveries"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_for_a_type_no_worker_serves_fails_with_that_reason() {
    let mut d = Deployment::start(0, |url| {
        let mut c = TestConfig::demo(url, 2, 0);
        // The planner knows `legal`, but the only worker serves `finance`.
        c.section("[subagents.legal]\ndescription = \"Reviews contracts.\"\nmodel = \"finance\"\n");
        c.script(
            "planner.toml",
            r#"
[[turns]]
[[turns.calls]]
tool = "task"
args = '{"subagent_type": "legal", "description": "review"}'
[[turns.calls]]
tool = "task"
args = '{"subagent_type": "finance", "description": "revenue 120, cost 75"}'
[[turns]]
content = "{% for r in last %}{% if r.ok %}ok {{ r.value }}{% else %}{{ r.error.message }}{% endif %}\n{% endfor %}"
"#,
        );
        c.section_replace("task_timeout = 60", "task_timeout = 60\nno_worker_timeout = 2");
        c
    })
    .await;
    d.add_worker_with("finance-only", &["--types", "finance"]);
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let job = d.submit("x").await;
    assert_eq!(log.job_end(TIMEOUT).await["event"], "completed");
    let rec = d.status(job).await;
    let answer = rec.answer.clone().unwrap();
    assert!(answer.contains("no worker serves legal"), "{answer}");
    assert!(answer.contains("ok 0.375"), "{answer}");
    // The task entry itself ends failed, with the reason.
    let legal = rec.tasks.iter().find(|t| t.subagent_type.as_str() == "legal").expect("the legal task");
    assert_eq!(legal.status, Some(TaskStatus::Failed), "{legal:?}");
    assert!(legal.error.as_ref().unwrap().message.contains("no worker serves legal"), "{legal:?}");
    assert_eq!((rec.task_counts.completed, rec.task_counts.failed), (1, 1));
    // A job that completed around a failed task is not a success to a script.
    let cfg = d.config_arg();
    let (code, out, err) = run_cli(&["--config", &cfg, "submit", "--wait", "x"], &[]);
    assert_eq!(code, 3, "completed with a failed task: exit 3 (stdout {out}, stderr {err})");
}
