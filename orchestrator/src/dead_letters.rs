//! Turns tasks that JetStream gave up on into failed reports, so the planner
//! never waits in silence. A task reaches `max_deliver` when every attempt
//! crashed its worker or was handed back; JetStream then publishes a
//! max-deliveries advisory. This module takes the task message from the
//! queue, stores it on the dead-letter subject with the reason, publishes a
//! `failed` report for it (unless one exists), with its `/reports/<task>.md`
//! file as a worker would have written it, and removes it from the queue.
//! The bus operations are the task queue's and the reports stream's
//! (shared/bus/src/tasks.rs, shared/bus/src/reports.rs).

use flotilla_bus::{Bus, GivenUp};
use flotilla_job_files::{JobFiles, report_path, unfinished_report};
use flotilla_protocol::{self as protocol, ErrorInfo, ErrorKind, TaskMessage, TaskReport, TaskStatus, Usage};
use futures::StreamExt;
use tokio_util::sync::CancellationToken;

/// Watches max-delivery advisories of the tasks stream until `shutdown`.
pub async fn watch(bus: Bus, files: JobFiles, shutdown: CancellationToken) {
    let given_up = match bus.tasks().given_up().await {
        Ok(s) => s,
        Err(e) => return tracing::error!(error = %e, "cannot watch max-delivery advisories"),
    };
    tokio::pin!(given_up);
    loop {
        let advisory = tokio::select! {
            a = given_up.next() => match a { Some(a) => a, None => return },
            _ = shutdown.cancelled() => return,
        };
        give_up(&bus, &files, advisory).await;
    }
}

async fn give_up(bus: &Bus, files: &JobFiles, advisory: GivenUp) {
    let queue = bus.tasks();
    let stored = match queue.stored(advisory.stream_seq).await {
        Ok(t) => t,
        Err(e) => return tracing::warn!(seq = advisory.stream_seq, error = %e, "given-up task no longer in the queue"),
    };
    let payload = stored.payload;
    let reason = format!(
        "task given up after {} deliveries: every attempt crashed its worker or was handed back",
        advisory.deliveries
    );
    match &stored.subagent_type {
        Some(ty) => bus.dead_letter_task(ty, payload.clone(), &reason).await,
        None => bus.dead_letter("task", payload.clone(), &reason).await,
    }
    if let Ok(task) = protocol::decode::<TaskMessage>(&payload) {
        let reports = bus.reports();
        if reports.stored(&task.tenant, &task.job_id, &task.subagent_type, &task.task_id).await.is_none() {
            let report = failed_report(&task, &reason, advisory.deliveries as u32);
            // The file first, so a planner that reads it on the report finds it.
            let error = report.error.as_ref().expect("a failed report has an error");
            let text = unfinished_report(&task.task_id, "failed", error);
            if let Err(e) = files.write_reserved(&task.job_id, &report_path(&task.task_id), text.as_bytes()).await {
                tracing::warn!(task_id = %task.task_id, error = %e, "report of a given-up task not stored in job files");
            }
            if let Err(e) = reports.publish(&task.tenant, &report, task.traceparent.as_deref()).await {
                tracing::error!(task_id = %task.task_id, error = %e, "failed report for a given-up task not stored");
                return;
            }
        }
        tracing::warn!(task_id = %task.task_id, job_id = %task.job_id, %reason, "task dead-lettered");
    }
    if let Err(e) = queue.remove(advisory.stream_seq).await {
        tracing::warn!(seq = advisory.stream_seq, error = %e, "given-up task not removed from the queue");
    }
}

/// The `failed` report the orchestrator writes for `task` on its workers' behalf.
fn failed_report(task: &TaskMessage, reason: &str, attempt: u32) -> TaskReport {
    let now = protocol::now();
    TaskReport {
        v: protocol::REPORT_VERSION,
        job_id: task.job_id,
        task_id: task.task_id,
        subagent_type: task.subagent_type.clone(),
        status: TaskStatus::Failed,
        summary: String::new(),
        summary_file: None,
        error: Some(ErrorInfo::new(ErrorKind::Transient, reason.to_string())),
        usage: Usage::default(),
        worker_id: "orchestrator".into(),
        attempt,
        resumed_from_step: None,
        started_at: now,
        finished_at: now,
        duration_ms: 0,
    }
}
