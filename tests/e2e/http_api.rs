//! The HTTP API and the dashboard's actions against a real
//! orchestrator and real workers (docs/HTTP_API.md, docs/OPERATIONS.md
//! "Dashboard"): submit with a file, status, SSE and cancel over HTTP; the
//! admin and tenant tokens; CSRF refusals of cross-site writes; and, in
//! headless Chromium, a job submitted, approved and another one cancelled
//! through the dashboard's own forms.

mod browser;
mod console;

use std::time::Duration;

use flotilla_protocol::files_api::{FilesLsReply, FilesLsRequest};
use flotilla_protocol::ids::{JobId, Tenant};
use flotilla_protocol::{ApiReply, JobStatus, SCHEMA_VERSION};
use flotilla_testkit::{EventLog, Proc, TestConfig, eventually, free_port};
use reqwest::StatusCode;
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, ORIGIN};
use serde_json::{Value, json};

use flotilla_testkit::{Deployment, TIMEOUT};

const ADMIN_TOKEN: &str = "e2e-admin-token-0123456789abcdef";
const ACME_TOKEN: &str = "e2e-acme-token-0123456789abcdef";
const JOB: &str = "Compute the gross margin of region north: revenue 120, cost 75.";

fn client() -> reqwest::Client {
    flotilla_config::tls::install_crypto_provider();
    let redirects = reqwest::redirect::Policy::none();
    reqwest::Client::builder().timeout(Duration::from_secs(20)).redirect(redirects).build().expect("http client")
}

/// Standard base64 (the tests crate has no base64 dependency).
pub(crate) fn base64(bytes: &[u8]) -> String {
    const ABC: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, b)| n | (*b as u32) << (16 - 8 * i));
        for i in 0..4 {
            out.push(if i <= chunk.len() { ABC[(n >> (18 - 6 * i) & 63) as usize] as char } else { '=' });
        }
    }
    out
}

/// A urlencoded form body, as a browser posts it (reqwest here has no `form`).
trait FormBody {
    fn fm(self, fields: &[(&str, &str)]) -> Self;
}

impl FormBody for reqwest::RequestBuilder {
    fn fm(self, fields: &[(&str, &str)]) -> Self {
        let enc = |s: &str| {
            s.bytes()
                .map(|b| match b {
                    b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
                    b' ' => "+".into(),
                    b => format!("%{b:02X}"),
                })
                .collect::<String>()
        };
        let body: Vec<String> = fields.iter().map(|(k, v)| format!("{}={}", enc(k), enc(v))).collect();
        self.header(CONTENT_TYPE, "application/x-www-form-urlencoded").body(body.join("&"))
    }
}

/// A request's status and JSON body (`Value::Null` when the body is not JSON).
async fn send(req: reqwest::RequestBuilder) -> (StatusCode, Value) {
    let r = req.send().await.expect("HTTP request");
    let status = r.status();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// The demo deployment with the dashboard on `port` and the admin and acme
/// tokens in the orchestrator's environment.
async fn with_tokens(port: u16, latency_ms: u64) -> Deployment {
    let dashboard = format!(
        "[dashboard]\nlisten = \"127.0.0.1:{port}\"\ntoken_env = \"E2E_ADMIN_TOKEN\"\n\
         [dashboard.tenants.acme]\ntoken_env = \"E2E_ACME_TOKEN\"\n"
    );
    let mut d = Deployment::start(1, |url| {
        let mut c = TestConfig::demo(url, 1, latency_ms);
        c.section(&dashboard);
        c
    })
    .await;
    // The harness starts the orchestrator without the tokens: start it again with them.
    d.orchestrator.as_mut().expect("orchestrator").kill();
    let cfg = d.config_arg();
    let env = [("E2E_ADMIN_TOKEN", ADMIN_TOKEN), ("E2E_ACME_TOKEN", ACME_TOKEN)];
    d.orchestrator = Some(Proc::spawn("orchestrator-tokens", "flotilla", &["orchestrator", "--config", &cfg], &env));
    d.orchestrator_ready().await;
    d
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_status_sse_and_cancel_over_http_with_tenant_bound_tokens() {
    let port = free_port();
    let d = with_tokens(port, 1500).await;
    let base = format!("http://127.0.0.1:{port}");
    let (admin, acme) = (format!("Bearer {ADMIN_TOKEN}"), format!("Bearer {ACME_TOKEN}"));
    let http = client();
    let note = b"region,revenue,cost\nnorth,120,75\n";
    let body = json!({"input": JOB, "files": [{"path": "/inputs/regions.csv", "content_base64": base64(note)}]});

    // Without a token (or with a wrong one) nothing is submitted.
    let (status, _) = send(http.post(format!("{base}/api/jobs")).json(&body)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _) =
        send(http.post(format!("{base}/api/jobs")).header(AUTHORIZATION, "Bearer nope").json(&body)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (_, all) = send(http.get(format!("{base}/api/jobs")).header(AUTHORIZATION, &admin)).await;
    assert_eq!(all["jobs"], json!([]), "no job was created: {all}");

    // acme's token submits for acme, with a file.
    let (status, created) = send(http.post(format!("{base}/api/jobs")).header(AUTHORIZATION, &acme).json(&body)).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!(created["tenant"], "acme");
    let job: JobId = created["job_id"].as_str().expect("job id").parse().unwrap();
    let acme_tenant = Tenant::new("acme").unwrap();
    let ls =
        FilesLsRequest { v: SCHEMA_VERSION, job_id: job, prefix: Some("/inputs/".into()), after: None, limit: None };
    let files: ApiReply<FilesLsReply> = d.bus.request(&acme_tenant, "files_ls", &ls, TIMEOUT).await.expect("files_ls");
    let files = files.into_result().expect("acme's job files");
    assert_eq!(files.files.len(), 1, "{:?}", files.files);
    assert_eq!((files.files[0].path.as_str(), files.files[0].size), ("/inputs/regions.csv", note.len() as u64));

    // SSE: the job's events from its first to its terminal one, then the stream ends.
    // A client without a total timeout: the stream lasts as long as the job.
    let streaming = reqwest::Client::new();
    let sse = streaming.get(format!("{base}/api/jobs/{job}/events")).header(AUTHORIZATION, &acme).send().await.unwrap();
    assert_eq!(sse.status(), StatusCode::OK);
    assert_eq!(sse.headers()[CONTENT_TYPE], "text/event-stream");
    // One deadline for the whole stream (keep-alive comments arrive meanwhile).
    let mut sse = sse;
    let mut text = String::new();
    let read = async {
        while let Some(chunk) = sse.chunk().await.expect("the SSE stream") {
            text.push_str(&String::from_utf8_lossy(&chunk));
        }
    };
    let ended = tokio::time::timeout(TIMEOUT, read).await;
    assert!(ended.is_ok(), "the stream ends with the job; so far:\n{text}");
    let events: Vec<Value> =
        text.lines().filter_map(|l| l.strip_prefix("data: ")).map(|d| serde_json::from_str(d).unwrap()).collect();
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["event"].as_str()).collect();
    assert_eq!(kinds.first(), Some(&"submitted"), "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"completed"), "{kinds:?}");
    assert!(kinds.contains(&"started") && kinds.contains(&"finished"), "progress events too: {kinds:?}");

    let (status, rec) = send(http.get(format!("{base}/api/jobs/{job}")).header(AUTHORIZATION, &acme)).await;
    assert_eq!(status, StatusCode::OK, "{rec}");
    assert_eq!((rec["status"].as_str(), rec["tenant"].as_str()), (Some("completed"), Some("acme")));
    assert!(rec["answer"].as_str().unwrap_or_default().contains("0.375"), "{rec}");

    // The admin token acts for another tenant with ?tenant=.
    let slow = json!({"input": JOB});
    let req = http.post(format!("{base}/api/jobs?tenant=globex")).header(AUTHORIZATION, &admin).json(&slow);
    let (status, created) = send(req).await;
    assert_eq!((status, created["tenant"].as_str()), (StatusCode::CREATED, Some("globex")), "{created}");
    let other: JobId = created["job_id"].as_str().unwrap().parse().unwrap();

    // acme's token cannot see or cancel globex's job: 404, as for no job.
    for path in [format!("/api/jobs/{other}"), format!("/api/jobs/{other}/events"), format!("/jobs/{other}")] {
        let r = http.get(format!("{base}{path}")).header(AUTHORIZATION, &acme).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::NOT_FOUND, "{path}");
    }
    let cancel = http.post(format!("{base}/api/jobs/{other}/cancel")).header(AUTHORIZATION, &acme);
    let (status, err) = send(cancel.json(&json!({"reason": "not yours"}))).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{err}");
    assert_eq!(err["error"]["kind"], "not_found");
    let (_, listed) = send(http.get(format!("{base}/api/jobs")).header(AUTHORIZATION, &acme)).await;
    let tenants: Vec<&str> = listed["jobs"].as_array().unwrap().iter().filter_map(|j| j["tenant"].as_str()).collect();
    assert_eq!(tenants, ["acme"], "acme lists its own jobs only: {listed}");
    let (status, _) = send(http.get(format!("{base}/api/jobs?tenant=globex")).header(AUTHORIZATION, &acme)).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) =
        send(http.post(format!("{base}/api/jobs?tenant=globex")).header(AUTHORIZATION, &acme).json(&slow)).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "a tenant token submits for its tenant only");

    // globex's job is still running; the admin cancels it with a reason.
    let (_, rec) = send(http.get(format!("{base}/api/jobs/{other}")).header(AUTHORIZATION, &admin)).await;
    assert!(!JobStatus::Cancelled.as_str().eq(rec["status"].as_str().unwrap()), "acme's cancel changed nothing: {rec}");
    let cancel = http.post(format!("{base}/api/jobs/{other}/cancel")).header(AUTHORIZATION, &admin);
    let (status, reply) = send(cancel.json(&json!({"reason": "operator stop"}))).await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    assert_eq!(reply["job_id"], other.to_string());
    let ended = eventually(TIMEOUT, "globex's job to end", || {
        let (http, admin, base) = (http.clone(), admin.clone(), base.clone());
        async move {
            let (_, rec) = send(http.get(format!("{base}/api/jobs/{other}")).header(AUTHORIZATION, &admin)).await;
            rec["status"]
                .as_str()
                .filter(|s| *s == "cancelled" || *s == "completed" || *s == "failed")
                .map(String::from)
        }
    })
    .await;
    assert_eq!(ended, "cancelled");

    // In a browser, acme's token, given once to the sign-in form, becomes a
    // cookie; the submit box then submits for acme, with the cookie
    // session's CSRF token.
    let mut browser = tokio::task::block_in_place(|| browser::Browser::start(&chromium()));
    let submitted = tokio::task::block_in_place(|| {
        browser.open(&format!("{base}/"));
        browser.until(TIMEOUT, "the sign-in form", "!!document.getElementById('login-form')");
        let sign_in = format!(
            "document.getElementById('login-token').value = '{ACME_TOKEN}'; \
             document.getElementById('login').click(); true"
        );
        assert_eq!(browser.eval(&sign_in), Some(Value::Bool(true)));
        browser.until(TIMEOUT, "the jobs page", "!!document.getElementById('submit-form')");
        assert_eq!(
            browser.eval("document.getElementById('submit-form').textContent.includes('as tenant acme')"),
            Some(true.into())
        );
        let typed = "document.querySelector('#submit-form textarea').value = 'Compute the gross margin of region west: revenue 80, cost 20.'; \
                     document.getElementById('submit-job').click(); true";
        assert_eq!(browser.eval(typed), Some(Value::Bool(true)));
        browser.until(TIMEOUT, "the new job's page", "/^\\/jobs\\/[0-9a-f-]{36}$/.test(location.pathname)");
        browser.eval("location.pathname.split('/')[2]").and_then(|v| v.as_str().map(String::from)).expect("job id")
    });
    let (status, rec) = send(http.get(format!("{base}/api/jobs/{submitted}")).header(AUTHORIZATION, &acme)).await;
    assert_eq!((status, rec["tenant"].as_str()), (StatusCode::OK, Some("acme")), "{rec}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cross_site_writes_are_refused_and_change_nothing() {
    let port = free_port();
    let listen = format!("[dashboard]\nlisten = \"127.0.0.1:{port}\"\n");
    let d = Deployment::start(1, |url| {
        let mut c = TestConfig::demo(url, 1, 3000);
        c.section(&listen);
        c
    })
    .await;
    d.orchestrator_ready().await;
    let base = format!("http://127.0.0.1:{port}");
    let http = client();
    let form = [("input", JOB), ("csrf", "0000")];
    let evil = "http://evil.example";

    // A page on another site posting the submit form, or calling the API.
    for (origin, fields) in [(evil, &form[..]), (base.as_str(), &form[..]), (base.as_str(), &form[..1])] {
        let r = http.post(format!("{base}/actions/submit")).header(ORIGIN, origin).fm(fields).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::FORBIDDEN, "Origin {origin}, fields {fields:?}");
    }
    let api = http.post(format!("{base}/api/jobs")).header(ORIGIN, evil).header("sec-fetch-site", "cross-site");
    let (status, _) = send(api.json(&json!({"input": JOB}))).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (_, listed) = send(http.get(format!("{base}/api/jobs"))).await;
    assert_eq!(listed["jobs"], json!([]), "nothing was submitted: {listed}");

    // Without a token, a non-browser client acts for the default tenant only.
    let (status, err) = send(http.post(format!("{base}/api/jobs?tenant=acme")).json(&json!({"input": JOB}))).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(err["error"]["message"].as_str().unwrap().contains("[dashboard.tenants.acme] token_env"), "{err}");
    let (status, created) = send(http.post(format!("{base}/api/jobs")).json(&json!({"input": JOB}))).await;
    assert_eq!((status, created["tenant"].as_str()), (StatusCode::CREATED, Some("default")), "{created}");
    let job: JobId = created["job_id"].as_str().unwrap().parse().unwrap();

    // A cross-site cancel of that job is refused and the job runs on.
    let r = http.post(format!("{base}/actions/jobs/{job}/cancel")).header(ORIGIN, evil).fm(&[("reason", "x")]);
    assert_eq!(r.send().await.unwrap().status(), StatusCode::FORBIDDEN);
    let page = http.get(format!("{base}/jobs/{job}")).send().await.unwrap().text().await.unwrap();
    let token = page.split("name=\"csrf\" value=\"").nth(1).and_then(|t| t.split('"').next()).expect("a csrf field");
    let r = http.post(format!("{base}/actions/jobs/{job}/cancel")).header(ORIGIN, evil).fm(&[("csrf", token)]);
    assert_eq!(r.send().await.unwrap().status(), StatusCode::FORBIDDEN, "the page's token does not help another site");
    let rec = d.status(job).await;
    assert!(!rec.status.is_terminal(), "the job still runs: {:?}", rec.status);

    // The same form from the dashboard's own origin works.
    let r = http.post(format!("{base}/actions/jobs/{job}/cancel")).header(ORIGIN, &base).fm(&[("csrf", token)]);
    let r = r.send().await.unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(r.headers()["location"], format!("/jobs/{job}").as_str());
    let ended = eventually(TIMEOUT, "the job to end", || async {
        Some(d.status(job).await.status).filter(|s| s.is_terminal())
    });
    assert_eq!(ended.await, JobStatus::Cancelled);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dashboard_port_in_use_stops_the_orchestrator_naming_the_key() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let mut d = Deployment::start(0, |url| {
        let mut c = TestConfig::demo(url, 1, 0);
        c.section(&format!("[dashboard]\nlisten = \"{addr}\"\n"));
        c
    })
    .await;
    let o = d.orchestrator.as_mut().expect("orchestrator");
    eventually(TIMEOUT, "the orchestrator to exit", || {
        let gone = !o.running();
        async move { gone.then_some(()) }
    })
    .await;
    let log = o.log();
    assert!(log.contains(&format!("[dashboard] listen = \"{addr}\": cannot listen on {addr}")), "{log}");
    assert!(!log.contains("orchestrator ready"), "{log}");
}

/// A finance subagent whose `calculate_margin` calls need a person's approval
/// (the setup of tests/e2e/approvals.rs), with the dashboard on `port`.
fn approvals_config(url: &str, port: u16) -> TestConfig {
    let mut c = crate::approvals::config(url, r#"["approve", "reject", "edit"]"#, 120);
    c.section(&format!("[dashboard]\nlisten = \"127.0.0.1:{port}\"\n"));
    c
}

fn chromium() -> String {
    let bin = std::env::var("CHROMIUM").unwrap_or_else(|_| "chromium".into());
    let found = std::process::Command::new(&bin).arg("--version").output().is_ok_and(|o| o.status.success());
    assert!(found, "{bin} not found: run scripts/install-deps --test (installs Debian's chromium) or set CHROMIUM");
    bin
}

/// Waits for job `job`'s approval request on the bus.
async fn approval_of(log: &mut EventLog, job: &str) -> Value {
    log.until(TIMEOUT, "an approval request", |s, v| s.contains(".approval.") && v["job_id"] == job).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_chromium_a_job_is_submitted_approved_and_another_cancelled_through_the_dashboard() {
    let bin = chromium();
    let port = free_port();
    let d = Deployment::start(1, |url| approvals_config(url, port)).await;
    d.orchestrator_ready().await;
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let base = format!("http://127.0.0.1:{port}");
    let mut browser = tokio::task::block_in_place(|| browser::Browser::start(&bin));

    // The jobs page's submit box starts a job and lands on its page.
    let job = tokio::task::block_in_place(|| {
        browser.open(&format!("{base}/"));
        browser.until(TIMEOUT, "the submit box", "document.querySelector('#submit-form textarea')");
        let typed = "document.querySelector('#submit-form textarea').value = 'one margin'; \
                     document.getElementById('submit-job').click(); true";
        assert_eq!(browser.eval(typed), Some(Value::Bool(true)));
        browser.until(TIMEOUT, "the new job's page", "/^\\/jobs\\/[0-9a-f-]{36}$/.test(location.pathname)");
        browser.eval("location.pathname.split('/')[2]").and_then(|v| v.as_str().map(String::from)).expect("job id")
    });
    let req = approval_of(&mut log, &job).await;
    assert_eq!(req["tool"], "calculate_margin");

    // The page shows the pending call (re-rendered on its live event); Approve runs it.
    tokio::task::block_in_place(|| {
        browser.until(TIMEOUT, "the approval form", "document.querySelector('form.approval button.approve')");
        assert_eq!(
            browser.eval("document.querySelector('form.approval button.approve').click(); true"),
            Some(true.into())
        );
        browser.until(
            TIMEOUT,
            "the job completed on its page",
            "document.getElementById('job').dataset.status === 'completed'",
        );
    });
    let id: JobId = job.parse().unwrap();
    let rec = d.status(id).await;
    assert_eq!((rec.status, rec.answer.as_deref()), (JobStatus::Completed, Some("margin=0.375")));
    log.drain();
    let resolved = log.seen.iter().find(|(s, v)| s.contains(".progress.") && v["event"] == "approval_resolved");
    let resolved = &resolved.expect("an approval_resolved event").1;
    assert_eq!((resolved["outcome"].as_str(), resolved["by"].as_str()), (Some("approve"), Some("dashboard")));

    // A third job's call waits in the approvals inbox; Approve there runs it
    // and the inbox is empty again.
    let third = d.submit("one margin").await;
    approval_of(&mut log, &third.to_string()).await;
    tokio::task::block_in_place(|| {
        browser.open(&format!("{base}/approvals"));
        let item = format!("document.querySelector('.inbox-item[data-job=\"{third}\"] button.approve')");
        browser.until(TIMEOUT, "the inbox item", &item);
        if let Ok(dir) = std::env::var("FLOTILLA_SCREENSHOTS") {
            browser.screenshot(&std::path::Path::new(&dir).join("console-approvals.png"));
        }
        assert_eq!(browser.eval(&format!("{item}.click(); true")), Some(true.into()));
        browser.until(
            TIMEOUT,
            "the inbox emptied",
            "location.pathname === '/approvals' && !!document.getElementById('inbox-empty')",
        );
    });
    let done = eventually(TIMEOUT, "the third job to end", || async {
        Some(d.status(third).await).filter(|r| r.status.is_terminal())
    })
    .await;
    assert_eq!((done.status, done.answer.as_deref()), (JobStatus::Completed, Some("margin=0.375")));

    // Another job waits for its approval; the Cancel button on its page ends it.
    let other = d.submit("one margin").await;
    approval_of(&mut log, &other.to_string()).await;
    tokio::task::block_in_place(|| {
        browser.open(&format!("{base}/jobs/{other}"));
        browser.until(TIMEOUT, "the cancel button", "document.getElementById('cancel-job')");
        let click = "document.querySelector('#cancel-form input[name=reason]').value = 'stopped in the browser'; \
                     document.getElementById('cancel-job').click(); true";
        assert_eq!(browser.eval(click), Some(Value::Bool(true)));
        browser.until(
            TIMEOUT,
            "the job cancelled on its page",
            "document.getElementById('job').dataset.status === 'cancelled'",
        );
    });
    let end = log
        .until(TIMEOUT, "the other job's end", |s, v| {
            let terminal = matches!(v["event"].as_str(), Some("completed" | "failed" | "cancelled"));
            s.ends_with(".event") && v["job_id"] == other.to_string() && terminal
        })
        .await;
    assert_eq!(end["event"], "cancelled", "{end}");
    assert_eq!(d.status(other).await.status, JobStatus::Cancelled);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_are_listed_and_decided_over_the_json_api() {
    let port = free_port();
    let d = Deployment::start(1, |url| approvals_config(url, port)).await;
    d.orchestrator_ready().await;
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let base = format!("http://127.0.0.1:{port}");
    let http = client();
    let submit = || async {
        let (status, created) = send(http.post(format!("{base}/api/jobs")).json(&json!({"input": "one margin"}))).await;
        assert_eq!(status, StatusCode::CREATED, "{created}");
        created["job_id"].as_str().unwrap().to_string()
    };

    // Edit: the call runs with the person's arguments.
    let job = submit().await;
    approval_of(&mut log, &job).await;
    let (status, listed) = send(http.get(format!("{base}/api/approvals?job={job}"))).await;
    assert_eq!(status, StatusCode::OK, "{listed}");
    let pending = listed["approvals"].as_array().expect("approvals");
    assert_eq!(pending.len(), 1, "{listed}");
    assert_eq!(pending[0]["args"], json!({"revenue": 120, "cost": 75}));
    let call = pending[0]["call_id"].as_str().unwrap().to_string();
    let edit = json!({"job_id": job, "decision": "edit", "args": {"revenue": 200, "cost": 50}, "by": "ana"});
    let (status, decided) = send(http.post(format!("{base}/api/approvals/{call}")).json(&edit)).await;
    assert_eq!(status, StatusCode::OK, "{decided}");
    let (status, again) = send(http.post(format!("{base}/api/approvals/{call}")).json(&edit)).await;
    assert_eq!((status, again["error"]["kind"].as_str()), (StatusCode::CONFLICT, Some("business")), "{again}");
    let end = log
        .until(TIMEOUT, "the job's end", |s, v| {
            s.ends_with(".event") && v["job_id"] == job.as_str() && v["event"] == "completed"
        })
        .await;
    assert_eq!(end["answer"], "margin=0.75", "{end}");

    // Reject with a reason: the model reads a permission error.
    let job = submit().await;
    approval_of(&mut log, &job).await;
    let (_, listed) = send(http.get(format!("{base}/api/approvals?job={job}"))).await;
    let call = listed["approvals"][0]["call_id"].as_str().unwrap().to_string();
    let reject = json!({"job_id": job, "decision": "reject", "reason": "not during the freeze"});
    let (status, decided) = send(http.post(format!("{base}/api/approvals/{call}")).json(&reject)).await;
    assert_eq!(status, StatusCode::OK, "{decided}");
    let end = log
        .until(TIMEOUT, "the job's end", |s, v| {
            s.ends_with(".event") && v["job_id"] == job.as_str() && v["event"] == "completed"
        })
        .await;
    let answer = end["answer"].as_str().unwrap_or_default();
    assert!(answer.starts_with("permission") && answer.contains("not during the freeze"), "{end}");
    let (status, listed) = send(http.get(format!("{base}/api/approvals"))).await;
    assert_eq!((status, listed["approvals"].clone()), (StatusCode::OK, json!([])), "nothing left pending");
}
