//! Job files through real processes: the planner and two worker processes share
//! one job's files, and a report over 1 MiB travels by reference.

use std::collections::HashSet;

use flotilla_protocol::digest::sha256_hex;
use flotilla_protocol::{JobStatus, TaskStatus};
use flotilla_testkit::{EventLog, TestConfig};

use flotilla_testkit::{Deployment, TIMEOUT};

const SCRIBE: &str = r#"
latency_ms = 300
[vars]
w = "captures(input, 'write (/[^ ]+) with (.+)$')"

[[turns]]
[[turns.calls]]
tool = "write_file"
args = '{"path": {{ w[0][1] | tojson }}, "content": {{ w[0][2] | tojson }}}'

[[turns]]
content = "{% if last[0].ok %}{{ last[0].value }}{% else %}failed: {{ last[0].error.message }}{% endif %}"
"#;

const SHARING_PLANNER: &str = r#"
[[turns]]
[[turns.calls]]
tool = "task"
args = '{"subagent_type": "scribe", "description": "write /shared/a.md with alpha from one worker"}'
[[turns.calls]]
tool = "task"
args = '{"subagent_type": "scribe", "description": "write /shared/b.md with beta from another"}'

[[turns]]
[[turns.calls]]
tool = "ls"
args = '{"path": "/shared"}'
[[turns.calls]]
tool = "read_file"
args = '{"path": "/shared/a.md"}'
[[turns.calls]]
tool = "read_file"
args = '{"path": "/shared/b.md"}'
[[turns.calls]]
tool = "write_file"
args = '{"path": "/shared/c.md", "content": "planner"}'

[[turns]]
content = "tasks={{ results[0].value }};{{ results[1].value }} ls={{ results[2].value.entries | map(attribute='path') | join(',') }} a={{ results[3].value }}b={{ results[4].value }}write={% if results[5].ok %}ok{% else %}{{ results[5].error.message }}{% endif %}"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn planner_and_two_workers_see_the_same_job_files() {
    let d = Deployment::start(2, |url| {
        let mut c = TestConfig::new(url);
        c.scripted_model("planner", SHARING_PLANNER).scripted_model("scribe", SCRIBE);
        c.section(
            r#"[planner]
model = "planner"
task_timeout = 60
[subagents.scribe]
description = "Writes files."
model = "scribe"
tools = ["write_file", "read_file"]
concurrency = 1
default_permission = "deny"
permissions = [{ operations = ["read", "write"], paths = ["/shared/**"], mode = "allow" }]
"#,
        );
        c
    })
    .await;
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let job = d.submit("share files").await;
    let end = log.job_end(TIMEOUT).await;
    assert_eq!(end["event"], "completed", "{end}");
    let rec = d.status(job).await;
    assert_eq!(rec.status, JobStatus::Completed);
    let answer = rec.answer.unwrap();
    assert!(answer.starts_with("tasks=created /shared/a.md (21 bytes);created /shared/b.md (17 bytes) "), "{answer}");
    assert!(answer.contains(" ls=/shared/a.md,/shared/b.md "), "{answer}");
    assert!(answer.contains("a=     1\talpha from one worker\nb=     1\tbeta from another\n"), "{answer}");
    // The planner's tools are read-only by default: write_file is not even offered.
    assert!(
        answer.contains(
            "write=unknown tool \"write_file\"; available tools: cancel_task, check_tasks, glob, grep, ls, \
             map_tasks, message_task, read_file, start_task, task, wait_tasks, write_todos"
        ),
        "{answer}"
    );
    let workers: HashSet<_> = rec.tasks.iter().map(|t| t.worker_id.clone().unwrap()).collect();
    assert_eq!(workers.len(), 2, "each file written by a different worker process: {:?}", rec.tasks);
}

/// 40 000 lines of ~48 bytes: about 1.9 MB, over the 1 MiB NATS payload.
const WRITER: &str = r#"
[[turns]]
content = "{% for i in range(40000) %}report line {{ i }}: lorem ipsum dolor sit amet\n{% endfor %}"
"#;

const READING_PLANNER: &str = r#"
[[turns]]
[[turns.calls]]
tool = "task"
args = '{"subagent_type": "writer", "description": "write the big report"}'

[[turns]]
[[turns.calls]]
tool = "read_file"
args = '{"path": {{ last[0].value.report_file.path | tojson }}, "offset": 39999, "limit": 5}'
[[turns.calls]]
tool = "grep"
args = '{"pattern": "^report line 31337:", "path": {{ last[0].value.report_file.path | tojson }}, "output_mode": "content"}'

[[turns]]
content = "size={{ results[0].value.report_file.size_bytes }} sha={{ results[0].value.report_file.sha256 }} lines={{ results[0].value.report_file.lines }} last={{ results[1].value }} grep={{ results[2].value.matches[0].line }}"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_over_1mib_is_delivered_by_reference() {
    let d = Deployment::start(1, |url| {
        let mut c = TestConfig::new(url);
        c.scripted_model("planner", READING_PLANNER).scripted_model("writer", WRITER);
        c.section(
            r#"[planner]
model = "planner"
task_timeout = 60
[subagents.writer]
description = "Writes long reports."
model = "writer"
"#,
        );
        c
    })
    .await;
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let job = d.submit("big report please").await;
    let end = log.job_end(TIMEOUT).await;
    assert_eq!(end["event"], "completed", "{end}");
    let rec = d.status(job).await;
    let expected: String = (0..40000).map(|i| format!("report line {i}: lorem ipsum dolor sit amet\n")).collect();
    assert!(expected.len() > 1024 * 1024);
    let answer = rec.answer.unwrap();
    assert!(
        answer.starts_with(&format!("size={} sha={} lines=40000 ", expected.len(), sha256_hex(expected.as_bytes()))),
        "{answer}"
    );
    assert!(answer.contains("last= 40000\treport line 39999: lorem ipsum dolor sit amet\n grep=31338"), "{answer}");
    let task = &rec.tasks[0];
    assert_eq!(task.status, Some(TaskStatus::Completed));
    assert!(task.summary.starts_with("report line 0: lorem"), "{}", task.summary);
    let reference = format!("[full report: /reports/{}.md ({} bytes)]", task.task_id, expected.len());
    assert!(task.summary.ends_with(&reference), "{}", task.summary);
    assert!(task.summary.len() < 2000, "the job record keeps only the head");
}

/// A report that carried its whole text is written to `/reports/<task>.md`
/// by the orchestrator after consolidating it, not by the worker on the
/// task's path (docs/TOOLS.md, "Job inputs and reports"); a read that finds
/// no stored file, because the write has not landed or was lost, is served
/// from the task's record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_file_is_derived_from_the_record_and_served_from_it_when_missing() {
    use flotilla_config::FilesConfig;
    use flotilla_job_files::{FilePath, report_path};
    let d = Deployment::start(1, |url| TestConfig::demo(url, 1, 0)).await;
    d.orchestrator_ready().await;
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let ty = flotilla_protocol::ids::SubagentType::new("finance").unwrap();
    let description = "Compute the gross margin of region north: revenue 120, cost 75.";
    let job = d.client().submit_task(ty, description.into(), Vec::new()).await.unwrap();
    let end = log.job_end(TIMEOUT).await;
    assert_eq!(end["event"], "completed", "{end}");
    let rec = d.status(job).await;
    let task = rec.tasks[0].task_id;
    let path: FilePath = report_path(&task);
    let files = d.bus.job_files(&FilesConfig::default()).await.unwrap();
    flotilla_testkit::eventually(TIMEOUT, "the report file to be stored", || async {
        files.stat(&job, &path).await.unwrap().map(|_| ())
    })
    .await;
    let (stored, sha) = d.client().download(job, path.as_str()).await.unwrap();
    assert_eq!(stored, b"0.375");
    assert_eq!(sha, sha256_hex(b"0.375"));

    assert!(files.delete(&job, &path).await.unwrap(), "the stored file is gone");
    let (served, _) = d.client().download(job, path.as_str()).await.expect("served from the record");
    assert_eq!(served, b"0.375");
    let missing = d.client().download(job, "/reports/q2.md").await.unwrap_err();
    assert!(format!("{missing:#}").contains("not found") || format!("{missing:#}").contains("no file"), "{missing:#}");
}
