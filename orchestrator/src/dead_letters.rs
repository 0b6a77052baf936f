//! Turns tasks that JetStream gave up on into failed reports, so the planner
//! never waits in silence. A task reaches `max_deliver` when every attempt
//! crashed its worker or was handed back; JetStream then publishes a
//! max-deliveries advisory. This module takes the task message from the
//! stream, stores it on the dead-letter subject with the reason, publishes a
//! `failed` report for it (unless one exists) and removes it from the queue.

use flotilla_bus::Bus;
use flotilla_protocol::{self as protocol, ErrorInfo, ErrorKind, TaskMessage, TaskReport, TaskStatus, Usage};
use futures::StreamExt;
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

/// The fields of `io.nats.jetstream.advisory.v1.max_deliver` we use.
#[derive(Deserialize)]
struct MaxDeliverAdvisory {
    stream_seq: u64,
    deliveries: u64,
}

/// Watches max-delivery advisories of the tasks stream until `shutdown`.
pub async fn watch(bus: Bus, shutdown: CancellationToken) {
    let subject = bus.subjects.max_deliveries_advisory();
    let mut sub = match bus.client.subscribe(subject.clone()).await {
        Ok(s) => s,
        Err(e) => return tracing::error!(%subject, error = %e, "cannot watch max-delivery advisories"),
    };
    loop {
        let msg = tokio::select! {
            m = sub.next() => match m { Some(m) => m, None => return },
            _ = shutdown.cancelled() => return,
        };
        match serde_json::from_slice::<MaxDeliverAdvisory>(&msg.payload) {
            Ok(a) => give_up(&bus, a).await,
            Err(e) => tracing::warn!(error = %e, "unreadable max-delivery advisory"),
        }
    }
}

async fn give_up(bus: &Bus, advisory: MaxDeliverAdvisory) {
    let Ok(stream) = bus.js.get_stream(bus.subjects.tasks_stream()).await else { return };
    let raw = match stream.get_raw_message(advisory.stream_seq).await {
        Ok(m) => m,
        Err(e) => return tracing::warn!(seq = advisory.stream_seq, error = %e, "given-up task no longer in the queue"),
    };
    let reason = format!(
        "task given up after {} deliveries: every attempt crashed its worker or was handed back",
        advisory.deliveries
    );
    bus.dead_letter("task", raw.payload.clone(), &reason).await;
    if let Ok(task) = protocol::decode::<TaskMessage>(&raw.payload) {
        let report_subject = bus.subjects.report(&task.tenant, &task.job_id, &task.task_id);
        let already = stream_has(bus, &report_subject).await;
        if !already {
            let now = protocol::now();
            let report = TaskReport {
                v: protocol::SCHEMA_VERSION,
                job_id: task.job_id,
                task_id: task.task_id,
                subagent_type: task.subagent_type.clone(),
                status: TaskStatus::Failed,
                summary: String::new(),
                summary_file: None,
                error: Some(ErrorInfo::new(ErrorKind::Transient, reason.clone())),
                usage: Usage::default(),
                worker_id: "orchestrator".into(),
                attempt: advisory.deliveries as u32,
                started_at: now,
                finished_at: now,
                duration_ms: 0,
            };
            let msg_id = format!("report:{}", task.task_id);
            if let Err(e) =
                bus.publish_durable(report_subject, &report, Some(&msg_id), task.traceparent.as_deref()).await
            {
                tracing::error!(task_id = %task.task_id, error = %e, "failed report for a given-up task not stored");
                return;
            }
        }
        tracing::warn!(task_id = %task.task_id, job_id = %task.job_id, %reason, "task dead-lettered");
    }
    if let Err(e) = stream.delete_message(advisory.stream_seq).await {
        tracing::warn!(seq = advisory.stream_seq, error = %e, "given-up task not removed from the queue");
    }
}

async fn stream_has(bus: &Bus, subject: &str) -> bool {
    match bus.js.get_stream(bus.subjects.reports_stream()).await {
        Ok(s) => s.get_last_raw_message_by_subject(subject).await.is_ok(),
        Err(_) => false,
    }
}
