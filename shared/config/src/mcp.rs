//! `[mcp_servers.<name>]`: the MCP servers a process may connect to, in two
//! steps like the rest of the configuration: [`RawMcpServer`] is the serde
//! shape (TOML, or an imported `mcpServers` JSON file), [`McpServerSettings`]
//! the validated form whose errors name the key.
//!
//! A stdio server is a trusted command from config: the
//! model can never name a command, and the child gets only the variables
//! declared here plus `PATH`. An HTTP server's secrets never sit in the file:
//! header values and the bearer token are read from named environment
//! variables when the session opens.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::url_policy;

/// Default bound on `initialize` + `tools/list` and on every call.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// `[mcp_servers.<name>]` before validation.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct RawMcpServer {
    /// `stdio` or `http`; inferred from `command` / `url` when absent.
    pub transport: Option<String>,
    /// stdio: the program (looked up on `PATH` unless it contains a `/`;
    /// relative paths resolve against the config file's directory).
    pub command: Option<String>,
    /// stdio: its arguments.
    pub args: Vec<String>,
    /// stdio: variables set in the child, which inherits nothing else but `PATH`.
    pub env: BTreeMap<String, String>,
    /// stdio: names of this process's variables passed through unchanged.
    pub env_passthrough: Vec<String>,
    /// stdio: working directory (relative to the config file).
    pub cwd: Option<PathBuf>,
    /// http: the Streamable HTTP endpoint.
    pub url: Option<String>,
    /// http: header name -> name of the environment variable holding its value.
    pub headers_from_env: BTreeMap<String, String>,
    /// http: name of the environment variable holding a bearer token.
    pub bearer_token_env: Option<String>,
    /// http: allow plain `http://` to a non-loopback host (never for metadata
    /// or link-local addresses).
    pub allow_insecure_http: bool,
    /// Seconds for starting the server, `initialize` and `tools/list`.
    pub init_timeout: Option<f64>,
    /// Seconds for each `tools/call`.
    pub call_timeout: Option<f64>,
    /// `persistent` (default: one session per process, shared by concurrent
    /// tasks) or `per_call` (a fresh session for every call).
    pub session: Option<String>,
    /// Expose tools as `<server>_<tool>` (default true).
    pub prefix: Option<bool>,
    /// Refuse to start the process when the server cannot be reached at start
    /// (default false: its tools are left out and discovery retries).
    pub required: bool,
    /// http: OAuth 2.1 authorization (`[mcp_servers.<name>.oauth]`, docs/MCP.md "OAuth").
    pub oauth: Option<RawMcpOAuth>,
    /// The protocol revision to speak, for a server that mishandles the
    /// newest one's probe; absent: `server/discover` at 2026-07-28, falling
    /// back to `initialize` (docs/MCP.md "Protocol revisions").
    pub protocol_version: Option<String>,
    /// Tools of this server, by the names the server lists them under
    /// (without the `<server>_` prefix), that the operator vouches change
    /// nothing outside their result: a model turn calling only these (and
    /// other read-only tools) is journaled without waiting for the stream's
    /// ack before the calls run (docs/RELIABILITY.md, "Step journal"). A
    /// server's own `readOnlyHint` never counts. Default: none.
    pub read_only_tools: Vec<String>,
}

/// Revisions `protocol_version` may pin, newest first. 2026-07-28 has no
/// `initialize` handshake (`server/discover` and per-request `_meta`); the
/// others start with `initialize` offering that revision.
pub const PROTOCOL_VERSIONS: [&str; 4] = ["2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26"];

/// `[mcp_servers.<name>.oauth]` before validation.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct RawMcpOAuth {
    /// `client_credentials` (default: the worker authenticates as itself),
    /// `authorization_code` (a person signs in once with `flotilla mcp login`),
    /// `enterprise_managed` (an enterprise identity provider's ID token
    /// exchanged for access, SEP-990; needs `[idp]`) or `workload_identity`
    /// (the platform's signed workload token redeemed as a JWT bearer
    /// grant, RFC 7523; needs `assertion_file` or `assertion_env`).
    pub grant: Option<String>,
    /// A client registered with the authorization server beforehand; without
    /// it the client registers through its metadata document or dynamically.
    pub client_id: Option<String>,
    /// Name of the environment variable holding the client secret.
    pub client_secret_env: Option<String>,
    /// Name of the environment variable holding a PEM private key: the client
    /// authenticates with a signed JWT (`private_key_jwt`) instead of a secret.
    pub private_key_env: Option<String>,
    /// The JWT's algorithm: RS256 (default), RS384, RS512, ES256 or ES384.
    pub signing_alg: Option<String>,
    /// Scopes to ask for; empty lets the server's challenge and metadata choose.
    pub scopes: Vec<String>,
    /// HTTPS URL of this client's Client ID Metadata Document, used when the
    /// authorization server supports them and no `client_id` is set.
    pub client_metadata_url: Option<String>,
    /// `client_name` sent in dynamic client registration (default "flotilla").
    pub client_name: Option<String>,
    /// authorization_code: where the authorization server sends the browser
    /// back (default `http://127.0.0.1:8976/callback`, `flotilla mcp login`'s listener).
    pub redirect_uri: Option<String>,
    /// enterprise_managed: the identity provider (`[mcp_servers.<name>.oauth.idp]`).
    pub idp: Option<RawMcpOAuthIdp>,
    /// workload_identity: a file holding the workload's JWT (a Kubernetes
    /// projected service-account token, a SPIFFE JWT-SVID; relative to the
    /// config file), read again at every authorization so a rotated token is
    /// picked up.
    pub assertion_file: Option<String>,
    /// workload_identity: the environment variable holding the workload's JWT.
    pub assertion_env: Option<String>,
    /// Sender-constrained tokens (DPoP, RFC 9449): the session asks for
    /// tokens bound to a key only it holds and proves possession on every
    /// request (default false; authorization_code and client_credentials).
    pub dpop: Option<bool>,
}

/// `[mcp_servers.<name>.oauth.idp]`: the enterprise identity provider that
/// exchanges an ID token for an identity assertion grant (ID-JAG, SEP-990).
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct RawMcpOAuthIdp {
    /// The identity provider's issuer URL.
    pub issuer: Option<String>,
    /// Its token endpoint (token exchange, RFC 8693).
    pub token_endpoint: Option<String>,
    /// This client's id at the identity provider.
    pub client_id: Option<String>,
    /// Name of the environment variable with this client's secret there (optional).
    pub client_secret_env: Option<String>,
    /// Name of the environment variable holding the user's ID token.
    pub id_token_env: Option<String>,
}

/// How to reach a server.
#[derive(Clone, Debug, PartialEq)]
pub enum McpTransport {
    /// A child process speaking JSON-RPC on stdin/stdout.
    Stdio {
        /// Program.
        command: PathBuf,
        /// Arguments.
        args: Vec<String>,
        /// The child's whole environment, besides `PATH`.
        env: BTreeMap<String, String>,
        /// Variables copied from this process when the child starts.
        env_passthrough: Vec<String>,
        /// Working directory.
        cwd: Option<PathBuf>,
    },
    /// Streamable HTTP.
    Http {
        /// The endpoint, checked against the URL rules.
        url: String,
        /// Header name -> environment variable name.
        headers_from_env: BTreeMap<String, String>,
        /// Environment variable with a bearer token.
        bearer_token_env: Option<String>,
        /// Plain http allowed beyond loopback.
        allow_insecure_http: bool,
        /// OAuth 2.1 authorization, when the server requires it (boxed: most
        /// servers have none).
        oauth: Option<Box<McpOAuth>>,
    },
}

/// Which OAuth grant obtains the tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OAuthGrant {
    /// The client's own credentials, no person involved (workers).
    ClientCredentials,
    /// A person authorizes in a browser once; workers then use the refresh token.
    AuthorizationCode,
    /// An enterprise ID token exchanged at the identity provider, then at the
    /// server's authorization server (SEP-990); no browser.
    EnterpriseManaged,
    /// The platform's workload token (a JWT its identity provider signed)
    /// redeemed at the server's authorization server as an RFC 7523 JWT
    /// bearer grant (SEP-1933); no client secret, no browser.
    WorkloadIdentity,
}

/// Where a `workload_identity` grant reads the workload's JWT from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WorkloadAssertion {
    /// A file, read again at every authorization (tokens rotate).
    File(PathBuf),
    /// An environment variable.
    Env(String),
}

/// A validated `[mcp_servers.<name>.oauth.idp]`.
#[derive(Clone, Debug, PartialEq)]
pub struct McpOAuthIdp {
    /// Issuer URL.
    pub issuer: String,
    /// Token endpoint.
    pub token_endpoint: String,
    /// Client id there.
    pub client_id: String,
    /// Variable with the client secret there, if any.
    pub client_secret_env: Option<String>,
    /// Variable with the ID token.
    pub id_token_env: String,
}

/// How the client proves its identity at the token endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OAuthClientAuth {
    /// A public client (PKCE only).
    None,
    /// A client secret from this environment variable, sent as HTTP Basic or
    /// in the form body, as the authorization server's metadata advertises.
    Secret {
        /// The variable's name.
        env: String,
    },
    /// A JWT signed with the PEM key in this environment variable (RFC 7523).
    PrivateKeyJwt {
        /// The variable's name.
        env: String,
        /// RS256, RS384, RS512, ES256 or ES384.
        alg: String,
    },
}

/// A validated `[mcp_servers.<name>.oauth]`.
#[derive(Clone, Debug, PartialEq)]
pub struct McpOAuth {
    /// The grant.
    pub grant: OAuthGrant,
    /// A pre-registered client id.
    pub client_id: Option<String>,
    /// Token endpoint authentication.
    pub client_auth: OAuthClientAuth,
    /// Requested scopes (empty: chosen from the challenge and metadata).
    pub scopes: Vec<String>,
    /// Client ID Metadata Document URL.
    pub client_metadata_url: Option<String>,
    /// Name for dynamic registration.
    pub client_name: String,
    /// authorization_code redirect URI.
    pub redirect_uri: String,
    /// enterprise_managed: the identity provider.
    pub idp: Option<McpOAuthIdp>,
    /// workload_identity: where the workload's JWT is.
    pub assertion: Option<WorkloadAssertion>,
    /// DPoP-bound tokens.
    pub dpop: bool,
}

/// `flotilla mcp login`'s loopback callback, the default redirect URI.
pub const DEFAULT_REDIRECT_URI: &str = "http://127.0.0.1:8976/callback";

/// Signing algorithms rmcp's `private_key_jwt` supports.
const SIGNING_ALGS: [&str; 5] = ["RS256", "RS384", "RS512", "ES256", "ES384"];

fn validate_oauth(name: &str, raw: RawMcpOAuth, base: &Path) -> Result<McpOAuth, McpConfigProblem> {
    let problem = |k: &str, m: String| McpConfigProblem { key: format!("mcp_servers.{name}.oauth.{k}"), message: m };
    let grant = match raw.grant.as_deref() {
        None | Some("client_credentials") => OAuthGrant::ClientCredentials,
        Some("authorization_code") => OAuthGrant::AuthorizationCode,
        Some("enterprise_managed") => OAuthGrant::EnterpriseManaged,
        Some("workload_identity") => OAuthGrant::WorkloadIdentity,
        Some(other) => {
            return Err(problem(
                "grant",
                format!(
                    "unknown grant {other:?}: use \"client_credentials\", \"authorization_code\", \"enterprise_managed\" or \"workload_identity\""
                ),
            ));
        }
    };
    let assertion = match (grant, raw.assertion_file, raw.assertion_env) {
        (OAuthGrant::WorkloadIdentity, Some(_), Some(_)) => {
            return Err(problem("assertion_env", "set assertion_file or assertion_env, not both".into()));
        }
        (OAuthGrant::WorkloadIdentity, Some(file), None) if file.is_empty() => {
            return Err(problem("assertion_file", "must be a path".into()));
        }
        (OAuthGrant::WorkloadIdentity, Some(file), None) => Some(WorkloadAssertion::File(base.join(file))),
        (OAuthGrant::WorkloadIdentity, None, Some(env)) if !is_env_name(&env) => {
            return Err(problem("assertion_env", "must name an environment variable (never the token itself)".into()));
        }
        (OAuthGrant::WorkloadIdentity, None, Some(env)) => Some(WorkloadAssertion::Env(env)),
        (OAuthGrant::WorkloadIdentity, None, None) => {
            return Err(problem(
                "assertion_file",
                "grant \"workload_identity\" needs assertion_file or assertion_env (where the workload's JWT is)"
                    .into(),
            ));
        }
        (_, Some(_), _) => return Err(problem("assertion_file", "only used with grant \"workload_identity\"".into())),
        (_, _, Some(_)) => return Err(problem("assertion_env", "only used with grant \"workload_identity\"".into())),
        (_, None, None) => None,
    };
    let idp = match (grant, raw.idp) {
        (OAuthGrant::EnterpriseManaged, Some(idp)) => Some(validate_idp(name, idp)?),
        (OAuthGrant::EnterpriseManaged, None) => {
            return Err(problem("idp", "required for grant \"enterprise_managed\"".into()));
        }
        (_, Some(_)) => return Err(problem("idp", "only used with grant \"enterprise_managed\"".into())),
        (_, None) => None,
    };
    for (k, v) in [("client_secret_env", &raw.client_secret_env), ("private_key_env", &raw.private_key_env)] {
        if let Some(v) = v
            && !is_env_name(v)
        {
            return Err(problem(k, "must name an environment variable (never the secret itself)".into()));
        }
    }
    let client_auth = match (raw.client_secret_env, raw.private_key_env) {
        (Some(_), Some(_)) => {
            return Err(problem("private_key_env", "set client_secret_env or private_key_env, not both".into()));
        }
        (Some(env), None) => OAuthClientAuth::Secret { env },
        (None, Some(env)) => {
            let alg = raw.signing_alg.unwrap_or_else(|| "RS256".into());
            if !SIGNING_ALGS.contains(&alg.as_str()) {
                return Err(problem(
                    "signing_alg",
                    format!("unsupported {alg:?}: use one of {}", SIGNING_ALGS.join(", ")),
                ));
            }
            OAuthClientAuth::PrivateKeyJwt { env, alg }
        }
        (None, None) => {
            if raw.signing_alg.is_some() {
                return Err(problem("signing_alg", "only used with private_key_env".into()));
            }
            OAuthClientAuth::None
        }
    };
    if grant == OAuthGrant::EnterpriseManaged {
        if raw.client_id.is_none() {
            return Err(problem("client_id", "required for grant \"enterprise_managed\"".into()));
        }
        if matches!(client_auth, OAuthClientAuth::PrivateKeyJwt { .. }) {
            return Err(problem("private_key_env", "grant \"enterprise_managed\" takes client_secret_env".into()));
        }
    }
    let dpop = raw.dpop.unwrap_or(false);
    if dpop && !matches!(grant, OAuthGrant::AuthorizationCode | OAuthGrant::ClientCredentials) {
        return Err(problem("dpop", "applies to grants \"authorization_code\" and \"client_credentials\"".into()));
    }
    if grant == OAuthGrant::WorkloadIdentity && client_auth != OAuthClientAuth::None {
        let key =
            if matches!(client_auth, OAuthClientAuth::Secret { .. }) { "client_secret_env" } else { "private_key_env" };
        return Err(problem(key, "grant \"workload_identity\" authenticates with the workload's JWT alone".into()));
    }
    if grant == OAuthGrant::ClientCredentials {
        if raw.client_id.is_none() {
            return Err(problem("client_id", "required for grant \"client_credentials\"".into()));
        }
        if client_auth == OAuthClientAuth::None {
            return Err(problem(
                "client_secret_env",
                "grant \"client_credentials\" needs client_secret_env or private_key_env".into(),
            ));
        }
    }
    if matches!(client_auth, OAuthClientAuth::Secret { .. } | OAuthClientAuth::PrivateKeyJwt { .. })
        && raw.client_id.is_none()
    {
        return Err(problem("client_id", "a client secret or key belongs to a pre-registered client_id".into()));
    }
    if let Some(u) = &raw.client_metadata_url {
        let ok = url::Url::parse(u).is_ok_and(|p| p.scheme() == "https" && p.path() != "/");
        if !ok {
            return Err(problem("client_metadata_url", "must be an https URL with a path".into()));
        }
    }
    let redirect_uri = raw.redirect_uri.unwrap_or_else(|| DEFAULT_REDIRECT_URI.into());
    if url::Url::parse(&redirect_uri).is_err() {
        return Err(problem("redirect_uri", "must be an absolute URL".into()));
    }
    if raw.scopes.iter().any(|s| s.is_empty() || s.contains(char::is_whitespace)) {
        return Err(problem("scopes", "each scope is one non-empty word".into()));
    }
    Ok(McpOAuth {
        grant,
        client_id: raw.client_id,
        client_auth,
        scopes: raw.scopes,
        client_metadata_url: raw.client_metadata_url,
        client_name: raw.client_name.unwrap_or_else(|| "flotilla".into()),
        redirect_uri,
        idp,
        assertion,
        dpop,
    })
}

fn validate_idp(name: &str, raw: RawMcpOAuthIdp) -> Result<McpOAuthIdp, McpConfigProblem> {
    let problem =
        |k: &str, m: &str| McpConfigProblem { key: format!("mcp_servers.{name}.oauth.idp.{k}"), message: m.into() };
    let url = |k: &str, v: Option<String>| {
        let v = v.ok_or_else(|| problem(k, "required"))?;
        match url::Url::parse(&v) {
            Ok(u) if u.scheme() == "https" || u.host_str().is_some_and(|h| h == "localhost" || h == "127.0.0.1") => {
                Ok(v)
            }
            _ => Err(problem(k, "must be an https URL (http only to localhost)")),
        }
    };
    let env = |k: &str, v: Option<String>| match v {
        Some(v) if is_env_name(&v) => Ok(Some(v)),
        Some(_) => Err(problem(k, "must name an environment variable (never the secret itself)")),
        None => Ok(None),
    };
    Ok(McpOAuthIdp {
        issuer: url("issuer", raw.issuer)?,
        token_endpoint: url("token_endpoint", raw.token_endpoint)?,
        client_id: raw.client_id.filter(|c| !c.is_empty()).ok_or_else(|| problem("client_id", "required"))?,
        client_secret_env: env("client_secret_env", raw.client_secret_env)?,
        id_token_env: env("id_token_env", raw.id_token_env)?.ok_or_else(|| problem("id_token_env", "required"))?,
    })
}

impl McpOAuth {
    /// The environment variables this section reads, for start-up checks.
    pub fn env_vars(&self) -> Vec<&str> {
        let mut vars = match &self.client_auth {
            OAuthClientAuth::None => vec![],
            OAuthClientAuth::Secret { env } | OAuthClientAuth::PrivateKeyJwt { env, .. } => vec![env.as_str()],
        };
        if let Some(idp) = &self.idp {
            vars.extend(idp.client_secret_env.as_deref());
            vars.push(&idp.id_token_env);
        }
        if let Some(WorkloadAssertion::Env(env)) = &self.assertion {
            vars.push(env);
        }
        vars
    }
}

/// Session lifetime.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionMode {
    /// One session per (process, server), shared, reconnected once when dead.
    Persistent,
    /// A fresh session (and for stdio a fresh process) per call.
    PerCall,
}

/// A validated `[mcp_servers.<name>]`.
#[derive(Clone, Debug, PartialEq)]
pub struct McpServerSettings {
    /// The server's name: the key, the tool prefix and the `mcp:<name>` entry.
    pub name: String,
    /// How to reach it.
    pub transport: McpTransport,
    /// Bound on start + `initialize` + `tools/list`.
    pub init_timeout: Duration,
    /// Bound on each call.
    pub call_timeout: Duration,
    /// Session lifetime.
    pub session: SessionMode,
    /// Prefix tool names with `<name>_`.
    pub prefix: bool,
    /// Fail the process start when unreachable.
    pub required: bool,
    /// The one protocol revision to speak (one of [`PROTOCOL_VERSIONS`]);
    /// `None`: negotiate, newest first.
    pub protocol_version: Option<String>,
    /// Tools (by their names on the server) the operator declared read-only.
    pub read_only_tools: BTreeSet<String>,
}

/// What is wrong with one server's config: the dotted key and why.
#[derive(Debug, Clone, PartialEq)]
pub struct McpConfigProblem {
    /// e.g. `mcp_servers.finance.url`.
    pub key: String,
    /// What to do.
    pub message: String,
}

fn seconds(key: &str, v: Option<f64>) -> Result<Duration, McpConfigProblem> {
    match v {
        None => Ok(DEFAULT_TIMEOUT),
        Some(s) if s.is_finite() && s > 0.0 && s <= 86_400.0 => Ok(Duration::from_secs_f64(s)),
        Some(_) => {
            Err(McpConfigProblem { key: key.into(), message: "must be a number of seconds in (0, 86400]".into() })
        }
    }
}

fn is_env_name(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with(|c: char| c.is_ascii_digit())
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Validates one server; `base` resolves relative paths (the config file's directory).
pub fn validate(name: &str, raw: RawMcpServer, base: &Path) -> Result<McpServerSettings, McpConfigProblem> {
    let key = |k: &str| format!("mcp_servers.{name}.{k}");
    let problem = |k: &str, m: String| McpConfigProblem { key: key(k), message: m };
    if !flotilla_protocol::ids::is_valid_token(name) {
        return Err(McpConfigProblem {
            key: format!("mcp_servers.{name}"),
            message: "server names use 1-64 characters from a-z, A-Z, 0-9, '-' and '_'".into(),
        });
    }
    let transport = match raw.transport.as_deref() {
        Some(t) => t.to_string(),
        None if raw.command.is_some() => "stdio".into(),
        None if raw.url.is_some() => "http".into(),
        None => return Err(problem("transport", "set `command` (stdio) or `url` (Streamable HTTP)".into())),
    };
    let transport = match transport.as_str() {
        "stdio" => {
            if raw.url.is_some() || !raw.headers_from_env.is_empty() || raw.bearer_token_env.is_some() {
                return Err(problem("url", "url and headers belong to transport \"http\", not \"stdio\"".into()));
            }
            if raw.oauth.is_some() {
                return Err(problem(
                    "oauth",
                    "OAuth applies to transport \"http\"; a stdio server gets its secrets through env".into(),
                ));
            }
            let command = raw.command.filter(|c| !c.trim().is_empty());
            let command = command.ok_or_else(|| problem("command", "required for transport \"stdio\"".into()))?;
            let command = if command.contains('/') { base.join(&command) } else { PathBuf::from(command) };
            for k in raw.env.keys().chain(raw.env_passthrough.iter()) {
                if !is_env_name(k) {
                    return Err(problem("env", format!("{k:?} is not a valid environment variable name")));
                }
            }
            McpTransport::Stdio {
                command,
                args: raw.args,
                env: raw.env,
                env_passthrough: raw.env_passthrough,
                cwd: raw.cwd.map(|c| base.join(c)),
            }
        }
        "http" | "streamable_http" | "streamable-http" | "streamableHttp" => {
            if raw.command.is_some() || !raw.args.is_empty() || !raw.env.is_empty() {
                return Err(problem("command", "command, args and env belong to transport \"stdio\"".into()));
            }
            let url = raw.url.ok_or_else(|| problem("url", "required for transport \"http\"".into()))?;
            url_policy::check(&url, raw.allow_insecure_http).map_err(|e| problem("url", e.to_string()))?;
            for (h, var) in &raw.headers_from_env {
                if !is_header_name(h) {
                    return Err(problem("headers_from_env", format!("{h:?} is not a valid HTTP header name")));
                }
                if !is_env_name(var) {
                    return Err(problem(
                        "headers_from_env",
                        format!("{h}: the value must name an environment variable, got {var:?}"),
                    ));
                }
            }
            if let Some(v) = &raw.bearer_token_env
                && !is_env_name(v)
            {
                return Err(problem("bearer_token_env", format!("{v:?} is not an environment variable name")));
            }
            if raw.oauth.is_some() && raw.bearer_token_env.is_some() {
                return Err(problem("oauth", "set bearer_token_env (a static token) or oauth, not both".into()));
            }
            let oauth = raw.oauth.map(|o| validate_oauth(name, o, base).map(Box::new)).transpose()?;
            McpTransport::Http {
                url,
                headers_from_env: raw.headers_from_env,
                bearer_token_env: raw.bearer_token_env,
                allow_insecure_http: raw.allow_insecure_http,
                oauth,
            }
        }
        "sse" => {
            return Err(problem(
                "transport",
                "the SSE transport is deprecated and not supported: use \"http\" (Streamable HTTP)".into(),
            ));
        }
        other => return Err(problem("transport", format!("unknown transport {other:?}: use \"stdio\" or \"http\""))),
    };
    let session = match raw.session.as_deref() {
        None | Some("persistent") => SessionMode::Persistent,
        Some("per_call") => SessionMode::PerCall,
        Some(other) => {
            return Err(problem("session", format!("unknown mode {other:?}: use \"persistent\" or \"per_call\"")));
        }
    };
    if let Some(v) = &raw.protocol_version
        && !PROTOCOL_VERSIONS.contains(&v.as_str())
    {
        return Err(problem(
            "protocol_version",
            format!("unknown revision {v:?}: use one of {} or leave it out to negotiate", PROTOCOL_VERSIONS.join(", ")),
        ));
    }
    let mut read_only_tools = BTreeSet::new();
    for tool in raw.read_only_tools {
        if tool.trim().is_empty() || tool.trim() != tool {
            return Err(problem(
                "read_only_tools",
                format!("{tool:?} is not a tool name: list the names the server's tools/list gives, e.g. [\"search\"]"),
            ));
        }
        read_only_tools.insert(tool);
    }
    Ok(McpServerSettings {
        name: name.to_string(),
        transport,
        init_timeout: seconds(&key("init_timeout"), raw.init_timeout)?,
        call_timeout: seconds(&key("call_timeout"), raw.call_timeout)?,
        session,
        prefix: raw.prefix.unwrap_or(true),
        required: raw.required,
        protocol_version: raw.protocol_version,
        read_only_tools,
    })
}

impl McpServerSettings {
    /// `stdio` or `http`.
    pub fn transport_name(&self) -> &'static str {
        match self.transport {
            McpTransport::Stdio { .. } => "stdio",
            McpTransport::Http { .. } => "http",
        }
    }

    /// Where the server is, safe to log: the command's file name, or the URL
    /// with its path redacted.
    pub fn endpoint(&self) -> String {
        match &self.transport {
            McpTransport::Stdio { command, .. } => {
                command.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default()
            }
            McpTransport::Http { url, .. } => url_policy::redact(url),
        }
    }
}

/// An HTTP header name: an RFC 9110 token.
fn is_header_name(h: &str) -> bool {
    !h.is_empty() && h.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// `[subagents.<type>] mcp_prompt`: the MCP prompt that becomes the system prompt.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct McpPromptConfig {
    /// Server name under `[mcp_servers]`.
    pub server: String,
    /// The prompt's name on the server.
    pub name: String,
    /// Argument values: minijinja templates over `task` and `subagent_type`.
    #[serde(default)]
    pub arguments: BTreeMap<String, String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stdio() -> RawMcpServer {
        RawMcpServer { command: Some("bin/server".into()), ..Default::default() }
    }

    #[test]
    fn infers_transport_and_resolves_paths() {
        let s = validate("finance", stdio(), Path::new("/etc/flotilla")).unwrap();
        match &s.transport {
            McpTransport::Stdio { command, .. } => assert_eq!(command, Path::new("/etc/flotilla/bin/server")),
            other => panic!("{other:?}"),
        }
        assert_eq!((s.session, s.prefix, s.call_timeout), (SessionMode::Persistent, true, DEFAULT_TIMEOUT));
        let npx = RawMcpServer { command: Some("npx".into()), ..Default::default() };
        match validate("x", npx, Path::new("/etc")).unwrap().transport {
            McpTransport::Stdio { command, .. } => assert_eq!(command, Path::new("npx")),
            other => panic!("{other:?}"),
        }
        let http = RawMcpServer { url: Some("https://mcp.example.com/secret/mcp".into()), ..Default::default() };
        let s = validate("remote", http, Path::new(".")).unwrap();
        assert_eq!(s.transport_name(), "http");
        assert_eq!(s.endpoint(), "https://mcp.example.com/<redacted>/mcp");
    }

    #[test]
    fn read_only_tools_are_the_operators_list_and_none_by_default() {
        assert!(validate("a", stdio(), Path::new(".")).unwrap().read_only_tools.is_empty());
        let raw = RawMcpServer { read_only_tools: vec!["search".into(), "fetch".into(), "search".into()], ..stdio() };
        let s = validate("a", raw, Path::new(".")).unwrap();
        assert_eq!(s.read_only_tools.iter().map(String::as_str).collect::<Vec<_>>(), ["fetch", "search"]);
    }

    #[test]
    fn errors_name_the_key() {
        let cases = [
            (RawMcpServer::default(), "mcp_servers.a.transport"),
            (RawMcpServer { transport: Some("sse".into()), ..stdio() }, "mcp_servers.a.transport"),
            (RawMcpServer { session: Some("sometimes".into()), ..stdio() }, "mcp_servers.a.session"),
            (RawMcpServer { call_timeout: Some(0.0), ..stdio() }, "mcp_servers.a.call_timeout"),
            (RawMcpServer { url: Some("http://example.com/mcp".into()), ..Default::default() }, "mcp_servers.a.url"),
            (
                RawMcpServer {
                    url: Some("http://169.254.169.254/latest".into()),
                    allow_insecure_http: true,
                    ..Default::default()
                },
                "mcp_servers.a.url",
            ),
            (
                RawMcpServer {
                    url: Some("https://x.example/mcp".into()),
                    headers_from_env: [("Authorization".to_string(), "Bearer abc".to_string())].into(),
                    ..Default::default()
                },
                "mcp_servers.a.headers_from_env",
            ),
            (RawMcpServer { env: [("A=B".to_string(), "1".to_string())].into(), ..stdio() }, "mcp_servers.a.env"),
            (RawMcpServer { transport: Some("stdio".into()), ..Default::default() }, "mcp_servers.a.command"),
            (RawMcpServer { protocol_version: Some("2024-10-07".into()), ..stdio() }, "mcp_servers.a.protocol_version"),
            (
                RawMcpServer { read_only_tools: vec!["search".into(), "".into()], ..stdio() },
                "mcp_servers.a.read_only_tools",
            ),
            (RawMcpServer { read_only_tools: vec![" search".into()], ..stdio() }, "mcp_servers.a.read_only_tools"),
        ];
        for (raw, key) in cases {
            let p = validate("a", raw.clone(), Path::new(".")).unwrap_err();
            assert_eq!(p.key, key, "{raw:?}: {}", p.message);
        }
        assert_eq!(validate("a.b", stdio(), Path::new(".")).unwrap_err().key, "mcp_servers.a.b");
        let p = validate("a", RawMcpServer { protocol_version: Some("latest".into()), ..stdio() }, Path::new("."));
        assert!(p.unwrap_err().message.contains("use one of 2026-07-28, 2025-11-25, 2025-06-18, 2025-03-26"));
        for v in PROTOCOL_VERSIONS {
            let raw = RawMcpServer { protocol_version: Some(v.into()), ..stdio() };
            assert_eq!(validate("a", raw, Path::new(".")).unwrap().protocol_version.as_deref(), Some(v));
        }
    }

    fn oauth(o: RawMcpOAuth) -> RawMcpServer {
        RawMcpServer { url: Some("https://mcp.example.com/mcp".into()), oauth: Some(o), ..Default::default() }
    }

    #[test]
    fn oauth_infers_client_authentication_and_names_bad_keys() {
        let secret = RawMcpOAuth {
            client_id: Some("fleet".into()),
            client_secret_env: Some("FLEET_SECRET".into()),
            ..Default::default()
        };
        let s = validate("remote", oauth(secret.clone()), Path::new(".")).unwrap();
        let McpTransport::Http { oauth: Some(o), .. } = &s.transport else { panic!("{s:?}") };
        assert_eq!(o.grant, OAuthGrant::ClientCredentials);
        assert_eq!(o.client_auth, OAuthClientAuth::Secret { env: "FLEET_SECRET".into() });
        assert_eq!((o.redirect_uri.as_str(), o.env_vars()), (DEFAULT_REDIRECT_URI, vec!["FLEET_SECRET"]));
        let jwt = RawMcpOAuth { client_secret_env: None, private_key_env: Some("KEY".into()), ..secret.clone() };
        let s = validate("remote", oauth(jwt.clone()), Path::new(".")).unwrap();
        let McpTransport::Http { oauth: Some(o), .. } = &s.transport else { panic!("{s:?}") };
        assert_eq!(o.client_auth, OAuthClientAuth::PrivateKeyJwt { env: "KEY".into(), alg: "RS256".into() });
        let public = RawMcpOAuth { grant: Some("authorization_code".into()), ..Default::default() };
        assert!(validate("remote", oauth(public.clone()), Path::new(".")).is_ok());

        let cases = [
            (oauth(RawMcpOAuth { grant: Some("password".into()), ..secret.clone() }), "grant"),
            (oauth(RawMcpOAuth { client_id: None, ..secret.clone() }), "client_id"),
            (oauth(RawMcpOAuth { client_secret_env: None, ..secret.clone() }), "client_secret_env"),
            (
                oauth(RawMcpOAuth { client_secret_env: Some("s3cr3t value!".into()), ..secret.clone() }),
                "client_secret_env",
            ),
            (oauth(RawMcpOAuth { private_key_env: Some("KEY".into()), ..secret.clone() }), "private_key_env"),
            (oauth(RawMcpOAuth { signing_alg: Some("HS256".into()), ..jwt }), "signing_alg"),
            (
                oauth(RawMcpOAuth { client_metadata_url: Some("http://x.example/c.json".into()), ..public.clone() }),
                "client_metadata_url",
            ),
            (oauth(RawMcpOAuth { scopes: vec!["a b".into()], ..public }), "scopes"),
        ];
        for (raw, k) in cases {
            let p = validate("x", raw.clone(), Path::new(".")).unwrap_err();
            assert_eq!(p.key, format!("mcp_servers.x.oauth.{k}"), "{raw:?}: {}", p.message);
            assert!(!p.message.contains("s3cr3t"), "{}", p.message);
        }
        let idp = RawMcpOAuthIdp {
            issuer: Some("https://idp.example".into()),
            token_endpoint: Some("https://idp.example/token".into()),
            client_id: Some("fleet-at-idp".into()),
            client_secret_env: None,
            id_token_env: Some("FLEET_ID_TOKEN".into()),
        };
        let ema = RawMcpOAuth { grant: Some("enterprise_managed".into()), idp: Some(idp.clone()), ..secret.clone() };
        let s = validate("x", oauth(ema.clone()), Path::new(".")).unwrap();
        let McpTransport::Http { oauth: Some(o), .. } = &s.transport else { panic!("{s:?}") };
        assert_eq!(o.env_vars(), ["FLEET_SECRET", "FLEET_ID_TOKEN"]);
        for (raw, key) in [
            (RawMcpOAuth { idp: None, ..ema.clone() }, "oauth.idp"),
            (RawMcpOAuth { idp: Some(idp.clone()), ..secret.clone() }, "oauth.idp"),
            (
                RawMcpOAuth { idp: Some(RawMcpOAuthIdp { id_token_env: None, ..idp.clone() }), ..ema.clone() },
                "oauth.idp.id_token_env",
            ),
            (
                RawMcpOAuth { idp: Some(RawMcpOAuthIdp { issuer: Some("http://idp.example".into()), ..idp }), ..ema },
                "oauth.idp.issuer",
            ),
        ] {
            let p = validate("x", oauth(raw), Path::new(".")).unwrap_err();
            assert_eq!(p.key, format!("mcp_servers.x.{key}"), "{}", p.message);
        }
        let wif = RawMcpOAuth {
            grant: Some("workload_identity".into()),
            assertion_file: Some("run/token.jwt".into()),
            ..Default::default()
        };
        let s = validate("x", oauth(wif.clone()), Path::new("/etc/flotilla")).unwrap();
        let McpTransport::Http { oauth: Some(o), .. } = &s.transport else { panic!("{s:?}") };
        assert_eq!(o.assertion, Some(WorkloadAssertion::File("/etc/flotilla/run/token.jwt".into())));
        let from_env = RawMcpOAuth { assertion_file: None, assertion_env: Some("WORKLOAD_JWT".into()), ..wif.clone() };
        let s = validate("x", oauth(from_env.clone()), Path::new(".")).unwrap();
        let McpTransport::Http { oauth: Some(o), .. } = &s.transport else { panic!("{s:?}") };
        assert_eq!((o.grant, o.env_vars()), (OAuthGrant::WorkloadIdentity, vec!["WORKLOAD_JWT"]));
        for (raw, key) in [
            (RawMcpOAuth { assertion_file: None, ..wif.clone() }, "assertion_file"),
            (RawMcpOAuth { assertion_env: Some("WORKLOAD_JWT".into()), ..wif.clone() }, "assertion_env"),
            (RawMcpOAuth { assertion_env: Some("eyJhbGciOi.x.y".into()), ..from_env }, "assertion_env"),
            (
                RawMcpOAuth { client_secret_env: Some("S".into()), client_id: Some("c".into()), ..wif.clone() },
                "client_secret_env",
            ),
            (RawMcpOAuth { assertion_file: Some("t.jwt".into()), ..secret.clone() }, "assertion_file"),
            (RawMcpOAuth { dpop: Some(true), ..wif.clone() }, "dpop"),
        ] {
            let p = validate("x", oauth(raw), Path::new(".")).unwrap_err();
            assert_eq!(p.key, format!("mcp_servers.x.oauth.{key}"), "{}", p.message);
        }
        let on_stdio = RawMcpServer { oauth: Some(secret.clone()), ..stdio() };
        assert_eq!(validate("x", on_stdio, Path::new(".")).unwrap_err().key, "mcp_servers.x.oauth");
        let both = RawMcpServer { bearer_token_env: Some("T".into()), ..oauth(secret) };
        assert_eq!(validate("x", both, Path::new(".")).unwrap_err().key, "mcp_servers.x.oauth");
    }

    #[test]
    fn toml_keeps_the_case_of_variable_and_header_names() {
        let d = std::env::temp_dir().join(format!("flotilla-mcp-config-{}", uuid::Uuid::now_v7()));
        std::fs::create_dir_all(&d).unwrap();
        let p = d.join("f.toml");
        std::fs::write(
            &p,
            r#"
[mcp_servers.finance]
command = "finance-tools"
env = { API_KEY = "x", Mixed_Case = "y" }
session = "per_call"
call_timeout = 0.5
[mcp_servers.remote]
url = "https://mcp.example.com/mcp"
headers_from_env = { "X-Api-Key" = "REMOTE_KEY" }
"#,
        )
        .unwrap();
        let s = crate::Settings::load_with_env(Some(&p), vec![]).unwrap();
        let f = &s.mcp_servers["finance"];
        assert_eq!((f.session, f.call_timeout), (SessionMode::PerCall, Duration::from_millis(500)));
        match &f.transport {
            McpTransport::Stdio { env, .. } => assert_eq!(env.keys().collect::<Vec<_>>(), ["API_KEY", "Mixed_Case"]),
            other => panic!("{other:?}"),
        }
        match &s.mcp_servers["remote"].transport {
            McpTransport::Http { headers_from_env, .. } => assert_eq!(headers_from_env["X-Api-Key"], "REMOTE_KEY"),
            other => panic!("{other:?}"),
        }
        std::fs::write(&p, "[mcp_servers.bad]\nurl = \"http://example.com/mcp\"\n").unwrap();
        let err = crate::Settings::load_with_env(Some(&p), vec![]).unwrap_err().to_string();
        assert!(err.contains("`mcp_servers.bad.url`") && err.contains("https"), "{err}");
    }
}
