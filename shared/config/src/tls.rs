//! Process-wide TLS setup.
//!
//! The workspace compiles exactly one rustls crypto backend, `ring` (the one
//! async-nats already uses), and builds reqwest with `rustls-no-provider` so
//! that aws-lc-rs (a C and cmake build) is never pulled in. The price is that
//! rustls has no default provider: reqwest panics when a client is built
//! before one is installed. [`install_crypto_provider`] installs `ring` and is
//! cheap and safe to call before every client is built.

/// Installs `ring` as the process-wide rustls crypto provider, once.
///
/// Idempotent: when a provider is already installed (by an earlier call or by
/// another library) that one is kept and nothing happens.
pub fn install_crypto_provider() {
    // `Err` only means a provider is already installed, which is what we want.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

#[cfg(test)]
mod tests {
    #[test]
    fn installing_twice_is_fine() {
        super::install_crypto_provider();
        super::install_crypto_provider();
        assert!(rustls::crypto::CryptoProvider::get_default().is_some());
    }
}
