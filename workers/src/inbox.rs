//! A running task's inbox: the follow-up messages the planner sends with
//! `message_task` (orchestrator/src/planner/async_tasks/tools.rs), read from
//! the `<prefix>_MESSAGES` stream (shared/bus/src/task_messages.rs) from the
//! task's first message on, so one sent while the task was still queued is
//! not lost and a redelivered attempt sees them all again. The agent loop
//! takes them before each model call as user messages
//! (shared/agent/src/agent.rs, `Inbox`).

use std::sync::Arc;

use flotilla_agent::agent::{Inbox, MessageInbox};
use flotilla_bus::Bus;
use flotilla_protocol::{FollowUp, TaskMessage};
use futures::{Stream, StreamExt};
use tokio_util::task::AbortOnDropHandle;

/// The first line of a follow-up as the subagent reads it.
pub const HEADER: &str = "[message from the planner]";

/// Follows one task's messages for as long as it is held.
pub struct TaskInbox {
    inbox: Arc<MessageInbox>,
    _follow: AbortOnDropHandle<()>,
}

impl TaskInbox {
    /// Starts following `task`'s messages, past the first `taken` (an
    /// earlier attempt's subagent read those: they are in its journaled
    /// conversation, workers/src/journal.rs). A stream that cannot be read
    /// leaves the task without follow-ups (logged), never fails it.
    pub async fn open(bus: &Bus, task: &TaskMessage, taken: u64) -> Self {
        let opening = std::time::Instant::now();
        match bus.task_messages().follow(&task.tenant, &task.job_id, &task.subagent_type, task.task_id).await {
            Ok(messages) => {
                tracing::debug!(ms = opening.elapsed().as_millis() as u64, "follow-up inbox opened");
                Self::over(messages.skip(taken as usize))
            }
            Err(e) => {
                tracing::warn!(error = %e, "follow-up messages of the task cannot be read; it runs without them");
                Self::over(futures::stream::empty())
            }
        }
    }

    /// An inbox fed by `messages`.
    fn over(messages: impl Stream<Item = FollowUp> + Send + 'static) -> Self {
        let inbox = Arc::new(MessageInbox::default());
        let feed = inbox.clone();
        let follow = tokio::spawn(async move {
            let mut messages = std::pin::pin!(messages);
            while let Some(m) = messages.next().await {
                tracing::info!(message_id = %m.id, bytes = m.text.len(), "follow-up message received");
                feed.push(format!("{HEADER}\n{}", m.text));
            }
        });
        Self { inbox, _follow: AbortOnDropHandle::new(follow) }
    }

    /// What the agent loop reads (`RunContext::inbox`).
    pub fn inbox(&self) -> Arc<dyn Inbox> {
        self.inbox.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_protocol::ids::{JobId, TaskId};

    #[tokio::test]
    async fn messages_reach_the_agent_once_each_in_order_with_a_header() {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<FollowUp>();
        let inbox = TaskInbox::over(tokio_stream_of(rx));
        let (job_id, task_id) = (JobId::new(), TaskId::new());
        let msg = |id: &str, text: &str| FollowUp {
            v: 1,
            id: id.into(),
            job_id,
            task_id,
            subagent_type: flotilla_protocol::ids::SubagentType::new("finance").unwrap(),
            text: text.into(),
            sent_at: flotilla_protocol::now(),
        };
        tx.send(msg("m1", "also cover Q3")).unwrap();
        tx.send(msg("m2", "in euros")).unwrap();
        let agent_side = inbox.inbox();
        let mut taken = Vec::new();
        while taken.len() < 2 {
            taken.extend(agent_side.take());
            tokio::task::yield_now().await;
        }
        assert_eq!(taken, [format!("{HEADER}\nalso cover Q3"), format!("{HEADER}\nin euros")]);
        assert!(agent_side.take().is_empty(), "each message is taken once");
    }

    fn tokio_stream_of(mut rx: tokio::sync::mpsc::UnboundedReceiver<FollowUp>) -> impl Stream<Item = FollowUp> {
        futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
    }
}
