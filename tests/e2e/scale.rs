//! "Job state that scales": a job is a small header plus
//! one KV key per task (orchestrator/src/jobs.rs), so a job of thousands of
//! tasks completes (the single-value record stopped near 2 000 tasks, over
//! the 1 MiB value limit), `status` pages through its tasks, and a job whose
//! reports are huge still ends. Real nats-server, orchestrator and workers;
//! zero-latency scripted models.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use flotilla_protocol::ids::{JobId, TaskId, Tenant};
use flotilla_protocol::{ApiReply, JobStatus, SCHEMA_VERSION, StatusReply, StatusRequest, TaskStatus};
use flotilla_testkit::{EventLog, TestConfig, proc::run_cli};
use futures::StreamExt;

use crate::durability::regions;
use flotilla_testkit::Deployment;

/// Counts the bytes of every value written to the jobs bucket: each KV put is
/// a message on `$KV.<bucket>.<key>`, so this is what the job store writes,
/// revisions a later one replaced included.
struct BucketWrites {
    bytes: Arc<AtomicU64>,
    puts: Arc<AtomicU64>,
}

impl BucketWrites {
    async fn follow(d: &Deployment) -> Self {
        let subject = format!("$KV.{}.>", d.bus.subjects.jobs_bucket());
        let mut sub = d.raw.client.subscribe(subject).await.expect("subscribe to the jobs bucket");
        d.raw.client.flush().await.expect("flush");
        let (bytes, puts) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let (b, p) = (bytes.clone(), puts.clone());
        tokio::spawn(async move {
            while let Some(m) = sub.next().await {
                b.fetch_add(m.payload.len() as u64, Ordering::Relaxed);
                p.fetch_add(1, Ordering::Relaxed);
            }
        });
        Self { bytes, puts }
    }

    fn totals(&self) -> (u64, u64) {
        (self.bytes.load(Ordering::Relaxed), self.puts.load(Ordering::Relaxed))
    }
}

/// The jobs bucket's stream size (the last value of each key).
async fn retained_bytes(d: &Deployment) -> u64 {
    let name = format!("KV_{}", d.bus.subjects.jobs_bucket());
    let mut stream = d.raw.js.get_stream(name).await.expect("jobs bucket stream");
    stream.info().await.expect("stream info").state.bytes
}

/// Peak resident memory of process `pid` (`VmHWM` of /proc/<pid>/status), in KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("process status");
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).expect("VmHWM");
    line.split_whitespace().nth(1).and_then(|n| n.parse().ok()).expect("VmHWM in kB")
}

/// One page of `job`'s tasks through the job API.
async fn page(d: &Deployment, job: JobId, limit: usize, after: Option<TaskId>) -> StatusReply {
    let req = StatusRequest {
        v: SCHEMA_VERSION,
        job_id: job,
        tasks_limit: Some(limit),
        tasks_after: after,
        tasks_filter: None,
    };
    let r: ApiReply<StatusReply> =
        d.bus.request(&Tenant::default(), "status", &req, Duration::from_secs(30)).await.expect("status");
    r.into_result().expect("status refused")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_5000_task_job_completes_with_every_row_and_status_pages_through_every_task() {
    const N: usize = 5000;
    let d = Deployment::start(2, |url| {
        let mut c = TestConfig::demo(url, 64, 0);
        // The demo planner builds its table from every report in its
        // conversation: keep them all (compaction is tested elsewhere).
        c.section_replace("task_timeout = 60\n", "task_timeout = 600\ncontext_tokens = 100000000\n");
        c
    })
    .await;
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.*.*.event").await;
    let writes = BucketWrites::follow(&d).await;
    let retained_before = retained_bytes(&d).await;
    let started = Instant::now();
    let job = d.submit(&regions(N)).await;

    let end = log.job_end(Duration::from_secs(180)).await;
    let elapsed = started.elapsed();
    assert_eq!(end["event"], "completed", "{end}");
    let answer = end["answer"].as_str().expect("answer");
    assert!(answer.contains("| r0 | 100 | 50 | 0.5 |"), "the first row");
    // Every region once, with its own numbers and a computed margin.
    let mut regions = HashSet::new();
    for row in answer.lines().filter(|l| l.starts_with("| r") && !l.starts_with("| region")) {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let i: usize = cells[1][1..].parse().expect("region number");
        assert_eq!((cells[2], cells[3]), ((100 + i).to_string().as_str(), (50 + i).to_string().as_str()), "{row}");
        assert!(cells[4].parse::<f64>().is_ok(), "a margin, not an error: {row}");
        assert!(regions.insert(i), "r{i} twice");
    }
    assert_eq!(regions.len(), N, "one row per region");
    assert!(!answer.contains("failed:"), "no task failed");

    // Status: counts first, then every task exactly once across pages, in dispatch order.
    let (mut seen, mut order, mut after, mut pages) = (HashSet::new(), Vec::new(), None, 0);
    loop {
        let reply = page(&d, job, 1000, after).await;
        assert_eq!(reply.job.status, JobStatus::Completed);
        assert_eq!((reply.job.tasks_total, reply.job.task_counts.completed), (N as u64, N as u64));
        for t in &reply.job.tasks {
            assert_eq!(t.status, Some(TaskStatus::Completed), "{t:?}");
            assert!(seen.insert(t.task_id), "task {} on two pages", t.task_id);
            order.push(t.task_id);
        }
        pages += 1;
        match reply.next_after {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    assert_eq!(seen.len(), N);
    assert!(pages >= 5, "{pages} pages of at most 1000");
    assert!(order.windows(2).all(|w| w[0] < w[1]), "pages in dispatch (task id) order");

    let (code, out, err) = run_cli(&["--config", &d.config_arg(), "status", &job.to_string(), "--tasks", "3"], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&format!("tasks    {N} in all: {N} completed")), "{out}");
    assert!(out.contains(&format!("task list (3 of {N} shown)")), "{out}");
    assert!(out.contains("more tasks: flotilla status"), "{out}");

    let (written, puts) = writes.totals();
    let retained = retained_bytes(&d).await - retained_before;
    let peak_rss = peak_rss_kib(d.orchestrator.as_ref().expect("orchestrator").pid());
    eprintln!(
        "figures: {N}-task job by plain `task` calls, 2 workers x 64 slots, zero-latency scripted models (debug build): \
         {:.1} s ({:.2} ms per task); jobs bucket: {} bytes written in {} puts ({} bytes and {:.1} puts per task, \
         counted on $KV.flotilla_jobs.>), {} bytes retained ({} per task, stream info before/after); \
         orchestrator peak RSS {} MiB (VmHWM)",
        elapsed.as_secs_f64(),
        elapsed.as_secs_f64() * 1000.0 / N as f64,
        written,
        puts,
        written / N as u64,
        puts as f64 / N as f64,
        retained,
        retained / N as u64,
        peak_rss / 1024,
    );
    // The single-value record wrote the whole job on every change: O(N) per
    // task, megabytes each at this size. A bounded constant now.
    assert!(written / (N as u64) < 8 * 1024, "{written} bytes written for {N} tasks");
}

/// A subagent whose every answer is ~200 KB, over the report budget (the
/// rest goes to the job files) but under a message.
const VERBOSE: &str = r#"
[[turns]]
content = "{% for i in range(4000) %}finding {{ i }}: a long line of detail that makes this report big\n{% endfor %}"
"#;

/// Thirty tasks at once, then an answer naming how many reported.
const PLANNER: &str = r#"
[[turns]]
[[turns.calls]]
tool = "task"
for_each = "range(30)"
args = '{"subagent_type": "verbose", "description": "report everything about part {{ item }}"}'

[[turns]]
content = "{{ last | selectattr('ok') | list | length }} reports"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_whose_reports_are_huge_ends_within_a_minute() {
    let d = Deployment::start(1, |url| {
        let mut c = TestConfig::new(url);
        c.scripted_model("planner", PLANNER).scripted_model("verbose", VERBOSE);
        c.section(
            r#"[planner]
model = "planner"
task_timeout = 60
context_tokens = 100000000
[subagents.verbose]
description = "Writes very long reports."
model = "verbose"
concurrency = 8
"#,
        );
        c
    })
    .await;
    let job = d.submit("report everything").await;
    let d = &d;
    let rec = flotilla_testkit::eventually(Duration::from_secs(60), "the job to end", || async move {
        d.status_opt(job).await.filter(|r| r.status.is_terminal())
    })
    .await;
    match rec.status {
        JobStatus::Completed => {
            assert_eq!(rec.answer.as_deref(), Some("30 reports"), "{:?}", rec.error);
            assert_eq!((rec.tasks_total, rec.task_counts.completed), (30, 30));
            let stored: usize = rec.tasks.iter().map(|t| t.summary.len()).sum();
            eprintln!(
                "figures: 30 reports of ~200 KB each: job completed; {stored} bytes of report summaries kept in 30 task entries"
            );
        }
        status => {
            let error = rec.error.expect("a failed job says why");
            assert!(!error.message.is_empty(), "{status:?} without a reason");
        }
    }
}
