//! A task's stream (`SendStreamingMessage`, `SubscribeToTask`, and what a
//! webhook receives): the task as it stands, then one update per job event
//! from the events stream (the same reader as `flotilla watch` and the
//! dashboard's SSE, `flotilla_client::events`), until the job ends: its
//! artifacts, then the final status.
//!
//! | job event | update |
//! |---|---|
//! | `running` | status `WORKING` |
//! | `task_dispatched`, `task_reported` | status `WORKING` with a line on the task |
//! | progress `approval_requested` (still open) | status `INPUT_REQUIRED` with the question |
//! | progress `approval_resolved` | status `WORKING` |
//! | `completed` | artifacts (answer, reports), then status `COMPLETED` |
//! | `failed`, `cancelled` | status `FAILED` / `CANCELED` with the reason |
//!
//! The stream stays open through an input-required state: the job goes on
//! once anyone answers (this client, the dashboard, `flotilla approve`).

use flotilla_client::{Client, EndWatch, Event, Scope};
use flotilla_protocol::ids::JobId;
use flotilla_protocol::{JobEventKind, ProgressKind};
use futures::Stream;
use time::format_description::well_known::Rfc3339;

use super::tasks;
use crate::wire::*;

/// Updates queued ahead of a slow reader before the producer waits.
const BUFFER: usize = 64;

/// The stream of task `first` (job `job`, of `client`'s tenant). It ends
/// after the final status, or when the reader goes away.
pub(crate) fn updates(
    client: Client,
    job: JobId,
    first: Task,
    base: String,
) -> impl Stream<Item = StreamResponse> + Send + 'static {
    let (tx, rx) = tokio::sync::mpsc::channel(BUFFER);
    tokio::spawn(async move {
        let ended = first.status.state.is_terminal();
        if tx.send(StreamResponse::Task(first)).await.is_err() || ended {
            return;
        }
        if let Err(e) = produce(&client, job, &base, &tx).await {
            tracing::debug!(%job, error = %e, "an A2A stream ended early");
        }
    });
    futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|item| (item, rx)) })
}

fn status(job: &str, state: TaskState, message: Option<Message>) -> StreamResponse {
    let now = time::OffsetDateTime::now_utc().format(&Rfc3339).unwrap_or_default();
    StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
        task_id: job.into(),
        context_id: job.into(),
        status: TaskStatus { state, message, timestamp: Some(now) },
        metadata: None,
    })
}

type Tx = tokio::sync::mpsc::Sender<StreamResponse>;

async fn produce(client: &Client, job: JobId, base: &str, tx: &Tx) -> anyhow::Result<()> {
    let id = job.to_string();
    let scope = Scope::Job(client.tenant().clone(), job);
    let mut events = Box::pin(client.follow(scope, true).await?);
    let mut watch = EndWatch::new(client, job, true);
    let send = |item: StreamResponse| async move { tx.send(item).await.map_err(|_| anyhow::anyhow!("reader gone")) };
    while let Some(ev) = watch.next(&mut events).await? {
        let update = match ev {
            Event::Job(e) => match e.kind {
                JobEventKind::Running => Some(status(&id, TaskState::Working, None)),
                JobEventKind::TaskDispatched { task_id, subagent_type, description } => {
                    let line = format!("task {task_id} ({subagent_type}) dispatched: {}", first_line(&description));
                    Some(status(&id, TaskState::Working, Some(Message::agent_text(&id, &id, line))))
                }
                JobEventKind::TaskReported { task_id, status: s, summary } => {
                    let line = format!("task {task_id} {}: {}", s.as_str(), first_line(&summary));
                    Some(status(&id, TaskState::Working, Some(Message::agent_text(&id, &id, line))))
                }
                kind if kind.is_terminal() => return finish(client, job, base, tx).await,
                _ => None,
            },
            Event::Progress(p) => match p.kind {
                ProgressKind::ApprovalRequested { .. } => {
                    let open = client.approvals(Some(job)).await?.approvals;
                    open.first().map(|a| status(&id, TaskState::InputRequired, Some(tasks::question(&id, a))))
                }
                ProgressKind::ApprovalResolved { .. } => Some(status(&id, TaskState::Working, None)),
                _ => None,
            },
        };
        if let Some(u) = update {
            send(u).await?;
        }
    }
    // The job ended without its terminal event reaching this follower.
    finish(client, job, base, tx).await
}

/// The artifacts of the ended job, then its final status.
async fn finish(client: &Client, job: JobId, base: &str, tx: &Tx) -> anyhow::Result<()> {
    let task = tasks::current(client, job, base, None).await.map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let id = job.to_string();
    for artifact in task.artifacts {
        let update = TaskArtifactUpdateEvent {
            task_id: id.clone(),
            context_id: id.clone(),
            artifact,
            append: false,
            last_chunk: true,
            metadata: None,
        };
        tx.send(StreamResponse::ArtifactUpdate(update)).await?;
    }
    let final_status = StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
        task_id: id.clone(),
        context_id: id,
        status: task.status,
        metadata: None,
    });
    tx.send(final_status).await?;
    Ok(())
}

fn first_line(s: &str) -> String {
    let line = s.lines().next().unwrap_or_default();
    if line.chars().count() > 200 { format!("{}…", line.chars().take(200).collect::<String>()) } else { line.into() }
}
