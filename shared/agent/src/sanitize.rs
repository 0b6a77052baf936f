//! One sanitizer for error text that leaves the process towards a model, a
//! report, a heartbeat or another tenant (docs/SECURITY.md, "Sanitized
//! errors"): no stack trace, host path, secret or internal address goes back
//! to a model, into a job record or onto the bus.
//!
//! - [`redact_secrets`] removes secrets only (API keys, bearer tokens, cookies,
//!   URL credentials and query tokens, key=value secrets, private keys, JWTs,
//!   nkey and xkey seeds). It is what logs get: the detail an operator needs,
//!   minus what nobody should read.
//! - [`sanitize`] also removes stack traces, host paths, source locations and
//!   internal URLs and addresses, and bounds the length. It is what models,
//!   reports and heartbeats get.
//! - [`sanitize_logged`] sanitizes and, when that changed anything, logs the
//!   secret-redacted original with the trace id, so the full detail is one
//!   `grep <trace id>` away.
//!
//! What is removed is one table, `rules::RULES` (name, pattern,
//! replacement), compiled once. Patterns are deliberately broad: a false
//! positive costs a model one less detail, a false negative leaks a key. Job
//! file paths (relative, or absolute outside host roots) are kept.
//! `sanitize` is idempotent and its output is at most [`MAX_LEN`] bytes.

mod rules;

use std::sync::LazyLock;

use regex::{Captures, Regex};

use rules::{Class, RULES, Rule};

/// Longest sanitized text in bytes, marker included; the rest is cut
/// (docs/SECURITY.md: errors are bounded).
pub const MAX_LEN: usize = 2000;

/// What replaces a removed secret.
pub const REDACTED: &str = "[redacted]";

/// What ends a cut text.
const TRUNCATED: &str = "… [truncated]";

/// What a text that was nothing but removed detail becomes.
const EMPTY: &str = "internal error (details are in the log)";

/// A table row with its pattern compiled.
struct Compiled {
    rule: &'static Rule,
    re: Regex,
}

/// The table, compiled on first use (a few milliseconds), so a process that
/// never sanitizes an error never holds its automata (docs/PERFORMANCE.md,
/// "Results": they were an idle worker's largest allocation).
static COMPILED: LazyLock<Vec<Compiled>> = LazyLock::new(|| {
    RULES
        .iter()
        .map(|rule| {
            let re = Regex::new(rule.pattern).unwrap_or_else(|e| panic!("sanitizer rule {:?}: {e}", rule.name));
            Compiled { rule, re }
        })
        .collect()
});

fn apply(text: &str, classes: &[Class]) -> String {
    let mut out = text.to_string();
    for c in COMPILED.iter().filter(|c| classes.contains(&c.rule.class)) {
        if !c.re.is_match(&out) {
            continue;
        }
        out =
            c.re.replace_all(&out, |caps: &Captures| {
                let keep = c.rule.guard.is_some_and(|g| !caps.name("v").is_some_and(|v| g(v.as_str())));
                let mut with = String::new();
                if keep {
                    with.push_str(&caps[0]);
                } else {
                    caps.expand(c.rule.with, &mut with);
                }
                with
            })
            .into_owned();
    }
    out
}

/// Removes secrets only (keys, tokens, URL credentials and query tokens); for logs.
pub fn redact_secrets(text: &str) -> String {
    fixpoint(text, &[Class::Secret])
}

/// Removes secrets, stack traces, host paths and internal addresses, and
/// bounds the length; for anything a model, a report or another tenant may read.
pub fn sanitize(text: &str) -> String {
    let once = pass(text);
    if once.len() <= MAX_LEN {
        return once;
    }
    // Cutting can expose a match the cut-off tail prevented (a `\b` that now
    // falls before the marker), so the cut text is sanitized once more.
    let cut_once = cut(&once, MAX_LEN);
    cut(&pass(&cut_once), MAX_LEN)
}

/// Most passes over the table before [`fixpoint`] gives up looking for a
/// fixed point (two are the norm: one that removes, one that finds nothing).
const MAX_ROUNDS: usize = 4;

/// The rules of `classes`, again and again until nothing changes. Rounds
/// matter: a removal can uncover a secret (in `http://[::1]:1Bearer abc`,
/// `Bearer` only starts a word once the address before it is gone).
fn fixpoint(text: &str, classes: &[Class]) -> String {
    let mut out = apply(text, classes);
    for _ in 1..MAX_ROUNDS {
        let next = apply(&out, classes);
        if next == out {
            break;
        }
        out = next;
    }
    out
}

/// Every rule to a fixed point, then blank and repeated trace-marker lines
/// collapsed.
fn pass(text: &str) -> String {
    let out = fixpoint(text, &[Class::Secret, Class::Trace, Class::Host]);
    let mut lines: Vec<&str> = Vec::new();
    for line in out.lines().map(str::trim_end).filter(|l| !l.trim().is_empty()) {
        if line.trim() == "[stack trace removed]" && lines.last().is_some_and(|l| l.trim() == line.trim()) {
            continue;
        }
        lines.push(line);
    }
    let out = lines.join("\n");
    if out.trim().is_empty() { EMPTY.to_string() } else { out }
}

/// [`sanitize`]s `text`; when that changed it, logs the secret-redacted
/// original under `trace_id` so an operator can find the detail.
pub fn sanitize_logged(text: &str, what: &str, trace_id: Option<&str>) -> String {
    let clean = sanitize(text);
    if clean != text {
        tracing::warn!(trace_id = trace_id.unwrap_or("-"), detail = %redact_secrets(text), "{what} sanitized before it left the process");
    }
    clean
}

/// `s` cut to at most `max` bytes, the marker included, on a char boundary.
fn cut(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max - TRUNCATED.len();
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{TRUNCATED}", &s[..end])
}

#[cfg(test)]
mod tests;
