//! What OTLP export costs a task: the `overhead` scenario's dispatch ->
//! report latency on two rigs side by side, one of whose processes export every span and
//! metric (`[telemetry] endpoint`) to a collector that takes everything at
//! once (an OTLP/HTTP endpoint answering 200 to `/v1/traces` and
//! `/v1/metrics`), so the figure is Flotilla's side: span creation,
//! batching, protobuf encoding and the HTTP posts.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use flotilla_protocol::ids::{JobId, SubagentType};

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
    let ty = SubagentType::new("finance")?;
    let (job_off, job_on) = (JobId::new(), JobId::new());
    let mut reports_off = Box::pin(off.bus().reports().live_of_job(&Default::default(), &job_off).await?);
    let mut reports_on = Box::pin(on.bus().reports().live_of_job(&Default::default(), &job_on).await?);
    let (mut lat_off, mut lat_on) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for i in 0..n + crate::OVERHEAD_WARM_UP {
        for (rig, job, reports, out) in
            [(&off, job_off, &mut reports_off, &mut lat_off), (&on, job_on, &mut reports_on, &mut lat_on)]
        {
            let took = crate::dispatch_to_report(rig, job, &ty, reports).await?;
            if i >= crate::OVERHEAD_WARM_UP {
                out.push(took);
            }
        }
    }
    let requests = sink.requests();
    off.stop();
    on.stop();
    lat_off.sort();
    lat_on.sort();
    Ok((lat_off, lat_on, requests))
}
