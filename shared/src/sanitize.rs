//! One sanitizer for error text that leaves the process towards a model or a
//! report (seed 000 section 3.4): no stack trace, host path, secret or
//! internal URL goes back to a model, into a job record or onto the bus.
//!
//! - [`redact_secrets`] removes secrets only (API keys, bearer tokens, URL
//!   credentials and query tokens, key=value secrets, private keys, JWTs,
//!   nkey seeds). It is what logs get: the detail an operator needs, minus
//!   what nobody should read.
//! - [`sanitize`] also removes stack traces, host paths, source locations and
//!   internal URLs, and bounds the length. It is what models and reports get.
//! - [`sanitize_logged`] sanitizes and, when that changed anything, logs the
//!   secret-redacted original with the trace id, so the full detail is one
//!   `grep <trace id>` away.
//!
//! Patterns are deliberately broad: a false positive costs a model one less
//! detail, a false negative leaks a key. Job file paths (relative, or under
//! the job's own root) are kept; absolute paths under host roots are not.

use std::sync::LazyLock;

use regex::Regex;

/// Longest sanitized text; the rest is cut (seed 000 section 3.5: bound error length).
pub const MAX_LEN: usize = 2000;

/// What replaces a removed secret.
pub const REDACTED: &str = "[redacted]";

struct Rule {
    re: Regex,
    with: &'static str,
}

fn rules(list: &[(&str, &'static str)]) -> Vec<Rule> {
    list.iter().map(|(re, with)| Rule { re: Regex::new(re).expect("sanitizer pattern"), with }).collect()
}

static SECRETS: LazyLock<Vec<Rule>> = LazyLock::new(|| {
    rules(&[
        // PEM private keys, whole block.
        (
            r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----[\s\S]*?(-----END [A-Z0-9 ]*PRIVATE KEY-----|$)",
            "[redacted private key]",
        ),
        // Credentials in URLs: scheme://user:pass@host and scheme://token@host.
        (r"(?i)\b([a-z][a-z0-9+.\-]*://)[^/\s@]+@", "${1}[redacted]@"),
        // Tokens in query strings.
        (
            r"(?i)([?&;](?:access_token|refresh_token|id_token|token|api[_-]?key|apikey|key|secret|client_secret|password|passwd|pwd|sig|signature|auth|code|session|x-amz-signature|x-amz-credential)=)[^&\s#'\x22]+",
            "${1}[redacted]",
        ),
        // Authorization header values.
        (r"(?i)\b(bearer|basic|token)(\s+)[A-Za-z0-9._~+/=\-]{8,}", "${1}${2}[redacted]"),
        // key: value / key=value secrets, JSON or not.
        (
            r#"(?i)((?:api[_-]?key|apikey|secret(?:[_-]?key)?|client[_-]?secret|password|passwd|pwd|access[_-]?token|auth[_-]?token|refresh[_-]?token|private[_-]?key|x-api-key|authorization)["']?\s*[:=]\s*["']?)(?:bearer\s+|basic\s+)?[^\s"',;&}]+"#,
            "${1}[redacted]",
        ),
        // Well-known key formats, wherever they appear.
        (r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_\-]{16,}", "[redacted]"),
        (r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b", "[redacted]"),
        (r"\bgh[pousr]_[A-Za-z0-9]{20,}\b", "[redacted]"),
        (r"\bxox[abposr]-[A-Za-z0-9\-]{10,}", "[redacted]"),
        (r"\bAIza[0-9A-Za-z_\-]{30,}", "[redacted]"),
        (r"\beyJ[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-]{5,}", "[redacted]"),
        // NATS nkey seeds (user, account, operator, server, cluster).
        (r"\bS[UAOCNP][A-Z2-7]{50,}\b", "[redacted]"),
    ])
});

static TRACES: LazyLock<Vec<Rule>> = LazyLock::new(|| {
    rules(&[
        // Python tracebacks: the header and every frame line with its source line.
        (r"(?m)^\s*Traceback \(most recent call last\):\s*$", "[stack trace removed]"),
        (r#"(?m)^\s*File "[^"]*", line \d+.*(\n\s{4,}\S.*)?$"#, ""),
        // Rust: panics, backtraces and their frames.
        (r"(?m)^.*thread '[^']*' panicked at .*$", "[stack trace removed]"),
        (r"(?m)^\s*stack backtrace:\s*$", "[stack trace removed]"),
        (
            r"(?m)^\s*\d+:\s+(?:0x[0-9a-f]+ - )?(?:[\w<>\[\]{}$.,&*'\- ]*::[\w<>\[\]{}$:.,&*'\- ]*|rust_begin_unwind|__\w+|_start)$",
            "",
        ),
        (r"(?m)^\s*note: run with `RUST_BACKTRACE=.*$", ""),
        // JVM, JavaScript, Go: `at frame (file:line)` and goroutine dumps.
        (r"(?m)^\s+at \S+(?: \(.*\)|:\d+\S*)?\s*$", ""),
        (r"(?m)^\s*goroutine \d+ \[.*$", "[stack trace removed]"),
        // Source locations such as src/tool.rs:12:5 or main.go:42.
        (r"\b[\w./\-]+\.(?:rs|py|go|js|ts|java|rb|c|cc|cpp|h):\d+(?::\d+)?", "[source]"),
    ])
});

static HOST: LazyLock<Vec<Rule>> = LazyLock::new(|| {
    rules(&[
        // URLs to loopback, private, link-local (cloud metadata) and cluster-internal hosts.
        (
            r"(?i)\b[a-z][a-z0-9+.\-]*://(?:\[[0-9a-f:]*\]|localhost|127(?:\.\d{1,3}){3}|0\.0\.0\.0|10(?:\.\d{1,3}){3}|192\.168(?:\.\d{1,3}){2}|172\.(?:1[6-9]|2\d|3[01])(?:\.\d{1,3}){2}|169\.254(?:\.\d{1,3}){2}|[a-z0-9\-]+|[a-z0-9.\-]+\.(?:internal|local|localdomain|lan|corp|svc|cluster\.local|intranet))(?::\d+)?(?:[/?#][^\s'\x22<>]*)?(?P<end>$|[\s'\x22<>),;])",
            "[internal url]${end}",
        ),
        (r"(?i)\bfile://[^\s'\x22<>]*", "[path]"),
        // Absolute paths under host roots, Windows paths and home-relative paths.
        (
            r"(?:/(?:home|root|Users|usr|etc|var|tmp|opt|srv|proc|sys|dev|mnt|run|lib|lib64|bin|sbin|nix|private|app|work|workspace|data|builds|snap)(?:/[^\s'\x22:;,()<>\[\]]*)?)",
            "[path]",
        ),
        (r#"\b[A-Za-z]:\\[^\s'"<>]*"#, "[path]"),
        (r"(?:^|\s)~/[^\s'\x22<>]*", " [path]"),
    ])
});

fn apply(rules: &[Rule], text: &str) -> String {
    let mut out = text.to_string();
    for r in rules {
        if r.re.is_match(&out) {
            out = r.re.replace_all(&out, r.with).into_owned();
        }
    }
    out
}

/// Compiles every pattern now, so the first error of a process is not slowed
/// by regex compilation (call at start-up).
pub fn warm_up() {
    let _ = (SECRETS.len(), TRACES.len(), HOST.len());
}

/// Removes secrets only (keys, tokens, URL credentials and query tokens); for logs.
pub fn redact_secrets(text: &str) -> String {
    apply(&SECRETS, text)
}

/// Removes secrets, stack traces, host paths and internal URLs, and bounds the
/// length; for anything a model, a report or another tenant may read.
pub fn sanitize(text: &str) -> String {
    let out = apply(&SECRETS, text);
    let out = apply(&TRACES, &out);
    let out = apply(&HOST, &out);
    // Collapse what removed lines left behind.
    let mut lines: Vec<&str> = Vec::new();
    for line in out.lines().map(str::trim_end).filter(|l| !l.trim().is_empty()) {
        if line.trim() == "[stack trace removed]" && lines.last().is_some_and(|l| l.trim() == line.trim()) {
            continue;
        }
        lines.push(line);
    }
    let out = lines.join("\n");
    let out = if out.trim().is_empty() { "internal error (details are in the log)".to_string() } else { out };
    cut(&out, MAX_LEN)
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

fn cut(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… [truncated]", &s[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clean(s: &str) -> String {
        let out = sanitize(s);
        for leak in [
            "sk-live",
            "hunter2",
            "s3cr3t",
            "AKIAABCDEFGHIJKLMNOP",
            "ghp_",
            "eyJhbGci",
            "10.0.3.7",
            "169.254",
            "localhost",
            "billing-db",
            "/home/",
            "/root/",
            "/etc/",
            "C:\\",
            "src/main.rs",
            "panicked",
            "Traceback",
            "at com.",
            "MIIE",
            "SUAM",
            "xoxb-",
            "svc.cluster.local",
            "tok3n",
            "/var/",
            "bt0k",
        ] {
            assert!(!out.contains(leak), "{leak:?} survived in {out:?} (from {s:?})");
        }
        out
    }

    #[test]
    fn secrets_never_survive() {
        let nasty = [
            "upstream said 401: Authorization: Bearer sk-live-abcdefghijklmnopqrstuvwx",
            "connect to postgres://admin:hunter2@db.example.com:5432/app failed",
            "GET https://api.example.com/v1/data?user=7&api_key=s3cr3t&x=1 -> 500",
            "GET https://api.example.com/v1/data?access_token=tok3n",
            r#"config {"password": "hunter2", "api_key":"s3cr3t"} rejected"#,
            "AWS key AKIAABCDEFGHIJKLMNOP is not allowed",
            "token ghp_abcdefghijklmnopqrstuvwxyz0123456789 expired",
            "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.abcdefghijk invalid",
            "slack xoxb-1234567890-abcdef failed",
            "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY-----",
            "seed SUAMLK2ZNL35WSMW37E7UD4VZ7ELPKW7DHC3BWBSD2GCZ7IUQQXZIORRBU is invalid",
            "nats://bt0k@nats.example.com:4222 refused",
            "export OPENAI_API_KEY=sk-proj-abcdefghijklmnopqrstuvwxyz",
        ];
        for s in nasty {
            let out = clean(s);
            assert!(out.contains(REDACTED) || out.contains("[redacted"), "{s:?} -> {out:?}");
            // Logs keep the non-secret context.
            assert!(!redact_secrets(s).contains("hunter2"));
        }
        assert!(redact_secrets("connect to postgres://admin:hunter2@db:5432 failed").contains("db:5432"));
    }

    #[test]
    fn stack_traces_paths_and_internal_urls_are_removed() {
        let python = "Traceback (most recent call last):\n  File \"/home/app/tools/billing.py\", line 42, in charge\n    raise KeyError(k)\nKeyError: 'customer'";
        let out = clean(python);
        assert!(out.contains("KeyError: 'customer'"), "{out}");

        let rust = "thread 'tokio-runtime-worker' panicked at src/main.rs:12:5:\nindex out of bounds\nstack backtrace:\n   0: rust_begin_unwind\n   1: core::panicking::panic_fmt\nnote: run with `RUST_BACKTRACE=full` for a verbose backtrace.";
        let out = clean(rust);
        assert!(out.contains("index out of bounds") && out.contains("[stack trace removed]"), "{out}");

        let java = "java.lang.IllegalStateException: closed\n\tat com.acme.Billing.charge(Billing.java:42)\n\tat com.acme.Main.main(Main.java:7)";
        assert_eq!(clean(java), "java.lang.IllegalStateException: closed");

        for (s, keep) in [
            ("cannot open /etc/flotilla/secret.toml: denied", "cannot open [path]: denied"),
            ("read /root/.ssh/id_rsa and /var/lib/x failed", "read [path] and [path] failed"),
            ("open C:\\Users\\bob\\key.txt", "open [path]"),
            ("fetch http://10.0.3.7:8080/admin failed", "fetch [internal url] failed"),
            ("fetch http://169.254.169.254/latest/meta-data", "fetch [internal url]"),
            ("GET http://billing-db:5432/ failed", "GET [internal url] failed"),
            ("GET https://api.billing.svc.cluster.local/v1 timed out", "GET [internal url] timed out"),
            ("http://localhost:3000/x", "[internal url]"),
        ] {
            assert_eq!(clean(s), keep, "{s}");
        }
    }

    #[test]
    fn useful_text_is_kept_and_length_bounded() {
        for s in [
            "revenue must be greater than zero",
            "file reports/north.md not found",
            "see https://docs.example.com/errors#429 and retry in 2s",
            "invalid arguments: /x: \"two\" is not of type \"number\"",
        ] {
            assert_eq!(sanitize(s), s);
        }
        let long = "x".repeat(10 * MAX_LEN);
        assert!(sanitize(&long).len() < MAX_LEN + 20);
        assert_eq!(sanitize("   at foo (bar.js:1:2)"), "internal error (details are in the log)");
    }
}
