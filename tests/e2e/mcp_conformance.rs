//! Issue 3: the official MCP conformance suite (`@modelcontextprotocol/
//! conformance` 0.1.13 from npm, installed by `scripts/install-deps --test`)
//! in client mode, against `mcp-conformance-client`, a thin binary over
//! Flotilla's own MCP client. The suite starts each scenario's server on a
//! loopback port, runs the client with its URL, and grades what it received;
//! this test reads the suite's `checks.json` for every non-auth scenario.

use std::path::{Path, PathBuf};
use std::time::Duration;

use flotilla_tests::{TempDir, bin};
use serde_json::Value;

fn suite() -> PathBuf {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../.flotilla/test-deps/npm/node_modules/@modelcontextprotocol/conformance/dist/index.js");
    assert!(p.is_file(), "{} is missing: run `scripts/install-deps --test`", p.display());
    p
}

/// Runs one scenario; returns `(check id, status, error message)` per graded check.
async fn run(scenario: &str, out: &Path) -> Vec<(String, String, String)> {
    let client = bin("mcp-conformance-client");
    let dir = out.join(scenario);
    let run = tokio::process::Command::new("node")
        .arg(suite())
        .args(["client", "--scenario", scenario, "--timeout", "30000", "--command"])
        .arg(&client)
        .arg("-o")
        .arg(&dir)
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(90), run)
        .await
        .unwrap_or_else(|_| panic!("scenario {scenario} did not finish in 90 s"))
        .expect("node runs");
    let log = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    let result_dir = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{scenario}: no results in {}: {e}\n{log}", dir.display()))
        .next()
        .expect("one result dir")
        .unwrap()
        .path();
    let checks: Vec<Value> = serde_json::from_slice(&std::fs::read(result_dir.join("checks.json")).unwrap()).unwrap();
    checks
        .iter()
        .filter(|c| c["status"] == "SUCCESS" || c["status"] == "FAILURE" || c["status"] == "WARNING")
        .map(|c| {
            (
                c["id"].as_str().unwrap_or_default().to_string(),
                c["status"].as_str().unwrap_or_default().to_string(),
                c["errorMessage"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

fn all_pass(scenario: &str, checks: &[(String, String, String)]) {
    assert!(!checks.is_empty(), "{scenario}: no graded checks");
    for (id, status, err) in checks {
        assert_eq!(status, "SUCCESS", "{scenario}: check {id} {status}: {err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_conformance_suite_passes_its_client_scenarios() {
    let out = TempDir::new("conformance");

    // tools/call over Streamable HTTP, graded by the server that received it.
    let tools = run("tools_call", out.path()).await;
    all_pass("tools_call", &tools);
    assert!(tools.iter().any(|(id, ..)| id == "tool-add-numbers"), "{tools:?}");

    // SEP-1699: the client honours the SSE `retry` field and resumes with Last-Event-ID.
    let sse = run("sse-retry", out.path()).await;
    all_pass("sse-retry", &sse);
    assert_eq!(sse.len(), 3, "{sse:?}");

    // initialize: Flotilla offers 2025-11-25, the newest version that still
    // has an `initialize` handshake (rmcp's default, 2026-07-28, has none).
    let init = run("initialize", out.path()).await;
    all_pass("initialize", &init);

    // Elicitation is not offered to servers (subagents run unattended), so the
    // client declines and the SEP-1034 defaults scenario cannot pass.
    let elicit = run("elicitation-sep1034-client-defaults", out.path()).await;
    assert!(
        elicit.iter().any(|(id, status, err)| id == "client-elicitation-sep1034-general"
            && status == "FAILURE"
            && err.contains("got 'decline'")),
        "{elicit:?}"
    );
}
