//! The task work queue (`<prefix>_TASKS`, WorkQueue retention) behind one
//! type, so publishing a task, purging a job's queued tasks and declaring a
//! type's consumer each exist once: the planner's `task` tool, job
//! cancellation (orchestrator/src/service.rs), the dead-letter watcher and the
//! workers all go through [`TaskQueue`]. What a worker does with a task it
//! received is in `task_delivery.rs`; how each type's queue stands, for an
//! operator, in `queue_stats.rs`.

use std::time::Duration;

use async_nats::jetstream::consumer;
use bytes::Bytes;
use futures::{Stream, StreamExt};

use crate::task_delivery::TaskConsumer;
use crate::{Bus, BusError};
use flotilla_protocol::ids::{JobId, SubagentType};
use flotilla_protocol::{Message, TaskMessage};

/// Whether follow-up messages (docs/PROTOCOL.md, "FollowUp: messages to a
/// running task") may come for a task: only for one the planner started
/// with `start_task`. For a task none can come for, the dispatcher says so in the
/// `Flotilla-Follow-Ups: none` header, and the worker neither looks up
/// messages stored before the task started nor follows its messages
/// (workers/src/inbox.rs): one round trip less on the task's path. A task
/// without the header (any other publisher, an earlier orchestrator) is
/// followed as before.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FollowUps {
    /// Messages may come (`start_task`); the default of a task without the header.
    Possible,
    /// None can come (`task`, `map_tasks`).
    None,
}

/// The work queue of tasks.
#[derive(Clone)]
pub struct TaskQueue {
    pub(crate) bus: Bus,
}

/// How many tasks of one type wait, as the type's durable consumer sees them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueDepth {
    /// Stored, not yet delivered.
    pub pending: u64,
    /// Delivered, not yet acknowledged (running on a worker).
    pub unacked: u64,
    /// Pull requests waiting (idle worker slots).
    pub waiting: u64,
}

/// A task as stored in the queue, read by its stream sequence.
#[derive(Clone, Debug)]
pub struct StoredTask {
    /// The type of the queue it is in (from its subject, not its body, which
    /// may not decode).
    pub subagent_type: Option<SubagentType>,
    /// The encoded task message.
    pub payload: Bytes,
}

/// A task JetStream stopped delivering (its consumer's `max_deliver` was
/// reached), from the `io.nats.jetstream.advisory.v1.max_deliver` advisory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GivenUp {
    /// Where the task is stored in the tasks stream.
    pub stream_seq: u64,
    /// How many times it was delivered.
    pub deliveries: u64,
}

impl GivenUp {
    /// Reads the fields used from an advisory's JSON body.
    pub fn parse(payload: &[u8]) -> Result<Self, String> {
        let v: serde_json::Value = serde_json::from_slice(payload).map_err(|e| e.to_string())?;
        let field = |name: &str| v.get(name).and_then(serde_json::Value::as_u64).ok_or(format!("no {name}"));
        Ok(Self { stream_seq: field("stream_seq")?, deliveries: field("deliveries")? })
    }
}

impl Bus {
    /// The task work queue.
    pub fn tasks(&self) -> TaskQueue {
        TaskQueue { bus: self.clone() }
    }
}

impl TaskQueue {
    /// Publishes `task` on `<prefix>.task.<type>.<job>` and waits for the
    /// stream's ack. `Nats-Msg-Id` is the task id, so a publish repeated
    /// (after a crash, by a retry) inside the duplicate window is dropped.
    /// `follow_ups` says whether follow-up messages may come for the task.
    pub async fn publish(&self, task: &TaskMessage, follow_ups: FollowUps) -> Result<(), BusError> {
        let subject = self.bus.subjects.task(&task.subagent_type, &task.job_id);
        let mut headers = crate::durable_headers(Some(&task.task_id.to_string()), task.traceparent.as_deref());
        if follow_ups == FollowUps::None {
            headers.insert(crate::FOLLOW_UPS, "none");
        }
        let payload = flotilla_protocol::encode(task);
        self.bus.publish_durable_with_headers(subject, payload, TaskMessage::NAME, headers).await
    }

    /// Removes `job`'s queued tasks (only those of `ty` when given) and
    /// returns how many left the queue. Tasks a worker is running are not
    /// queued and stay; cancellation reaches them through
    /// [`Cancellations`](crate::Cancellations).
    pub async fn purge_job(&self, job: &JobId, ty: Option<&SubagentType>) -> Result<u64, BusError> {
        let s = &self.bus.subjects;
        let filter = match ty {
            Some(ty) => s.task(ty, job),
            None => s.tasks_of_job(job),
        };
        self.bus.purge_filtered(&s.tasks_stream(), filter).await
    }

    /// The durable pull consumer shared by every worker serving `ty`, which
    /// yields [`TaskDelivery`](crate::TaskDelivery)s.
    pub async fn consumer(&self, ty: &SubagentType) -> Result<TaskConsumer, BusError> {
        let (s, config) = (&self.bus.subjects, &self.bus.config);
        let name = s.task_consumer(ty);
        let stream = s.tasks_stream();
        let api = format!("$JS.API.CONSUMER.CREATE.{stream}.{name}");
        let create = self.bus.js.create_consumer_on_stream(
            consumer::pull::Config {
                durable_name: Some(name.clone()),
                filter_subject: s.tasks_of_type(ty),
                ack_policy: consumer::AckPolicy::Explicit,
                ack_wait: Duration::from_secs(config.ack_wait),
                max_deliver: config.max_deliver,
                max_ack_pending: 10_000,
                ..Default::default()
            },
            &stream,
        );
        let consumer = self
            .bus
            .guarded(format!("cannot declare consumer {name} on {stream}"), create, |d| d.subject.starts_with(&api))
            .await?;
        Ok(TaskConsumer { bus: self.bus.clone(), consumer })
    }

    /// The depth of `ty`'s queue. Fails (kind
    /// [`NotFound`](crate::BusErrorKind::NotFound)) when no worker of the
    /// type ever declared its consumer.
    pub async fn depth(&self, ty: &SubagentType) -> Result<QueueDepth, BusError> {
        let stream = self.stream().await?;
        let info = stream
            .consumer_info(self.bus.subjects.task_consumer(ty))
            .await
            .map_err(|e| BusError::new(format!("cannot read the queue of {ty}"), e))?;
        Ok(QueueDepth {
            pending: info.num_pending,
            unacked: info.num_ack_pending as u64,
            waiting: info.num_waiting as u64,
        })
    }

    /// The task stored at `seq` (one JetStream gave up on), to dead-letter it.
    pub async fn stored(&self, seq: u64) -> Result<StoredTask, BusError> {
        let stream = self.stream().await?;
        let msg = stream
            .get_raw_message(seq)
            .await
            .map_err(|e| BusError::new(format!("task {seq} no longer in the queue"), e))?;
        let subagent_type = self.bus.subjects.type_of_task(&msg.subject).and_then(|t| SubagentType::new(t).ok());
        Ok(StoredTask { subagent_type, payload: msg.payload })
    }

    /// Removes the task stored at `seq` from the queue.
    pub async fn remove(&self, seq: u64) -> Result<(), BusError> {
        let stream = self.stream().await?;
        stream.delete_message(seq).await.map_err(|e| BusError::new(format!("cannot remove task {seq}"), e))?;
        Ok(())
    }

    /// Tasks JetStream gives up on from now on (core NATS subscription on
    /// the max-deliveries advisories of every task consumer). Unreadable
    /// advisories are skipped with a warning.
    pub async fn given_up(&self) -> Result<impl Stream<Item = GivenUp> + use<>, BusError> {
        let subject = self.bus.subjects.max_deliveries_advisory();
        let sub = self
            .bus
            .client
            .subscribe(subject.clone())
            .await
            .map_err(|e| BusError::new(format!("cannot watch {subject}"), e))?;
        Ok(sub.filter_map(|m| async move {
            GivenUp::parse(&m.payload)
                .inspect_err(|e| tracing::warn!(error = %e, "unreadable max-delivery advisory"))
                .ok()
        }))
    }

    pub(crate) async fn stream(&self) -> Result<async_nats::jetstream::stream::Stream, BusError> {
        let name = self.bus.subjects.tasks_stream();
        self.bus.js.get_stream(&name).await.map_err(|e| BusError::new(format!("cannot open stream {name}"), e))
    }
}

#[cfg(test)]
mod tests {
    use super::GivenUp;

    #[test]
    fn an_advisory_names_the_stored_task_and_its_deliveries() {
        let body = br#"{"type":"io.nats.jetstream.advisory.v1.max_deliver","stream":"FLOTILLA_TASKS","consumer":"flotilla-task-finance","stream_seq":42,"deliveries":5}"#;
        assert_eq!(GivenUp::parse(body), Ok(GivenUp { stream_seq: 42, deliveries: 5 }));
        assert!(GivenUp::parse(br#"{"stream_seq":42}"#).is_err(), "no deliveries: unreadable");
        assert!(GivenUp::parse(b"not json").is_err());
    }
}
