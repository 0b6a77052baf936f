//! Servers of the 2025-03-26 authorization spec publish no protected-resource
//! metadata: the MCP server's origin is the authorization base URL, and its
//! `/.well-known/oauth-authorization-server` may describe an issuer at
//! another path of that origin (e.g. `/oauth`). rmcp 3.11 checks the issuer
//! against the metadata URL (RFC 8414 §3.3) and refuses that document.
//!
//! Accepting it is safe only where the spec put the trust: the document comes
//! from the MCP server's own origin, no protected-resource metadata exists
//! that could name another authorization server, and every endpoint it names
//! is on that same origin. Anything else keeps rmcp's error.

use rmcp::transport::auth::AuthorizationMetadata;

/// The root authorization-server metadata of `url`'s origin, if the legacy
/// layout above applies.
pub(super) async fn root_metadata(http: &reqwest::Client, url: &str) -> Option<AuthorizationMetadata> {
    let base = reqwest::Url::parse(url).ok()?;
    let path = base.path().trim_end_matches('/');
    for prm in [format!("/.well-known/oauth-protected-resource{path}"), "/.well-known/oauth-protected-resource".into()]
    {
        let response = http.get(base.join(&prm).ok()?).send().await.ok()?;
        if response.status().is_success() {
            return None;
        }
    }
    let response = http.get(base.join("/.well-known/oauth-authorization-server").ok()?).send().await.ok()?;
    if !response.status().is_success() {
        return None;
    }
    let metadata: AuthorizationMetadata = response.json().await.ok()?;
    let same_origin = |u: &str| reqwest::Url::parse(u).is_ok_and(|u| u.origin() == base.origin());
    let endpoints = [Some(&metadata.authorization_endpoint), Some(&metadata.token_endpoint)];
    let all_same =
        endpoints.into_iter().chain([metadata.registration_endpoint.as_ref()]).flatten().all(|e| same_origin(e));
    all_same.then_some(metadata)
}
