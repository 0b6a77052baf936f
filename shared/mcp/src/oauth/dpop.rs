//! DPoP (RFC 9449; the MCP extension `io.modelcontextprotocol/auth/dpop`,
//! SEP-1932), with `dpop = true` in `[mcp_servers.<name>.oauth]`
//! (docs/MCP.md "OAuth"): a session holds one P-256 key of its own, asks
//! the authorization server for tokens bound to it, and proves possession of
//! it on every request, so a token copied out of a log or a proxy is useless
//! without the key, which never leaves the process.
//!
//! A proof is a JWT signed with the key (`typ` `dpop+jwt`, the public key in
//! `jwk`) naming the request's method and URL (`htm`, `htu`, without query
//! or fragment), a fresh `jti` and `iat`, the access token's hash (`ath`)
//! on resource requests, and the server's nonce when it demands one. Each
//! server's latest nonce (`DPoP-Nonce`) is kept per origin.
//!
//! [`DpopOAuthHttp`] carries the OAuth state machine's requests (discovery,
//! registration, token and refresh), adding a proof to token requests and
//! retrying once with the nonce of a `use_dpop_nonce` refusal; it applies
//! Flotilla's URL rules itself (docs/MCP.md "HTTP security"), since rmcp's
//! address filter belongs to its own client. [`DpopHttp`] carries the MCP
//! requests.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use futures::StreamExt;
use jsonwebtoken::jwk::Jwk;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use oauth2::http;
use reqwest::header::{HeaderMap, HeaderValue};
use rmcp::transport::auth::{
    AuthorizationMetadata, OAuthHttpClient, OAuthHttpClientError, OAuthHttpClientFuture, OAuthHttpRedirectPolicy,
    OAuthHttpRequest,
};
use serde_json::{Value, json};

use crate::url_policy;

/// The response header a server sends its nonce in (RFC 9449 §8, §9).
pub(crate) const NONCE_HEADER: &str = "dpop-nonce";

/// A session's DPoP key and what it learned from the servers.
pub(crate) struct Dpop {
    key: EncodingKey,
    jwk: Jwk,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// The authorization server's token endpoint, once discovery found it.
    token_endpoint: Option<String>,
    /// Whether the last token issued is DPoP-bound (`token_type` `DPoP`):
    /// an authorization server may still answer with a bearer token.
    bound: bool,
    /// The latest nonce of each origin.
    nonces: HashMap<String, String>,
}

impl Dpop {
    /// A fresh P-256 key, for one session.
    pub(crate) fn generate() -> Result<Self, String> {
        let pair = EcdsaKeyPair::generate(&ECDSA_P256_SHA256_FIXED_SIGNING).map_err(|e| e.to_string())?;
        let pkcs8 = pair.to_pkcs8v1().map_err(|e| e.to_string())?;
        let key = EncodingKey::from_ec_der(pkcs8.as_ref());
        let jwk = Jwk::from_encoding_key(&key, Algorithm::ES256).map_err(|e| e.to_string())?;
        Ok(Dpop { key, jwk, state: Mutex::default() })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Binds the session to the authorization server `metadata` describes,
    /// which must advertise ES256 DPoP proofs.
    pub(crate) fn use_server(&self, metadata: &AuthorizationMetadata) -> Result<(), String> {
        let algs = metadata.additional_fields.get("dpop_signing_alg_values_supported").and_then(Value::as_array);
        if !algs.is_some_and(|a| a.iter().any(|v| v == "ES256")) {
            return Err(format!(
                "the authorization server does not accept DPoP proofs signed with ES256 (its metadata lists {}); \
                 set `dpop = false` to use bearer tokens",
                algs.map(|a| Value::from(a.clone()).to_string()).unwrap_or_else(|| "none".into())
            ));
        }
        // `bound` stays as the last token left it until the next token
        // response says otherwise: requests still in flight keep presenting
        // the current token the way it was issued.
        self.state().token_endpoint = Some(metadata.token_endpoint.clone());
        Ok(())
    }

    fn is_token_endpoint(&self, url: &str) -> bool {
        self.state().token_endpoint.as_deref().is_some_and(|t| without_query(t) == without_query(url))
    }

    /// Whether the current access token is DPoP-bound.
    pub(crate) fn is_bound(&self) -> bool {
        self.state().bound
    }

    /// A proof for one request to `url`, with the access token's hash when
    /// one is presented.
    pub(crate) fn proof(&self, method: &str, url: &str, access_token: Option<&str>) -> Result<HeaderValue, String> {
        let mut jti = [0u8; 16];
        aws_lc_rs::rand::fill(&mut jti).map_err(|e| e.to_string())?;
        let iat = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_err(|e| e.to_string())?;
        let mut claims = json!({
            "jti": URL_SAFE_NO_PAD.encode(jti),
            "htm": method,
            "htu": without_query(url),
            "iat": iat.as_secs(),
        });
        if let Some(token) = access_token {
            let hash = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, token.as_bytes());
            claims["ath"] = URL_SAFE_NO_PAD.encode(hash.as_ref()).into();
        }
        if let Some(nonce) = self.state().nonces.get(&origin(url)) {
            claims["nonce"] = nonce.clone().into();
        }
        let header =
            Header { typ: Some("dpop+jwt".into()), jwk: Some(self.jwk.clone()), ..Header::new(Algorithm::ES256) };
        let jwt = jsonwebtoken::encode(&header, &claims, &self.key).map_err(|e| e.to_string())?;
        HeaderValue::from_str(&jwt).map_err(|e| e.to_string())
    }

    /// Keeps the nonce `headers` carry for `url`'s origin; true when it is new.
    pub(crate) fn learn_nonce(&self, url: &str, headers: &HeaderMap) -> bool {
        let Some(nonce) = headers.get(NONCE_HEADER).and_then(|v| v.to_str().ok()) else { return false };
        self.state().nonces.insert(origin(url), nonce.to_string()).as_deref() != Some(nonce)
    }

    fn record_token_type(&self, body: &[u8]) {
        if let Ok(answer) = serde_json::from_slice::<Value>(body)
            && answer["access_token"].is_string()
        {
            self.state().bound = answer["token_type"].as_str().is_some_and(|t| t.eq_ignore_ascii_case("dpop"));
        }
    }
}

/// `url` without query and fragment (RFC 9449 §4.2's `htu`).
fn without_query(url: &str) -> &str {
    url.split(['?', '#']).next().unwrap_or(url)
}

fn origin(url: &str) -> String {
    reqwest::Url::parse(url).map(|u| u.origin().ascii_serialization()).unwrap_or_default()
}

/// Whether an OAuth error body is `use_dpop_nonce`.
pub(crate) fn is_nonce_error(body: &[u8]) -> bool {
    serde_json::from_slice::<Value>(body).is_ok_and(|b| b["error"] == "use_dpop_nonce")
}

/// Largest OAuth response body read (metadata, registration, tokens).
const MAX_BODY: usize = 1024 * 1024;

/// Redirects followed for discovery, within the first URL's origin.
const MAX_REDIRECTS: usize = 5;

/// The OAuth state machine's HTTP client under DPoP (see the module docs).
pub(crate) struct DpopOAuthHttp {
    dpop: Arc<Dpop>,
    follow: reqwest::Client,
    stop: reqwest::Client,
    allow_insecure_http: bool,
}

impl DpopOAuthHttp {
    pub(crate) fn new(dpop: Arc<Dpop>, allow_insecure_http: bool) -> reqwest::Result<Self> {
        flotilla_config::tls::install_crypto_provider();
        let build = |redirect| {
            reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .redirect(redirect)
                .dns_resolver(CheckedResolver)
                .build()
        };
        let same_origin = reqwest::redirect::Policy::custom(|attempt| {
            let first = attempt.previous().first().map(|u| u.origin());
            if attempt.previous().len() > MAX_REDIRECTS || first.is_some_and(|o| o != attempt.url().origin()) {
                attempt.stop()
            } else {
                attempt.follow()
            }
        });
        Ok(DpopOAuthHttp {
            dpop,
            follow: build(same_origin)?,
            stop: build(reqwest::redirect::Policy::none())?,
            allow_insecure_http,
        })
    }

    async fn send(&self, request: OAuthHttpRequest) -> Result<http::Response<Vec<u8>>, OAuthHttpClientError> {
        let OAuthHttpRequest { request, redirect_policy, .. } = request;
        let url = request.uri().to_string();
        url_policy::check(&url, self.allow_insecure_http)?;
        let client = match redirect_policy {
            OAuthHttpRedirectPolicy::Follow => &self.follow,
            _ => &self.stop,
        };
        let token_request = request.method() == http::Method::POST && self.dpop.is_token_endpoint(&url);
        let (parts, body) = request.into_parts();
        for attempt in 0..2 {
            let mut outgoing = reqwest::Request::new(parts.method.clone(), url.parse()?);
            *outgoing.headers_mut() = parts.headers.clone();
            *outgoing.body_mut() = Some(body.clone().into());
            if token_request {
                outgoing.headers_mut().insert("dpop", self.dpop.proof("POST", &url, None)?);
            }
            let response = client.execute(outgoing).await?;
            let (status, version, headers) = (response.status(), response.version(), response.headers().clone());
            let mut bytes = Vec::new();
            let mut stream = response.bytes_stream();
            while let Some(chunk) = stream.next().await {
                let chunk = chunk?;
                if bytes.len() + chunk.len() > MAX_BODY {
                    return Err(
                        format!("OAuth response from {} exceeds {MAX_BODY} bytes", url_policy::redact(&url)).into()
                    );
                }
                bytes.extend_from_slice(&chunk);
            }
            let fresh_nonce = self.dpop.learn_nonce(&url, &headers);
            if token_request {
                if attempt == 0 && status == http::StatusCode::BAD_REQUEST && fresh_nonce && is_nonce_error(&bytes) {
                    continue;
                }
                if status.is_success() {
                    self.dpop.record_token_type(&bytes);
                }
            }
            let mut answer = http::Response::builder().status(status).version(version);
            for (name, value) in &headers {
                answer = answer.header(name, value);
            }
            return Ok(answer.body(bytes)?);
        }
        unreachable!("the second attempt always returns")
    }
}

impl OAuthHttpClient for DpopOAuthHttp {
    fn execute(&self, request: OAuthHttpRequest) -> OAuthHttpClientFuture<'_> {
        Box::pin(self.send(request))
    }
}

/// Resolves with the system resolver and drops the addresses Flotilla's URL
/// rules forbid (link-local and metadata addresses, IPv4 dressed as IPv6),
/// at connect time, so a name cannot be re-pointed after a check.
struct CheckedResolver;

impl reqwest::dns::Resolve for CheckedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let host = name.as_str().to_string();
        Box::pin(async move {
            let found: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let allowed: Vec<SocketAddr> =
                found.iter().copied().filter(|a| !url_policy::is_forbidden(a.ip())).collect();
            if allowed.is_empty() {
                return Err(format!("{host} resolves only to forbidden addresses ({found:?})").into());
            }
            Ok(Box::new(allowed.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use jsonwebtoken::{DecodingKey, Validation};

    use super::*;

    /// Verifies `proof` with the key its own header carries, as a server does.
    fn verified(proof: &HeaderValue) -> (Header, Value) {
        let proof = proof.to_str().unwrap();
        let header = jsonwebtoken::decode_header(proof).unwrap();
        let key = DecodingKey::from_jwk(header.jwk.as_ref().expect("jwk in the header")).unwrap();
        let mut validation = Validation::new(Algorithm::ES256);
        validation.required_spec_claims.clear();
        validation.validate_exp = false;
        (header, jsonwebtoken::decode::<Value>(proof, &key, &validation).unwrap().claims)
    }

    #[test]
    fn a_proof_is_signed_by_the_public_key_it_carries_names_the_request_and_binds_the_token() {
        let dpop = Dpop::generate().unwrap();
        let url = "https://mcp.example.com/mcp?session=1#top";
        let (header, claims) = verified(&dpop.proof("POST", url, Some("at-1")).unwrap());
        assert_eq!(header.typ.as_deref(), Some("dpop+jwt"));
        let jwk = serde_json::to_value(header.jwk.unwrap()).unwrap();
        assert!(jwk.get("d").is_none(), "the private key never leaves: {jwk}");
        assert_eq!(
            (claims["htm"].as_str(), claims["htu"].as_str()),
            (Some("POST"), Some("https://mcp.example.com/mcp"))
        );
        // base64url(SHA-256("at-1")), RFC 9449 §4.2.
        assert_eq!(claims["ath"], "R8PYaIQdcYEdkSc9TeGyiUqSAedmCQuOQImPRh1E3HI");
        assert!(claims.get("nonce").is_none());

        let (_, again) = verified(&dpop.proof("POST", url, Some("at-1")).unwrap());
        assert_ne!(claims["jti"], again["jti"], "every proof is fresh");
        let (_, token_request) = verified(&dpop.proof("POST", "https://as.example.com/token", None).unwrap());
        assert!(token_request.get("ath").is_none());

        // A nonce is kept for its origin only, and a repeated one is not new.
        let mut headers = HeaderMap::new();
        headers.insert(NONCE_HEADER, HeaderValue::from_static("n-1"));
        assert!(dpop.learn_nonce("https://mcp.example.com/other", &headers));
        assert!(!dpop.learn_nonce("https://mcp.example.com/mcp", &headers));
        assert_eq!(verified(&dpop.proof("GET", url, Some("at-1")).unwrap()).1["nonce"], "n-1");
        assert!(verified(&dpop.proof("POST", "https://as.example.com/token", None).unwrap()).1.get("nonce").is_none());
    }

    #[test]
    fn only_an_authorization_server_that_takes_es256_proofs_is_used_and_only_a_dpop_token_is_bound() {
        let dpop = Dpop::generate().unwrap();
        let metadata = |algs: Value| -> AuthorizationMetadata {
            serde_json::from_value(json!({
                "authorization_endpoint": "https://as.example.com/authorize",
                "token_endpoint": "https://as.example.com/token",
                "dpop_signing_alg_values_supported": algs,
            }))
            .unwrap()
        };
        let refused = dpop.use_server(&metadata(json!(["RS256"]))).unwrap_err();
        assert!(refused.contains("ES256") && refused.contains("dpop = false"), "{refused}");
        dpop.use_server(&metadata(json!(["ES256"]))).unwrap();
        assert!(dpop.is_token_endpoint("https://as.example.com/token"));
        dpop.record_token_type(br#"{"access_token":"a","token_type":"Bearer"}"#);
        assert!(!dpop.is_bound(), "a bearer answer stays a bearer token");
        dpop.record_token_type(br#"{"access_token":"a","token_type":"DPoP"}"#);
        assert!(dpop.is_bound());
        assert!(is_nonce_error(br#"{"error":"use_dpop_nonce"}"#) && !is_nonce_error(br#"{"error":"invalid_grant"}"#));
    }
}
