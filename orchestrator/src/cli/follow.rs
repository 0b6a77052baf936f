//! Reads job events and progress from the events stream: first everything
//! stored for the job, then live, so `watch` and `submit --wait` never miss an
//! event that happened before they started.

use async_nats::jetstream::consumer::{DeliverPolicy, pull};
use flotilla_shared::bus::Bus;
use flotilla_shared::ids::JobId;
use flotilla_shared::protocol::{self, JobEvent, ProgressEvent};
use futures::{Stream, StreamExt};

/// One event of either kind.
#[derive(Debug, Clone)]
pub enum Event {
    /// A job-level event.
    Job(JobEvent),
    /// A task progress event.
    Progress(ProgressEvent),
}

impl Event {
    /// The event as its JSON wire form.
    pub fn to_json(&self) -> String {
        match self {
            Event::Job(e) => String::from_utf8_lossy(&protocol::encode(e)).into_owned(),
            Event::Progress(e) => String::from_utf8_lossy(&protocol::encode(e)).into_owned(),
        }
    }
}

/// What to follow.
#[derive(Clone, Copy, Debug)]
pub enum Scope {
    /// One job, from its first stored event.
    Job(JobId),
    /// Every job, from now on.
    All,
}

/// Follows events; job events only when `with_progress` is false.
pub async fn follow(
    bus: &Bus,
    scope: Scope,
    with_progress: bool,
) -> anyhow::Result<impl Stream<Item = anyhow::Result<Event>> + use<>> {
    let s = &bus.subjects;
    let (subjects, deliver_policy) = match scope {
        Scope::Job(id) => {
            let mut v = vec![s.job_event(&id)];
            if with_progress {
                v.push(format!("{}.job.{id}.progress.*", s.prefix()));
            }
            (v, DeliverPolicy::All)
        }
        Scope::All => {
            let mut v = vec![format!("{}.job.*.event", s.prefix())];
            if with_progress {
                v.push(format!("{}.job.*.progress.*", s.prefix()));
            }
            (v, DeliverPolicy::New)
        }
    };
    let stream = bus
        .js
        .get_stream(s.events_stream())
        .await
        .map_err(|e| anyhow::anyhow!("cannot open the events stream {}: {e}", s.events_stream()))?;
    let consumer = stream
        .create_consumer(pull::OrderedConfig { filter_subjects: subjects, deliver_policy, ..Default::default() })
        .await
        .map_err(|e| anyhow::anyhow!("cannot follow events: {e}"))?;
    let messages = consumer.messages().await.map_err(|e| anyhow::anyhow!("cannot follow events: {e}"))?;
    let marker = format!("{}.job.", s.prefix());
    Ok(messages.filter_map(move |m| {
        let marker = marker.clone();
        async move {
            let m = match m {
                Ok(m) => m,
                Err(e) => return Some(Err(anyhow::anyhow!("event stream error: {e}"))),
            };
            let is_event = m.subject.as_str().strip_prefix(&marker).is_some_and(|r| r.ends_with(".event"));
            let decoded = if is_event {
                protocol::decode::<JobEvent>(&m.payload).map(Event::Job)
            } else {
                protocol::decode::<ProgressEvent>(&m.payload).map(Event::Progress)
            };
            match decoded {
                Ok(e) => Some(Ok(e)),
                Err(e) => {
                    tracing::warn!(subject = %m.subject, error = %e, "undecodable event skipped");
                    None
                }
            }
        }
    }))
}

/// How many events and progress messages of `job` the events stream still holds.
pub async fn stored_events(bus: &Bus, job: JobId) -> anyhow::Result<usize> {
    let s = &bus.subjects;
    let stream = bus
        .js
        .get_stream(s.events_stream())
        .await
        .map_err(|e| anyhow::anyhow!("cannot open the events stream {}: {e}", s.events_stream()))?;
    let mut counts = stream
        .info_with_subjects(s.job_all(&job))
        .await
        .map_err(|e| anyhow::anyhow!("cannot count the job's events: {e}"))?;
    let mut total = 0;
    while let Some(entry) = counts.next().await {
        let (_, n) = entry.map_err(|e| anyhow::anyhow!("cannot count the job's events: {e}"))?;
        total += n;
    }
    Ok(total)
}
