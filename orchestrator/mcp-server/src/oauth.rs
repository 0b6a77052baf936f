//! OAuth resource-server mode for `flotilla mcp serve --listen` (docs/MCP.md,
//! "HTTP security"): instead of static bearer tokens, hosts bring access
//! tokens from the organisation's authorization server (AS), so people and
//! agents are authorized, scoped and revoked there.
//!
//! - Discovery (RFC 9728): `/.well-known/oauth-protected-resource` and its
//!   `/mcp` path variant name this resource, its AS and its scopes; a request
//!   without a usable token gets 401 with `WWW-Authenticate: Bearer
//!   resource_metadata="..."` pointing there, as MCP hosts expect.
//! - Validation by introspection at the AS (RFC 7662), with this server's
//!   own client credentials from the environment: opaque and JWT tokens alike,
//!   and a revoked token stops working at once. No token is cached.
//! - The token must be active, unexpired, from `--oauth-issuer` when it names
//!   one, and issued for this resource (`aud`, RFC 8707): a token minted for
//!   another server is refused. Missing `--oauth-scope`s get 403
//!   `insufficient_scope` naming them.
//! - The tenant comes from the token (`--oauth-tenant-claim`), and only
//!   tenants this server may act for (`--tenant` and each `--oauth-tenant`)
//!   are accepted; a token naming none is refused rather than defaulted, so
//!   a token minted for some other use of the AS never acts for a tenant.
//! - A token the AS bound to a key (`cnf.jkt`) counts only under the `DPoP`
//!   scheme with a valid proof of that key ([`super::dpop`]).

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use flotilla_protocol::digest::sha256_hex;
use flotilla_protocol::ids::Tenant;
use serde_json::{Map, Value, json};

use super::ServeArgs;
use super::dpop::{self, Proofs};
use super::http::Caller;
use super::sessions::Owner;

/// Where RFC 9728 puts protected-resource metadata.
const WELL_KNOWN: &str = "/.well-known/oauth-protected-resource";
/// How long one introspection may take before the request is refused (503).
const INTROSPECTION_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The resource server's settings, fixed at start.
pub struct ResourceServer {
    issuer: String,
    /// This server's resource identifier: the URL hosts use for `/mcp`.
    resource: String,
    introspection: String,
    client_id: String,
    client_secret: String,
    scopes: Vec<String>,
    tenant_claim: String,
    tenants: Vec<Tenant>,
    http: reqwest::Client,
    /// DPoP proofs seen (replay protection).
    proofs: Proofs,
}

/// Why a request is refused, and how to say so.
#[derive(Debug, PartialEq)]
enum Refusal {
    /// 401: no token, or one that is not valid here (`error="invalid_token"`).
    Unauthorized { sent: bool, why: String },
    /// 403 `insufficient_scope`: the token lacks a required scope.
    Scope,
    /// 403: a valid token that may not act for any tenant here.
    Forbidden(String),
    /// 503: the AS could not be asked.
    Unavailable(String),
    /// 401 `invalid_dpop_proof`: a DPoP proof that does not hold.
    Proof(String),
}

/// How the request presented its token.
#[derive(Debug, PartialEq)]
enum Presented {
    /// `Authorization: Bearer`.
    Bearer,
    /// `Authorization: DPoP` with a valid proof made with the key of this thumbprint.
    Dpop(String),
}

impl ResourceServer {
    /// Reads the settings and client credentials; finds the introspection
    /// endpoint in the AS's metadata (RFC 8414) when not given. `None`
    /// without `--oauth-issuer`.
    pub async fn new(args: &ServeArgs, tenant: &Tenant) -> anyhow::Result<Option<Self>> {
        let Some(issuer) = args.oauth_issuer.as_deref().map(|i| i.trim_end_matches('/').to_string()) else {
            return Ok(None);
        };
        let resource = args
            .oauth_resource
            .clone()
            .ok_or_else(|| anyhow::anyhow!("--oauth-issuer needs --oauth-resource URL: the URL hosts use for /mcp"))?;
        let parsed = reqwest::Url::parse(&resource)
            .map_err(|e| anyhow::anyhow!("--oauth-resource {resource:?} is not a URL: {e}"))?;
        if parsed.fragment().is_some() || !matches!(parsed.scheme(), "https" | "http") {
            anyhow::bail!("--oauth-resource {resource:?}: give an http(s) URL without a fragment (RFC 8707)");
        }
        let env = |flag: &str, var: &str| {
            std::env::var(var).map(|v| v.trim().to_string()).map_err(|_| {
                anyhow::anyhow!("{flag} {var}: environment variable {var} is not set (this server's client at the AS)")
            })
        };
        let client_id = env("--oauth-client-id-env", &args.oauth_client_id_env)?;
        let client_secret = env("--oauth-client-secret-env", &args.oauth_client_secret_env)?;
        let mut tenants = vec![tenant.clone()];
        for t in &args.oauth_tenants {
            tenants
                .push(Tenant::new(t).map_err(|e| anyhow::anyhow!("--oauth-tenant {t:?} is not a tenant name: {e}"))?);
        }
        let http = reqwest::Client::builder().timeout(INTROSPECTION_TIMEOUT).build()?;
        no_credentials_in("--oauth-issuer", &issuer)?;
        let introspection = match &args.oauth_introspection_url {
            Some(url) => url.clone(),
            None => discover(&http, &issuer).await?,
        };
        no_credentials_in("the introspection endpoint (--oauth-introspection-url)", &introspection)?;
        Ok(Some(Self {
            issuer,
            resource,
            introspection,
            client_id,
            client_secret,
            scopes: args.oauth_scopes.clone(),
            tenant_claim: args.oauth_tenant_claim.clone(),
            tenants,
            http,
            proofs: Proofs::default(),
        }))
    }

    /// The RFC 9728 document.
    pub fn metadata(&self) -> Value {
        let mut doc = json!({
            "resource": self.resource,
            "authorization_servers": [self.issuer],
            "bearer_methods_supported": ["header"],
            "resource_name": "Flotilla job API (flotilla mcp serve)",
            "dpop_signing_alg_values_supported": dpop::ALGORITHMS,
            "dpop_bound_access_tokens_required": false,
        });
        if !self.scopes.is_empty() {
            doc["scopes_supported"] = json!(self.scopes);
        }
        doc
    }

    /// The paths the metadata is served at: the root document and the
    /// variant for the resource's path (`/.well-known/oauth-protected-resource/mcp`).
    pub fn metadata_paths(&self) -> Vec<String> {
        let path = reqwest::Url::parse(&self.resource).ok().map(|u| u.path().trim_end_matches('/').to_string());
        let mut paths = vec![WELL_KNOWN.to_string()];
        if let Some(p) = path.filter(|p| !p.is_empty()) {
            paths.push(format!("{WELL_KNOWN}{p}"));
        }
        paths
    }

    /// The metadata URL announced in challenges: the resource's own variant.
    fn metadata_url(&self) -> String {
        match reqwest::Url::parse(&self.resource) {
            Ok(u) => format!("{}{}", u.origin().ascii_serialization(), self.metadata_paths().last().unwrap()),
            Err(_) => WELL_KNOWN.to_string(),
        }
    }

    /// The tenant `token` acts for and whom it stands for (its subject, else
    /// its client), after asking the AS about it.
    async fn authorize(&self, token: &str, presented: Presented) -> Result<(Tenant, Owner), Refusal> {
        let mut form = reqwest::Url::parse("http://form.invalid/").expect("a constant URL");
        form.query_pairs_mut().append_pair("token", token).append_pair("token_type_hint", "access_token");
        let reply = self
            .http
            .post(&self.introspection)
            .basic_auth(&self.client_id, Some(&self.client_secret))
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(header::ACCEPT, "application/json")
            .body(form.query().unwrap_or_default().to_string())
            .send()
            .await
            .map_err(|e| self.unavailable(&format!("failed: {}", e.without_url())))?;
        let status = reply.status();
        if !status.is_success() {
            return Err(self.unavailable(&format!("answered HTTP {status}: check this server's client credentials")));
        }
        let claims: Map<String, Value> = reply
            .json()
            .await
            .map_err(|e| self.unavailable(&format!("answered no JSON object: {}", e.without_url())))?;
        let now = time::OffsetDateTime::now_utc().unix_timestamp();
        let tenant = self.decide(&claims, now)?;
        binding(&claims, presented)?;
        let subject = ["sub", "client_id", "username"].iter().find_map(|k| claims.get(*k).and_then(Value::as_str));
        // A token naming nobody shares its sessions with no other token.
        let who = subject.map(str::to_string).unwrap_or_else(|| format!("token {}", sha256_hex(token.as_bytes())));
        let owner = Owner(format!("oauth {tenant} {who}"));
        Ok((tenant, owner))
    }

    /// A 503 whose log line names the endpoint without its path, query or
    /// any secret in them (the caller is not told: it may be anyone).
    fn unavailable(&self, what: &str) -> Refusal {
        let at = flotilla_config::url_policy::redact(&self.introspection);
        Refusal::Unavailable(format!("token introspection at {at} {what}"))
    }

    /// The checks on an introspection answer, at unix time `now`.
    fn decide(&self, claims: &Map<String, Value>, now: i64) -> Result<Tenant, Refusal> {
        let invalid = |why: &str| Refusal::Unauthorized { sent: true, why: why.to_string() };
        if claims.get("active") != Some(&Value::Bool(true)) {
            return Err(invalid("the token is not active (unknown, expired or revoked)"));
        }
        if claims.get("exp").and_then(Value::as_i64).is_some_and(|exp| exp <= now) {
            return Err(invalid("the token has expired"));
        }
        if let Some(iss) = claims.get("iss").and_then(Value::as_str)
            && iss.trim_end_matches('/') != self.issuer
        {
            return Err(invalid("the token is from another issuer"));
        }
        let audiences: Vec<&str> = match claims.get("aud") {
            Some(Value::String(a)) => vec![a.as_str()],
            Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
            _ => vec![],
        };
        if !audiences.iter().any(|a| a.trim_end_matches('/') == self.resource.trim_end_matches('/')) {
            return Err(invalid("the token was not issued for this resource (aud)"));
        }
        let granted: Vec<&str> = claims.get("scope").and_then(Value::as_str).unwrap_or("").split_whitespace().collect();
        if self.scopes.iter().any(|s| !granted.contains(&s.as_str())) {
            return Err(Refusal::Scope);
        }
        let claim = &self.tenant_claim;
        let named = claims.get(claim).and_then(Value::as_str).ok_or_else(|| {
            Refusal::Forbidden(format!("the token has no {claim} claim naming the tenant to act for"))
        })?;
        self.tenants
            .iter()
            .find(|t| t.as_str() == named)
            .cloned()
            .ok_or_else(|| Refusal::Forbidden(format!("this server does not act for tenant {named:?}")))
    }

    /// The response for `refusal`.
    fn refuse(&self, refusal: Refusal) -> Response {
        let meta = self.metadata_url();
        let scope = self.scopes.join(" ");
        let with_scope = if scope.is_empty() { String::new() } else { format!(", scope=\"{scope}\"") };
        match refusal {
            Refusal::Unauthorized { sent: false, why } => {
                let challenge = format!("Bearer resource_metadata=\"{meta}\"{with_scope}");
                (StatusCode::UNAUTHORIZED, [(header::WWW_AUTHENTICATE, challenge)], why).into_response()
            }
            Refusal::Unauthorized { sent: true, why } => {
                let challenge = format!(
                    "Bearer error=\"invalid_token\", error_description=\"{why}\", resource_metadata=\"{meta}\"{with_scope}"
                );
                (StatusCode::UNAUTHORIZED, [(header::WWW_AUTHENTICATE, challenge)], why).into_response()
            }
            Refusal::Scope => {
                let challenge =
                    format!("Bearer error=\"insufficient_scope\", resource_metadata=\"{meta}\"{with_scope}");
                let body = format!("the token lacks a required scope: {scope}");
                (StatusCode::FORBIDDEN, [(header::WWW_AUTHENTICATE, challenge)], body).into_response()
            }
            Refusal::Forbidden(why) => (StatusCode::FORBIDDEN, why).into_response(),
            Refusal::Proof(why) => {
                let algs = dpop::ALGORITHMS.join(" ");
                let challenge = format!(
                    "DPoP error=\"invalid_dpop_proof\", error_description=\"{why}\", algs=\"{algs}\", resource_metadata=\"{meta}\""
                );
                (StatusCode::UNAUTHORIZED, [(header::WWW_AUTHENTICATE, challenge)], why).into_response()
            }
            Refusal::Unavailable(why) => {
                tracing::warn!("{why}");
                let body = "the authorization server could not check this token now: retry shortly \
                            (the reason is in this server's log)";
                (StatusCode::SERVICE_UNAVAILABLE, [(header::RETRY_AFTER, "5")], body).into_response()
            }
        }
    }
}

/// Whether the token was presented as its binding requires: a token bound
/// to a key (`cnf.jkt`) only with a proof made with that key, an unbound one
/// only as a bearer token.
fn binding(claims: &Map<String, Value>, presented: Presented) -> Result<(), Refusal> {
    let invalid = |why: &str| Refusal::Unauthorized { sent: true, why: why.to_string() };
    match (dpop::bound_key(claims), presented) {
        (None, Presented::Bearer) => {}
        (Some(bound), Presented::Dpop(key)) if bound == key => {}
        (Some(_), Presented::Dpop(_)) => {
            return Err(Refusal::Proof("the proof is made with another key than the token is bound to".into()));
        }
        (Some(_), Presented::Bearer) => {
            return Err(invalid("the token is DPoP-bound: present it with the DPoP scheme and a proof"));
        }
        (None, Presented::Dpop(_)) => {
            return Err(invalid("the token is not DPoP-bound: present it as a bearer token"));
        }
    }
    Ok(())
}

/// Refuses a URL with credentials in it (`user:pass@`): they would travel
/// in every request and show up wherever the URL is named; the client
/// credentials have their own flags.
fn no_credentials_in(what: &str, url: &str) -> anyhow::Result<()> {
    let parsed = reqwest::Url::parse(url)
        .map_err(|e| anyhow::anyhow!("{what} {:?} is not a URL: {e}", flotilla_config::redact_url(url)))?;
    if !parsed.username().is_empty() || parsed.password().is_some() {
        anyhow::bail!(
            "{what} {:?} carries credentials (user:pass@): leave them out and give this server's client id and \
             secret in the environment (--oauth-client-id-env, --oauth-client-secret-env)",
            flotilla_config::url_policy::redact(url)
        );
    }
    Ok(())
}

/// The AS's introspection endpoint from its RFC 8414 metadata, whose
/// `issuer` must be the one configured (RFC 8414 section 3.3).
async fn discover(http: &reqwest::Client, issuer: &str) -> anyhow::Result<String> {
    let url = metadata_url(issuer)?;
    let doc: Value = async { http.get(&url).send().await?.error_for_status()?.json().await }
        .await
        .map_err(|e: reqwest::Error| anyhow::anyhow!("reading the authorization server's metadata at {url}: {e}"))?;
    let named = doc.get("issuer").and_then(Value::as_str).unwrap_or_default();
    if named.trim_end_matches('/') != issuer {
        anyhow::bail!("{url} names issuer {named:?}, not --oauth-issuer {issuer:?}");
    }
    doc.get("introspection_endpoint")
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| anyhow::anyhow!("{url} names no introspection_endpoint: pass --oauth-introspection-url"))
}

/// Where RFC 8414 puts an issuer's metadata: the well-known path goes
/// between the host and the issuer's own path.
fn metadata_url(issuer: &str) -> anyhow::Result<String> {
    let u = reqwest::Url::parse(issuer).map_err(|e| anyhow::anyhow!("--oauth-issuer {issuer:?} is not a URL: {e}"))?;
    let path = u.path().trim_end_matches('/');
    Ok(format!("{}/.well-known/oauth-authorization-server{path}", u.origin().ascii_serialization()))
}

/// Middleware: the request's token (a bearer token, or a DPoP-bound one
/// with its proof) must pass [`ResourceServer::decide`]; marks the request
/// with the tenant it acts for.
pub async fn check(State(rs): State<Arc<ResourceServer>>, mut req: Request, next: Next) -> Response {
    let authorization = req.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let (scheme, token) = authorization.split_once(' ').unwrap_or((authorization, ""));
    let token = token.trim().to_string();
    let dpop_scheme = scheme.eq_ignore_ascii_case("dpop");
    if token.is_empty() || !(dpop_scheme || scheme.eq_ignore_ascii_case("bearer")) {
        let why = "an OAuth access token is required: see the resource_metadata in WWW-Authenticate".to_string();
        return rs.refuse(Refusal::Unauthorized { sent: false, why });
    }
    let presented = if dpop_scheme {
        let proofs: Vec<&str> = req.headers().get_all("dpop").iter().filter_map(|v| v.to_str().ok()).collect();
        let [proof] = proofs[..] else {
            return rs.refuse(Refusal::Proof("a DPoP request carries exactly one DPoP proof header".into()));
        };
        let now = time::OffsetDateTime::now_utc().unix_timestamp();
        match rs.proofs.check(proof, req.method().as_str(), &rs.resource, &token, now) {
            Ok(key) => Presented::Dpop(key),
            Err(why) => return rs.refuse(Refusal::Proof(why)),
        }
    } else {
        Presented::Bearer
    };
    match rs.authorize(&token, presented).await {
        Ok((tenant, owner)) => {
            req.extensions_mut().insert(Caller(tenant));
            req.extensions_mut().insert(owner);
            next.run(req).await
        }
        Err(refusal) => rs.refuse(refusal),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rs(scopes: &[&str]) -> ResourceServer {
        flotilla_config::tls::install_crypto_provider();
        ResourceServer {
            issuer: "https://as.example".into(),
            resource: "https://mcp.example/mcp".into(),
            introspection: "https://as.example/introspect".into(),
            client_id: "rs".into(),
            client_secret: "secret".into(),
            scopes: scopes.iter().map(|s| s.to_string()).collect(),
            tenant_claim: "flotilla_tenant".into(),
            tenants: vec![Tenant::default(), Tenant::new("acme").unwrap()],
            http: reqwest::Client::new(),
            proofs: Proofs::default(),
        }
    }

    fn claims(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn a_bound_token_counts_only_with_a_proof_of_its_key_and_an_unbound_one_only_as_bearer() {
        let bound = claims(json!({"active": true, "cnf": {"jkt": "key-a"}}));
        let unbound = claims(json!({"active": true}));
        assert_eq!(binding(&bound, Presented::Dpop("key-a".into())), Ok(()));
        assert_eq!(binding(&unbound, Presented::Bearer), Ok(()));
        assert!(matches!(binding(&bound, Presented::Dpop("key-b".into())), Err(Refusal::Proof(_))));
        for (c, p) in [(&bound, Presented::Bearer), (&unbound, Presented::Dpop("key-a".into()))] {
            assert!(matches!(binding(c, p), Err(Refusal::Unauthorized { sent: true, .. })));
        }
    }

    #[test]
    fn a_token_acts_for_its_claimed_tenant_only_when_active_for_this_resource_and_scoped() {
        let r = rs(&["jobs"]);
        let ok = json!({"active": true, "iss": "https://as.example/", "aud": ["x", "https://mcp.example/mcp"],
                        "exp": 200, "scope": "jobs other", "flotilla_tenant": "acme"});
        assert_eq!(r.decide(&claims(ok.clone()), 100).unwrap().as_str(), "acme");
        let with = |k: &str, v: Value| {
            let mut c = claims(ok.clone());
            c.insert(k.into(), v);
            r.decide(&c, 100).unwrap_err()
        };
        assert!(matches!(with("active", json!(false)), Refusal::Unauthorized { sent: true, .. }));
        assert!(matches!(with("exp", json!(50)), Refusal::Unauthorized { why, .. } if why.contains("expired")));
        assert!(
            matches!(with("aud", json!("https://other.example/mcp")), Refusal::Unauthorized { why, .. } if why.contains("aud"))
        );
        assert!(
            matches!(with("iss", json!("https://evil.example")), Refusal::Unauthorized { why, .. } if why.contains("issuer"))
        );
        assert_eq!(with("scope", json!("other")), Refusal::Scope);
        assert!(matches!(with("flotilla_tenant", json!("globex")), Refusal::Forbidden(why) if why.contains("globex")));
        let mut none = claims(ok);
        none.remove("flotilla_tenant");
        assert!(
            matches!(r.decide(&none, 100).unwrap_err(), Refusal::Forbidden(why) if why.contains("flotilla_tenant"))
        );
    }

    #[test]
    fn the_issuers_metadata_url_puts_the_well_known_path_before_the_issuers_path() {
        let url = |i: &str| metadata_url(i).unwrap();
        assert_eq!(url("https://as.example"), "https://as.example/.well-known/oauth-authorization-server");
        assert_eq!(url("https://as.example/t/1"), "https://as.example/.well-known/oauth-authorization-server/t/1");
        assert!(metadata_url("not a url").is_err());
    }

    #[test]
    fn metadata_is_served_at_the_root_and_the_resource_path_and_announced_there() {
        let r = rs(&["jobs"]);
        assert_eq!(r.metadata_paths(), [WELL_KNOWN.to_string(), format!("{WELL_KNOWN}/mcp")]);
        assert_eq!(r.metadata_url(), "https://mcp.example/.well-known/oauth-protected-resource/mcp");
        let doc = r.metadata();
        assert_eq!(
            (doc["resource"].as_str(), doc["authorization_servers"][0].as_str()),
            (Some("https://mcp.example/mcp"), Some("https://as.example"))
        );
        assert_eq!(doc["scopes_supported"], json!(["jobs"]));
    }
}
