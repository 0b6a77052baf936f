//! Serving Prometheus metrics over HTTP (`/metrics`), for the binaries, and
//! the metric families both binaries share ([`AgentMetrics`], `families.rs`).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use prometheus_client::registry::Registry;

mod families;

pub use families::*;

/// The OpenTelemetry meter of Flotilla's instruments: the OTLP exporter's
/// when the process installed one (`crate::otel::Export::start`, which runs
/// before any metric is registered), else a no-op.
pub fn meter() -> opentelemetry::metrics::Meter {
    opentelemetry::global::meter("flotilla")
}

/// A metrics endpoint could not be opened.
#[derive(Debug, thiserror::Error)]
#[error("cannot listen on {addr} for {what}: {source} (choose another address or free the port)")]
pub struct ListenError {
    /// What the endpoint serves.
    pub what: &'static str,
    /// The address.
    pub addr: SocketAddr,
    /// Why.
    #[source]
    pub source: std::io::Error,
}

impl ListenError {
    /// The error as an operator needs it: the config `key` (or flag) that
    /// asked for the address, the address, the cause and what to change.
    pub fn naming(&self, key: &str) -> String {
        let (addr, cause) = (self.addr, &self.source);
        let hint = if cause.kind() == std::io::ErrorKind::AddrInUse {
            "another process listens there: stop it or choose another port"
        } else {
            "choose another address"
        };
        format!("{key} = \"{addr}\": cannot listen on {addr}: {cause} ({hint} in the config)")
    }
}

/// Binds `addr` and serves `router` until `shutdown` completes; returns the
/// bound address (useful with port 0) once listening.
pub async fn serve(
    what: &'static str,
    addr: SocketAddr,
    router: axum::Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<SocketAddr, ListenError> {
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|source| ListenError { what, addr, source })?;
    let bound = listener.local_addr().map_err(|source| ListenError { what, addr, source })?;
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router).with_graceful_shutdown(shutdown).await {
            tracing::error!(error = %e, what, "HTTP endpoint stopped");
        }
    });
    tracing::info!(%bound, what, "listening");
    Ok(bound)
}

/// A router answering `GET /metrics` with `registry`, after running `refresh`
/// (e.g. to read queue depths) on each scrape.
pub fn router<F, Fut>(registry: Arc<Registry>, refresh: F) -> axum::Router
where
    F: Fn() -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send,
{
    axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let (registry, refresh) = (registry.clone(), refresh.clone());
            async move {
                refresh().await;
                ([(axum::http::header::CONTENT_TYPE, CONTENT_TYPE)], render(&registry))
            }
        }),
    )
}
