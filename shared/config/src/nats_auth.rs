//! `[nats.auth]` and `[nats.tls]`: how a process proves who it is to NATS and
//! how it checks the server. The file names *where* secrets are (an
//! environment variable's name, a seed or creds file), never the secrets
//! themselves, so a config file can be committed, printed and logged.
//! Reading the secrets happens at connect time in `bus::auth`.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{ConfigError, invalid};

/// `[nats.auth]`: at most one way to authenticate. Empty = anonymous.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct NatsAuthConfig {
    /// User name, with `password_env`.
    pub user: Option<String>,
    /// Name of the environment variable holding the user's password.
    pub password_env: Option<String>,
    /// Name of the environment variable holding a server token.
    pub token_env: Option<String>,
    /// File holding an nkey seed (`SU...`), relative to the config file.
    pub nkey_seed_file: Option<PathBuf>,
    /// A `.creds` file (JWT + nkey seed) for decentralized auth, relative to the config file.
    pub creds_file: Option<PathBuf>,
}

/// `[nats.tls]`: TLS towards the server.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct NatsTlsConfig {
    /// PEM file of the CA(s) that signed the server certificate. When set,
    /// only these CAs are trusted (not the system store).
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate, for servers that verify clients (mutual TLS).
    pub cert_file: Option<PathBuf>,
    /// PEM private key of `cert_file`.
    pub key_file: Option<PathBuf>,
    /// Refuse to connect without TLS even if the URL says `nats://`.
    pub required: bool,
}

impl NatsAuthConfig {
    /// The method in use, for logs (`none`, `user`, `token`, `nkey`, `creds`).
    pub fn method(&self) -> &'static str {
        if self.user.is_some() {
            "user"
        } else if self.token_env.is_some() {
            "token"
        } else if self.nkey_seed_file.is_some() {
            "nkey"
        } else if self.creds_file.is_some() {
            "creds"
        } else {
            "none"
        }
    }

    /// Checks the combination and resolves files against `base`.
    pub(crate) fn validate(&mut self, base: &Path) -> Result<(), ConfigError> {
        let set =
            [self.user.is_some(), self.token_env.is_some(), self.nkey_seed_file.is_some(), self.creds_file.is_some()];
        if set.iter().filter(|s| **s).count() > 1 {
            return Err(invalid(
                "nats.auth",
                "set only one of user (+ password_env), token_env, nkey_seed_file or creds_file",
            ));
        }
        if self.user.is_some() != self.password_env.is_some() {
            return Err(invalid("nats.auth.password_env", "user and password_env go together"));
        }
        for (key, env) in [("nats.auth.password_env", &self.password_env), ("nats.auth.token_env", &self.token_env)] {
            if let Some(name) = env
                && (name.is_empty() || name.contains('='))
            {
                return Err(invalid(key, "give the *name* of an environment variable, not the secret"));
            }
        }
        resolve_file("nats.auth.nkey_seed_file", &mut self.nkey_seed_file, base)?;
        resolve_file("nats.auth.creds_file", &mut self.creds_file, base)
    }
}

impl NatsTlsConfig {
    /// Whether any TLS setting is present.
    pub fn enabled(&self) -> bool {
        self.required || self.ca_file.is_some() || self.cert_file.is_some()
    }

    /// Checks the combination and resolves files against `base`.
    pub(crate) fn validate(&mut self, base: &Path) -> Result<(), ConfigError> {
        if self.cert_file.is_some() != self.key_file.is_some() {
            return Err(invalid("nats.tls.key_file", "cert_file and key_file go together"));
        }
        resolve_file("nats.tls.ca_file", &mut self.ca_file, base)?;
        resolve_file("nats.tls.cert_file", &mut self.cert_file, base)?;
        resolve_file("nats.tls.key_file", &mut self.key_file, base)
    }
}

fn resolve_file(key: &str, file: &mut Option<PathBuf>, base: &Path) -> Result<(), ConfigError> {
    if let Some(f) = file {
        let p = base.join(&*f);
        if !p.is_file() {
            return Err(invalid(key, format!("{} does not exist or is not a file", p.display())));
        }
        *file = Some(p);
    }
    Ok(())
}
