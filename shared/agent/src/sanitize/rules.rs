//! The sanitizer's one table of rules: what each removes and what replaces
//! it. Rules run in table order, so a rule may rely on what earlier rules left
//! (secrets go before hosts: `postgres://admin:pw@db:5432` first loses its
//! password, then its internal host).
//!
//! Every rule must be idempotent on its own output (its replacement never
//! matches again), because [`super::sanitize`] promises
//! `sanitize(sanitize(x)) == sanitize(x)`; the property tests in
//! `shared/agent/src/sanitize/tests.rs` check that.
//!
//! A rule may carry a guard: a check on the named group `v` of a match that
//! keeps the match unchanged when it returns false. Guards hold the decisions a
//! regex cannot make cleanly: whether a word after `Basic` is an encoded
//! credential or English, and whether an absolute path is a host path or a job
//! file path (job files may live at any absolute path, see
//! `shared/protocol/src/path.rs`, so only known host roots count as host paths).

/// Which entry point applies a rule: logs get only [`Class::Secret`];
/// models, reports and heartbeats get all three.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Class {
    /// Keys, tokens, passwords: never written anywhere.
    Secret,
    /// Stack traces and source locations.
    Trace,
    /// Host paths and internal addresses.
    Host,
}

/// One row of the table.
pub(super) struct Rule {
    /// Short name, for test failures and reviews.
    pub name: &'static str,
    pub class: Class,
    pub pattern: &'static str,
    /// Replacement template (`${1}`, `${name}` refer to groups).
    pub with: &'static str,
    /// When set, a match whose group `v` fails this check is kept as it was.
    pub guard: Option<fn(&str) -> bool>,
}

const fn rule(name: &'static str, class: Class, pattern: &'static str, with: &'static str) -> Rule {
    Rule { name, class, pattern, with, guard: None }
}

const fn guarded(
    name: &'static str,
    class: Class,
    pattern: &'static str,
    with: &'static str,
    g: fn(&str) -> bool,
) -> Rule {
    Rule { name, class, pattern, with, guard: Some(g) }
}

use Class::{Host, Secret, Trace};

/// The table. Secrets first, then traces, then hosts.
pub(super) const RULES: &[Rule] = &[
    // ---- secrets ----
    rule(
        "pem private key",
        Secret,
        r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----[\s\S]*?(-----END [A-Z0-9 ]*PRIVATE KEY-----|$)",
        "[redacted private key]",
    ),
    rule("url credentials", Secret, r"(?i)\b([a-z][a-z0-9+.\-]*://)[^/\s@\[\]]+@", "${1}[redacted]@"),
    rule(
        "query token",
        Secret,
        r"(?i)([?&;](?:access_token|refresh_token|id_token|token|api[_-]?key|apikey|key|secret|client_secret|password|passwd|pwd|sig|signature|auth|code|session|x-amz-signature|x-amz-credential)=)[^&\s#'\x22]+",
        "${1}[redacted]",
    ),
    // A whole Cookie / Set-Cookie header value: every cookie in it is a credential.
    rule("cookie header", Secret, r#"(?im)\b((?:set-)?cookie\s*:[ \t]*)[^\s"\[][^\r\n"]*"#, "${1}[redacted]"),
    // `key: value`, `key=value`, `"key": "value"`, `NATS_TOKEN=value`, with an
    // optional prefix (`NATS_`, `db.`, `x-`). A quoted value goes whole.
    rule(
        "key=value secret",
        Secret,
        r#"(?i)(\b[a-z0-9_.\-]*?(?:api[_-]?key|apikey|secret(?:[_-]?(?:access[_-]?)?key)?|client[_-]?secret|password|passwd|passphrase|pwd|token|access[_-]?token|auth[_-]?token|refresh[_-]?token|id[_-]?token|session[_-]?(?:id|token|key)|private[_-]?key|account[_-]?key|access[_-]?key[_-]?id|shared[_-]?access[_-]?(?:key|signature)|authorization|cookie)(?:\\?["'])?\s*[:=]\s*)(?:\\"(?:[^"\\]|\\[^"])*\\"|"(?:[^"\\\n]|\\.)*"|'[^'\n]*'|\[redacted[^\]\n]*\]|(?:\\?["'])?(?:(?:bearer|basic|token)\s+)?[^\s"',;&}{][^\s"',;&}]*)"#,
        "${1}[redacted]",
    ),
    // Authorization schemes outside a `key:` form. `Bearer` is always followed
    // by a credential; after `Basic`, `token` or `x-api-key` only a word that
    // looks generated is one ("Basic authentication failed" stays).
    rule("bearer", Secret, r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=\-]{8,}", "${1}[redacted]"),
    guarded(
        "basic, token, x-api-key",
        Secret,
        r"(?i)\b((?:basic|token|x-api-key)\s+)(?P<v>[A-Za-z0-9._~+/=\-]{8,})",
        "${1}[redacted]",
        looks_generated,
    ),
    // Well-known key formats, wherever they appear.
    rule("openai/anthropic key", Secret, r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_\-]{16,}", "[redacted]"),
    rule("stripe key", Secret, r"\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{10,}", "[redacted]"),
    rule("stripe webhook secret", Secret, r"\bwhsec_[A-Za-z0-9]{20,}", "[redacted]"),
    rule("aws access key id", Secret, r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b", "[redacted]"),
    rule("github token", Secret, r"\bgh[pousr]_[A-Za-z0-9]{20,}\b", "[redacted]"),
    rule("github fine-grained token", Secret, r"\bgithub_pat_[A-Za-z0-9_]{20,}", "[redacted]"),
    rule("gitlab token", Secret, r"\bglpat-[A-Za-z0-9_\-]{16,}", "[redacted]"),
    rule("hugging face token", Secret, r"\bhf_[A-Za-z0-9]{20,}", "[redacted]"),
    rule("npm token", Secret, r"\bnpm_[A-Za-z0-9]{30,}", "[redacted]"),
    rule("pypi token", Secret, r"\bpypi-AgE[A-Za-z0-9_\-]{20,}", "[redacted]"),
    // SendGrid: `SG.` + 22 + `.` + 43 characters of base64url.
    rule("sendgrid api key", Secret, r"\bSG\.[A-Za-z0-9_\-]{22}\.[A-Za-z0-9_\-]{43}", "[redacted]"),
    // DigitalOcean personal access (`dop_`), OAuth (`doo_`) and refresh (`dor_`) tokens: 64 hex.
    rule("digitalocean token", Secret, r"\bdo[por]_v1_[a-fA-F0-9]{64}", "[redacted]"),
    rule("slack token", Secret, r"\bxox[abposr]-[A-Za-z0-9\-]{10,}", "[redacted]"),
    rule("slack app token", Secret, r"\bxapp-[A-Za-z0-9\-]{10,}", "[redacted]"),
    rule("google api key", Secret, r"\bAIza[0-9A-Za-z_\-]{30,}", "[redacted]"),
    rule("google oauth token", Secret, r"\bya29\.[0-9A-Za-z_\-]{20,}", "[redacted]"),
    rule("jwt", Secret, r"\beyJ[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-]{5,}", "[redacted]"),
    // NATS nkey seeds (user, account, operator, server, cluster) and xkey (curve) seeds.
    rule("nkey seed", Secret, r"\bS[UAOCNPX][A-Z2-7]{50,}\b", "[redacted]"),
    // ---- stack traces ----
    rule("python traceback", Trace, r"(?m)^\s*Traceback \(most recent call last\):\s*$", "[stack trace removed]"),
    rule("python frame", Trace, r#"(?m)^\s*File "[^"]*", line \d+.*(\n\s{4,}\S.*)?$"#, ""),
    rule("rust panic", Trace, r"(?m)^.*thread '[^']*' panicked at .*$", "[stack trace removed]"),
    rule("rust backtrace", Trace, r"(?m)^\s*stack backtrace:\s*$", "[stack trace removed]"),
    rule(
        "rust frame",
        Trace,
        r"(?m)^\s*\d+:\s+(?:0x[0-9a-f]+ - )?(?:[\w<>\[\]{}$.,&*'\- ]*::[\w<>\[\]{}$:.,&*'\- ]*|rust_begin_unwind|__\w+|_start)$",
        "",
    ),
    rule("rust backtrace note", Trace, r"(?m)^\s*note: run with `RUST_BACKTRACE=.*$", ""),
    rule("jvm/js/go frame", Trace, r"(?m)^\s+at \S+(?: \(.*\)|:\d+\S*)?\s*$", ""),
    rule("goroutine dump", Trace, r"(?m)^\s*goroutine \d+ \[.*$", "[stack trace removed]"),
    rule("source location", Trace, r"\b[\w./\-]+\.(?:rs|py|go|js|ts|java|rb|c|cc|cpp|h):\d+(?::\d+)?", "[source]"),
    // ---- hosts ----
    // URLs to loopback (any spelling: 127.1, 0x7f000001, 2130706433, [::1],
    // [::ffff:10.0.0.1]), private, shared (100.64/10), link-local (cloud
    // metadata) and cluster-internal hosts. A single-label host (`billing-db`,
    // an MCP resource scheme like `finance://rules`) counts as internal.
    rule(
        "internal url",
        Host,
        r"(?i)\b[a-z][a-z0-9+.\-]*://(?:\[redacted\]@|[^/\s@\[\]]+@)?(?:\[[0-9a-f:.]*(?:%25[\w.\-]+)?\]|(?:127|10|0)(?:\.\d+){0,3}|192\.168(?:\.\d+){0,2}|172\.(?:1[6-9]|2\d|3[01])(?:\.\d+){0,2}|169\.254(?:\.\d+){0,2}|100\.(?:6[4-9]|[7-9]\d|1[01]\d|12[0-7])(?:\.\d+){0,2}|0x[0-9a-f]+(?:\.(?:0x[0-9a-f]+|\d+)){0,3}|0[0-7]+(?:\.\d+){0,3}|[a-z0-9\-]+|[a-z0-9.\-]+\.(?:internal|local|localdomain|localhost|lan|corp|home\.arpa|svc|cluster\.local|intranet))(?::\d+)?(?:[/?#][^\s'\x22<>`]*)?(?P<end>$|[\s'\x22<>),;\]}`]|\.(?:\s|$))",
        "[internal url]${end}",
    ),
    rule("file url", Host, r"(?i)\bfile://[^\s'\x22<>`]*", "[path]"),
    // Bare private, loopback, shared and link-local IPv4 addresses, with any port.
    rule(
        "internal ipv4",
        Host,
        r"(?P<pre>^|[^\w.])(?:(?:10|127)(?:\.\d{1,3}){3}|192\.168(?:\.\d{1,3}){2}|172\.(?:1[6-9]|2\d|3[01])(?:\.\d{1,3}){2}|169\.254(?:\.\d{1,3}){2}|100\.(?:6[4-9]|[7-9]\d|1[01]\d|12[0-7])(?:\.\d{1,3}){2}|0\.0\.0\.0)(?::\d{1,5})?\b",
        "${pre}[internal address]",
    ),
    rule(
        "bracketed ipv6",
        Host,
        r"(?i)\[[0-9a-f]{0,4}(?::[0-9a-f]{0,4}){2,7}(?:\.\d+){0,3}(?:%[\w.\-]+)?\](?::\d{1,5})?",
        "[internal address]",
    ),
    rule("localhost with port", Host, r"(?i)\blocalhost:\d{1,5}\b", "[internal address]"),
    // Absolute paths, whole; the guard keeps job file paths.
    guarded(
        "host path",
        Host,
        r#"(?P<pre>^|[^\w.~\-/\\])(?P<v>/[A-Za-z0-9_.\-]+(?:/[^\s'"`:;,()<>\[\]{}]*[^\s'"`:;,()<>\[\]{}.]|/)?)"#,
        "${pre}[path]",
        is_host_path,
    ),
    rule("windows path", Host, r#"\b[A-Za-z]:\\[^\s'"<>`]*"#, "[path]"),
    rule("home-relative path", Host, r#"(?P<pre>^|\s)~/[^\s'"<>`]*"#, "${pre}[path]"),
];

/// Whether a word after `Basic`, `token` or `x-api-key` looks like an encoded
/// or generated credential rather than English: it has a digit, a `+/=`, or
/// both cases.
fn looks_generated(v: &str) -> bool {
    let lower = v.bytes().any(|b| b.is_ascii_lowercase());
    let upper = v.bytes().any(|b| b.is_ascii_uppercase());
    v.bytes().any(|b| b.is_ascii_digit() || b"+/=".contains(&b)) || (lower && upper)
}

/// Top-level directories of hosts and containers (Linux, macOS, container
/// mounts). A job's own files may use any absolute path, so only these count;
/// `/inputs/a.csv`, `/reports/x.md` and `/secrets/key` (a job path the e2e
/// permission tests use, tests/e2e/files.rs) stay. Host secret mounts live
/// under `/run/secrets`, `/var/run/secrets` or `/etc`, and credential files
/// are caught by name wherever they are.
const HOST_ROOTS: &[&str] = &[
    "home",
    "root",
    "Users",
    "usr",
    "etc",
    "var",
    "tmp",
    "opt",
    "srv",
    "proc",
    "sys",
    "dev",
    "mnt",
    "media",
    "run",
    "boot",
    "lib",
    "lib64",
    "bin",
    "sbin",
    "nix",
    "private",
    "app",
    "work",
    "workspace",
    "data",
    "builds",
    "snap",
    "config",
    "certs",
    "Library",
    "Volumes",
    "System",
];

/// File names that hold credentials wherever they are.
const CREDENTIAL_FILES: &[&str] =
    &[".creds", ".pem", ".key", ".p12", ".pfx", ".jks", ".kdbx", ".nk", "id_rsa", "id_ed25519", "id_ecdsa", ".netrc"];

/// Whether an absolute path names the host (its first segment is a host root)
/// or a credential file.
fn is_host_path(v: &str) -> bool {
    let first = v.trim_start_matches('/').split('/').next().unwrap_or("");
    HOST_ROOTS.contains(&first) || CREDENTIAL_FILES.iter().any(|end| v.ends_with(end))
}
