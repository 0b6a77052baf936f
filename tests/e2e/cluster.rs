//! A 3-node JetStream cluster on loopback ports, from the node configs of
//! `deploy/nats/cluster/` (with the roles of `deploy/nats/roles.conf`):
//! streams and buckets get 3 replicas (`[nats] replicas = 3`), workers connect
//! to different nodes, and killing a node in the middle of a job does not stop
//! the job from completing.

use std::time::Duration;

use flotilla_bus::Bus;
use flotilla_config::NatsConfig;
use flotilla_protocol::JobStatus;
use flotilla_protocol::ids::Tenant;
use flotilla_testkit::nats_conf::{ConfiguredNats, deploy_dir};
use flotilla_testkit::{Proc, free_port};

use crate::security::{JOB, config, connect_as, finished, refs, role_env, submit};

async fn cluster() -> Vec<ConfiguredNats> {
    let ports: Vec<(u16, u16)> = (0..3).map(|_| (free_port(), free_port())).collect();
    let routes = ports.iter().map(|(_, c)| format!("nats://127.0.0.1:{c}")).collect::<Vec<_>>().join(",");
    let mut nodes = Vec::new();
    for (i, (port, cport)) in ports.iter().enumerate() {
        let n = i + 1;
        let conf = deploy_dir().join(format!("nats/cluster/nats-{n}.conf"));
        let extra = vec![
            "--server_name".to_string(),
            format!("test-nats-{n}"),
            "--cluster_name".into(),
            "flotilla-test".into(),
            "--cluster".into(),
            format!("nats://127.0.0.1:{cport}"),
            "--routes".into(),
            routes.clone(),
        ];
        nodes.push(ConfiguredNats::start_node(&format!("nats-{n}"), &conf, *port, *cport, &extra).await);
    }
    nodes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_survives_losing_a_cluster_node() {
    let started = std::time::Instant::now();
    let mut nodes = cluster().await;
    let all_urls = nodes.iter().map(|n| n.url()).collect::<Vec<_>>().join(",");

    // Declare the topology with 3 replicas once the cluster has a JetStream leader.
    let admin = NatsConfig {
        url: nodes[0].url_as("orchestrator"),
        inbox_prefix: "_INBOX.orchestrator".into(),
        replicas: 3,
        ..Default::default()
    };
    let bus = Bus::connect(&admin, "test admin", Duration::from_secs(10)).await.expect("connect");
    flotilla_testkit::eventually(Duration::from_secs(150), "the cluster to accept R3 streams", || {
        let bus = bus.clone();
        async move { bus.ensure_topology().await.ok() }
    })
    .await;
    let raw = flotilla_testkit::RawNats::connect(&admin).await;
    let tasks = raw.js.get_stream(bus.subjects.tasks_stream()).await.expect("tasks stream").cached_info().clone();
    assert_eq!(tasks.config.num_replicas, 3);
    assert_eq!(tasks.cluster.as_ref().map(|c| c.replicas.len()), Some(2), "a leader and two replicas");
    drop((bus, raw));
    eprintln!("cluster up with R3 topology after {:?}", started.elapsed());

    // Orchestrator knows every node; each worker is pinned to its own node.
    // Model calls are slow (1.5 s) so that one worker, one task at a time,
    // cannot finish the job before the other's first pull reaches the
    // consumer's leader, even on a loaded machine.
    let cfg = config(&all_urls);
    let mut slow = cfg;
    slow.script("finance.toml", &format!("latency_ms = 1500\n{}", crate::security::FINANCE));
    // One task at a time per worker (the default is 4): one worker alone
    // could otherwise take all three tasks at once.
    slow.section_replace("tools = [\"calculate_margin\"]", "tools = [\"calculate_margin\"]\nconcurrency = 1");
    let path = slow.write().display().to_string();
    let mut orch_env = role_env("orchestrator");
    orch_env.push(("FLOTILLA_NATS__REPLICAS".into(), "3".into()));
    let _orch = Proc::spawn("orchestrator", "flotilla", &["orchestrator", "--config", &path], &refs(&orch_env));
    let mut workers = Vec::new();
    for (id, node) in [("w-node1", &nodes[0]), ("w-node2", &nodes[1])] {
        let mut e = role_env("worker-finance");
        e.push(("FLOTILLA_NATS__URL".into(), node.url()));
        e.push(("FLOTILLA_SUBAGENTS__FINANCE__CONCURRENCY".into(), "1".into()));
        workers.push(Proc::spawn(
            id,
            "flotilla-worker",
            &["--config", &path, "--id", id, "--types", "finance", "--grace", "1"],
            &refs(&e),
        ));
    }

    // Both workers (one per node) are serving before the job starts, so both get tasks.
    let admin = connect_as(&nodes[0], "orchestrator").await;
    flotilla_testkit::eventually(Duration::from_secs(120), "both workers' heartbeats", || {
        let admin = admin.clone();
        async move { (admin.live_workers().await.ok()?.len() >= 2).then_some(()) }
    })
    .await;
    let acme = Tenant::new("acme").unwrap();
    let client = connect_as(&nodes[0], "client-acme").await;
    let job = submit(&client, &acme, JOB).await;
    // Mid-job: once the first task has a report and the others are still running or queued.
    flotilla_testkit::eventually(Duration::from_secs(120), "the first task report", || {
        let client = client.clone();
        let acme = acme.clone();
        async move {
            let r = crate::security::status(&client, &acme, job).await.ok()?;
            let done = r.tasks.iter().filter(|t| t.status.is_some()).count();
            (r.tasks.len() == 3 && (1..3).contains(&done)).then_some(())
        }
    })
    .await;
    eprintln!("killing nats-3 mid-job after {:?}", started.elapsed());
    nodes[2].kill();

    let rec = finished(&client, &acme, job).await;
    eprintln!("job finished after {:?}", started.elapsed());
    assert_eq!(rec.status, JobStatus::Completed, "{rec:#?}");
    let answer = rec.answer.unwrap_or_default();
    assert!(answer.contains("0.375") && answer.contains("0.24") && answer.contains("0.75"), "{answer}");
    let ran_on: std::collections::BTreeSet<_> = rec.tasks.iter().filter_map(|t| t.worker_id.clone()).collect();
    assert_eq!(ran_on.len(), 2, "both workers, on two nodes, ran tasks: {ran_on:?}");
}
