//! One task as a worker receives it from its type's durable consumer, and
//! the five things a worker may do with it, named for what they mean to the
//! task instead of JetStream's ack kinds: keep it ([`TaskDelivery::progress`]),
//! give it to another attempt later ([`TaskDelivery::hand_back`]), give up on
//! it ([`TaskDelivery::dead_letter`]) or finish it ([`TaskDelivery::ack`]).
//! The delivery count says which attempt this is (docs/RELIABILITY.md).

use std::time::Duration;

use async_nats::jetstream::consumer::PullConsumer;
use async_nats::jetstream::{AckKind, Message};
use bytes::Bytes;
use futures::{Stream, StreamExt};

use crate::{Bus, BusError, TRACEPARENT};
use flotilla_protocol::ids::SubagentType;

/// The durable consumer of one subagent type's tasks, shared by every
/// replica serving the type ([`TaskQueue::consumer`](crate::TaskQueue::consumer)).
pub struct TaskConsumer {
    pub(crate) bus: Bus,
    pub(crate) consumer: PullConsumer,
}

impl TaskConsumer {
    /// Asks for up to `max` tasks with one pull request: the stream yields
    /// them as they come and ends when `max` came or `expires` passed. A
    /// worker asks for as many as it has free slots, so it never holds a
    /// task an idle replica could run, and a run of tasks costs one request
    /// (and one reply inbox) per `max` of them instead of one each.
    pub async fn pull(
        &self,
        max: usize,
        expires: Duration,
    ) -> Result<impl Stream<Item = Result<TaskDelivery, BusError>> + use<>, BusError> {
        let batch = self
            .consumer
            .batch()
            .max_messages(max)
            .expires(expires)
            .messages()
            .await
            .map_err(|e| BusError::new("cannot ask for a task", e))?;
        let bus = self.bus.clone();
        Ok(batch.map(move |m| match m {
            Ok(msg) => Ok(TaskDelivery { bus: bus.clone(), msg }),
            Err(e) => Err(BusError::new("the pull for a task ended", e)),
        }))
    }
}

/// One delivery of a task message. Cheap to clone: clones answer for the
/// same delivery (the keep-alive and the run share one).
#[derive(Clone)]
pub struct TaskDelivery {
    bus: Bus,
    msg: Message,
}

impl TaskDelivery {
    /// The encoded task message.
    pub fn payload(&self) -> &Bytes {
        &self.msg.payload
    }

    /// The subject it was queued on (`<prefix>.task.<type>.<job>`).
    pub fn subject(&self) -> &str {
        self.msg.subject.as_str()
    }

    /// Which delivery of the task this is, from 1.
    pub fn attempt(&self) -> u32 {
        self.msg.info().map(|i| i.delivered as u32).unwrap_or(1)
    }

    /// Where the task is stored in the tasks stream: the same on every
    /// delivery of it, unlike the delivery count.
    pub fn stream_sequence(&self) -> Option<u64> {
        self.msg.info().ok().map(|i| i.stream_sequence)
    }

    /// Whether follow-up messages may come for the task: not when its
    /// publisher said none can (the `Flotilla-Follow-Ups: none` header).
    pub fn follow_ups(&self) -> crate::FollowUps {
        match self.msg.headers.as_ref().and_then(|h| h.get(crate::FOLLOW_UPS)) {
            Some(v) if v.as_str() == "none" => crate::FollowUps::None,
            _ => crate::FollowUps::Possible,
        }
    }

    /// The W3C trace context the publisher sent in the `traceparent` header.
    pub fn traceparent(&self) -> Option<String> {
        self.msg.headers.as_ref().and_then(|h| h.get(TRACEPARENT)).map(|v| v.to_string())
    }

    /// Keeps the task: restarts its `ack_wait`, so a long run is not
    /// redelivered while this worker is alive.
    pub async fn progress(&self) -> Result<(), BusError> {
        self.answer(AckKind::Progress, "in-progress ack").await
    }

    /// Gives the task back for another delivery, after `delay` when given
    /// (at once otherwise), to this or another worker.
    pub async fn hand_back(&self, delay: Option<Duration>) -> Result<(), BusError> {
        self.answer(AckKind::Nak(delay), "hand-back").await
    }

    /// Gives up on the task: stores it on the dead-letter stream with
    /// `reason` and tells JetStream never to deliver it again.
    pub async fn dead_letter(&self, reason: &str) -> Result<(), BusError> {
        let payload = self.msg.payload.clone();
        match self.bus.subjects.type_of_task(self.subject()).and_then(|t| SubagentType::new(t).ok()) {
            Some(ty) => self.bus.dead_letter_task(&ty, payload, reason).await,
            // Not a task subject: the consumer's filter lets none through.
            None => self.bus.dead_letter("task", payload, reason).await,
        }
        self.answer(AckKind::Term, "termination").await
    }

    /// Finishes the task: it leaves the work queue.
    pub async fn ack(&self) -> Result<(), BusError> {
        self.answer(AckKind::Ack, "ack").await
    }

    async fn answer(&self, kind: AckKind, what: &str) -> Result<(), BusError> {
        self.msg.ack_with(kind).await.map_err(|e| BusError::new(format!("task {what} failed"), e))
    }
}
