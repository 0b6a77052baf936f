//! What OTLP export costs a task: the `overhead` scenario's dispatch ->
//! report latency on two rigs side by side, one of whose processes export every span and
//! metric (`[telemetry] endpoint`) to a collector that takes everything at
//! once (an OTLP/HTTP endpoint answering 200 to `/v1/traces` and
//! `/v1/metrics`), so the figure is Flotilla's side: span creation,
//! batching, protobuf encoding and the HTTP posts.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::setup::Rig;

/// An OTLP/HTTP collector that accepts and drops every export; counts the
/// requests so the bench can tell that export really happened.
pub struct Sink {
    url: String,
    requests: Arc<AtomicU64>,
}

impl Sink {
    /// Listens on a free loopback port.
    pub async fn start() -> anyhow::Result<Self> {
        let requests = Arc::new(AtomicU64::new(0));
        let counted = requests.clone();
        let accept = move || {
            let counted = counted.clone();
            async move {
                counted.fetch_add(1, Ordering::Relaxed);
                axum::http::StatusCode::OK
            }
        };
        let router = axum::Router::new()
            .route("/v1/traces", axum::routing::post(accept.clone()))
            .route("/v1/metrics", axum::routing::post(accept));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        tokio::spawn(async move { axum::serve(listener, router).await });
        Ok(Self { url, requests })
    }

    /// Export requests taken so far.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }
}

/// Dispatch -> report latencies of `n` sequential tasks on two rigs at
/// once, one exporting and one not, their tasks alternating so both see
/// the same moments of a noisy machine: (off, on, export requests the
/// collector took), each sorted.
pub async fn overhead_paired(n: usize) -> anyhow::Result<(Vec<Duration>, Vec<Duration>, u64)> {
    let sink = Sink::start().await?;
    let off = Rig::start(1, 4, 0).await?;
    let on = Rig::start_exporting(1, 4, 0, &sink.url).await?;
    let (lat_off, lat_on) = crate::paired(&off, &on, n).await?;
    let requests = sink.requests();
    off.stop();
    on.stop();
    Ok((lat_off, lat_on, requests))
}
