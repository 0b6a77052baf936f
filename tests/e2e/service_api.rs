//! Workers answer the standard NATS service API, so any NATS
//! tool discovers the fleet (`$SRV.PING|INFO|STATS`), also under the
//! least-privilege worker role of deploy/nats/roles.conf.

use std::collections::BTreeSet;
use std::time::Duration;

use flotilla_testkit::TestConfig;
use futures::StreamExt;
use serde_json::Value;

use flotilla_testkit::{Deployment, TIMEOUT};

/// Sends one request on `subject` and collects replies until `n` came in.
async fn replies(client: &async_nats::Client, subject: &str, n: usize) -> Vec<Value> {
    let inbox = client.new_inbox();
    let mut sub = client.subscribe(inbox.clone()).await.unwrap();
    client.publish_with_reply(subject.to_string(), inbox, "".into()).await.unwrap();
    let mut out = Vec::new();
    while out.len() < n {
        let msg = tokio::time::timeout(TIMEOUT, sub.next()).await.expect("a reply in time").unwrap();
        out.push(serde_json::from_slice(&msg.payload).unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_answer_srv_ping_info_and_stats_until_they_stop() {
    let mut d = Deployment::start(2, |url| TestConfig::demo(url, 2, 0)).await;
    let client = &d.raw.client;
    // Workers announce themselves once connected; wait until both answer.
    let pings = flotilla_testkit::eventually(TIMEOUT, "both workers to answer $SRV.PING", || async {
        let inbox = client.new_inbox();
        let mut sub = client.subscribe(inbox.clone()).await.ok()?;
        client.publish_with_reply("$SRV.PING.flotilla-worker", inbox, "".into()).await.ok()?;
        let mut ids = BTreeSet::new();
        while ids.len() < 2 {
            let msg = tokio::time::timeout(Duration::from_secs(2), sub.next()).await.ok()??;
            let v: Value = serde_json::from_slice(&msg.payload).ok()?;
            ids.insert(v["metadata"]["worker_id"].as_str()?.to_string());
        }
        Some(ids)
    })
    .await;
    assert_eq!(pings, BTreeSet::from(["w1".to_string(), "w2".to_string()]));

    let infos = replies(client, "$SRV.INFO.flotilla-worker", 2).await;
    for info in &infos {
        assert_eq!(info["type"], "io.nats.micro.v1.info_response");
        assert_eq!(info["name"], "flotilla-worker");
        assert_eq!(info["version"], env!("CARGO_PKG_VERSION"));
        assert_eq!(info["metadata"]["types"], "finance");
    }
    let stats = replies(client, "$SRV.STATS.flotilla-worker", 2).await;
    assert!(stats.iter().all(|s| s["type"] == "io.nats.micro.v1.stats_response"), "{stats:?}");

    // A stopped worker leaves the service: only w2 answers a ping now.
    assert_eq!(d.workers.remove(0).terminate(), Some(0));
    let after = replies(client, "$SRV.PING.flotilla-worker", 1).await;
    assert_eq!(after[0]["metadata"]["worker_id"], "w2");
}
