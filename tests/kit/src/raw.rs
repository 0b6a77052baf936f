//! A raw NATS connection for tests that act as plain clients: an observer of
//! subjects, an inspector of streams, an attacker holding some credential.
//! Tests must not reach into `flotilla_bus::Bus`, whose connection is private
//! (shared/bus/src/lib.rs), so they open their own here, with the same auth
//! and TLS settings (`flotilla_bus::auth::apply`) and the same tracking of
//! permission denials (`flotilla_bus::denials`), so that a refused request
//! fails at once with the server's reason instead of timing out.

use std::future::Future;

use async_nats::jetstream;
use flotilla_bus::BusError;
use flotilla_bus::denials::{Denial, Denials};
use flotilla_config::NatsConfig;

/// One raw connection.
pub struct RawNats {
    /// The core client.
    pub client: async_nats::Client,
    /// JetStream on it.
    pub js: jetstream::Context,
    denials: Denials,
}

impl RawNats {
    /// Connects with `config`'s URL, credentials, TLS and inbox prefix;
    /// reconnects forever, like `Bus`, so fault tests may restart the server.
    pub async fn connect(config: &NatsConfig) -> Self {
        let denials = Denials::default();
        let seen = denials.clone();
        let opts = async_nats::ConnectOptions::new()
            .name("e2e raw client")
            .max_reconnects(None)
            .custom_inbox_prefix(&config.inbox_prefix)
            .event_callback(move |event| {
                let seen = seen.clone();
                async move {
                    if let async_nats::Event::ServerError(async_nats::ServerError::Other(e)) = event {
                        seen.observe(&e);
                    }
                }
            });
        let opts = flotilla_bus::auth::apply(config, opts).await.expect("NATS credentials");
        let client = opts.connect(config.url.as_str()).await.expect("raw NATS connection");
        Self { js: jetstream::new(client.clone()), client, denials }
    }

    /// Runs `op`, turning a permission denial `concerns` accepts into an
    /// immediate error (as `Bus::guarded` does for the processes).
    pub async fn guarded<T, E>(
        &self,
        context: impl Into<String>,
        op: impl Future<Output = Result<T, E>>,
        concerns: impl Fn(&Denial) -> bool,
    ) -> Result<T, BusError>
    where
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        self.denials.guarded(context, op, concerns).await
    }
}
