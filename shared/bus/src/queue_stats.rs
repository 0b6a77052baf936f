//! How each subagent type's task queue stands ([`QueueStats`]), read from
//! what JetStream already keeps, so nothing extra is written on the task
//! path: the type's durable consumer says what waits, runs and was
//! redelivered; the first stored message after the consumer's last
//! delivered one says since when the oldest task waits; the dead-letter
//! stream's per-subject counts say how many tasks of the type were given up
//! on (`<prefix>.deadletter.task.<type>`, `dead_letters.rs`).
//!
//! The types listed are those with a consumer on the tasks stream: a
//! worker declares its type's consumer when it starts, so every type a
//! worker ever served is there, live or not.

use std::collections::HashMap;

use async_nats::jetstream::consumer;
use async_nats::jetstream::stream::{RawMessageErrorKind, Stream};
use futures::TryStreamExt;
use time::OffsetDateTime;

use crate::tasks::TaskQueue;
use crate::{Bus, BusError};
use flotilla_protocol::ids::SubagentType;
use flotilla_protocol::{self as protocol, QueueStats};

impl TaskQueue {
    /// The queue of every type with a consumer on the tasks stream, sorted
    /// by type. Costs one consumer listing, one stream info of the
    /// dead-letter stream, and one message lookup per type with tasks waiting.
    pub async fn stats(&self) -> Result<Vec<QueueStats>, BusError> {
        let stream = self.stream().await?;
        let subjects = &self.bus.subjects;
        let consumers: Vec<consumer::Info> = stream
            .consumers()
            .try_collect()
            .await
            .map_err(|e| BusError::new(format!("cannot list the consumers of {}", subjects.tasks_stream()), e))?;
        let dead = dead_letter_counts(&self.bus).await?;
        let mut out = Vec::new();
        for info in &consumers {
            let Some(ty) = subjects.type_of_task_consumer(&info.name).and_then(|t| SubagentType::new(t).ok()) else {
                continue;
            };
            let dead_letters = dead.get(ty.as_str()).copied().unwrap_or(0);
            out.push(self.read_stats(&stream, ty, info, dead_letters).await?);
        }
        out.sort_by(|a, b| a.subagent_type.cmp(&b.subagent_type));
        Ok(out)
    }

    /// The queue of `ty` alone. Fails (kind
    /// [`NotFound`](crate::BusErrorKind::NotFound)) when no worker of the
    /// type ever declared its consumer.
    pub async fn stats_of(&self, ty: &SubagentType) -> Result<QueueStats, BusError> {
        let stream = self.stream().await?;
        let info = stream
            .consumer_info(self.bus.subjects.task_consumer(ty))
            .await
            .map_err(|e| BusError::new(format!("cannot read the queue of {ty}"), e))?;
        let dead = dead_letter_counts(&self.bus).await?;
        let dead_letters = dead.get(ty.as_str()).copied().unwrap_or(0);
        self.read_stats(&stream, ty.clone(), &info, dead_letters).await
    }

    async fn read_stats(
        &self,
        stream: &Stream,
        ty: SubagentType,
        info: &consumer::Info,
        dead_letters: u64,
    ) -> Result<QueueStats, BusError> {
        let oldest_waiting_at = if info.num_pending == 0 {
            None
        } else {
            self.first_after(stream, &ty, info.delivered.stream_sequence).await?
        };
        Ok(QueueStats {
            v: protocol::SCHEMA_VERSION,
            subagent_type: ty,
            pending: info.num_pending,
            in_flight: info.num_ack_pending as u64,
            redelivered: info.num_redelivered as u64,
            oldest_waiting_at,
            dead_letters,
            at: protocol::now(),
        })
    }

    /// When the first task of `ty` stored after stream sequence `delivered`
    /// (the consumer's last delivery) was stored: tasks are delivered in
    /// stream order, so that is the oldest one no worker has received.
    /// `None` when a worker took the last one meanwhile.
    async fn first_after(
        &self,
        stream: &Stream,
        ty: &SubagentType,
        delivered: u64,
    ) -> Result<Option<OffsetDateTime>, BusError> {
        let filter = self.bus.subjects.tasks_of_type(ty);
        match stream.get_first_raw_message_by_subject(&filter, delivered + 1).await {
            Ok(msg) => Ok(Some(msg.time)),
            Err(e) if e.kind() == RawMessageErrorKind::NoMessageFound => Ok(None),
            Err(e) => Err(BusError::new(format!("cannot read the oldest waiting task of {ty}"), e)),
        }
    }
}

/// How many dead-lettered tasks each type has (by the type token of
/// `<prefix>.deadletter.task.<type>`; dead letters of earlier versions, on
/// `<prefix>.deadletter.task`, name no type and are not counted).
async fn dead_letter_counts(bus: &Bus) -> Result<HashMap<String, u64>, BusError> {
    let s = &bus.subjects;
    let name = s.dead_letter_stream();
    let stream = bus.js.get_stream(&name).await.map_err(|e| BusError::new(format!("cannot open stream {name}"), e))?;
    let counts: Vec<(String, usize)> = stream
        .info_with_subjects(s.dead_letter_tasks())
        .await
        .map_err(|e| BusError::new(format!("cannot count the dead letters in {name}"), e))?
        .try_collect()
        .await
        .map_err(|e| BusError::new(format!("cannot count the dead letters in {name}"), e))?;
    Ok(counts
        .into_iter()
        .filter_map(|(subject, n)| Some((s.type_of_dead_letter_task(&subject)?.to_string(), n as u64)))
        .collect())
}
