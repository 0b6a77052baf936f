//! The sanitizer's cases as one table: each input with what must not survive
//! and what must. Security review items (docs/SECURITY.md, "Sanitized
//! errors") each have a row; a new leak found later gets a row here first.

use proptest::prelude::*;

use super::*;

/// (input, must not contain, must contain) for [`sanitize`].
const CASES: &[(&str, &[&str], &[&str])] = &[
    // ---- secrets: existing forms ----
    ("upstream said 401: Authorization: Bearer sk-live-abcdefghijklmnopqrstuvwx", &["sk-live"], &["401"]),
    ("connect to postgres://admin:hunter2@db.example.com:5432/app failed", &["hunter2", "admin"], &["db.example.com"]),
    ("GET https://api.example.com/v1/data?user=7&api_key=s3cr3t&x=1 -> 500", &["s3cr3t"], &["user=7", "x=1"]),
    ("GET https://api.example.com/v1/data?access_token=tok3n", &["tok3n"], &["api.example.com"]),
    (r#"config {"password": "hunter2", "api_key":"s3cr3t"} rejected"#, &["hunter2", "s3cr3t"], &["rejected"]),
    ("AWS key AKIAABCDEFGHIJKLMNOP is not allowed", &["AKIAABCDEFGHIJKLMNOP"], &["is not allowed"]),
    ("token ghp_abcdefghijklmnopqrstuvwxyz0123456789 expired", &["ghp_"], &["expired"]),
    ("jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.abcdefghijk invalid", &["eyJhbGci"], &["invalid"]),
    ("slack xoxb-1234567890-abcdef failed", &["xoxb-"], &["failed"]),
    ("-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY-----", &["MIIE"], &["[redacted"]),
    ("seed SUAMLK2ZNL35WSMW37E7UD4VZ7ELPKW7DHC3BWBSD2GCZ7IUQQXZIORRBU is invalid", &["SUAM"], &["is invalid"]),
    ("nats://bt0k@nats.example.com:4222 refused", &["bt0k"], &["refused"]),
    ("export OPENAI_API_KEY=sk-proj-abcdefghijklmnopqrstuvwxyz", &["sk-proj"], &["OPENAI_API_KEY"]),
    // ---- secrets ----
    (r#"body {"token": "tk-9f8e7d6c5b4a", "ok": false}"#, &["tk-9f8e"], &[r#""token": [redacted]"#, "ok"]),
    ("login with token=abc123def456 failed", &["abc123def456"], &["token=[redacted]", "failed"]),
    ("env NATS_TOKEN=s3cretNatsT0ken set", &["s3cretNatsT0ken"], &["NATS_TOKEN=[redacted]"]),
    ("request had Cookie: session=abc123; theme=dark", &["abc123", "theme=dark"], &["Cookie: [redacted]"]),
    ("upstream sent Set-Cookie: sid=zz9plural; HttpOnly", &["zz9plural"], &["Set-Cookie: [redacted]"]),
    ("token github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz rejected", &["github_pat_", "11ABCDEFG"], &[]),
    ("stripe sk_live_51Habcdefghijklmnop failed", &["sk_live_", "51Habc"], &["failed"]),
    ("stripe sk_test_51Habcdefghijklmnop failed", &["sk_test_"], &["failed"]),
    ("stripe rk_live_51Habcdefghijklmnop failed", &["rk_live_"], &["failed"]),
    ("hub hf_abcdefghijklmnopqrstuvwxyzABCDEFGH denied", &["hf_abc"], &["denied"]),
    ("gitlab glpat-abcdefghij0123456789 denied", &["glpat-"], &["denied"]),
    ("sent x-api-key 9f8e7d6c5b4a3210 upstream", &["9f8e7d6c5b4a3210"], &["upstream"]),
    ("header X-Api-Key: k3y-v4lue rejected", &["k3y-v4lue"], &["X-Api-Key: [redacted]", "rejected"]),
    (
        "DefaultEndpointsProtocol=https;AccountName=acme;AccountKey=Zm9vYmFy+YmF6/cXV4==;EndpointSuffix=core.windows.net",
        &["Zm9vYmFy", "cXV4"],
        &["AccountName=acme", "EndpointSuffix"],
    ),
    (
        "Endpoint=sb://acme.servicebus.windows.net/;SharedAccessKeyName=root;SharedAccessKey=Qk1XYz0x+abc=",
        &["Qk1XYz0x"],
        &[],
    ),
    ("xkey SXAMLK2ZNL35WSMW37E7UD4VZ7ELPKW7DHC3BWBSD2GCZ7IUQQXZIORRBU bad", &["SXAM"], &["bad"]),
    (
        r#"config password: "correct horse battery staple" rejected"#,
        &["correct", "horse", "battery", "staple"],
        &["rejected"],
    ),
    (r#"client_secret='a b c' and private_key: "k e y""#, &["'a b c'", "k e y"], &["and"]),
    ("secret=s3cr3t-value;other=1", &["s3cr3t-value"], &["other=1"]),
    ("Authorization: Basic dXNlcjpwYXNzd29yZA==", &["dXNlcjpw"], &[]),
    ("got Basic dXNlcjpwYXNz from the client", &["dXNlcjpw"], &["from the client"]),
    ("slack app xapp-1-A0123456789-abcdef denied", &["xapp-1"], &["denied"]),
    ("aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", &["wJalrXUtn"], &[]),
    (r#"{\"password\": \"hunter2\"}"#, &["hunter2"], &[]),
    (
        "npm npm_abcdefghijklmnopqrstuvwxyz0123456789 and pypi pypi-AgEIcHlwaS5vcmcabcdefghijklmnop",
        &["npm_a", "pypi-AgE"],
        &[],
    ),
    ("google ya29.a0AfH6SMBabcdefghijklmnop and AIzaSyA1234567890abcdefghijklmnopqrstu", &["ya29.a0", "AIzaSy"], &[]),
    ("webhook whsec_abcdefghijklmnopqrstuvwx bad signature", &["whsec_"], &["bad signature"]),
    // ---- secrets: SendGrid and DigitalOcean formats ----
    (
        "mail SG.abcdefghij_KLMNOPQRS-u.abcdefghijklmnopqrstuvwxyz_ABCDEFGHIJ-01234 refused",
        &["SG.abc", "abcdefghijklmnop", "GHIJ-0"],
        &["mail [redacted] refused"],
    ),
    (
        "do dop_v1_0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef denied",
        &["dop_v1_", "0123456789abcdef"],
        &["do [redacted] denied"],
    ),
    (
        "oauth doo_v1_0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef and \
         dor_v1_fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210",
        &["doo_v1_", "dor_v1_", "0123456789abcdef", "fedcba9876543210"],
        &["oauth [redacted] and"],
    ),
    // ---- stack traces ----
    ("goroutine 7 [running]:\nmain.main()\nexit status 2", &["goroutine 7"], &["exit status 2"]),
    ("open file:///var/run/x.sock failed", &["file://", "/var"], &["open [path] failed"]),
    (
        "Traceback (most recent call last):\n  File \"/home/app/tools/billing.py\", line 42, in charge\n    raise KeyError(k)\nKeyError: 'customer'",
        &["Traceback", "/home/"],
        &["KeyError: 'customer'"],
    ),
    (
        "thread 'tokio-runtime-worker' panicked at src/main.rs:12:5:\nindex out of bounds\nstack backtrace:\n   0: rust_begin_unwind\n   1: core::panicking::panic_fmt\nnote: run with `RUST_BACKTRACE=full` for a verbose backtrace.",
        &["panicked", "src/main.rs", "core::panicking"],
        &["index out of bounds", "[stack trace removed]"],
    ),
    // ---- internal addresses ----
    ("connect 10.0.3.7:5432 refused", &["10.0.3.7", "5432"], &["[internal address] refused"]),
    ("peer 192.168.1.20 and 172.20.0.3:4222 and 100.64.1.1 gone", &["192.168", "172.20", "100.64"], &["gone"]),
    ("fetch http://127.1:8080/admin failed", &["127.1", "8080"], &["[internal url] failed"]),
    ("fetch http://[::ffff:10.0.0.1]/x failed", &["ffff", "10.0.0.1"], &["[internal url] failed"]),
    ("fetch http://0x7f000001/ and http://2130706433/ and http://0177.0.0.1/", &["0x7f", "2130706433", "0177"], &[]),
    ("fetch http://[::1]:9000/ failed", &["::1"], &["failed"]),
    ("nats://[redacted]@nats.internal:4222 refused", &["nats.internal"], &["refused"]),
    ("dial tcp [::1]:4222: connection refused", &["::1"], &["connection refused"]),
    ("listening on localhost:8080 now", &["localhost"], &["now"]),
    ("see http://10.0.0.1. Then retry", &["10.0.0.1"], &["Then retry"]),
    // ---- host paths ----
    ("cannot read /config/flotilla.toml: denied", &["/config", "flotilla.toml"], &["cannot read [path]: denied"]),
    ("cannot read /secrets/nats/worker.creds", &["secrets", "nats/", "worker", ".creds"], &["cannot read [path]"]),
    ("open /run/secrets/token and /certs/ca.pem", &["/run", "/certs", "ca.pem"], &["open [path] and [path]"]),
    ("cannot open /etc/flotilla/secret.toml: denied", &["/etc"], &["cannot open [path]: denied"]),
    ("read /root/.ssh/id_rsa and /var/lib/x failed", &["/root", "/var"], &["read [path] and [path] failed"]),
    ("open C:\\Users\\bob\\key.txt", &["C:\\"], &["open [path]"]),
    ("open ~/notes/key.txt now", &["~/"], &["open [path] now"]),
];

/// (input, exact sanitized output) for behaviour that must not drift.
const EXACT: &[(&str, &str)] = &[
    ("fetch http://10.0.3.7:8080/admin failed", "fetch [internal url] failed"),
    ("fetch http://169.254.169.254/latest/meta-data", "fetch [internal url]"),
    ("GET http://billing-db:5432/ failed", "GET [internal url] failed"),
    ("GET https://api.billing.svc.cluster.local/v1 timed out", "GET [internal url] timed out"),
    ("http://localhost:3000/x", "[internal url]"),
    (
        "java.lang.IllegalStateException: closed\n\tat com.acme.Billing.charge(Billing.java:42)",
        "java.lang.IllegalStateException: closed",
    ),
    ("   at foo (bar.js:1:2)", EMPTY),
    ("cannot read /etc/x.", "cannot read [path]."),
    (
        "cannot load MCP resource \"finance://rules/nope\" from server `finance`",
        "cannot load MCP resource \"[internal url]\" from server `finance`",
    ),
    (
        r#"invalid arguments: /password: "hunter2" is not of type "number""#,
        r#"invalid arguments: /password: [redacted] is not of type "number""#,
    ),
];

/// Text that must come out exactly as it went in (false positives).
const KEPT: &[&str] = &[
    "revenue must be greater than zero",
    "file reports/north.md not found",
    "see https://docs.example.com/errors#429 and retry in 2s",
    "invalid arguments: /x: \"two\" is not of type \"number\"",
    "margin is 0.375 for 3 of 12 rows, total 1234567.89",
    "requires version 1.2.3 (have 1.10.0)",
    "file /inputs/a.csv has 3 columns; wrote /reports/x.md",
    "cannot overwrite /notes.md: use write_file with overwrite=true",
    "Basic authentication failed for the token endpoint",
    "the x-api-key header is missing",
    "max_tokens: 512 exceeds the limit; input_tokens: 90",
    "public host 93.184.216.34 answered 503",
    "GET /v1/chat/completions returned 429",
    "the job work dir /workflows/q3.md is missing",
    "permission denied: /secrets/key is not readable by this subagent",
    r#"schema {"password": {"type": "string"}, "token": {"minLength": 8}}"#,
    "at 12:30:45 the list [1, 2, 3] had 3 items",
    "see SG.2 of the manual and the do_v1_ prefix",
];

#[test]
fn every_case_is_sanitized() {
    for (input, gone, kept) in CASES {
        let out = sanitize(input);
        for g in *gone {
            assert!(!out.contains(g), "{g:?} survived in {out:?} (from {input:?})");
        }
        for k in *kept {
            assert!(out.contains(k), "{k:?} missing from {out:?} (from {input:?})");
        }
        assert_eq!(sanitize(&out), out, "not idempotent on {input:?}");
    }
}

#[test]
fn exact_outputs_and_kept_text() {
    for (input, want) in EXACT {
        assert_eq!(sanitize(input), *want, "{input:?}");
    }
    for s in KEPT {
        assert_eq!(sanitize(s), *s);
        assert_eq!(redact_secrets(s), *s);
    }
}

#[test]
fn logs_keep_hosts_but_lose_secrets() {
    let s = "connect to postgres://admin:hunter2@db:5432 failed; NATS_TOKEN=t0k3n; see /etc/flotilla.toml";
    let out = redact_secrets(s);
    assert!(!out.contains("hunter2") && !out.contains("t0k3n"), "{out}");
    assert!(out.contains("db:5432") && out.contains("/etc/flotilla.toml"), "{out}");
}

#[test]
fn length_is_bounded_marker_included() {
    let long = "x".repeat(10 * MAX_LEN);
    let out = sanitize(&long);
    assert!(out.len() <= MAX_LEN && out.ends_with(TRUNCATED), "{}", out.len());
    assert_eq!(sanitize(&out), out);
    let wide = "é".repeat(MAX_LEN);
    assert!(sanitize(&wide).len() <= MAX_LEN);
}

#[test]
fn every_rule_compiles_is_named_once_and_has_a_case() {
    for c in COMPILED.iter() {
        let covered = CASES.iter().map(|c| c.0).chain(EXACT.iter().map(|e| e.0)).any(|input| c.re.is_match(input));
        assert!(covered, "rule {:?} has no row in CASES or EXACT", c.rule.name);
    }
    let mut names: Vec<&str> = RULES.iter().map(|r| r.name).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), RULES.len(), "duplicate rule names");
}

/// Fragments the property tests mix: secrets, addresses, paths, traces,
/// separators and plain words, so rules meet each other's output.
fn fragment() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("password: \"a b\"".to_string()),
        Just("token=abc123".to_string()),
        Just("Cookie: a=b; c=d".to_string()),
        Just("Bearer abcdefgh12".to_string()),
        Just("http://127.1:80/x".to_string()),
        Just("http://[::1]:1".to_string()),
        Just("10.0.0.1:5432".to_string()),
        Just("/etc/passwd".to_string()),
        Just("/inputs/a.csv".to_string()),
        Just("~/x".to_string()),
        Just("src/a.rs:1:2".to_string()),
        Just("\n   at foo (bar.js:1:2)\n".to_string()),
        Just("Traceback (most recent call last):\n".to_string()),
        Just("[redacted]".to_string()),
        Just("AKIAABCDEFGHIJKLMNOP".to_string()),
        "[a-z0-9]{1,8}",
        "[ :=\"'/.@\\[\\]\n-]{1,3}",
        ".{0,16}",
    ]
}

proptest! {
    #[test]
    fn sanitize_never_panics_is_bounded_and_idempotent(parts in prop::collection::vec(fragment(), 0..16)) {
        let text = parts.concat();
        let once = sanitize(&text);
        prop_assert!(once.len() <= MAX_LEN, "{} bytes", once.len());
        prop_assert!(!once.trim().is_empty());
        prop_assert_eq!(sanitize(&once), once.clone(), "from {:?}", text);
        let logged = redact_secrets(&text);
        prop_assert_eq!(redact_secrets(&logged), logged);
    }

    #[test]
    fn long_inputs_stay_bounded(s in ".{0,64}", n in 0usize..48) {
        let text = s.repeat(n);
        let out = sanitize(&text);
        prop_assert!(out.len() <= MAX_LEN);
        prop_assert_eq!(sanitize(&out), out);
    }
}
