//! Pinned resolution for MCP over HTTP: a host name is resolved once per
//! session, every address is checked against the URL policy
//! (`flotilla_config::url_policy`, re-exported here), and the checked
//! addresses are pinned into the session's HTTP client, so a DNS server that
//! answers a public address to the check and an internal one to the
//! connection (DNS rebinding) gains nothing (docs/MCP.md, "HTTP security").

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use futures::future::BoxFuture;
use reqwest::Url;

pub use flotilla_config::url_policy::*;

/// A host name's checked addresses, fixed for one session: the HTTP client
/// connects only to these ([`Pinned::apply`]) and never asks DNS again, so a
/// name that passed the check cannot be re-pointed at an internal address
/// later in the session (DNS rebinding).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pinned {
    /// The URL's host name, as the client will look it up.
    pub host: String,
    /// Every address it resolved to, each one checked by [`is_forbidden`].
    pub addrs: Vec<SocketAddr>,
}

impl Pinned {
    /// `builder` with `host` resolving to the checked addresses only.
    pub fn apply(&self, builder: reqwest::ClientBuilder) -> reqwest::ClientBuilder {
        builder.resolve_to_addrs(&self.host, &self.addrs)
    }
}

/// How a host name becomes addresses: the system resolver in production
/// ([`system_resolver`]); tests substitute one that answers differently on
/// each call to replay a rebinding DNS server.
pub type Resolver = Arc<dyn Fn(String, u16) -> BoxFuture<'static, std::io::Result<Vec<SocketAddr>>> + Send + Sync>;

/// The operating system's resolver (`getaddrinfo`, through tokio).
pub fn system_resolver() -> Resolver {
    Arc::new(|host, port| Box::pin(async move { Ok(tokio::net::lookup_host((host.as_str(), port)).await?.collect()) }))
}

/// `resolver`, asked at most once: every later call answers what the first
/// one did. A session's open that starts over (offering an older revision)
/// connects to the addresses its first attempt checked, never to a second
/// answer of the name server.
pub(crate) fn resolving_once(resolver: &Resolver) -> Resolver {
    let inner = resolver.clone();
    let first: Arc<tokio::sync::OnceCell<Vec<SocketAddr>>> = Arc::default();
    Arc::new(move |host, port| {
        let (inner, first) = (inner.clone(), first.clone());
        Box::pin(async move { first.get_or_try_init(|| inner(host, port)).await.cloned() })
    })
}

/// Resolves `url`'s host name once, checks every address, and returns them
/// to pin for the session; `None` for an IP literal (checked by [`check`],
/// nothing to resolve). A failed or empty resolution is an error: without a
/// checked address there is nothing safe to connect to.
pub async fn resolve_and_pin(url: &Url, resolver: &Resolver) -> Result<Option<Pinned>, UrlError> {
    let Some(host) = url.host_str() else { return Ok(None) };
    if host.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>().is_ok() {
        return Ok(None);
    }
    let port = url.port_or_known_default().unwrap_or(443);
    let addrs = resolver(host.to_string(), port).await.map_err(|e| UrlError::Resolve(host.into(), e.to_string()))?;
    if addrs.is_empty() {
        return Err(UrlError::Resolve(host.into(), "no addresses".into()));
    }
    if let Some(bad) = addrs.iter().find(|a| is_forbidden(a.ip())) {
        return Err(UrlError::Forbidden(format!("{host} (resolves to {})", bad.ip())));
    }
    Ok(Some(Pinned { host: host.to_string(), addrs }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_disguised_as_ipv6_is_refused_unless_public() {
        for ip in [
            "64:ff9b::a00:1",           // NAT64 of 10.0.0.1
            "64:ff9b::10.0.0.1",        // the same, dotted
            "64:ff9b::169.254.169.254", // NAT64 of the metadata address
            "64:ff9b::127.0.0.1",       // NAT64 of loopback
            "64:ff9b:1::c0a8:101",      // local-use NAT64 prefix, 192.168.1.1
            "64:ff9b:1:abcd::10.1.2.3", // local-use prefix, any middle bits
            "64:ff9b::100.100.100.200", // Alibaba metadata
            "::ffff:10.0.0.1",          // IPv4-mapped
            "::ffff:127.0.0.1",         // IPv4-mapped loopback
            "::ffff:169.254.169.254",   // IPv4-mapped metadata
            "::10.0.0.1",               // IPv4-compatible
            "::127.0.0.1",              // IPv4-compatible loopback
            "::ffff:0:10.0.0.1",        // IPv4-translated
            "64:ff9b::100.64.0.1",      // shared (CGNAT)
            "64:ff9b::0.0.0.0",         // unspecified
        ] {
            assert!(is_forbidden(ip.parse().unwrap()), "{ip} must be refused");
            assert!(matches!(check(&format!("https://[{ip}]/mcp"), true), Err(UrlError::Forbidden(_))), "{ip}");
        }
        for ip in ["64:ff9b::8.8.8.8", "64:ff9b:1::1.1.1.1", "::ffff:93.184.216.34", "2606:4700::1111", "::1"] {
            assert!(!is_forbidden(ip.parse().unwrap()), "{ip} must be allowed");
        }
        for ip in ["10.0.0.1", "127.0.0.1", "192.168.1.1", "8.8.8.8"] {
            assert!(!is_forbidden(ip.parse().unwrap()), "{ip}: plain IPv4 keeps its own rules");
        }
    }

    /// A resolver answering `answers` in turn, counting its calls.
    fn scripted(answers: Vec<Vec<SocketAddr>>) -> (Resolver, Arc<std::sync::atomic::AtomicUsize>) {
        let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let c = calls.clone();
        let r: Resolver = Arc::new(move |_, _| {
            let n = c.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let a = answers[n.min(answers.len() - 1)].clone();
            Box::pin(async move { Ok(a) })
        });
        (r, calls)
    }

    #[tokio::test]
    async fn every_resolved_address_is_checked_and_pinned() {
        let u = Url::parse("https://mcp.rebind.invalid/mcp").unwrap();
        let good: SocketAddr = "93.184.216.34:443".parse().unwrap();
        let (r, calls) = scripted(vec![vec![good]]);
        let pinned = resolve_and_pin(&u, &r).await.unwrap().unwrap();
        assert_eq!(pinned, Pinned { host: "mcp.rebind.invalid".into(), addrs: vec![good] });
        assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1);
        for bad in ["169.254.169.254:443", "[64:ff9b::a9fe:a9fe]:443", "[::ffff:10.0.0.1]:443"] {
            let (r, _) = scripted(vec![vec![good, bad.parse().unwrap()]]);
            let e = resolve_and_pin(&u, &r).await.unwrap_err();
            assert!(matches!(&e, UrlError::Forbidden(m) if m.contains("mcp.rebind.invalid")), "{bad}: {e}");
        }
        let (r, _) = scripted(vec![vec![]]);
        assert!(matches!(resolve_and_pin(&u, &r).await, Err(UrlError::Resolve(..))));
        let literal = Url::parse("http://127.0.0.1:1/mcp").unwrap();
        assert_eq!(resolve_and_pin(&literal, &r).await, Ok(None));
        let local = Url::parse("http://localhost:1/mcp").unwrap();
        let pinned = resolve_and_pin(&local, &system_resolver()).await.unwrap().unwrap();
        assert!(pinned.addrs.iter().all(|a| a.ip().is_loopback()), "{pinned:?}");
    }

    /// The pin replaces DNS: a `.invalid` name (RFC 6761: never resolves)
    /// reaches the local server it is pinned to, and a client without the
    /// pin cannot reach it at all, so the connection asked no resolver.
    #[tokio::test]
    async fn a_pinned_client_connects_to_the_checked_address_without_asking_dns() {
        flotilla_config::tls::install_crypto_provider();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let mut buf = [0u8; 1024];
                let _ = s.read(&mut buf).await;
                let _ = s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 6\r\nconnection: close\r\n\r\npinned").await;
            }
        });
        let url = format!("http://mcp.rebind.invalid:{}/mcp", addr.port());
        let pinned = Pinned { host: "mcp.rebind.invalid".into(), addrs: vec![addr] };
        let client = pinned.apply(reqwest::Client::builder().no_proxy()).build().unwrap();
        for _ in 0..3 {
            let body = client.get(&url).send().await.unwrap().text().await.unwrap();
            assert_eq!(body, "pinned");
        }
        let unpinned = reqwest::Client::builder().no_proxy().build().unwrap();
        assert!(unpinned.get(&url).send().await.is_err(), "without the pin the name does not resolve");
    }
}
