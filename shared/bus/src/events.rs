//! The events stream (`<prefix>_EVENTS`, kept 24 h): job events and progress
//! under `<prefix>.job.<tenant>.<job>.{event,progress.<task>}`. Publishing is
//! [`Bus::publish_event`] (fire and forget: losing an observation changes no
//! result); following a scope is [`EventStream::follow`], read by the CLI and
//! the dashboard through shared/client/src/events.rs.

use async_nats::jetstream::consumer::{DeliverPolicy, pull};
use bytes::Bytes;
use futures::{Stream, StreamExt};

use crate::{Bus, BusError, PROGRESS_HEADER};

/// The events stream.
#[derive(Clone)]
pub struct EventStream {
    bus: Bus,
}

/// One stored event or progress message, undecoded.
#[derive(Clone, Debug)]
pub struct RawEvent {
    /// The subject it was published on (tells a job event from progress).
    pub subject: String,
    /// Its JSON body.
    pub payload: Bytes,
}

impl Bus {
    /// The events stream.
    pub fn events(&self) -> EventStream {
        EventStream { bus: self.clone() }
    }
}

impl EventStream {
    /// Follows the messages matching `filter` (a subject under
    /// `<prefix>.job.>`), from the first stored one when `replay`, else from
    /// now on. Returns how many matching messages were stored when it started
    /// (what a replay delivers before live ones) and the messages.
    ///
    /// The consumer is named, so the filter is part of the
    /// `$JS.API.CONSUMER.CREATE` subject NATS permissions check, and created
    /// without a stream lookup, which a tenant's credential may not do
    /// (docs/SECURITY.md).
    pub async fn follow(
        &self,
        filter: String,
        replay: bool,
    ) -> Result<(usize, impl Stream<Item = Result<RawEvent, BusError>> + use<>), BusError> {
        let stream = self.bus.subjects.events_stream();
        let name = format!("follow-{}", uuid::Uuid::now_v7().simple());
        let api = format!("$JS.API.CONSUMER.CREATE.{stream}.{name}");
        let deliver_policy = if replay { DeliverPolicy::All } else { DeliverPolicy::New };
        let config =
            pull::OrderedConfig { name: Some(name), filter_subject: filter, deliver_policy, ..Default::default() };
        let create = self.bus.js.create_consumer_on_stream(config, &stream);
        let consumer =
            self.bus.guarded("cannot follow the events stream", create, |d| d.subject.starts_with(&api)).await?;
        let stored = consumer.cached_info().num_pending as usize;
        let messages = consumer.messages().await.map_err(|e| BusError::new("cannot follow events", e))?;
        let events = messages.map(|m| match m {
            Ok(m) => {
                Ok(RawEvent { subject: m.subject.to_string(), payload: event_body(&m.payload, m.headers.as_ref()) })
            }
            Err(e) => Err(BusError::new("event stream error", e)),
        });
        Ok((stored, events))
    }
}

/// The body of an event message: its payload, or for a progress event that
/// its step's journal entry carried (republished headers only, an empty
/// payload; shared/bus/src/journal.rs) the [`PROGRESS_HEADER`] header.
pub fn event_body(payload: &Bytes, headers: Option<&async_nats::HeaderMap>) -> Bytes {
    match headers.and_then(|h| h.get(PROGRESS_HEADER)) {
        Some(event) if payload.is_empty() => Bytes::copy_from_slice(event.as_str().as_bytes()),
        _ => payload.clone(),
    }
}
