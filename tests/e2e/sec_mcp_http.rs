//! MCP over HTTP against a rebinding DNS server, with the real
//! finance-tools HTTP server (docs/MCP.md, "HTTP security"). The resolver is
//! the one a session checks addresses with; it answers the checked loopback
//! address once, then the cloud-metadata address, as a rebinding server
//! would. Editing /etc/hosts is not possible here, so that the connection
//! itself never asks DNS is shown by the unit test
//! `a_pinned_client_connects_to_the_checked_address_without_asking_dns`
//! (shared/mcp/src/url_policy.rs); this test shows a real session lives on
//! the pin and that every new session resolves and checks again.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use flotilla_mcp::McpError;
use flotilla_mcp::config::{self, McpServerSettings, RawMcpServer};
use flotilla_mcp::session::Session;
use flotilla_mcp::url_policy::Resolver;
use flotilla_testkit::{Proc, eventually, free_port};

fn settings(url: &str) -> McpServerSettings {
    let raw = RawMcpServer { url: Some(url.into()), ..Default::default() };
    config::validate("remote", raw, Path::new(".")).unwrap_or_else(|p| panic!("{}: {}", p.key, p.message))
}

/// Answers `first` once, then the metadata address; counts its calls.
fn rebinding(first: SocketAddr) -> (Resolver, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let r: Resolver = Arc::new(move |_, port| {
        let n = c.fetch_add(1, Ordering::SeqCst);
        let addr = if n == 0 { first } else { SocketAddr::from(([169, 254, 169, 254], port)) };
        Box::pin(async move { Ok(vec![addr]) })
    });
    (r, calls)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_keeps_its_checked_address_when_dns_rebinds() {
    let port = free_port();
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let _srv = Proc::spawn("finance-http", "finance-tools", &["--http", &addr.to_string()], &[]);
    eventually(Duration::from_secs(20), "the HTTP MCP server to listen", || async move {
        tokio::net::TcpStream::connect(addr).await.ok().map(|_| ())
    })
    .await;
    // finance-tools answers only Host localhost (rmcp's own rebinding check).
    let s = settings(&format!("http://localhost:{port}/mcp"));
    let (resolver, calls) = rebinding(addr);
    let session = Session::open_with_resolver(&s, &resolver).await.expect("session on the checked address");
    // Every request is a new connection (the client keeps no idle ones):
    // each one would be a chance to rebind if the client resolved again.
    for _ in 0..5 {
        let tools = session.list_tools(&s, Duration::from_secs(10)).await.expect("tools over the pinned address");
        assert!(tools.iter().any(|t| t.name == "gross_margin"));
    }
    assert_eq!(calls.load(Ordering::SeqCst), 1, "resolved once, when the session opened");

    // A new session (a reconnect) resolves and checks again: refused.
    let e = Session::open_with_resolver(&s, &resolver).await.err().expect("a rebound name is refused");
    match &e {
        McpError::Config { message, .. } => assert!(message.contains("resolves to 169.254.169.254"), "{e}"),
        other => panic!("expected a config refusal, got {other:?}"),
    }
    session.close().await;

    // IPv4 dressed as IPv6 is refused before any connection.
    for host in ["[64:ff9b::7f00:1]", "[::ffff:127.0.0.1]", "[64:ff9b:1::a9fe:a9fe]"] {
        let url = format!("http://{host}:{port}/mcp");
        let raw = RawMcpServer { url: Some(url.clone()), allow_insecure_http: true, ..Default::default() };
        let p = config::validate("remote", raw, Path::new(".")).unwrap_err();
        assert!(p.message.contains("IPv4 address hidden in an IPv6 one"), "{url}: {}", p.message);
    }
}
