//! A running task's inbox: the follow-up messages the planner sends with
//! `message_task` (orchestrator/src/planner/async_tasks/tools.rs), read from
//! the `<prefix>_MESSAGES` stream (shared/bus/src/task_messages.rs) from the
//! task's first message on, so one sent while the task was still queued is
//! not lost and a redelivered attempt sees them all again. The agent loop
//! takes them before each model call as user messages
//! (shared/agent/src/agent.rs, `Inbox`).
//!
//! Most tasks never get one, and a consumer per task would cost every task
//! two JetStream API calls (create, delete) on its path. So each subagent
//! type's [`Inboxes`] follows the messages of all its tasks once, from the
//! worker's start, and hands each to the running task it names; a task that
//! starts registers first, then looks up (one direct get) whether a message
//! was stored before, and only then replays its own from the start instead
//! (a message the follower handed over in between is taken once, by id). A
//! redelivered attempt that took messages before replays at once. Only a
//! task the planner started with `start_task` can get messages: the
//! dispatcher marks the others (`FollowUps::None`, shared/bus/src/tasks.rs),
//! whose inbox is empty, with no look-up and no route.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, OnceLock};

use dashmap::DashMap;
use flotilla_agent::agent::{Inbox, MessageInbox};
use flotilla_bus::{Bus, FollowUps};
use flotilla_protocol::ids::{SubagentType, TaskId};
use flotilla_protocol::{FollowUp, TaskMessage};
use futures::{Stream, StreamExt};
use tokio_util::task::AbortOnDropHandle;

/// The first line of a follow-up as the subagent reads it.
pub const HEADER: &str = "[message from the planner]";

/// The follow-up messages of one subagent type's running tasks.
pub struct Inboxes {
    ty: SubagentType,
    /// The running tasks, with the subject their messages are stored on.
    routes: Arc<DashMap<TaskId, (String, Feed)>>,
    /// Follows the type's messages once started; unset (every task replays
    /// its own) when that could not be.
    follow: OnceLock<AbortOnDropHandle<()>>,
}

impl Inboxes {
    /// The inboxes of `ty`'s tasks; [`Self::start`] follows their messages.
    pub fn new(ty: SubagentType) -> Self {
        Self { ty, routes: Default::default(), follow: OnceLock::new() }
    }

    /// Follows every message to `ty`'s tasks stored from now on. Without
    /// (a role that may not, a stream without direct gets) each task
    /// replays its own messages, as it does when one was stored before it
    /// started.
    pub async fn start(&self, bus: &Bus) {
        let messages = match bus.task_messages().follow_type(&self.ty).await {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(ty = %self.ty, error = %e, "follow-up messages followed per task");
                return;
            }
        };
        let (routes, ty) = (self.routes.clone(), self.ty.clone());
        let follow = tokio::spawn(async move {
            let mut messages = std::pin::pin!(messages);
            while let Some((subject, m)) = messages.next().await {
                let Some(route) = routes.get(&m.task_id) else { continue };
                let (expected, feed) = route.value();
                match m.check(&m.task_id, &ty) {
                    Ok(()) if &subject == expected => feed.push(&m),
                    Ok(()) => {
                        tracing::warn!(%subject, task = %m.task_id, "follow-up on another task's subject ignored")
                    }
                    Err(e) => tracing::warn!(task = %m.task_id, error = %e, "follow-up message ignored"),
                }
            }
        });
        let _ = self.follow.set(AbortOnDropHandle::new(follow));
    }

    /// The inbox of `task`, past the first `taken` messages (an earlier
    /// attempt's subagent read those: they are in its journaled
    /// conversation, workers/src/journal.rs); an empty one, neither looked
    /// up nor followed, when its dispatcher said no follow-up can come
    /// (`FollowUps::None`: a `task` or `map_tasks` task). A stream that
    /// cannot be read leaves the task without follow-ups (logged), never
    /// fails it.
    pub async fn open(&self, bus: &Bus, task: &TaskMessage, follow_ups: FollowUps, taken: u64) -> TaskInbox {
        let feed = Feed::default();
        let mut inbox = TaskInbox { feed: feed.clone(), _registration: None, _follow: None };
        if follow_ups == FollowUps::None {
            return inbox;
        }
        let messages = bus.task_messages();
        let (tenant, job, ty, id) = (&task.tenant, &task.job_id, &task.subagent_type, &task.task_id);
        let mut last = None;
        // An attempt that took messages before replays them all (they
        // exist), and only the replay knows which it skips.
        if self.follow.get().is_some() && taken == 0 {
            let subject = bus.subjects.task_message(tenant, job, ty, id);
            self.routes.insert(task.task_id, (subject, feed.clone()));
            let registration = Registration { routes: self.routes.clone(), task: task.task_id };
            match messages.last_for(tenant, job, ty, id).await {
                Ok(None) => {
                    inbox._registration = Some(registration);
                    return inbox;
                }
                // The replay follows new messages too; one the type's
                // follower handed over meanwhile is taken once, by id.
                Ok(found) => last = found,
                Err(e) => tracing::debug!(error = %e, "follow-up messages not looked up; replayed"),
            }
        }
        let opening = std::time::Instant::now();
        match messages.follow(tenant, job, ty, task.task_id).await {
            Ok(replay) => {
                let (follow, mut through) = feed.replay(replay, taken);
                inbox._follow = Some(follow);
                // The first model call reads every message stored before the start.
                if let Some(last) = last {
                    let caught_up = through.wait_for(|seq| *seq >= last);
                    if tokio::time::timeout(REPLAY_WAIT, caught_up).await.is_err() {
                        tracing::warn!(last, "follow-up replay slow; the subagent starts without waiting for it");
                    }
                }
                tracing::debug!(ms = opening.elapsed().as_millis() as u64, "follow-up inbox opened");
            }
            Err(e) => tracing::warn!(error = %e, "follow-up messages of the task cannot be read; it runs without them"),
        }
        inbox
    }
}

/// How long a starting task waits for the replay of the messages stored
/// before it (a last message that does not decode is never delivered).
const REPLAY_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// One task's inbox, fed for as long as it is held.
pub struct TaskInbox {
    feed: Feed,
    _registration: Option<Registration>,
    _follow: Option<AbortOnDropHandle<()>>,
}

impl TaskInbox {
    /// What the agent loop reads (`RunContext::inbox`).
    pub fn inbox(&self) -> Arc<dyn Inbox> {
        self.feed.inbox.clone()
    }
}

/// Where one task's messages go, each once.
#[derive(Clone, Default)]
struct Feed {
    inbox: Arc<MessageInbox>,
    taken: Arc<Mutex<HashSet<String>>>,
}

impl Feed {
    fn push(&self, m: &FollowUp) {
        if !self.taken.lock().expect("follow-up ids").insert(m.id.clone()) {
            return;
        }
        tracing::info!(message_id = %m.id, bytes = m.text.len(), "follow-up message received");
        self.inbox.push(format!("{HEADER}\n{}", m.text));
    }

    /// Feeds a task's replayed `messages` in past the first `taken`, until
    /// dropped; the receiver says up to which stream sequence it got.
    fn replay(
        &self,
        messages: impl Stream<Item = (u64, FollowUp)> + Send + 'static,
        taken: u64,
    ) -> (AbortOnDropHandle<()>, tokio::sync::watch::Receiver<u64>) {
        let (through, seen) = tokio::sync::watch::channel(0);
        let feed = self.clone();
        let follow = tokio::spawn(async move {
            let mut messages = std::pin::pin!(messages);
            let mut n = 0;
            while let Some((seq, m)) = messages.next().await {
                n += 1;
                if n > taken {
                    feed.push(&m);
                }
                through.send_replace(seq);
            }
        });
        (AbortOnDropHandle::new(follow), seen)
    }
}

/// Takes a task off its type's routes when its inbox is dropped.
struct Registration {
    routes: Arc<DashMap<TaskId, (String, Feed)>>,
    task: TaskId,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.routes.remove(&self.task);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_protocol::ids::{JobId, TaskId};

    #[tokio::test]
    async fn messages_reach_the_agent_once_each_in_order_with_a_header_past_those_taken() {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<(u64, FollowUp)>();
        let feed = Feed::default();
        // The first replayed message was taken by an earlier attempt.
        let (_follow, mut through) = feed.replay(tokio_stream_of(rx), 1);
        let inbox = TaskInbox { feed: feed.clone(), _registration: None, _follow: None };
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
        tx.send((1, msg("m0", "taken before"))).unwrap();
        tx.send((2, msg("m1", "also cover Q3"))).unwrap();
        // The same message from the type's follower and the task's replay.
        feed.push(&msg("m1", "also cover Q3"));
        tx.send((3, msg("m1", "also cover Q3"))).unwrap();
        tx.send((4, msg("m2", "in euros"))).unwrap();
        through.wait_for(|seq| *seq >= 4).await.unwrap();
        let agent_side = inbox.inbox();
        let mut taken = Vec::new();
        while taken.len() < 2 {
            taken.extend(agent_side.take());
            tokio::task::yield_now().await;
        }
        assert_eq!(taken, [format!("{HEADER}\nalso cover Q3"), format!("{HEADER}\nin euros")]);
        assert!(agent_side.take().is_empty(), "each message is taken once");
    }

    fn tokio_stream_of<T>(mut rx: tokio::sync::mpsc::UnboundedReceiver<T>) -> impl Stream<Item = T> {
        futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
    }
}
