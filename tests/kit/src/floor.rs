//! The NATS floor under Flotilla's per-task path, measured on a given
//! server with a raw client (`flotilla bench`, orchestrator/bench): what one
//! core request/reply, one JetStream publish with its ack, one KV put and one
//! small Object Store put take there, so a task's dispatch -> report time can
//! be read as a multiple of the operations it is made of
//! (docs/PERFORMANCE.md). Each figure is a p50 over sequential operations
//! after a warm-up, on its own stream or bucket, which it removes after.

use std::time::{Duration, Instant};

use async_nats::jetstream::{kv, object_store, stream};
use flotilla_config::NatsConfig;
use futures::StreamExt;

use crate::RawNats;

/// p50 of each floor operation.
#[derive(Clone, Debug)]
pub struct Floor {
    /// Core NATS request and its reply (a responder in the same process).
    pub request_reply: Duration,
    /// JetStream publish of a 300-byte message, ack awaited (file storage).
    pub publish_ack: Duration,
    /// KV put of a 300-byte value (file storage).
    pub kv_put: Duration,
    /// Object Store put of a 1 KiB object (file storage).
    pub object_put: Duration,
}

const WARM_UP: usize = 20;

async fn p50<F, Fut>(n: usize, mut op: F) -> anyhow::Result<Duration>
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let mut times = Vec::with_capacity(n);
    for i in 0..n + WARM_UP {
        let started = Instant::now();
        op(i).await?;
        if i >= WARM_UP {
            times.push(started.elapsed());
        }
    }
    times.sort();
    Ok(times[times.len() / 2])
}

/// Measures the floor on the server at `url` (`n` operations each).
pub async fn measure(url: &str, n: usize) -> anyhow::Result<Floor> {
    let raw = RawNats::connect(&NatsConfig { url: url.into(), ..Default::default() }).await;
    let body = bytes::Bytes::from(vec![b'x'; 300]);

    let mut echo = raw.client.subscribe("bench.floor.echo").await?;
    let responder = raw.client.clone();
    let serve = tokio::spawn(async move {
        while let Some(m) = echo.next().await {
            if let Some(reply) = m.reply {
                let _ = responder.publish(reply, m.payload).await;
            }
        }
    });
    let client = raw.client.clone();
    let request_reply = p50(n, |_| {
        let (client, body) = (client.clone(), body.clone());
        async move {
            client.request("bench.floor.echo", body).await?;
            Ok(())
        }
    })
    .await?;
    serve.abort();

    let config = stream::Config {
        name: "BENCH_FLOOR".into(),
        subjects: vec!["bench.floor.js".into()],
        storage: stream::StorageType::File,
        ..Default::default()
    };
    raw.js.create_stream(config).await?;
    let js = raw.js.clone();
    let publish_ack = p50(n, |_| {
        let (js, body) = (js.clone(), body.clone());
        async move {
            js.publish("bench.floor.js", body).await?.await?;
            Ok(())
        }
    })
    .await?;
    raw.js.delete_stream("BENCH_FLOOR").await?;

    let store = raw
        .js
        .create_key_value(kv::Config {
            bucket: "bench_floor".into(),
            storage: stream::StorageType::File,
            ..Default::default()
        })
        .await?;
    let kv_put = p50(n, |i| {
        let (store, body) = (store.clone(), body.clone());
        async move {
            store.put(format!("k{}", i % 64), body).await?;
            Ok(())
        }
    })
    .await?;
    raw.js.delete_key_value("bench_floor").await?;

    let objects = raw
        .js
        .create_object_store(object_store::Config {
            bucket: "bench_floor_obj".into(),
            storage: stream::StorageType::File,
            ..Default::default()
        })
        .await?;
    let object = vec![b'y'; 1024];
    let object_put = p50(n / 2, |i| {
        let (objects, object) = (objects.clone(), object.clone());
        async move {
            objects.put(format!("o{}", i % 64).as_str(), &mut object.as_slice()).await?;
            Ok(())
        }
    })
    .await?;
    raw.js.delete_object_store("bench_floor_obj").await?;

    Ok(Floor { request_reply, publish_ack, kv_put, object_put })
}
