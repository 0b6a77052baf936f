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

#[cfg(test)]
mod tests {
    use axum::Json;
    use axum::routing::get;
    use serde_json::{Value, json};

    /// A real HTTP server with the legacy root metadata, optionally PRM, and
    /// endpoints on `endpoints_at` (its own origin when `None`).
    async fn server(with_prm: bool, endpoints_at: Option<&str>) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let origin = format!("http://{}", listener.local_addr().unwrap());
        let at = endpoints_at.unwrap_or(&origin).to_string();
        let metadata = json!({
            "issuer": format!("{origin}/oauth"),
            "authorization_endpoint": format!("{at}/oauth/authorize"),
            "token_endpoint": format!("{at}/oauth/token"),
        });
        let mut app = axum::Router::new().route(
            "/.well-known/oauth-authorization-server",
            get(move || {
                let m = metadata.clone();
                async move { Json::<Value>(m) }
            }),
        );
        if with_prm {
            let prm = json!({"resource": format!("{origin}/mcp"), "authorization_servers": ["https://as.example"]});
            app = app.route("/.well-known/oauth-protected-resource", get(move || async move { Json(prm.clone()) }));
        }
        tokio::spawn(async move { axum::serve(listener, app).await });
        format!("{origin}/mcp")
    }

    #[tokio::test]
    async fn root_metadata_only_without_prm_and_with_same_origin_endpoints() {
        flotilla_config::tls::install_crypto_provider();
        let http = reqwest::Client::new();
        let legacy = server(false, None).await;
        let m = super::root_metadata(&http, &legacy).await.expect("legacy layout accepted");
        assert!(m.token_endpoint.starts_with(legacy.trim_end_matches("/mcp")), "{m:?}");
        // PRM exists: it, not the root document, says who the authorization server is.
        assert!(super::root_metadata(&http, &server(true, None).await).await.is_none());
        // An endpoint on another origin: never sent the client's credentials.
        assert!(super::root_metadata(&http, &server(false, Some("http://127.0.0.2:9")).await).await.is_none());
    }
}
