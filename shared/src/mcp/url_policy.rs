//! Where an MCP client may connect over HTTP, and how its URLs appear in logs.
//!
//! Rules (seed 000 sections 5.8 and 7.1): `https` is required except to
//! loopback (or where a server explicitly sets `allow_insecure_http`);
//! credentials in the URL are refused (use `headers_from_env`); link-local and
//! cloud-metadata addresses are refused whatever the scheme, both as literals
//! and as what a host name resolves to when the session opens. Redirects are
//! followed only to the same origin (rmcp's default client), so a server
//! cannot bounce the client to a metadata address.
//!
//! A hosted server's URL path can be an unguessable deployment id that works
//! as a bearer locator, so logs, health reports and errors show URLs through
//! [`redact`]: scheme, host and port, and of the path only the well-known
//! endpoint segments (`mcp`, `sse`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use reqwest::Url;

/// Why a URL is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UrlError {
    /// Not a URL.
    #[error("not a valid URL: {0}")]
    Parse(String),
    /// Neither http nor https.
    #[error("scheme {0:?} is not supported: use https (or http to loopback)")]
    Scheme(String),
    /// Plain http beyond loopback.
    #[error("plain http is only allowed to loopback ({0}); use https, or set allow_insecure_http = true")]
    InsecureHttp(String),
    /// user:password@ in the URL.
    #[error(
        "credentials in the URL are refused: put them in an environment variable named by headers_from_env or bearer_token_env"
    )]
    Credentials,
    /// A link-local or cloud-metadata address.
    #[error("{0} is a link-local or cloud-metadata address: refused")]
    Forbidden(String),
}

/// Host names of cloud metadata services.
const METADATA_HOSTS: &[&str] = &["metadata.google.internal", "metadata.goog", "metadata", "instance-data"];

/// Parses `url` and checks it against the rules.
pub fn check(url: &str, allow_insecure_http: bool) -> Result<Url, UrlError> {
    let parsed = Url::parse(url).map_err(|e| UrlError::Parse(e.to_string()))?;
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(UrlError::Credentials);
    }
    let host = parsed.host_str().ok_or_else(|| UrlError::Parse("the URL has no host".into()))?.to_ascii_lowercase();
    let host = host.trim_start_matches('[').trim_end_matches(']').to_string();
    if METADATA_HOSTS.contains(&host.trim_end_matches('.')) {
        return Err(UrlError::Forbidden(host));
    }
    let ip: Option<IpAddr> = host.parse().ok();
    if let Some(ip) = ip
        && is_forbidden(ip)
    {
        return Err(UrlError::Forbidden(ip.to_string()));
    }
    match parsed.scheme() {
        "https" => {}
        "http" => {
            let loopback = host == "localhost" || host.ends_with(".localhost") || ip.is_some_and(|ip| ip.is_loopback());
            if !loopback && !allow_insecure_http {
                return Err(UrlError::InsecureHttp(host));
            }
        }
        other => return Err(UrlError::Scheme(other.into())),
    }
    Ok(parsed)
}

/// Checks what a host name resolved to, just before connecting.
pub async fn check_resolved(url: &Url) -> Result<(), UrlError> {
    let Some(host) = url.host_str() else { return Ok(()) };
    if host.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>().is_ok() {
        return Ok(()); // literals were checked by `check`
    }
    let port = url.port_or_known_default().unwrap_or(443);
    // A resolution failure is the transport's to report, with its own message.
    if let Ok(addrs) = tokio::net::lookup_host((host, port)).await {
        for a in addrs {
            if is_forbidden(a.ip()) {
                return Err(UrlError::Forbidden(format!("{host} (resolves to {})", a.ip())));
            }
        }
    }
    Ok(())
}

/// Link-local (which holds the AWS/GCP/Azure metadata address), the
/// unspecified address, and the other clouds' metadata addresses.
pub fn is_forbidden(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            v4.is_link_local() || v4.is_unspecified() || v4 == Ipv4Addr::new(100, 100, 100, 200) // Alibaba metadata
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_forbidden(IpAddr::V4(v4));
            }
            (v6.segments()[0] & 0xffc0) == 0xfe80 // fe80::/10
                || v6.is_unspecified()
                || v6 == Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254) // AWS IMDS over IPv6
        }
    }
}

/// Path segments shown as they are: endpoint names, not secrets.
const PUBLIC_SEGMENTS: &[&str] = &["mcp", "sse"];

/// `url` safe to log: scheme, host, port; the path with every segment but
/// well-known endpoint names replaced by `<redacted>`; no credentials, query
/// or fragment.
pub fn redact(url: &str) -> String {
    let Ok(u) = Url::parse(url) else { return "<unparseable url>".into() };
    let mut out = format!("{}://{}", u.scheme(), u.host_str().unwrap_or(""));
    if let Some(port) = u.port() {
        out.push_str(&format!(":{port}"));
    }
    let segments: Vec<&str> = u.path_segments().map(|s| s.filter(|s| !s.is_empty()).collect()).unwrap_or_default();
    for s in &segments {
        out.push('/');
        out.push_str(if PUBLIC_SEGMENTS.contains(s) { s } else { "<redacted>" });
    }
    if u.query().is_some() {
        out.push_str("?<redacted>");
    }
    out
}

/// Removes a URL, its secret path segments and its query from text produced
/// by other libraries, such as transport errors that quote the request URL.
/// Errs on the side of hiding too much.
pub fn scrub(text: &str, url: &str) -> String {
    let mut out = text.replace(url, &redact(url));
    if let Ok(u) = Url::parse(url) {
        for seg in u.path_segments().into_iter().flatten() {
            if !seg.is_empty() && !PUBLIC_SEGMENTS.contains(&seg) {
                out = out.replace(seg, "<redacted>");
            }
        }
        if let Some(q) = u.query().filter(|q| !q.is_empty()) {
            out = out.replace(q, "<redacted>");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn https_required_except_loopback() {
        assert!(check("https://mcp.example.com/mcp", false).is_ok());
        assert!(check("http://127.0.0.1:8080/mcp", false).is_ok());
        assert!(check("http://localhost:8080/mcp", false).is_ok());
        assert!(check("http://[::1]:8080/mcp", false).is_ok());
        assert_eq!(check("http://mcp.example.com/mcp", false), Err(UrlError::InsecureHttp("mcp.example.com".into())));
        assert!(check("http://10.1.2.3/mcp", true).is_ok());
        assert!(matches!(check("ftp://x/mcp", false), Err(UrlError::Scheme(_))));
        assert_eq!(check("https://u:p@mcp.example.com/mcp", false), Err(UrlError::Credentials));
        assert!(matches!(check("not a url", false), Err(UrlError::Parse(_))));
    }

    #[test]
    fn metadata_and_link_local_are_refused_even_when_insecure_is_allowed() {
        for url in [
            "http://169.254.169.254/latest/meta-data",
            "https://169.254.169.254/",
            "http://169.254.10.1/mcp",
            "http://metadata.google.internal/computeMetadata/v1",
            "http://100.100.100.200/latest",
            "http://[fe80::1]/mcp",
            "http://[fd00:ec2::254]/",
            "http://[::ffff:169.254.169.254]/",
            "http://0.0.0.0:80/mcp",
        ] {
            assert!(matches!(check(url, true), Err(UrlError::Forbidden(_))), "{url}");
        }
    }

    #[tokio::test]
    async fn resolved_names_are_checked() {
        let u = Url::parse("http://localhost:1/mcp").unwrap();
        assert!(check_resolved(&u).await.is_ok());
    }

    #[test]
    fn redaction_hides_deployment_paths_and_queries() {
        let url = "https://mcp.api-inference.example.net/3f9a0c2d7e/mcp?key=s3cret";
        assert_eq!(redact(url), "https://mcp.api-inference.example.net/<redacted>/mcp?<redacted>");
        assert_eq!(redact("http://127.0.0.1:9000/mcp"), "http://127.0.0.1:9000/mcp");
        assert_eq!(redact("https://u:p@h.example/tok"), "https://h.example/<redacted>");
        let msg = format!("error sending request for url ({url}): connection refused; path /3f9a0c2d7e/mcp");
        let s = scrub(&msg, url);
        assert!(!s.contains("3f9a0c2d7e") && !s.contains("s3cret"), "{s}");
        assert!(s.contains("connection refused"), "{s}");
    }
}
