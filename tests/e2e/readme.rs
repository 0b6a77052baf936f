//! The README tells the truth: every `flotilla` command line it shows parses
//! with the flags it shows (checked against the binary's own `--help`), and
//! its demo output is what `flotilla demo` prints (times, ids, durations and
//! worker names aside).

use std::path::Path;

use flotilla_testkit::proc::run_cli;
use flotilla_testkit::{TempDir, free_port};
use regex::Regex;

fn readme() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md")).expect("read README.md")
}

/// The lines of the README's fenced blocks whose info string is `info`.
fn blocks(text: &str, info: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    // The open block: its info string and its lines so far.
    let mut open: Option<(String, Vec<String>)> = None;
    for line in text.lines() {
        match (open.take(), line.strip_prefix("```")) {
            (None, Some(rest)) => open = Some((rest.trim().to_string(), Vec::new())),
            (None, None) => {}
            (Some((block, lines)), Some(_)) => out.extend((block == info).then_some(lines)),
            (Some((block, mut lines)), None) => {
                lines.push(line.to_string());
                open = Some((block, lines));
            }
        }
    }
    out
}

/// Each `flotilla …` invocation on a shell line, comments cut, `a|b`
/// subcommand alternatives expanded: the words before the first argument
/// and every `--flag`.
fn invocations(line: &str) -> Vec<(Vec<String>, Vec<String>)> {
    let code = line.split(" #").next().unwrap_or_default();
    if code.trim_start().starts_with('#') {
        return vec![];
    }
    let flag = Regex::new(r"(?:^|\s|\[)(--[a-z][a-z-]*)").unwrap();
    let mut out = Vec::new();
    for part in code.split(" / ").flat_map(|p| p.split("&&")) {
        let Some(at) = part.split_whitespace().position(|w| w == "flotilla" || w.ends_with("/flotilla")) else {
            continue;
        };
        let words: Vec<&str> = part.split_whitespace().skip(at + 1).collect();
        let mut i = 0;
        // Global `-c <file>` / `--config <file>` before the subcommand.
        while i < words.len() && (words[i] == "-c" || words[i] == "--config") {
            i += 2;
        }
        let path: Vec<&str> = words[i.min(words.len())..]
            .iter()
            .take_while(|w| w.chars().all(|c| c.is_ascii_lowercase() || c == '-' || c == '|') && !w.starts_with('-'))
            .copied()
            .collect();
        let flags: Vec<String> = flag.captures_iter(part).map(|c| c[1].to_string()).collect();
        let alternatives: Vec<Vec<String>> = path.iter().map(|w| w.split('|').map(str::to_string).collect()).collect();
        let mut paths: Vec<Vec<String>> = vec![vec![]];
        for alts in alternatives {
            paths =
                paths.iter().flat_map(|p| alts.iter().map(move |a| [p.clone(), vec![a.clone()]].concat())).collect();
        }
        out.extend(paths.into_iter().map(|p| (p, flags.clone())));
    }
    out
}

/// `flotilla <words…> --help` of the longest prefix of `words` that is a
/// subcommand (the rest are positional values such as `bash`).
fn help(words: &[String]) -> (String, String) {
    for n in (0..=words.len()).rev() {
        let prefix = &words[..n];
        let mut args: Vec<&str> = prefix.iter().map(String::as_str).collect();
        args.push("--help");
        let (code, out, _) = run_cli(&args, &[]);
        let usage = format!("Usage: flotilla {}", prefix.join(" "));
        if code == 0 && out.contains(usage.trim_end()) {
            return (prefix.join(" "), out);
        }
    }
    unreachable!("`flotilla --help` always works")
}

#[tokio::test]
async fn every_command_line_in_the_readme_parses_with_the_flags_it_shows() {
    let text = readme();
    let mut checked = 0;
    let mut wrong = Vec::new();
    for line in blocks(&text, "sh").concat() {
        for (words, flags) in invocations(&line) {
            let (command, help) = help(&words);
            if command.is_empty() && !words.is_empty() {
                wrong.push(format!("`flotilla {}` is not a command: {line}", words.join(" ")));
                continue;
            }
            for f in flags.iter().filter(|f| !help.contains(f.as_str())) {
                wrong.push(format!("`flotilla {command}` has no {f}: {line}"));
            }
            checked += 1;
        }
    }
    assert!(checked >= 30, "the README's command lines were found ({checked})");
    assert!(wrong.is_empty(), "README command lines the binary refuses:\n  {}", wrong.join("\n  "));
}

#[test]
fn the_line_reader_finds_commands_flags_and_alternatives() {
    let got = invocations("flotilla files ls|get <job> [/reports/] [--json]     # path, --not-this");
    assert_eq!(
        got,
        vec![
            (vec!["files".to_string(), "ls".to_string()], vec!["--json".to_string()]),
            (vec!["files".to_string(), "get".to_string()], vec!["--json".to_string()]),
        ]
    );
    let got = invocations("scripts/install-deps && cargo build --bins && target/debug/flotilla demo");
    assert_eq!(got, vec![(vec!["demo".to_string()], vec![])]);
    let got = invocations("flotilla -c deploy/local/flotilla.toml mcp call finance gross_margin '{}'");
    assert_eq!(got[0].0, ["mcp", "call", "finance"]);
}

/// Times, ids, durations and worker names vary run to run; the rest of a
/// demo line (token counts, tool names, the table) does not.
fn normalise(line: &str) -> String {
    let rules = [
        (r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", "<time>"),
        (r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "<job>"),
        (r"\b[0-9a-f]{8}\b", "<task>"),
        (r"\d+ ms\b", "<n> ms"),
        (r"local-\d+", "<worker>"),
    ];
    rules.iter().fold(line.trim_end().to_string(), |l, (re, to)| Regex::new(re).unwrap().replace_all(&l, *to).into())
}

#[tokio::test]
async fn the_readme_demo_output_is_what_the_demo_prints() {
    let text = readme();
    let shown = blocks(&text, "")
        .into_iter()
        .find(|b| b.iter().any(|l| l.starts_with("submitted job")))
        .expect("the README shows the demo's output in a plain ``` block");
    let state = TempDir::new("readme-demo");
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/local/flotilla.toml");
    let nats = format!("nats://127.0.0.1:{}", free_port());
    let state_dir = state.path().to_str().unwrap().to_string();
    let (code, out, err) = tokio::task::spawn_blocking(move || {
        let env = [
            ("FLOTILLA_NATS__URL", nats.as_str()),
            ("FLOTILLA_DASHBOARD__LISTEN", "127.0.0.1:0"),
            ("FLOTILLA_METRICS__ORCHESTRATOR", "127.0.0.1:0"),
            ("FLOTILLA_LOCAL__STATE_DIR", state_dir.as_str()),
        ];
        run_cli(&["-c", config.to_str().unwrap(), "demo"], &env)
    })
    .await
    .unwrap();
    assert_eq!(code, 0, "the demo completes\nstdout:\n{out}\nstderr:\n{err}");
    let printed: Vec<String> = out.lines().map(normalise).collect();
    let mut missing = Vec::new();
    for line in shown.iter().filter(|l| l.trim() != "…" && !l.trim().is_empty()) {
        let want = normalise(line);
        let found = match want.strip_suffix('…') {
            // A line the README cuts short matches the printed line it starts.
            Some(start) => printed.iter().any(|p| p.starts_with(start)),
            None => printed.contains(&want),
        };
        if !found {
            missing.push(line.clone());
        }
    }
    assert!(
        missing.is_empty(),
        "README demo lines the demo does not print:\n  {}\n\nit printed:\n{out}",
        missing.join("\n  ")
    );
}
