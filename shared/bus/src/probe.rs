//! Reaching a NATS server without opening Flotilla's topology: whether
//! anything answers at a URL (the local supervisor's "reuse a running
//! server or start one"), and whether a config's credentials and TLS reach
//! a JetStream account (`flotilla config check --connect`).

use std::time::Duration;

use flotilla_config::NatsConfig;

/// Whether a NATS server answers at `url` within about two seconds.
pub async fn reachable(url: &str) -> bool {
    let opts = async_nats::ConnectOptions::new().connection_timeout(Duration::from_millis(500));
    matches!(tokio::time::timeout(Duration::from_secs(2), opts.connect(url)).await, Ok(Ok(_)))
}

/// What a JetStream account holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JetStreamAccount {
    /// Streams in the account.
    pub streams: usize,
    /// Bytes stored.
    pub storage: u64,
}

/// Why [`jetstream_account`] did not reach an account, each a step an
/// operator fixes differently.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// `[nats] url` does not parse.
    #[error("not a NATS URL: {0}")]
    BadUrl(String),
    /// The credentials or TLS files of `[nats.auth]` do not load.
    #[error("cannot load the credentials: {0}")]
    Credentials(String),
    /// Nobody answered within the budget.
    #[error("no answer")]
    NoAnswer,
    /// The server refused or broke the connection.
    #[error("cannot connect: {0}")]
    Connect(String),
    /// Connected, but JetStream did not answer within the budget.
    #[error("JetStream did not answer")]
    JetStreamNoAnswer,
    /// Connected, but the account info request failed (JetStream off).
    #[error("JetStream account info failed: {0}")]
    JetStream(String),
}

/// Connects once with `config`'s credentials and TLS (as every process
/// does, [`crate::auth::apply`]) and asks for the JetStream account; each
/// step is bounded by `timeout` (the connection by twice that).
pub async fn jetstream_account(config: &NatsConfig, timeout: Duration) -> Result<JetStreamAccount, ProbeError> {
    let servers = config
        .url
        .split(',')
        .map(|u| u.trim().parse::<async_nats::ServerAddr>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| ProbeError::BadUrl(e.to_string()))?;
    let opts = async_nats::ConnectOptions::new()
        .name("flotilla config check")
        .connection_timeout(timeout)
        .custom_inbox_prefix(&config.inbox_prefix);
    let opts = crate::auth::apply(config, opts).await.map_err(|e| ProbeError::Credentials(e.to_string()))?;
    let client = tokio::time::timeout(timeout * 2, opts.connect(servers))
        .await
        .map_err(|_| ProbeError::NoAnswer)?
        .map_err(|e| ProbeError::Connect(e.to_string()))?;
    let js = async_nats::jetstream::new(client);
    let account = tokio::time::timeout(timeout, js.query_account())
        .await
        .map_err(|_| ProbeError::JetStreamNoAnswer)?
        .map_err(|e| ProbeError::JetStream(e.to_string()))?;
    Ok(JetStreamAccount { streams: account.streams, storage: account.storage })
}
