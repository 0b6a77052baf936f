//! The dashboard against a DNS-rebinding page and without
//! its token, replayed against the real orchestrator process
//! (docs/OPERATIONS.md, "Dashboard"). A rebinding page's requests carry the
//! attacker's name in `Host`; they are sent here as such with reqwest.

use std::time::Duration;

use flotilla_testkit::{Proc, TestConfig, eventually, free_port};
use reqwest::StatusCode;
use reqwest::header::{AUTHORIZATION, COOKIE, HOST, LOCATION, SET_COOKIE};

use flotilla_testkit::{Deployment, TIMEOUT};

const JOB: &str = "Compute the gross margin of region north: revenue 120, cost 75.";
const TOKEN: &str = "e2e-dashboard-token-0123456789abcdef";
const TOKEN_ENV: &str = "FLOTILLA_DASHBOARD_TOKEN";

fn client() -> reqwest::Client {
    flotilla_config::tls::install_crypto_provider();
    let redirects = reqwest::redirect::Policy::none();
    reqwest::Client::builder().timeout(Duration::from_secs(10)).redirect(redirects).build().expect("http client")
}

fn config(url: &str, dashboard: &str) -> TestConfig {
    let mut c = TestConfig::demo(url, 1, 0);
    c.section(&format!("[dashboard]\n{dashboard}"));
    c
}

/// Status and body of `GET base+path` with extra headers.
async fn get(base: &str, path: &str, headers: &[(reqwest::header::HeaderName, &str)]) -> (StatusCode, String) {
    let mut req = client().get(format!("{base}{path}"));
    for (name, value) in headers {
        req = req.header(name, *value);
    }
    let r = req.send().await.unwrap_or_else(|e| panic!("GET {path}: {e}"));
    let status = r.status();
    // SSE never ends: its status and headers are all a test needs.
    if r.headers().get("content-type").is_some_and(|v| v == "text/event-stream") {
        return (status, String::new());
    }
    (status, r.text().await.unwrap_or_default())
}

/// Waits until the orchestrator process has exited; returns its log.
async fn exited(p: &mut Proc) -> String {
    eventually(TIMEOUT, "the orchestrator to refuse to start", || {
        let gone = !p.running();
        async move { gone.then_some(()) }
    })
    .await;
    p.log()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebinding_page_gets_421_and_no_job_text_while_own_names_work() {
    let port = free_port();
    let listen = format!("listen = \"127.0.0.1:{port}\"\nallowed_hosts = [\"Dash.Example.test\"]\n");
    let d = Deployment::start(1, |url| config(url, &listen)).await;
    let job = d.submit(JOB).await.to_string();
    let base = format!("http://127.0.0.1:{port}");
    let own = format!("localhost:{port}");
    eventually(TIMEOUT, "the job on the dashboard", || {
        let (base, own, job) = (base.clone(), own.clone(), job.clone());
        async move {
            let r = client().get(format!("{base}/api/jobs")).header(HOST, own).send().await.ok()?;
            r.text().await.ok().filter(|t| t.contains(&job))
        }
    })
    .await;

    let routes = ["/", "/fragment/jobs", "/api/jobs", "/api/workers", "/events"];
    let job_routes = [format!("/jobs/{job}"), format!("/fragment/jobs/{job}"), format!("/api/jobs/{job}")];
    let all: Vec<String> = routes.iter().map(|r| r.to_string()).chain(job_routes.iter().cloned()).collect();
    let all: Vec<String> = all.into_iter().chain([format!("/jobs/{job}/events")]).collect();
    for path in &all {
        for evil in ["evil.example", &format!("evil.example:{port}"), "localhost.evil.example", "127.0.0.1.nip.io"] {
            let (status, body) = get(&base, path, &[(HOST, evil)]).await;
            assert_eq!(status, StatusCode::MISDIRECTED_REQUEST, "{path} with Host {evil}: {body}");
            assert!(!body.contains(&job) && !body.contains("gross margin"), "{path} leaked: {body}");
            assert!(body.contains("[dashboard] allowed_hosts"), "the refusal names the key: {body}");
        }
        let own_names =
            [own.as_str(), "localhost", "127.0.0.1", &format!("[::1]:{port}"), &format!("dash.example.TEST:{port}")];
        for host in own_names {
            let (status, body) = get(&base, path, &[(HOST, host)]).await;
            assert_eq!(status, StatusCode::OK, "{path} with Host {host}: {body}");
        }
    }
    let (_, body) = get(&base, &format!("/api/jobs/{job}"), &[(HOST, &own)]).await;
    assert!(body.contains("gross margin"), "the job's own page shows its input: {body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_token_env_every_route_needs_the_token() {
    let port = free_port();
    let listen = format!("listen = \"127.0.0.1:{port}\"\ntoken_env = \"{TOKEN_ENV}\"\n");
    let mut d = Deployment::start(1, |url| config(url, &listen)).await;
    // Started without the variable: a startup error that names it.
    let log = exited(d.orchestrator.as_mut().expect("orchestrator")).await;
    assert!(log.contains(&format!("environment variable {TOKEN_ENV} is not set")), "{log}");
    let cfg = d.config_arg();
    let args = ["orchestrator", "--config", cfg.as_str()];
    d.orchestrator = Some(Proc::spawn("orchestrator-token", "flotilla", &args, &[(TOKEN_ENV, TOKEN)]));
    let job = d.submit(JOB).await.to_string();
    let base = format!("http://127.0.0.1:{port}");
    let bearer = format!("Bearer {TOKEN}");
    eventually(TIMEOUT, "the job on the dashboard", || {
        let (base, bearer, job) = (base.clone(), bearer.clone(), job.clone());
        async move {
            let r = client().get(format!("{base}/api/jobs")).header(AUTHORIZATION, bearer).send().await.ok()?;
            r.text().await.ok().filter(|t| t.contains(&job))
        }
    })
    .await;

    let wrong_bearer = format!("Bearer {TOKEN}x");
    let wrong_cookie = "flotilla_dashboard=0000";
    let paths = ["/", "/api/jobs", "/api/workers", "/events", &format!("/jobs/{job}"), &format!("/jobs/{job}/events")];
    for path in paths {
        for (what, headers) in [
            ("no token", vec![]),
            ("a wrong bearer token", vec![(AUTHORIZATION, wrong_bearer.as_str())]),
            ("the token without Bearer", vec![(AUTHORIZATION, TOKEN)]),
            ("a wrong cookie", vec![(COOKIE, wrong_cookie)]),
        ] {
            let (status, body) = get(&base, path, &headers).await;
            assert_eq!(status, StatusCode::UNAUTHORIZED, "{path} with {what}: {body}");
            assert!(!body.contains(&job), "{path} with {what} leaked: {body}");
        }
        let (status, _) = get(&base, &format!("{path}?token={TOKEN}"), &[]).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{path} with ?token=: a link signs nobody in");
        let (status, body) = get(&base, path, &[(AUTHORIZATION, &bearer)]).await;
        assert_eq!(status, StatusCode::OK, "{path} with the token: {body}");
    }
    // The Host check still comes first.
    let (status, _) = get(&base, "/api/jobs", &[(AUTHORIZATION, &bearer), (HOST, "evil.example")]).await;
    assert_eq!(status, StatusCode::MISDIRECTED_REQUEST);

    // A browser: the sign-in form sets the cookie and goes on to the page asked for.
    let form = format!("token={TOKEN}&next=%2Fjobs%2F{job}%3Fx%3D1");
    let r = client()
        .post(format!("{base}/login"))
        .header(reqwest::header::ORIGIN, &base)
        .header(reqwest::header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(form)
        .send()
        .await
        .expect("sign in");
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(r.headers()[LOCATION], format!("/jobs/{job}?x=1").as_str());
    let set = r.headers()[SET_COOKIE].to_str().unwrap().to_string();
    assert!(set.contains("HttpOnly") && set.contains("SameSite=Strict") && !set.contains(TOKEN), "{set}");
    let cookie = set.split(';').next().unwrap().to_string();
    for path in ["/", "/events", &format!("/fragment/jobs/{job}"), &format!("/api/jobs/{job}")] {
        let (status, body) = get(&base, path, &[(COOKIE, &cookie)]).await;
        assert_eq!(status, StatusCode::OK, "{path} with the cookie: {body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_loopback_listener_without_a_token_does_not_start() {
    let port = free_port();
    let listen = format!("listen = \"0.0.0.0:{port}\"\n");
    let mut d = Deployment::start(0, |url| config(url, &listen)).await;
    let log = exited(d.orchestrator.as_mut().expect("orchestrator")).await;
    assert!(log.contains("is not a loopback address") && log.contains("token_env"), "{log}");
    assert!(log.contains("insecure_no_token"), "the opt-out is named: {log}");
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err(), "nothing listens on {port}");
}
