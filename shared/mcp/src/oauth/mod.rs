//! OAuth 2.1 for Streamable HTTP servers (`[mcp_servers.<name>.oauth]`,
//! docs/MCP.md "OAuth"), through rmcp's auth support: this module only maps
//! Flotilla's settings onto rmcp's `AuthorizationManager` and decides what an
//! unattended process may do.
//!
//! Discovery is reactive: the session first talks to the server without a
//! token, and the `WWW-Authenticate` challenge of its 401 seeds rmcp's
//! discovery (protected-resource metadata, then authorization-server metadata
//! with the 2025-03-26 fallbacks). Then:
//!
//! - `client_credentials`: the worker exchanges its own secret or signed JWT
//!   for a token (RFC 8707 `resource` = the server's URL); on 403
//!   `insufficient_scope` it asks again with the union of scopes.
//! - `enterprise_managed` (SEP-990): the user's ID token from the enterprise
//!   identity provider is exchanged there, then at the server's authorization
//!   server (`enterprise`).
//! - `authorization_code`: someone must open a browser, which a worker never
//!   waits for. A process either has an [`Authorizer`] (the conformance
//!   client, `flotilla mcp login`) or a [`CredentialStores`] entry
//!   holding a refresh token from an earlier login; otherwise the error names
//!   `flotilla mcp login <server>`.
//!
//! Secrets and tokens stay inside rmcp's types (whose `Debug` redacts them)
//! and are never formatted into errors: `auth_error` keeps rmcp's message,
//! which names endpoints and OAuth error codes, not credentials.

mod dpop;
mod enterprise;
mod legacy;
mod runtime;
mod session_http;
mod stored;
mod workload;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::transport::AuthClient;
use rmcp::transport::auth::{
    AuthError, AuthorizationCallback, AuthorizationManager, AuthorizationRequest, AuthorizationSession,
    ClientCredentialsConfig, CredentialStore, InMemoryCredentialStore, JwtSigningAlgorithm, OAuthTokenResponse,
    StoredCredentials, WWWAuthenticateParams,
};
pub use runtime::{Authorizer, CredentialStores, set_runtime};
pub use session_http::SessionHttp;
pub use stored::{StoredCredentialStores, StoredSummary, TokenStore, TokenStoreError};

use crate::config::{McpOAuth, McpServerSettings, McpTransport, OAuthClientAuth, OAuthGrant};
use crate::error::McpError;

/// The HTTP client a session sends MCP requests through, with OAuth tokens.
pub type OAuthHttpClient = AuthClient<SessionHttp>;

/// A manager for `url` with no token yet: requests go out without one and
/// the server's 401 starts [`authorize`]. Under DPoP its OAuth requests go
/// through [`dpop::DpopOAuthHttp`], which adds the proofs.
pub(crate) async fn unauthorized(
    settings: &McpServerSettings,
    url: &str,
    dpop: Option<&Arc<dpop::Dpop>>,
) -> Result<AuthorizationManager, McpError> {
    let manager = match dpop {
        None => AuthorizationManager::new(url).await,
        Some(dpop) => {
            let insecure = matches!(&settings.transport, McpTransport::Http { allow_insecure_http: true, .. });
            let http = dpop::DpopOAuthHttp::new(dpop.clone(), insecure)
                .map_err(|e| config_error(settings, &format!("cannot build the DPoP HTTP client: {e}")))?;
            AuthorizationManager::new_with_oauth_http_client(url, Arc::new(http)).await
        }
    };
    manager.map_err(|e| auth_error(settings, "cannot prepare OAuth", e))
}

/// Obtains a token for `settings`' server as its `[oauth]` section says,
/// starting discovery from `challenge` (a 401's `WWW-Authenticate`, or none
/// when the server let the session start without a token), and installs the
/// authorized manager into `client`.
pub(crate) async fn authorize(
    settings: &McpServerSettings,
    oauth: &McpOAuth,
    url: &str,
    client: &OAuthHttpClient,
    challenge: Option<&str>,
) -> Result<(), McpError> {
    let server = &settings.name;
    let dpop = client.http_client.dpop();
    let mut manager = unauthorized(settings, url, dpop).await?;
    if oauth.grant == OAuthGrant::AuthorizationCode
        && let Some(store) = runtime::store_for(server)
    {
        manager.set_credential_store(store);
        if manager.initialize_from_store().await.map_err(|e| auth_error(settings, "stored OAuth credentials", e))? {
            *client.auth_manager.lock().await = manager;
            return Ok(());
        }
    }
    let metadata = match manager.resolve_metadata_from_challenge(challenge).await {
        Ok(resolution) => resolution.metadata,
        Err(e @ AuthError::AuthorizationServerMismatch { .. }) => legacy::root_metadata(&client.http_client.http, url)
            .await
            .ok_or_else(|| auth_error(settings, "OAuth discovery failed", e))?,
        Err(e) => return Err(auth_error(settings, "OAuth discovery failed", e)),
    };
    if let Some(dpop) = dpop {
        dpop.use_server(&metadata).map_err(|m| McpError::Connect { server: server.clone(), message: m })?;
    }
    manager.set_metadata(metadata.clone());
    let manager = match oauth.grant {
        OAuthGrant::ClientCredentials => {
            let scopes =
                if oauth.scopes.is_empty() { manager.select_initial_scopes(&[]).await } else { oauth.scopes.clone() };
            client_credentials(settings, oauth, url, manager, scopes).await?
        }
        OAuthGrant::AuthorizationCode => authorization_code(settings, oauth, manager).await?,
        OAuthGrant::EnterpriseManaged => enterprise::authorize(settings, oauth, url, &metadata, manager).await?,
        OAuthGrant::WorkloadIdentity => {
            let scopes =
                if oauth.scopes.is_empty() { manager.select_initial_scopes(&[]).await } else { oauth.scopes.clone() };
            workload::authorize(settings, oauth, url, &metadata, scopes, manager).await?
        }
    };
    *client.auth_manager.lock().await = manager;
    Ok(())
}

/// After a 403 `insufficient_scope` (`challenge`): asks for the union of the
/// granted scopes and the challenge's, within rmcp's bound on upgrade attempts.
pub(crate) async fn step_up(
    settings: &McpServerSettings,
    oauth: &McpOAuth,
    url: &str,
    client: &OAuthHttpClient,
    challenge: &str,
) -> Result<(), McpError> {
    let base = reqwest::Url::parse(url).map_err(|e| auth_error(settings, "bad URL", AuthError::UrlError(e)))?;
    let params = WWWAuthenticateParams::parse(challenge, &base);
    let required = params.scope.unwrap_or_default();
    let guard = client.auth_manager.clone().lock_owned().await;
    match oauth.grant {
        OAuthGrant::AuthorizationCode => {
            let auth_url =
                guard.request_scope_upgrade(&required).await.map_err(|e| auth_error(settings, "scope step-up", e))?;
            let callback = run_authorizer(settings, &auth_url).await?;
            guard
                .exchange_code_for_token_with_issuer(&callback.code, &callback.csrf_token, callback.issuer.as_deref())
                .await
                .map_err(|e| auth_error(settings, "scope step-up: token exchange failed", e))?;
        }
        OAuthGrant::EnterpriseManaged => {
            // The identity provider decides the scopes of the ID-JAG; asking
            // again with the same ID token cannot add any.
            return Err(McpError::Connect {
                server: settings.name.clone(),
                message: format!(
                    "the server needs scope {required:?}, which enterprise-managed authorization did not grant"
                ),
            });
        }
        OAuthGrant::WorkloadIdentity => {
            // Counts the attempt against rmcp's bound; the URL it builds is unused.
            let _ =
                guard.request_scope_upgrade(&required).await.map_err(|e| auth_error(settings, "scope step-up", e))?;
            let mut scopes = guard.get_current_scopes().await;
            drop(guard);
            scopes.extend(oauth.scopes.iter().cloned());
            scopes.extend(required.split_whitespace().map(str::to_string));
            scopes.sort();
            scopes.dedup();
            let wider = McpOAuth { scopes, ..oauth.clone() };
            return Box::pin(authorize(settings, &wider, url, client, Some(challenge))).await;
        }
        OAuthGrant::ClientCredentials => {
            // Counts the attempt against rmcp's bound; the URL it builds is unused.
            let _ =
                guard.request_scope_upgrade(&required).await.map_err(|e| auth_error(settings, "scope step-up", e))?;
            let mut scopes = guard.get_current_scopes().await;
            scopes.extend(oauth.scopes.iter().cloned());
            scopes.extend(required.split_whitespace().map(str::to_string));
            scopes.sort();
            scopes.dedup();
            let config = client_credentials_config(settings, oauth, url, scopes)?;
            exchange(guard, config).await.1.map_err(|e| auth_error(settings, "scope step-up", e))?;
        }
    }
    Ok(())
}

/// Whether `challenge` asks for more scope (403) rather than a token (401).
pub(crate) fn is_insufficient_scope(challenge: &str) -> bool {
    let base = reqwest::Url::parse("http://localhost/").expect("constant URL");
    WWWAuthenticateParams::parse(challenge, &base).is_insufficient_scope()
}

async fn client_credentials(
    settings: &McpServerSettings,
    oauth: &McpOAuth,
    url: &str,
    mut manager: AuthorizationManager,
    scopes: Vec<String>,
) -> Result<AuthorizationManager, McpError> {
    let config = client_credentials_config(settings, oauth, url, scopes)?;
    let err = |e| auth_error(settings, "OAuth client credentials grant failed", e);
    manager.validate_client_credentials_metadata(&config).map_err(err)?;
    manager.configure_client_credentials(&config).map_err(err)?;
    let (manager, result) = exchange(Box::new(manager), config).await;
    result.map_err(err)?;
    Ok(*manager)
}

/// rmcp 3.11's client-credentials exchange is not `Send` (its JWT path holds
/// a `form_urlencoded::Serializer` across an await), so it runs to completion
/// on a blocking thread rather than on the session's task.
async fn exchange<M>(manager: M, config: ClientCredentialsConfig) -> (M, Result<(), AuthError>)
where
    M: std::ops::Deref<Target = AuthorizationManager> + Send + 'static,
{
    let handle = tokio::runtime::Handle::current();
    let joined = tokio::task::spawn_blocking(move || {
        let result = handle.block_on(manager.exchange_client_credentials(&config)).map(drop);
        (manager, result)
    })
    .await;
    match joined {
        Ok(done) => done,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}

fn client_credentials_config(
    settings: &McpServerSettings,
    oauth: &McpOAuth,
    url: &str,
    scopes: Vec<String>,
) -> Result<ClientCredentialsConfig, McpError> {
    let client_id = oauth.client_id.clone().unwrap_or_default();
    let resource = Some(url.to_string());
    Ok(match &oauth.client_auth {
        OAuthClientAuth::Secret { env } => {
            ClientCredentialsConfig::ClientSecret { client_id, client_secret: secret(settings, env)?, scopes, resource }
        }
        OAuthClientAuth::PrivateKeyJwt { env, alg } => ClientCredentialsConfig::PrivateKeyJwt {
            client_id,
            signing_key: secret(settings, env)?.into_bytes(),
            signing_algorithm: signing_alg(alg),
            token_endpoint_audience: None,
            scopes,
            resource,
        },
        OAuthClientAuth::None => {
            return Err(config_error(settings, "grant client_credentials needs client_secret_env or private_key_env"));
        }
    })
}

async fn authorization_code(
    settings: &McpServerSettings,
    oauth: &McpOAuth,
    manager: AuthorizationManager,
) -> Result<AuthorizationManager, McpError> {
    if !runtime::has_authorizer() {
        return Err(McpError::Connect {
            server: settings.name.clone(),
            message: format!(
                "OAuth authorization_code needs a person to sign in once: run `flotilla mcp login {}`",
                settings.name
            ),
        });
    }
    let mut request = AuthorizationRequest::new(oauth.redirect_uri.clone())
        .with_client_name(oauth.client_name.clone())
        .with_initial_scope_selection();
    if !oauth.scopes.is_empty() {
        request = request.with_scopes(oauth.scopes.iter().cloned());
    }
    if let Some(id) = &oauth.client_id {
        request = request.with_preregistered_client(id.clone());
    }
    match &oauth.client_auth {
        OAuthClientAuth::Secret { env } => request = request.with_client_secret(secret(settings, env)?),
        OAuthClientAuth::PrivateKeyJwt { .. } => {
            return Err(config_error(settings, "private_key_env applies to grant client_credentials only"));
        }
        OAuthClientAuth::None => {}
    }
    if let Some(u) = &oauth.client_metadata_url {
        request = request.with_client_metadata_url(u.clone());
    }
    let session = AuthorizationSession::new(manager, request)
        .await
        .map_err(|(_, e)| auth_error(settings, "OAuth authorization failed", e))?;
    let callback = run_authorizer(settings, session.get_authorization_url()).await?;
    session
        .auth_manager
        .exchange_code_for_token_with_issuer(&callback.code, &callback.csrf_token, callback.issuer.as_deref())
        .await
        .map_err(|e| auth_error(settings, "OAuth token exchange failed", e))?;
    Ok(session.auth_manager)
}

async fn run_authorizer(settings: &McpServerSettings, auth_url: &str) -> Result<AuthorizationCallback, McpError> {
    let redirect = runtime::authorize(&settings.name, auth_url).await.map_err(|m| McpError::Connect {
        server: settings.name.clone(),
        message: format!("OAuth authorization was not completed: {m}"),
    })?;
    AuthorizationCallback::from_redirect_url(&redirect).map_err(|e| auth_error(settings, "OAuth callback", e))
}

/// The secret in environment variable `env`, or an error naming the variable.
fn secret(settings: &McpServerSettings, env: &str) -> Result<String, McpError> {
    std::env::var(env).map_err(|_| {
        let key = format!("mcp_servers.{}.oauth", settings.name);
        config_error(settings, &format!("environment variable {env} (named in `{key}`) is not set"))
    })
}

/// Installs an access token obtained outside rmcp's own grants (which read
/// tokens from the manager's credential store) into `manager`.
async fn install_token(
    settings: &McpServerSettings,
    mut manager: AuthorizationManager,
    client_id: &str,
    access_token: &str,
    expires_in: Option<u64>,
    scopes: Vec<String>,
) -> Result<AuthorizationManager, McpError> {
    let mut response = serde_json::json!({"access_token": access_token, "token_type": "bearer"});
    if let Some(expires) = expires_in {
        response["expires_in"] = expires.into();
    }
    let response: OAuthTokenResponse = serde_json::from_value(response)
        .map_err(|_| config_error(settings, "the access token response could not be stored"))?;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).ok();
    let store = InMemoryCredentialStore::new();
    store
        .save(StoredCredentials::new(client_id.to_string(), Some(response), scopes, now))
        .await
        .map_err(|e| auth_error(settings, "storing the token", e))?;
    manager.set_credential_store(store);
    manager.configure_client_id(client_id).map_err(|e| auth_error(settings, "OAuth client", e))?;
    Ok(manager)
}

fn signing_alg(alg: &str) -> JwtSigningAlgorithm {
    match alg {
        "RS384" => JwtSigningAlgorithm::RS384,
        "RS512" => JwtSigningAlgorithm::RS512,
        "ES256" => JwtSigningAlgorithm::ES256,
        "ES384" => JwtSigningAlgorithm::ES384,
        _ => JwtSigningAlgorithm::RS256,
    }
}

fn config_error(settings: &McpServerSettings, message: &str) -> McpError {
    McpError::Config { server: settings.name.clone(), message: format!("oauth: {message}") }
}

/// rmcp's auth errors name endpoints and OAuth error codes, never the secret
/// or a token (see the module docs); URL paths of the server are redacted.
fn auth_error(settings: &McpServerSettings, what: &str, e: AuthError) -> McpError {
    McpError::Connect {
        server: settings.name.clone(),
        message: crate::session::redacted(settings, format!("{what}: {e}")),
    }
}

/// Most re-authorizations (401 after a token, or 403 step-ups) one session
/// attempts within [`REAUTHORIZATION_WINDOW`] before it reports the server's
/// refusal: enough for expiries over a long session, never a loop.
const MAX_REAUTHORIZATIONS: u32 = 3;
const REAUTHORIZATION_WINDOW: Duration = Duration::from_secs(60);

/// A session's OAuth state: the client its transport sends through (whose
/// manager this swaps when a new token is needed) and what to ask for.
pub(crate) struct SessionAuth {
    pub(crate) client: OAuthHttpClient,
    oauth: McpOAuth,
    url: String,
    /// Re-authorizations in the current window and when it started.
    reauthorizations: Mutex<(u32, Instant)>,
}

impl SessionAuth {
    /// A client with no token yet, for `settings`' server at `url`.
    pub(crate) async fn new(
        settings: &McpServerSettings,
        oauth: &McpOAuth,
        url: &str,
        http: reqwest::Client,
    ) -> Result<Self, McpError> {
        let dpop = match oauth.dpop {
            true => {
                Some(Arc::new(dpop::Dpop::generate().map_err(|e| config_error(settings, &format!("DPoP key: {e}")))?))
            }
            false => None,
        };
        let manager = unauthorized(settings, url, dpop.as_ref()).await?;
        Ok(SessionAuth {
            client: AuthClient::new(SessionHttp::new(http, dpop), manager),
            oauth: oauth.clone(),
            url: url.to_string(),
            reauthorizations: Mutex::new((0, Instant::now())),
        })
    }

    /// Answers a 401 or 403 `challenge`: authorizes (or steps up) and says
    /// whether the request is worth sending again.
    pub(crate) async fn recover(&self, settings: &McpServerSettings, challenge: &str) -> Result<bool, McpError> {
        {
            let mut guard = self.reauthorizations.lock().unwrap_or_else(|p| p.into_inner());
            let (count, since) = &mut *guard;
            if since.elapsed() > REAUTHORIZATION_WINDOW {
                (*count, *since) = (0, Instant::now());
            }
            if *count >= MAX_REAUTHORIZATIONS {
                return Ok(false);
            }
            *count += 1;
        }
        if is_insufficient_scope(challenge) {
            step_up(settings, &self.oauth, &self.url, &self.client, challenge).await?;
        } else {
            authorize(settings, &self.oauth, &self.url, &self.client, Some(challenge)).await?;
        }
        Ok(true)
    }
}
