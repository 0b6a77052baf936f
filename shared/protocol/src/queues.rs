//! How the task queue of each subagent type stands, as an operator console
//! shows it: what waits for a worker, what runs, what came back for another
//! attempt, what was given up on, and since when the oldest task waits.
//!
//! Not a message any process publishes: readers with access to the tasks
//! and dead-letter streams compute it on demand from JetStream's own
//! bookkeeping (`flotilla_bus::TaskQueue::stats`, `flotilla queues`). It is
//! versioned like the messages because its JSON is an interface too (`flotilla
//! queues --json`, the dashboard).

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use super::Message;
use crate::ids::SubagentType;

/// The queue of one subagent type at one moment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueStats {
    /// Schema version.
    #[serde(default = "super::schema_version")]
    pub v: u32,
    /// The type whose tasks these are.
    pub subagent_type: SubagentType,
    /// Tasks stored and never delivered yet: they wait for a free worker slot.
    #[serde(default)]
    pub pending: u64,
    /// Tasks delivered to a worker and not acknowledged: running, or waiting
    /// for their redelivery after a worker went silent or handed them back.
    #[serde(default)]
    pub in_flight: u64,
    /// Of the tasks in flight, those delivered more than once (a current
    /// count, not a running total: a redelivered task that ends leaves it).
    #[serde(default)]
    pub redelivered: u64,
    /// When the oldest task of `pending` was stored; `None` when none waits.
    #[serde(default, with = "time::serde::rfc3339::option", skip_serializing_if = "Option::is_none")]
    pub oldest_waiting_at: Option<OffsetDateTime>,
    /// Tasks of this type on the dead-letter stream (given up on, or
    /// undecodable), kept there for the stream's retention.
    #[serde(default)]
    pub dead_letters: u64,
    /// When these figures were read.
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
}

impl QueueStats {
    /// How long the oldest pending task has waited at `now` (zero when its
    /// time is ahead of `now`, as another host's clock may be).
    pub fn oldest_wait(&self, now: OffsetDateTime) -> Option<time::Duration> {
        self.oldest_waiting_at.map(|t| (now - t).max(time::Duration::ZERO))
    }
}

impl Message for QueueStats {
    const NAME: &'static str = "queue stats";
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{decode, encode};

    fn stats(oldest: Option<OffsetDateTime>) -> QueueStats {
        QueueStats {
            v: 1,
            subagent_type: SubagentType::new("finance").unwrap(),
            pending: 3,
            in_flight: 2,
            redelivered: 1,
            oldest_waiting_at: oldest,
            dead_letters: 4,
            at: OffsetDateTime::UNIX_EPOCH + time::Duration::seconds(60),
        }
    }

    #[test]
    fn queue_stats_round_trip_and_tell_the_oldest_wait() {
        let s = stats(Some(OffsetDateTime::UNIX_EPOCH + time::Duration::seconds(18)));
        let back: QueueStats = decode(&encode(&s)).unwrap();
        assert_eq!(back, s);
        assert_eq!(s.oldest_wait(s.at), Some(time::Duration::seconds(42)));
        assert_eq!(s.oldest_wait(OffsetDateTime::UNIX_EPOCH), Some(time::Duration::ZERO), "a clock ahead");
        let none = stats(None);
        let json: serde_json::Value = serde_json::from_slice(&encode(&none)).unwrap();
        assert!(json.get("oldest_waiting_at").is_none(), "nothing waits: omitted: {json}");
        assert_eq!(none.oldest_wait(none.at), None);
        // A newer minor version's unknown field is read past.
        let newer = br#"{"v":1.1,"subagent_type":"finance","at":"1970-01-01T00:01:00Z","paused":true}"#;
        let read: QueueStats = decode(newer).unwrap();
        assert_eq!((read.pending, read.dead_letters, read.oldest_waiting_at), (0, 0, None));
    }
}
