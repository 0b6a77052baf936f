//! The CLI in a shell pipeline. `flotilla watch <job> | head -1`
//! and `flotilla submit --wait ... | head -1` used to panic ("failed printing
//! to stdout: Broken pipe", exit 101) once `head` had its line and closed the
//! pipe. Every command now stops at the first write nobody reads and exits 0
//! without a word on stderr (`orchestrator/cli/src/commands/out.rs`). Real processes:
//! nats-server, orchestrator, workers and the `flotilla` binary, its stdout an
//! OS pipe the test closes.

use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};

use flotilla_testkit::{TestConfig, bin};

use flotilla_testkit::Deployment;

/// Runs `flotilla <args>` with stdout a pipe; reads the first line, closes
/// the pipe (what `head -1` does) and waits. Returns the line and the output
/// (status and stderr).
fn first_line_then_close(args: &[&str]) -> (String, Output) {
    let (reader, writer) = std::io::pipe().expect("pipe");
    let child = cli(args).stdout(writer).spawn().expect("run flotilla");
    let mut first = String::new();
    BufReader::new(reader).read_line(&mut first).expect("first line");
    // The reader is dropped here: the pipe has no reader any more.
    (first, child.wait_with_output().expect("wait for flotilla"))
}

/// Runs `flotilla <args>` with stdout a pipe whose reader is already gone,
/// so the very first write fails (`flotilla status ... | true`).
fn closed_from_the_start(args: &[&str]) -> Output {
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    cli(args).stdout(writer).spawn().expect("run flotilla").wait_with_output().expect("wait for flotilla")
}

fn cli(args: &[&str]) -> Command {
    let mut c = Command::new(bin("flotilla"));
    // Default log level (warn): stderr stays empty unless something is wrong.
    c.args(args).env_remove("RUST_LOG").stdin(Stdio::null()).stderr(Stdio::piped());
    c
}

/// Exit status 0 and nothing on stderr (no panic, no "Broken pipe" error).
fn assert_quiet_success(what: &str, out: &Output) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{what}: {}\nstderr: {err}", out.status);
    assert!(err.is_empty(), "{what}: nothing on stderr, got: {err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_commands_exit_0_quietly_when_stdout_closes() {
    let d = Deployment::start(2, |url| TestConfig::demo(url, 2, 0)).await;
    let cfg = d.config_arg();
    // Wait until the orchestrator answers (the CLI itself does not retry).
    d.submit("x: revenue 10, cost 5").await;

    // `submit --wait | head -1`: the answer's first line is read (the job id
    // goes to stderr, the only line there), the rest meets a closed pipe.
    let (first, out) = first_line_then_close(&["--config", &cfg, "submit", "--wait", "north: revenue 120, cost 75"]);
    assert!(first.starts_with('|'), "the answer's first line: {first:?}");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let job = err.strip_prefix("job ").map(str::trim).unwrap_or_default().to_string();
    assert!(job.parse::<uuid::Uuid>().is_ok() && err.lines().count() == 1, "stderr holds the job id alone: {err:?}");
    assert_eq!(out.status.code(), Some(0), "submit --wait | head -1: {}", out.status);
    let rec = d.status(job.parse().unwrap()).await;
    assert_eq!(rec.status.as_str(), "completed", "the job ran to its end: {rec:?}");

    // `watch <finished job> | head -1`: the replay goes on after the first line.
    let (first, out) = first_line_then_close(&["--config", &cfg, "watch", &job]);
    assert!(first.contains("already completed"), "{first}");
    assert_quiet_success("watch <job> | head -1", &out);

    // Every printing command, its pipe closed before it writes anything.
    let commands: [&[&str]; 8] = [
        &["watch", &job],
        &["watch", &job, "--json"],
        &["status", &job],
        &["status", &job, "--json"],
        &["jobs"],
        &["workers"],
        &["approvals"],
        &["submit", "y: revenue 2, cost 1"],
    ];
    for args in commands {
        let mut all = vec!["--config", cfg.as_str()];
        all.extend_from_slice(args);
        assert_quiet_success(&args.join(" "), &closed_from_the_start(&all));
    }
}
