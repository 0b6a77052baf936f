//! Turns `[nats.auth]` and `[nats.tls]` into async-nats connect options.
//!
//! This is the only place that reads NATS secrets (a password or token from
//! the environment variable the config names, an nkey seed or creds file).
//! They go straight into `ConnectOptions` (whose `Debug` hides them) and are
//! never formatted: errors name the variable or file, not its content.

use async_nats::ConnectOptions;

use flotilla_config::NatsConfig;

/// Why the configured credentials could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AuthError {
    /// The environment variable named in the config is missing or empty.
    #[error("environment variable {var} (named by `{key}`) is not set or empty")]
    MissingEnv {
        /// The config key that names it.
        key: &'static str,
        /// The variable.
        var: String,
    },
    /// A seed or creds file could not be read or parsed.
    #[error("cannot use {what} {path}: {reason}")]
    File {
        /// Which setting.
        what: &'static str,
        /// The file.
        path: String,
        /// Why (never the file's content).
        reason: String,
    },
}

fn env_secret(key: &'static str, var: &str) -> Result<String, AuthError> {
    match std::env::var(var) {
        Ok(v) if !v.is_empty() => Ok(v),
        _ => Err(AuthError::MissingEnv { key, var: var.to_string() }),
    }
}

/// `user:password` or `token` from the first URL of `urls` (`nats://u:p@h`),
/// percent-decoded. async-nats ignores URL credentials, so Flotilla applies them.
pub fn url_credentials(urls: &str) -> Option<(String, Option<String>)> {
    let url = urls.split(',').next()?.trim();
    let rest = &url[url.find("://")? + 3..];
    let userinfo = &rest[..rest.find('@')?];
    if userinfo.contains('/') {
        return None;
    }
    match userinfo.split_once(':') {
        Some((u, p)) => Some((decode(u), Some(decode(p)))),
        None => Some((decode(userinfo), None)),
    }
}

fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match (
            bytes[i],
            bytes.get(i + 1..i + 3).and_then(|h| u8::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok()),
        ) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The authentication method in use, for logs and errors (never the secret).
pub fn method(config: &NatsConfig) -> &'static str {
    match config.auth.method() {
        "none" if url_credentials(&config.url).is_some() => "url",
        m => m,
    }
}

/// Adds the configured authentication and TLS settings to `opts`.
pub async fn apply(config: &NatsConfig, mut opts: ConnectOptions) -> Result<ConnectOptions, AuthError> {
    let auth = &config.auth;
    if auth.method() == "none" {
        match url_credentials(&config.url) {
            Some((user, Some(pass))) => opts = opts.user_and_password(user, pass),
            Some((token, None)) => opts = opts.token(token),
            None => {}
        }
    }
    if let (Some(user), Some(var)) = (&auth.user, &auth.password_env) {
        opts = opts.user_and_password(user.clone(), env_secret("nats.auth.password_env", var)?);
    }
    if let Some(var) = &auth.token_env {
        opts = opts.token(env_secret("nats.auth.token_env", var)?);
    }
    if let Some(path) = &auth.nkey_seed_file {
        let file_err =
            |reason: String| AuthError::File { what: "nkey seed file", path: path.display().to_string(), reason };
        let seed = tokio::fs::read_to_string(path).await.map_err(|e| file_err(e.to_string()))?;
        let seed = seed.trim().to_string();
        // Check the seed here so a bad file is a clear error, not a failed handshake.
        nkeys::KeyPair::from_seed(&seed)
            .map_err(|_| file_err("not a valid nkey seed (expected one line starting with S)".into()))?;
        opts = opts.nkey(seed);
    }
    if let Some(path) = &auth.creds_file {
        opts = opts.credentials_file(path).await.map_err(|e| AuthError::File {
            what: "creds file",
            path: path.display().to_string(),
            // async-nats' parse errors describe the format, not the secret.
            reason: e.kind().to_string(),
        })?;
    }
    let tls = &config.tls;
    if tls.enabled() {
        flotilla_config::tls::install_crypto_provider();
        opts = opts.require_tls(true);
    }
    if let Some(ca) = &tls.ca_file {
        opts = opts.add_root_certificates(ca.clone());
    }
    if let (Some(cert), Some(key)) = (&tls.cert_file, &tls.key_file) {
        opts = opts.add_client_certificate(cert.clone(), key.clone());
    }
    Ok(opts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_credentials_are_parsed_and_decoded() {
        assert_eq!(url_credentials("nats://u:p%40ss@h:4222,nats://x"), Some(("u".into(), Some("p@ss".into()))));
        assert_eq!(url_credentials("tls://t0k3n@h"), Some(("t0k3n".into(), None)));
        assert_eq!(url_credentials("nats://h:4222"), None);
        let mut c = NatsConfig { url: "nats://u:p@h".into(), ..Default::default() };
        assert_eq!(method(&c), "url");
        c.auth.token_env = Some("X".into());
        assert_eq!(method(&c), "token");
    }

    #[tokio::test]
    async fn missing_secrets_name_the_variable_and_never_leak() {
        let mut config = NatsConfig::default();
        config.auth.user = Some("worker".into());
        config.auth.password_env = Some("FLOTILLA_TEST_SURELY_UNSET_PASSWORD".into());
        let err = apply(&config, ConnectOptions::new()).await.unwrap_err().to_string();
        assert!(err.contains("FLOTILLA_TEST_SURELY_UNSET_PASSWORD") && err.contains("nats.auth.password_env"), "{err}");

        let dir = std::env::temp_dir().join(format!("flotilla-auth-{}", uuid::Uuid::now_v7()));
        std::fs::create_dir_all(&dir).unwrap();
        let seed = dir.join("bad.nk");
        std::fs::write(&seed, "SUPERSECRETBUTNOTASEED").unwrap();
        let mut config = NatsConfig::default();
        config.auth.nkey_seed_file = Some(seed);
        let err = apply(&config, ConnectOptions::new()).await.unwrap_err().to_string();
        assert!(err.contains("not a valid nkey seed"), "{err}");
        assert!(!err.contains("SUPERSECRET"), "{err}");
        let _ = std::fs::remove_dir_all(dir);
    }
}
