//! `grant = "workload_identity"` (SEP-1933, docs/MCP.md "OAuth"): the
//! platform's signed workload token (a Kubernetes projected service-account
//! token, a SPIFFE JWT-SVID, a cloud's identity token) is redeemed at the
//! server's authorization server as an RFC 7523 JWT bearer grant. The worker
//! holds no client secret: the authorization server trusts the workload's
//! issuer. rmcp 3.11 sends a JWT bearer grant only for an enterprise ID-JAG,
//! so this file makes the one token request itself and hands the token to
//! the session's manager.
//!
//! A refused grant is reported as the authorization server said it
//! (`invalid_grant`, `invalid_scope`, `unauthorized_client`), and is neither
//! retried nor replaced by another grant: a second try with the same token
//! gets the same answer, and falling back would sidestep the server's policy.
//! The next authorization (a 401 later in the session, a new session) reads
//! the token again, so a rotated file is picked up.

use std::time::Duration;

use rmcp::transport::auth::{AuthorizationManager, AuthorizationMetadata};
use serde::Deserialize;

use super::{config_error, install_token, secret};
use crate::config::{McpOAuth, McpServerSettings, WorkloadAssertion};
use crate::error::McpError;
use crate::url_policy;

/// RFC 7523 §2.1's grant type.
const JWT_BEARER: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";

/// A token request that takes longer has failed (rmcp's OAuth timeout).
const TOKEN_TIMEOUT: Duration = Duration::from_secs(30);

/// The token endpoint's answer, success or error (RFC 6749 §5.1, §5.2).
#[derive(Deserialize)]
struct TokenAnswer {
    access_token: Option<String>,
    expires_in: Option<u64>,
    scope: Option<String>,
    error: Option<String>,
    error_description: Option<String>,
}

/// Redeems the workload's JWT for an access token to `url` and installs it in `manager`.
pub(super) async fn authorize(
    settings: &McpServerSettings,
    oauth: &McpOAuth,
    url: &str,
    metadata: &AuthorizationMetadata,
    scopes: Vec<String>,
    manager: AuthorizationManager,
) -> Result<AuthorizationManager, McpError> {
    let failed = |m: String| McpError::Connect {
        server: settings.name.clone(),
        message: crate::session::redacted(settings, format!("OAuth workload identity grant failed: {m}")),
    };
    let assertion = assertion(settings, oauth)?;
    let endpoint = url_policy::check(&metadata.token_endpoint, false)
        .map_err(|e| failed(format!("token endpoint {}: {e}", url_policy::redact(&metadata.token_endpoint))))?;
    let body = {
        // The serializer is not `Send`: it never lives across an await.
        let mut form = form_urlencoded::Serializer::new(String::new());
        form.append_pair("grant_type", JWT_BEARER).append_pair("assertion", &assertion).append_pair("resource", url);
        if let Some(id) = &oauth.client_id {
            form.append_pair("client_id", id);
        }
        if !scopes.is_empty() {
            form.append_pair("scope", &scopes.join(" "));
        }
        form.finish()
    };
    flotilla_config::tls::install_crypto_provider();
    let http = reqwest::Client::builder()
        .timeout(TOKEN_TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| failed(format!("cannot build the HTTP client: {e}")))?;
    let response = http
        .post(endpoint)
        .header(reqwest::header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header(reqwest::header::ACCEPT, "application/json")
        .body(body)
        .send()
        .await
        .map_err(|e| failed(format!("token endpoint unreachable: {}", e.without_url())))?;
    let status = response.status();
    let answer: TokenAnswer = response
        .json()
        .await
        .map_err(|_| failed(format!("the token endpoint answered HTTP {status} without an OAuth JSON body")))?;
    let token = match answer {
        TokenAnswer { access_token: Some(token), .. } if status.is_success() => token,
        TokenAnswer { error: Some(code), error_description, .. } => {
            let why = error_description.map(|d| format!(": {d}")).unwrap_or_default();
            return Err(failed(format!("the authorization server refused it ({code}{why})")));
        }
        _ => return Err(failed(format!("the token endpoint answered HTTP {status} with no access token"))),
    };
    let granted = answer.scope.map(|s| s.split_whitespace().map(str::to_string).collect()).unwrap_or(scopes);
    let client_id = oauth.client_id.clone().unwrap_or_default();
    install_token(settings, manager, &client_id, &token, answer.expires_in, granted).await
}

/// The workload's JWT, read now (a file may have been rotated since the last read).
fn assertion(settings: &McpServerSettings, oauth: &McpOAuth) -> Result<String, McpError> {
    let token = match &oauth.assertion {
        Some(WorkloadAssertion::Env(env)) => secret(settings, env)?,
        Some(WorkloadAssertion::File(path)) => std::fs::read_to_string(path).map_err(|e| {
            let key = format!("mcp_servers.{}.oauth.assertion_file", settings.name);
            config_error(settings, &format!("cannot read the workload token {} (`{key}`): {e}", path.display()))
        })?,
        None => return Err(config_error(settings, "grant workload_identity needs assertion_file or assertion_env")),
    };
    let token = token.trim();
    if token.is_empty() {
        return Err(config_error(settings, "the workload token is empty"));
    }
    Ok(token.to_string())
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use axum::routing::post;
    use rmcp::transport::auth::{AuthorizationManager, AuthorizationMetadata};

    use crate::config::{McpTransport, RawMcpOAuth, RawMcpServer, validate};

    /// A token endpoint that records each form body and refuses every
    /// assertion but `good`, as an authorization server that does not trust
    /// the workload's issuer would.
    async fn token_endpoint(bodies: Arc<Mutex<Vec<String>>>) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let origin = format!("http://{}", listener.local_addr().unwrap());
        let app = axum::Router::new().route(
            "/token",
            post(move |body: String| {
                let bodies = bodies.clone();
                async move {
                    let good = body.contains("assertion=good");
                    bodies.lock().unwrap().push(body);
                    if good {
                        (axum::http::StatusCode::OK, r#"{"access_token":"at-1","token_type":"Bearer"}"#)
                    } else {
                        let refused = r#"{"error":"invalid_grant","error_description":"untrusted issuer"}"#;
                        (axum::http::StatusCode::BAD_REQUEST, refused)
                    }
                }
            }),
        );
        tokio::spawn(async move { axum::serve(listener, app).await });
        format!("{origin}/token")
    }

    #[tokio::test]
    async fn a_refused_grant_names_the_servers_answer_once_and_a_rotated_token_file_is_read_again() {
        flotilla_config::tls::install_crypto_provider();
        let bodies = Arc::new(Mutex::new(Vec::new()));
        let token_endpoint = token_endpoint(bodies.clone()).await;
        let dir = std::env::temp_dir().join(format!("flotilla-wif-{}-{}", std::process::id(), line!()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("token.jwt"), "bad\n").unwrap();
        let raw = RawMcpServer {
            url: Some("http://127.0.0.1:9/mcp".into()),
            oauth: Some(RawMcpOAuth {
                grant: Some("workload_identity".into()),
                client_id: Some("workload-7".into()),
                assertion_file: Some("token.jwt".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let settings = validate("remote", raw, &dir).unwrap();
        let McpTransport::Http { oauth: Some(oauth), url, .. } = &settings.transport else { panic!() };
        let metadata: AuthorizationMetadata = serde_json::from_value(serde_json::json!({
            "authorization_endpoint": "http://127.0.0.1:9/authorize",
            "token_endpoint": token_endpoint,
        }))
        .unwrap();
        // As `oauth::authorize` hands it over: discovery done, metadata set.
        let manager = async || {
            let mut m = AuthorizationManager::new(url.as_str()).await.unwrap();
            m.set_metadata(metadata.clone());
            m
        };

        let scopes = vec!["files:read".to_string()];
        let refused = super::authorize(&settings, oauth, url, &metadata, scopes.clone(), manager().await).await;
        let message = refused.err().expect("refused").to_string();
        assert!(message.contains("invalid_grant") && message.contains("untrusted issuer"), "{message}");
        assert!(!message.contains("assertion=bad"), "the token never reaches the error: {message}");
        {
            let sent = bodies.lock().unwrap();
            assert_eq!(sent.len(), 1, "a refused grant is not retried: {sent:?}");
            for part in ["grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer", "assertion=bad"] {
                assert!(sent[0].contains(part), "{part} missing from {}", sent[0]);
            }
            for part in ["client_id=workload-7", "scope=files%3Aread", "resource=http%3A%2F%2F127.0.0.1%3A9%2Fmcp"] {
                assert!(sent[0].contains(part), "{part} missing from {}", sent[0]);
            }
        }

        std::fs::write(dir.join("token.jwt"), "good\n").unwrap();
        let manager = super::authorize(&settings, oauth, url, &metadata, scopes, manager().await)
            .await
            .expect("the rotated token is accepted");
        assert_eq!(manager.get_access_token().await.unwrap(), "at-1");
        assert_eq!(bodies.lock().unwrap().len(), 2);
        std::fs::remove_dir_all(dir).ok();
    }
}
