//! Standard output that reports a closed pipe instead of panicking.
//!
//! `println!` panics with "failed printing to stdout: Broken pipe" when the
//! reader went away (`flotilla watch <job> | head -1`): Rust ignores SIGPIPE,
//! so the write fails with `EPIPE` and the macro turns that into a panic.
//! Every command prints through [`outln!`] / [`out!`] instead, which return
//! the `io::Error`; `main` ends the process with exit code 0 and no message
//! when [`is_broken_pipe`] says the command stopped because nobody reads its
//! output any more (what a shell expects of `cmd | head`). Resetting SIGPIPE
//! to its default would also stop the process, but it would die of a signal
//! (status 141 in a shell) rather than exit 0. Test: `tests/e2e/cli_pipe.rs`.

use std::fmt;
use std::io::{self, Write};

/// Writes `args` to stdout and flushes, so a closed pipe shows at this write.
pub fn write(args: fmt::Arguments<'_>) -> io::Result<()> {
    let mut stdout = io::stdout().lock();
    stdout.write_fmt(args)?;
    stdout.flush()
}

/// Prints `value` as one compact JSON line: what every command prints under
/// `--json` (one object per reply, one line per item of a stream;
/// docs/OPERATIONS.md, "Scripting with --json").
pub fn json(value: &impl serde::Serialize) -> anyhow::Result<()> {
    write(format_args!("{}\n", serde_json::to_string(value)?))?;
    Ok(())
}

/// Whether `e` (or one of its causes) is a write to a closed pipe.
pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.downcast_ref::<io::Error>().is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe))
}

/// `print!` that returns `io::Result<()>` instead of panicking.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::commands::out::write(format_args!($($arg)*))
    };
}

/// `println!` that returns `io::Result<()>` instead of panicking.
macro_rules! outln {
    () => {
        $crate::commands::out::write(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::commands::out::write(format_args!("{}\n", format_args!($($arg)*)))
    };
}

pub(crate) use {out, outln};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_closed_pipe_is_recognised_through_context() {
        let e = anyhow::Error::from(io::Error::from(io::ErrorKind::BrokenPipe)).context("printing the table");
        assert!(is_broken_pipe(&e));
        let other = anyhow::Error::from(io::Error::from(io::ErrorKind::PermissionDenied));
        assert!(!is_broken_pipe(&other));
        assert!(!is_broken_pipe(&anyhow::anyhow!("broken pipe, in words only")));
    }
}
