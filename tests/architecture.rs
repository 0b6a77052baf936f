//! The crate graph matches docs/ARCHITECTURE.md.
//!
//! The document's two machine-read tables ("Crates and what they may depend
//! on", between `crate-graph` markers, and "Crates only some may use
//! directly", between `direct-deps` markers) are the rules; this test checks
//! them against the manifests (`cargo metadata --no-deps`), so the document
//! cannot drift from the code:
//!
//! - every workspace package has a row, at the path the row names;
//! - a package's non-optional normal dependencies on workspace packages are
//!   among the row's "may depend on";
//! - nothing in a package's reach (itself and every workspace package it
//!   depends on, transitively) declares a crate of its "must not reach";
//! - an external crate of the second table is declared only by the
//!   packages that table names.
//!
//! Optional dependencies and dev-dependencies are outside the rules: a
//! feature such as a provider's `test-server` fake endpoint or the tests'
//! own helpers do not ship in a product binary.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// One package's declared dependencies, as the rules see them.
struct Package {
    /// Directory of the manifest, relative to the workspace root.
    path: PathBuf,
    /// Names of its non-optional normal dependencies (workspace or not).
    deps: BTreeSet<String>,
}

struct Row {
    path: String,
    may: BTreeSet<String>,
    must_not: BTreeSet<String>,
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ has a parent").to_path_buf()
}

fn packages(root: &Path) -> BTreeMap<String, Package> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["metadata", "--no-deps", "--format-version", "1", "--offline"])
        .current_dir(root)
        .output()
        .expect("run cargo metadata");
    assert!(out.status.success(), "cargo metadata failed: {}", String::from_utf8_lossy(&out.stderr));
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON");
    let mut packages = BTreeMap::new();
    for p in meta["packages"].as_array().expect("packages") {
        let manifest = Path::new(p["manifest_path"].as_str().expect("manifest_path"));
        let dir = manifest.parent().expect("manifest has a directory");
        let deps = p["dependencies"]
            .as_array()
            .expect("dependencies")
            .iter()
            .filter(|d| d["kind"].is_null() && !d["optional"].as_bool().unwrap_or(false))
            .map(|d| d["name"].as_str().expect("dependency name").to_string())
            .collect();
        packages.insert(
            p["name"].as_str().expect("name").to_string(),
            Package { path: dir.strip_prefix(root).unwrap_or(dir).to_path_buf(), deps },
        );
    }
    packages
}

/// The rows of the markdown table between `<!-- {name}:begin -->` and
/// `<!-- {name}:end -->`, header and separator skipped, cells trimmed.
fn table(doc: &str, name: &str) -> Vec<Vec<String>> {
    let begin = format!("<!-- {name}:begin -->");
    let end = format!("<!-- {name}:end -->");
    let start = doc.find(&begin).unwrap_or_else(|| panic!("docs/ARCHITECTURE.md has no `{begin}` marker"));
    let stop = doc[start..].find(&end).unwrap_or_else(|| panic!("docs/ARCHITECTURE.md has no `{end}` marker"));
    doc[start + begin.len()..start + stop]
        .lines()
        .filter(|l| l.trim_start().starts_with('|'))
        .skip(2)
        .map(|l| l.trim().trim_matches('|').split('|').map(|c| c.trim().to_string()).collect())
        .collect()
}

/// The backticked names in a cell: "`a`, `b` (why)" is {a, b}.
fn names(cell: &str) -> BTreeSet<String> {
    cell.split('`').skip(1).step_by(2).map(str::to_string).collect()
}

fn rules(doc: &str) -> BTreeMap<String, Row> {
    table(doc, "crate-graph")
        .into_iter()
        .map(|cells| {
            assert_eq!(cells.len(), 4, "a crate-graph row has 4 cells: {cells:?}");
            let name = names(&cells[0]).into_iter().next().unwrap_or_else(|| panic!("no crate name in {cells:?}"));
            let path = names(&cells[1]).into_iter().next().unwrap_or_default();
            (
                name,
                Row { path: path.trim_end_matches('/').to_string(), may: names(&cells[2]), must_not: names(&cells[3]) },
            )
        })
        .collect()
}

/// `name` and every workspace package it depends on, transitively.
fn reach<'a>(name: &'a str, packages: &'a BTreeMap<String, Package>) -> BTreeSet<&'a str> {
    let mut seen = BTreeSet::new();
    let mut todo = vec![name];
    while let Some(n) = todo.pop() {
        if seen.insert(n) {
            todo.extend(packages[n].deps.iter().filter(|d| packages.contains_key(*d)).map(String::as_str));
        }
    }
    seen
}

#[test]
fn the_crate_graph_is_the_one_docs_architecture_draws() {
    let root = workspace_root();
    let doc = std::fs::read_to_string(root.join("docs/ARCHITECTURE.md")).expect("read docs/ARCHITECTURE.md");
    let packages = packages(&root);
    let rules = rules(&doc);
    let mut wrong = Vec::new();

    for (name, package) in &packages {
        let Some(row) = rules.get(name) else {
            wrong.push(format!("`{name}` ({}) has no row in the crate table", package.path.display()));
            continue;
        };
        if Path::new(&row.path) != package.path {
            wrong.push(format!("`{name}` lives at {}, the table says {}", package.path.display(), row.path));
        }
        for dep in package.deps.iter().filter(|d| packages.contains_key(*d)) {
            if !row.may.contains(dep) {
                wrong.push(format!("`{name}` depends on `{dep}`, which its row does not allow"));
            }
        }
        for member in reach(name, &packages) {
            for banned in packages[member].deps.iter().filter(|d| row.must_not.contains(*d)) {
                let via = if member == name { String::new() } else { format!(" (through `{member}`)") };
                wrong.push(format!("`{name}` reaches `{banned}`{via}, which its row forbids"));
            }
        }
    }
    for name in rules.keys().filter(|n| !packages.contains_key(*n)) {
        wrong.push(format!("the crate table names `{name}`, which is not a workspace package"));
    }

    for cells in table(&doc, "direct-deps") {
        assert_eq!(cells.len(), 2, "a direct-deps row has 2 cells: {cells:?}");
        let external = names(&cells[0]).into_iter().next().unwrap_or_else(|| panic!("no crate name in {cells:?}"));
        let allowed = names(&cells[1]);
        for (name, package) in &packages {
            if package.deps.contains(&external) && !allowed.contains(name) {
                wrong.push(format!("`{name}` depends on `{external}` directly; only {allowed:?} may"));
            }
        }
    }

    assert!(wrong.is_empty(), "docs/ARCHITECTURE.md and the manifests disagree:\n  {}", wrong.join("\n  "));
}

#[test]
fn the_table_reader_sees_names_and_rows() {
    let doc = "x\n<!-- t:begin -->\n| a | b |\n|---|---|\n| `one` | `two`, `three` (why) |\n<!-- t:end -->\n";
    let rows = table(doc, "t");
    assert_eq!(rows, vec![vec!["`one`".to_string(), "`two`, `three` (why)".to_string()]]);
    assert_eq!(names(&rows[0][1]), BTreeSet::from(["two".to_string(), "three".to_string()]));
}
