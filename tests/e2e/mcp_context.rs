//! App-controlled MCP context (docs/MCP.md). A subagent
//! type takes its system prompt from finance-tools' `analyst` prompt (argument
//! rendered from the task description) and gets the `finance://rules/...`
//! resource appended, through real worker, orchestrator, NATS and MCP server
//! processes; an unknown resource and a server that cannot start fail their
//! tasks with errors naming the server and the resource.

use flotilla_protocol::JobStatus;
use flotilla_testkit::{EventLog, TestConfig, bin};

use flotilla_testkit::{Deployment, TIMEOUT};

/// Plans three tasks (one per type), then prints each outcome.
const PLANNER: &str = r#"
[[turns]]
[[turns.calls]]
tool = "task"
args = '{"subagent_type": "analyst", "description": "margins of north"}'
[[turns.calls]]
tool = "task"
args = '{"subagent_type": "missing", "description": "anything"}'
[[turns.calls]]
tool = "task"
args = '{"subagent_type": "down", "description": "anything"}'

[[turns]]
content = '''{% for r in last %}=== {{ loop.index }} {% if r.ok %}OK {{ r.value }}{% else %}FAILED {{ r.error.kind }}: {{ r.error.message }}{% endif %}
{% endfor %}'''
"#;

/// Echoes what the model receives on its first call.
const ECHO: &str = r#"
[[turns]]
content = '''SYSTEM<<{{ system }}>> INPUT<<{{ input }}>>'''
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subagent_starts_with_the_mcp_prompt_and_resource_and_bad_context_fails_its_task() {
    let finance = bin("finance-tools").display().to_string();
    let d = Deployment::start(1, |url| {
        let mut c = TestConfig::new(url);
        // One delivery: a server that cannot start fails the task now, not after retries.
        c.nats(5, 1);
        c.scripted_model("planner", PLANNER).scripted_model("echo", ECHO);
        c.section(&format!(
            r#"[planner]
model = "planner"
task_timeout = 60
[mcp_servers.finance]
command = "{finance}"
[mcp_servers.gone]
command = "/nonexistent/mcp-server"
init_timeout = 2
[subagents.analyst]
description = "Finance analyst."
model = "echo"
mcp_resources = ["finance/finance://rules/gross-margin"]
mcp_prompt = {{ server = "finance", name = "analyst", arguments = {{ task = "Report: {{{{ task }}}}", audience = "the CFO" }} }}
[subagents.missing]
description = "Names a resource the server lacks."
model = "echo"
system_prompt = "static"
mcp_resources = ["finance/finance://rules/nope"]
[subagents.down]
description = "Names a server that cannot start."
model = "echo"
mcp_resources = ["gone/finance://rules/gross-margin"]
"#
        ));
        c
    })
    .await;
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let job = d.submit("Check the MCP context of each type.").await;
    let end = log.job_end(TIMEOUT).await;
    assert_eq!(end["event"], "completed", "{end}");
    let rec = d.status(job).await;
    assert_eq!(rec.status, JobStatus::Completed, "{rec:?}");
    let answer = rec.answer.clone().unwrap_or_default();
    let parts: Vec<&str> = answer.split("=== ").skip(1).collect();
    assert_eq!(parts.len(), 3, "{answer}");

    // The prompt (its `task` argument rendered from the description) is the
    // system prompt, the resource text follows it, the input is untouched.
    let analyst = parts[0];
    assert!(
        analyst.starts_with(
            "1 OK SYSTEM<<You are a finance analyst writing for the CFO. Use the finance tools for every figure; \
             never compute a margin yourself. Your assignment: Report: margins of north\n\n\
             # Reference material (loaded from MCP resources before this task)\n\n\
             ## finance://rules/gross-margin (finance)\n\
             House rules for margin reports: gross margin is (revenue - cost) / revenue"
        ),
        "{analyst}"
    );
    assert!(analyst.contains(">> INPUT<<margins of north>>"), "{analyst}");

    // An unknown resource: the server's refusal, naming server and URI; no
    // model call. (The planner sees URIs redacted by the egress sanitizer; the
    // worker log has them.)
    let missing = parts[1];
    assert!(missing.starts_with("2 FAILED not_found: task "), "{missing}");
    assert!(
        missing.contains(
            "(missing) failed: cannot load MCP resource \"[internal url]\" from server `finance`: \
             MCP server `finance` refused the request (-32002)"
        ),
        "{missing}"
    );
    assert!(!missing.contains("SYSTEM<<"), "{missing}");
    let worker = d.workers[0].log();
    assert!(worker.contains("cannot load MCP resource \"finance://rules/nope\" from server `finance`"), "{worker}");

    // A server that cannot start: a clear transient error, reported after the
    // last delivery (max_deliver = 1 here), never a hang.
    let down = parts[2];
    assert!(
        down.starts_with("3 FAILED transient: ")
            && down.contains("(down) failed: cannot load MCP resource")
            && down
                .contains("from server `gone`: MCP server `gone` is unavailable: cannot start /nonexistent/mcp-server"),
        "{down}"
    );
}
