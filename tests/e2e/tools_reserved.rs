//! The reserved `/large_tool_results` directory over a real
//! nats-server's Object Store (docs/TOOLS.md, "Reserved directory and
//! checksums"): agents cannot write there, and a stored report whose bytes
//! are replaced under the same name, straight in the bucket, is detected by
//! every reader instead of being used.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::object_store::ObjectMetadata;
use flotilla_agent::tool::ToolContext;
use flotilla_bus::Bus;
use flotilla_config::permissions::{Mode, Permissions};
use flotilla_config::{FilesConfig, NatsConfig};
use flotilla_job_files::{FileError, FilePath};
use flotilla_protocol::ErrorKind;
use flotilla_protocol::ids::{JobId, TaskId};
use flotilla_testkit::NatsServer;
use flotilla_tools::{self as builtin, FileToolEnv};
use futures::StreamExt;
use serde_json::json;
use tokio_util::sync::CancellationToken;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reserved_reports_refuse_writes_and_detect_tampering() {
    let nats = NatsServer::start().await;
    let bus = Bus::connect(&NatsConfig { url: nats.url(), ..Default::default() }, "reserved", Duration::from_secs(10))
        .await
        .expect("connect");
    let config = FilesConfig { max_file_bytes: 1 << 20, ..Default::default() };
    let files = bus.job_files(&config).await.expect("files bucket");
    let job = JobId::new();
    let c = ToolContext {
        job_id: job,
        task_id: Some(TaskId::new()),
        tenant: Default::default(),
        call_id: "call_1".into(),
        idempotency_key: "k".into(),
        traceparent: None,
        cancel: CancellationToken::new(),
        approvals: None,
    };
    let env =
        Arc::new(FileToolEnv { files: files.clone(), permissions: Permissions::compile(&[], Mode::Allow).unwrap() });
    let write = builtin::tool("write_file", &env).unwrap();
    let read = builtin::tool("read_file", &env).unwrap();

    // An agent cannot write into the reserved directory.
    let e = write.call(&c, json!({"path": "/large_tool_results/x", "content": "forged"})).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Permission, "{e:?}");
    assert!(e.message.contains("/large_tool_results"), "{e:?}");

    // The runtime's report, read back by reference, verifies.
    let path = FilePath::parse("/large_tool_results/t1/report").unwrap();
    let answer = "the real answer\n".repeat(100);
    files.write_reserved(&job, &path, answer.as_bytes()).await.unwrap();
    let reference = flotilla_protocol::digest::describe_file(path.as_str(), &answer);
    assert_eq!(files.read_by_ref(&job, &reference).await.unwrap(), answer.as_bytes());

    // Someone with raw bucket access replaces the bytes, keeping the metadata.
    let store = bus.files(Duration::from_secs(config.max_age)).await.unwrap();
    let mut list = store.list().await.unwrap();
    let mut target = None;
    while let Some(info) = list.next().await {
        let info = info.unwrap();
        if info.name.starts_with(&format!("{job}/")) && info.metadata.contains_key("flotilla-sha256") {
            target = Some(info);
        }
    }
    let info = target.expect("the report object");
    let meta = ObjectMetadata { name: info.name.clone(), metadata: info.metadata.clone(), ..Default::default() };
    store.put(meta, &mut "the forged answer\n".as_bytes()).await.unwrap();

    let e = files.read_by_ref(&job, &reference).await.unwrap_err();
    assert!(matches!(e, FileError::Tampered { .. }), "{e}");
    let e = read.call(&c, json!({"path": path.as_str()})).await.unwrap_err();
    assert!(e.message.contains("integrity check"), "{e:?}");
}
