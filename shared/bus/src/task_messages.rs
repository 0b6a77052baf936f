//! The follow-up messages stream (`<prefix>_MESSAGES`, limits retention, 7
//! days): instructions the planner sends to a running task with
//! `message_task` (orchestrator/src/planner/async_tasks.rs), on
//! `<prefix>.job.<tenant>.<job>.message.<type>.<task>`. A stream, not core NATS: a
//! message sent before the worker subscribed (the task still queued, or just
//! pulled) is not lost, and a redelivered attempt replays every message from
//! the task's start (workers/src/inbox.rs). Contract: docs/PROTOCOL.md.
//!
//! Most tasks get no follow-up, so a worker does not open a consumer per
//! task: it follows its type's messages once ([`TaskMessages::follow_type`])
//! and checks, when a task starts, whether any was stored before
//! ([`TaskMessages::last_for`], one direct get); only then does the task
//! replay its own from the start ([`TaskMessages::follow`]).

use std::time::Duration;

use async_nats::jetstream::consumer::{DeliverPolicy, pull};
use async_nats::jetstream::stream;
use futures::{Stream, StreamExt};

use crate::{Bus, BusError};
use flotilla_protocol::ids::{JobId, SubagentType, TaskId, Tenant};
use flotilla_protocol::subjects::Subjects;
use flotilla_protocol::{self as protocol, FollowUp, MAX_MESSAGE_BYTES};

/// The name prefix of a worker's consumer on all of a type's messages
/// ([`TaskMessages::follow_type`]), `<prefix><type>-<uuid>`; a task's own
/// replay is `inbox-<uuid>`.
pub const MESSAGE_FOLLOWER_PREFIX: &str = "messages-";

/// How long follow-up messages are kept: as long as reports.
const RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);

/// The stream's configuration, declared with the rest of the topology
/// (`Bus::ensure_topology`, lib.rs).
pub(crate) fn stream_config(s: &Subjects) -> stream::Config {
    stream::Config {
        name: s.task_messages_stream(),
        subjects: vec![s.all_task_messages()],
        storage: stream::StorageType::File,
        max_age: RETENTION,
        duplicate_window: Duration::from_secs(120),
        max_message_size: MAX_MESSAGE_BYTES as i32,
        // `last_for`: a direct get whose subject names the task, so NATS
        // permissions scope it per type (deploy/nats/roles.conf).
        allow_direct: true,
        ..Default::default()
    }
}

/// The follow-up messages stream.
#[derive(Clone)]
pub struct TaskMessages {
    bus: Bus,
}

impl Bus {
    /// The follow-up messages stream.
    pub fn task_messages(&self) -> TaskMessages {
        TaskMessages { bus: self.clone() }
    }
}

impl TaskMessages {
    /// Stores `msg` for a task of `tenant` and waits for the stream's ack.
    /// `Nats-Msg-Id` is `message:<id>`: a replayed tool call is dropped.
    pub async fn publish(&self, tenant: &Tenant, msg: &FollowUp) -> Result<(), BusError> {
        let subject = self.bus.subjects.task_message(tenant, &msg.job_id, &msg.subagent_type, &msg.task_id);
        let id = format!("message:{}", msg.id);
        self.bus.publish_durable(subject, msg, Some(&id), None).await
    }

    /// The stream sequence of the last message stored for `task` of type
    /// `ty`, `None` when there is none (one direct get).
    pub async fn last_for(
        &self,
        tenant: &Tenant,
        job: &JobId,
        ty: &SubagentType,
        task: &TaskId,
    ) -> Result<Option<u64>, BusError> {
        use async_nats::jetstream::stream::DirectGetErrorKind;
        let name = self.bus.subjects.task_messages_stream();
        let stream = self.bus.js.get_stream_no_info(&name).await.map_err(|e| BusError::new("no messages stream", e))?;
        let subject = self.bus.subjects.task_message(tenant, job, ty, task);
        let api = format!("$JS.API.DIRECT.GET.{name}.{subject}");
        let get = async {
            match stream.direct_get_last_for_subject(subject.clone()).await {
                Ok(m) => Ok(Some(m.sequence)),
                Err(e) if e.kind() == DirectGetErrorKind::NotFound => Ok(None),
                Err(e) => Err(e),
            }
        };
        self.bus.guarded(format!("cannot look up messages on {subject}"), get, |d| d.subject == api).await
    }

    /// Every message stored from now on for any task of type `ty`, with the
    /// subject it was stored on (it names the tenant, job and task): an
    /// ordered consumer from the stream's last sequence when this is
    /// called, so every message stored after that is delivered, across
    /// reconnects too (the consumer is recreated from the last one it
    /// delivered, or from that start). Undecodable messages are skipped with
    /// a warning.
    pub async fn follow_type(
        &self,
        ty: &SubagentType,
    ) -> Result<impl Stream<Item = (String, FollowUp)> + use<>, BusError> {
        let stream = self.bus.subjects.task_messages_stream();
        let info = self.bus.js.get_stream(&stream).await.map_err(|e| BusError::new("no messages stream", e))?;
        let last = info.cached_info().state.last_sequence;
        let name = format!("{MESSAGE_FOLLOWER_PREFIX}{ty}-{}", uuid::Uuid::now_v7().simple());
        let api = format!("$JS.API.CONSUMER.CREATE.{stream}.{name}");
        let config = pull::OrderedConfig {
            name: Some(name),
            filter_subject: self.bus.subjects.task_messages_of_type(ty),
            deliver_policy: DeliverPolicy::ByStartSequence { start_sequence: last + 1 },
            ..Default::default()
        };
        let create = self.bus.js.create_consumer_on_stream(config, &stream);
        let consumer =
            self.bus.guarded("cannot follow follow-up messages", create, |d| d.subject.starts_with(&api)).await?;
        let messages = consumer.messages().await.map_err(|e| BusError::new("cannot follow follow-up messages", e))?;
        Ok(messages.filter_map(|m| async move {
            let m = m.map_err(|e| tracing::warn!(error = %e, "follow-up stream hiccup")).ok()?;
            match protocol::decode::<FollowUp>(&m.payload) {
                Ok(f) => Some((m.subject.to_string(), f)),
                Err(e) => {
                    tracing::warn!(subject = %m.subject, error = %e, "follow-up message ignored");
                    None
                }
            }
        }))
    }

    /// Every message stored for `task` of type `ty`, with its stream
    /// sequence, from its first, then new ones as
    /// they are stored (an ordered consumer: no acks). Undecodable or
    /// invalid messages are skipped with a warning.
    ///
    /// The consumer is named, so its filter is part of the
    /// `$JS.API.CONSUMER.CREATE` subject that NATS permissions check
    /// (deploy/nats/roles.conf: a worker may follow only its own type's
    /// tasks), and created without a stream lookup.
    pub async fn follow(
        &self,
        tenant: &Tenant,
        job: &JobId,
        ty: &SubagentType,
        task: TaskId,
    ) -> Result<impl Stream<Item = (u64, FollowUp)> + use<>, BusError> {
        let stream = self.bus.subjects.task_messages_stream();
        let name = format!("inbox-{}", uuid::Uuid::now_v7().simple());
        let config_name = name.clone();
        let api = format!("$JS.API.CONSUMER.CREATE.{stream}.{name}");
        let config = pull::OrderedConfig {
            name: Some(name),
            filter_subject: self.bus.subjects.task_message(tenant, job, ty, &task),
            deliver_policy: DeliverPolicy::All,
            ..Default::default()
        };
        let create = self.bus.js.create_consumer_on_stream(config, &stream);
        let consumer =
            self.bus.guarded("cannot follow follow-up messages", create, |d| d.subject.starts_with(&api)).await?;
        let messages = consumer.messages().await.map_err(|e| BusError::new("cannot follow follow-up messages", e))?;
        // Deleted when the task's stream is dropped, rather than left to
        // expire: a worker runs thousands of tasks, each with its consumer.
        let consumer = DeleteOnDrop { js: self.bus.js.clone(), stream, name: config_name };
        let ty = ty.clone();
        Ok(messages.filter_map(move |m| {
            let _consumer = &consumer;
            let ty = ty.clone();
            async move {
                let m = m.map_err(|e| tracing::warn!(error = %e, "follow-up stream hiccup")).ok()?;
                let seq = m.info().map(|i| i.stream_sequence).unwrap_or_default();
                match protocol::decode::<FollowUp>(&m.payload).map_err(|e| e.to_string()).and_then(|f| {
                    f.check(&task, &ty)?;
                    Ok(f)
                }) {
                    Ok(f) => Some((seq, f)),
                    Err(e) => {
                        tracing::warn!(%task, error = %e, "follow-up message ignored");
                        None
                    }
                }
            }
        }))
    }
}

/// Deletes a task's follow-up consumer when its stream is dropped (the
/// task ended).
struct DeleteOnDrop {
    js: async_nats::jetstream::Context,
    stream: String,
    name: String,
}

impl Drop for DeleteOnDrop {
    fn drop(&mut self) {
        let (js, stream, name) = (self.js.clone(), std::mem::take(&mut self.stream), std::mem::take(&mut self.name));
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Err(e) = js.delete_consumer_from_stream(&name, &stream).await {
                    tracing::debug!(consumer = %name, error = %e, "follow-up consumer not deleted; it expires");
                }
            });
        }
    }
}
