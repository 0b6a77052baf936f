//! `grant = "enterprise_managed"` (SEP-990, docs/MCP.md "OAuth"): the user's
//! ID token from the enterprise identity provider becomes an identity
//! assertion grant (ID-JAG, RFC 8693 token exchange at the IdP), which the
//! server's authorization server exchanges for an access token (RFC 7523 JWT
//! bearer grant). rmcp's `enterprise` module does both exchanges and their
//! checks; this file supplies the two servers from config and discovery and
//! hands the token to the session's manager. No browser is involved.

use rmcp::transport::auth::enterprise::{EmaAuthorizationServer, EmaClientAuthentication, EmaExchangeRequest};
use rmcp::transport::auth::{AuthorizationManager, AuthorizationMetadata, default_oauth_http_client};

use super::{auth_error, config_error, install_token, secret};
use crate::config::{McpOAuth, McpServerSettings, OAuthClientAuth};
use crate::error::McpError;

/// Runs both exchanges for `url` and installs the access token in `manager`.
pub(super) async fn authorize(
    settings: &McpServerSettings,
    oauth: &McpOAuth,
    url: &str,
    metadata: &AuthorizationMetadata,
    manager: AuthorizationManager,
) -> Result<AuthorizationManager, McpError> {
    let idp_config =
        oauth.idp.as_ref().ok_or_else(|| config_error(settings, "grant enterprise_managed needs [idp]"))?;
    let client_id = oauth.client_id.clone().unwrap_or_default();
    let issuer = metadata.issuer.clone().ok_or_else(|| {
        config_error(settings, "the authorization server's metadata names no issuer, which enterprise_managed needs")
    })?;
    let mut resource_as = EmaAuthorizationServer::new(issuer, metadata.token_endpoint.clone(), client_id.clone());
    if let OAuthClientAuth::Secret { env } = &oauth.client_auth {
        let secret = oauth2::ClientSecret::new(secret(settings, env)?);
        resource_as = resource_as.with_client_authentication(if prefers_post(metadata) {
            EmaClientAuthentication::ClientSecretPost(secret)
        } else {
            EmaClientAuthentication::ClientSecretBasic(secret)
        });
    }
    let mut idp = EmaAuthorizationServer::new(
        idp_config.issuer.clone(),
        idp_config.token_endpoint.clone(),
        idp_config.client_id.clone(),
    );
    if let Some(env) = &idp_config.client_secret_env {
        let secret = oauth2::ClientSecret::new(secret(settings, env)?);
        idp = idp.with_client_authentication(EmaClientAuthentication::ClientSecretBasic(secret));
    }
    let id_token = secret(settings, &idp_config.id_token_env)?;
    let http = default_oauth_http_client().map_err(|e| auth_error(settings, "cannot prepare OAuth", e))?;
    let token = EmaExchangeRequest::new_with_id_token(idp, resource_as, url, &id_token)
        .with_scopes(oauth.scopes.iter().cloned())
        .exchange(&http, &http)
        .await
        .map_err(|e| McpError::Connect {
            server: settings.name.clone(),
            message: crate::session::redacted(settings, format!("OAuth enterprise-managed authorization failed: {e}")),
        })?;

    let expires_in = token.expires_in.map(|e| e.as_secs());
    let scopes = token.scopes.into_iter().collect();
    install_token(settings, manager, &client_id, token.access_token.secret(), expires_in, scopes).await
}

/// Client secret in the form body only when the server advertises that and not HTTP Basic.
fn prefers_post(metadata: &AuthorizationMetadata) -> bool {
    let methods = metadata.additional_fields.get("token_endpoint_auth_methods_supported").and_then(|m| m.as_array());
    methods
        .is_some_and(|m| m.iter().any(|v| v == "client_secret_post") && !m.iter().any(|v| v == "client_secret_basic"))
}
