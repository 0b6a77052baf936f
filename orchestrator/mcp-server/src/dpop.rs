//! DPoP-bound access tokens in OAuth resource-server mode (RFC 9449, MCP's
//! `io.modelcontextprotocol/auth/dpop` extension; docs/MCP.md "HTTP
//! security"). An authorization server that binds a token to a client's
//! key says so in introspection (`cnf.jkt`, the key's RFC 7638 thumbprint).
//! Such a token is accepted only under the `DPoP` scheme with a proof,
//! checked here: a JWT of type `dpop+jwt`, signed with an asymmetric
//! algorithm by the public key in its own header (which carries no private
//! part), naming this request (`htm`, and `htu` = this server's resource
//! URL), issued within [`IAT_WINDOW`] of now, carrying the token's hash
//! (`ath`), never seen before (`jti`), and made with the key the token is
//! bound to. A bound token sent as a bearer token is refused, so one copied
//! out of a log or a proxy is useless without the key.
//!
//! No server nonce is demanded: the `jti` cache over the `iat` window
//! already refuses a replay within it.

use std::collections::HashMap;
use std::sync::Mutex;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::jwk::{Jwk, ThumbprintHash};
use jsonwebtoken::{DecodingKey, Validation};
use serde_json::Value;
use sha2::Digest;

/// How far a proof's `iat` may be from now, either way (clock skew).
pub(crate) const IAT_WINDOW: i64 = 300;

/// The proof algorithms accepted (asymmetric only: `none` and HMAC can
/// prove nothing), as announced in the protected-resource metadata.
pub(crate) const ALGORITHMS: [&str; 9] =
    ["ES256", "ES384", "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "EdDSA"];

/// Checks proofs and remembers their `jti`s for the `iat` window.
#[derive(Default)]
pub(crate) struct Proofs {
    /// `jti` -> the `iat` it came with; pruned as entries leave the window.
    seen: Mutex<HashMap<String, i64>>,
}

impl Proofs {
    /// The thumbprint of the key that signed `proof`, a valid proof for a
    /// `method` request to `url` presenting `token` at unix time `now`; or
    /// why not (for the `error_description`, naming no secret).
    pub(crate) fn check(&self, proof: &str, method: &str, url: &str, token: &str, now: i64) -> Result<String, String> {
        let header_json = proof
            .split('.')
            .next()
            .and_then(|h| URL_SAFE_NO_PAD.decode(h).ok())
            .and_then(|h| serde_json::from_slice::<Value>(&h).ok())
            .ok_or("the proof is not a JWT")?;
        if header_json["typ"] != "dpop+jwt" {
            return Err("the proof's typ is not dpop+jwt".into());
        }
        if !header_json["alg"].as_str().is_some_and(|a| ALGORITHMS.contains(&a)) {
            return Err(format!("the proof's alg is not one of {}", ALGORITHMS.join(" ")));
        }
        let raw_jwk = header_json.get("jwk").ok_or("the proof's header carries no jwk")?;
        if ["d", "p", "q", "dp", "dq", "qi", "k"].iter().any(|k| raw_jwk.get(k).is_some()) {
            return Err("the proof's jwk holds a private key".into());
        }
        let header = jsonwebtoken::decode_header(proof).map_err(|_| "the proof's header is malformed")?;
        let jwk: &Jwk = header.jwk.as_ref().ok_or("the proof's header carries no jwk")?;
        let key = DecodingKey::from_jwk(jwk).map_err(|_| "the proof's jwk is not a usable public key")?;
        // The header's alg, checked against ALGORITHMS above, is the only one tried.
        let mut validation = Validation::new(header.alg);
        validation.required_spec_claims.clear();
        validation.validate_exp = false;
        validation.validate_aud = false;
        let claims = jsonwebtoken::decode::<Value>(proof, &key, &validation)
            .map_err(|_| "the proof's signature does not verify with its jwk")?
            .claims;
        let jti = claims["jti"].as_str().filter(|j| !j.is_empty()).ok_or("the proof has no jti")?;
        if claims["htm"] != method {
            return Err(format!("the proof is for another method (htm is not {method})"));
        }
        let htu = claims["htu"].as_str().ok_or("the proof has no htu")?;
        if normal(htu) != normal(url) {
            return Err(format!("the proof is for another URL (htu is not {url})"));
        }
        let iat = claims["iat"].as_i64().ok_or("the proof has no iat")?;
        if (iat - now).abs() > IAT_WINDOW {
            return Err(format!("the proof's iat is more than {IAT_WINDOW} s from now"));
        }
        let ath = URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(token.as_bytes()));
        if claims["ath"] != ath.as_str() {
            return Err("the proof's ath is not the hash of the presented token".into());
        }
        {
            let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
            seen.retain(|_, at| (*at - now).abs() <= IAT_WINDOW);
            if seen.insert(jti.to_string(), iat).is_some() {
                return Err("the proof was used before (jti)".into());
            }
        }
        jwk.thumbprint(ThumbprintHash::SHA256).map_err(|_| "the proof's jwk has no thumbprint".into())
    }
}

/// A URL as `htu` compares it: no query, fragment or trailing slash.
fn normal(url: &str) -> &str {
    url.split(['?', '#']).next().unwrap_or(url).trim_end_matches('/')
}

/// The key thumbprint an introspection answer binds the token to (`cnf.jkt`).
pub(crate) fn bound_key(claims: &serde_json::Map<String, Value>) -> Option<&str> {
    claims.get("cnf").and_then(|c| c.get("jkt")).and_then(Value::as_str)
}

#[cfg(test)]
mod tests {
    use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair};
    use jsonwebtoken::{Algorithm, EncodingKey, Header};
    use serde_json::json;

    use super::*;

    const URL: &str = "https://flotilla.example/mcp";
    const NOW: i64 = 1_800_000_000;

    /// A client's key: signs proofs carrying `jwk` (normally its own public key).
    struct Client {
        key: EncodingKey,
        jwk: Jwk,
    }

    fn client() -> Client {
        let pair = EcdsaKeyPair::generate(&ECDSA_P256_SHA256_FIXED_SIGNING).unwrap();
        let key = EncodingKey::from_ec_der(pair.to_pkcs8v1().unwrap().as_ref());
        let jwk = Jwk::from_encoding_key(&key, Algorithm::ES256).unwrap();
        Client { key, jwk }
    }

    impl Client {
        fn proof(&self, jwk: &Jwk, claims: Value) -> String {
            let header =
                Header { typ: Some("dpop+jwt".into()), jwk: Some(jwk.clone()), ..Header::new(Algorithm::ES256) };
            jsonwebtoken::encode(&header, &claims, &self.key).unwrap()
        }
        fn for_request(&self, jti: &str, method: &str, url: &str, token: &str, iat: i64) -> String {
            let ath = URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(token.as_bytes()));
            self.proof(&self.jwk, json!({"jti": jti, "htm": method, "htu": url, "iat": iat, "ath": ath}))
        }
    }

    #[test]
    fn a_proof_counts_once_for_its_request_token_and_time_and_names_its_key() {
        let (alice, proofs) = (client(), Proofs::default());
        let good = alice.for_request("j-1", "POST", URL, "at-1", NOW - 10);
        let key = proofs.check(&good, "POST", URL, "at-1", NOW).expect("a valid proof");
        assert_eq!(key, alice.jwk.thumbprint(ThumbprintHash::SHA256).unwrap());
        assert_eq!(proofs.check(&good, "POST", URL, "at-1", NOW).unwrap_err(), "the proof was used before (jti)");

        for (proof, why) in [
            (alice.for_request("j-2", "GET", URL, "at-1", NOW), "another method"),
            (alice.for_request("j-3", "POST", "https://elsewhere.example/mcp", "at-1", NOW), "another URL"),
            (alice.for_request("j-4", "POST", URL, "at-2", NOW), "ath"),
            (alice.for_request("j-5", "POST", URL, "at-1", NOW - IAT_WINDOW - 1), "iat"),
            (alice.for_request("j-6", "POST", URL, "at-1", NOW + IAT_WINDOW + 1), "iat"),
        ] {
            let refused = proofs.check(&proof, "POST", URL, "at-1", NOW).unwrap_err();
            assert!(refused.contains(why), "{why}: {refused}");
        }
        // The query string is not part of htu.
        let with_query = alice.for_request("j-7", "POST", URL, "at-1", NOW);
        assert!(proofs.check(&with_query, "POST", &format!("{URL}?x=1"), "at-1", NOW).is_ok());
    }

    #[test]
    fn a_proof_signed_by_another_key_than_its_jwk_or_not_asymmetrically_proves_nothing() {
        let (alice, mallory, proofs) = (client(), client(), Proofs::default());
        let ath = URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(b"at-1"));
        let claims = json!({"jti": "j-1", "htm": "POST", "htu": URL, "iat": NOW, "ath": ath});
        // Mallory signs, claiming Alice's public key: the signature does not verify.
        let forged = mallory.proof(&alice.jwk, claims.clone());
        let refused = proofs.check(&forged, "POST", URL, "at-1", NOW).unwrap_err();
        assert!(refused.contains("signature"), "{refused}");

        // HMAC with a key anyone can pick, and a private key in the header.
        let hmac = Header { typ: Some("dpop+jwt".into()), ..Header::new(Algorithm::HS256) };
        let hs = jsonwebtoken::encode(&hmac, &claims, &EncodingKey::from_secret(b"k")).unwrap();
        assert!(proofs.check(&hs, "POST", URL, "at-1", NOW).unwrap_err().contains("alg"));
        let plain = Header { typ: Some("JWT".into()), jwk: Some(alice.jwk.clone()), ..Header::new(Algorithm::ES256) };
        let typ = jsonwebtoken::encode(&plain, &claims, &alice.key).unwrap();
        assert!(proofs.check(&typ, "POST", URL, "at-1", NOW).unwrap_err().contains("typ"));
        let good = alice.proof(&alice.jwk, claims);
        let (head, rest) = good.split_once('.').unwrap();
        let mut header: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(head).unwrap()).unwrap();
        header["jwk"]["d"] = json!("private");
        let leaked = format!("{}.{rest}", URL_SAFE_NO_PAD.encode(header.to_string()));
        assert!(proofs.check(&leaked, "POST", URL, "at-1", NOW).unwrap_err().contains("private"));
        assert!(proofs.check(&good, "POST", URL, "at-1", NOW).is_ok(), "the untouched proof holds");
    }
}
