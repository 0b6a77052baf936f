//! Where an MCP client may connect over HTTP, and how its URLs appear in logs.
//!
//! Rules (docs/MCP.md): `https` is required except to
//! loopback (or where a server explicitly sets `allow_insecure_http`);
//! credentials in the URL are refused (use `headers_from_env`); link-local and
//! cloud-metadata addresses are refused whatever the scheme, both as literals
//! and as what a host name resolves to when the session opens, and so are
//! IPv4 addresses disguised as IPv6 ([`is_forbidden`]). A host name is
//! resolved once per session and its checked addresses are pinned into the
//! session's HTTP client (`flotilla_mcp::url_policy::resolve_and_pin`): the connection never
//! resolves the name again, so a DNS server answering a public address to
//! the check and an internal one to the connection (DNS rebinding) gains
//! nothing (docs/MCP.md, "HTTP security"). Redirects are followed only to the
//! same origin (307/308, as rmcp's default client), so a server cannot bounce
//! the client to a metadata address.
//!
//! A hosted server's URL path can be an unguessable deployment id that works
//! as a bearer locator, so logs, health reports and errors show URLs through
//! [`redact`]: scheme, host and port, and of the path only the well-known
//! endpoint segments (`mcp`, `sse`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use url::Url;

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
    #[error(
        "{0} is a link-local or cloud-metadata address, or an IPv4 address hidden in an IPv6 one (mapped, NAT64): refused"
    )]
    Forbidden(String),
    /// The host name did not resolve when the session opened.
    #[error("cannot resolve {0}: {1}")]
    Resolve(String, String),
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

/// Link-local (which holds the AWS/GCP/Azure metadata address), the
/// unspecified address, the other clouds' metadata addresses, and any IPv4
/// address dressed as IPv6 (IPv4-mapped `::ffff:a.b.c.d`, IPv4-compatible
/// `::a.b.c.d`, NAT64 `64:ff9b::/96` and the local-use `64:ff9b:1::/48`)
/// unless the IPv4 address inside is a public one. Plain private and
/// loopback IPv4 addresses stay allowed (an internal MCP server is a normal
/// deployment); their IPv6 disguises only serve to slip past checks written
/// for IPv4, so they are refused: write the IPv4 address itself.
pub fn is_forbidden(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            v4.is_link_local() || v4.is_unspecified() || v4 == Ipv4Addr::new(100, 100, 100, 200) // Alibaba metadata
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = embedded_ipv4(v6) {
                return is_forbidden(IpAddr::V4(v4)) || !is_public_v4(v4);
            }
            (v6.segments()[0] & 0xffc0) == 0xfe80 // fe80::/10
                || v6.is_unspecified()
                || v6 == Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254) // AWS IMDS over IPv6
        }
    }
}

/// The IPv4 address an IPv6 address carries, for the forms that a network
/// delivers to that IPv4 address: mapped, compatible (not `::` or `::1`),
/// IPv4-translated (`::ffff:0:a.b.c.d`) and NAT64 (RFC 6052 well-known
/// prefix, RFC 8215 local-use prefix).
fn embedded_ipv4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    if let Some(v4) = v6.to_ipv4_mapped() {
        return Some(v4);
    }
    let s = v6.segments();
    let low = Ipv4Addr::from(((s[6] as u32) << 16) | s[7] as u32);
    let compatible = s[..6].iter().all(|&x| x == 0) && u32::from(low) > 1;
    let nat64 = s[..6] == [0x64, 0xff9b, 0, 0, 0, 0];
    let nat64_local = s[0] == 0x64 && s[1] == 0xff9b && s[2] == 1;
    let translated = s[..6] == [0, 0, 0, 0, 0xffff, 0]; // SIIT, RFC 2765
    (compatible || nat64 || nat64_local || translated).then_some(low)
}

/// A globally routable IPv4 address: not private, loopback, link-local,
/// shared (CGNAT, `100.64.0.0/10`), "this network" (`0.0.0.0/8`), protocol
/// assignments (`192.0.0.0/24`), benchmarking, documentation, multicast,
/// reserved or broadcast.
fn is_public_v4(v4: Ipv4Addr) -> bool {
    let [a, b, c, _] = v4.octets();
    !(v4.is_private()
        || v4.is_loopback()
        || v4.is_link_local()
        || v4.is_documentation()
        || v4.is_multicast()
        || v4.is_broadcast()
        || a == 0
        || (a == 100 && (b & 0xc0) == 64)
        || (a == 192 && b == 0 && c == 0)
        || (a == 198 && (b & 0xfe) == 18)
        || a >= 240)
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
