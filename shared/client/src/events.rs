//! Reads job events and progress from the events stream: first everything
//! stored for the job, then live, so `watch` and `submit --wait` never miss an
//! event that happened before they started.
//!
//! The one reader of the events stream: the CLI (`watch`, `submit --wait`,
//! `demo`, `bench`), `mcp serve`'s waits and the dashboard's Server-Sent
//! Events all follow through it, so all see the same events with the same
//! filters and permissions.

use flotilla_bus::Bus;
use flotilla_protocol::ids::{JobId, TaskId, Tenant};
use flotilla_protocol::{self as protocol, JobEvent, ProgressEvent};
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
    /// The event as JSON: a job event as on the bus, a progress event whole,
    /// with the job and task ids its bus body leaves to the subject
    /// (docs/PROTOCOL.md, "ProgressEvent").
    pub fn to_json(&self) -> String {
        match self {
            Event::Job(e) => String::from_utf8_lossy(&protocol::encode(e)).into_owned(),
            Event::Progress(e) => serde_json::to_string(e).expect("protocol types serialize infallibly"),
        }
    }
}

/// What to follow. Each scope is one filter subject, which the consumer's
/// create subject carries, so a client credential may follow only its own
/// tenant's jobs (`deploy/nats/roles.conf`, docs/SECURITY.md).
#[derive(Clone, Debug)]
pub enum Scope {
    /// One job, from its first stored event.
    Job(Tenant, JobId),
    /// One job, from now on: for a view of a very large job, whose stored
    /// events (several per task) are too many to replay on every visit.
    JobLive(Tenant, JobId),
    /// One task's progress events, from its first stored one (job events
    /// are not included, whatever `with_progress` says).
    Task(Tenant, JobId, TaskId),
    /// Every job of one tenant, from now on.
    Tenant(Tenant),
    /// Every job of every tenant, from now on (orchestrator credentials).
    All,
}

impl crate::Client {
    /// Follows events of `scope` ([`follow`]).
    pub async fn follow(
        &self,
        scope: Scope,
        with_progress: bool,
    ) -> anyhow::Result<impl Stream<Item = anyhow::Result<Event>> + use<>> {
        follow(self.bus(), scope, with_progress).await
    }

    /// Follows events of `scope`, with how many were stored ([`follow_counted`]).
    pub async fn follow_counted(
        &self,
        scope: Scope,
        with_progress: bool,
    ) -> anyhow::Result<(usize, impl Stream<Item = anyhow::Result<Event>> + use<>)> {
        follow_counted(self.bus(), scope, with_progress).await
    }
}

/// Follows events; job events only when `with_progress` is false.
pub async fn follow(
    bus: &Bus,
    scope: Scope,
    with_progress: bool,
) -> anyhow::Result<impl Stream<Item = anyhow::Result<Event>> + use<>> {
    Ok(follow_counted(bus, scope, with_progress).await?.1)
}

/// [`follow`], with how many of the followed events were already stored when
/// it started (for [`Scope::Job`]: the events a finished job replays).
pub async fn follow_counted(
    bus: &Bus,
    scope: Scope,
    with_progress: bool,
) -> anyhow::Result<(usize, impl Stream<Item = anyhow::Result<Event>> + use<>)> {
    let s = &bus.subjects;
    // A job's events replay from its start; a tenant's or everyone's are live only.
    let (filter, replay) = match (&scope, with_progress) {
        (Scope::Job(t, id), true) => (s.job_all(t, id), true),
        (Scope::Job(t, id), false) => (s.job_event(t, id), true),
        (Scope::JobLive(t, id), true) => (s.job_all(t, id), false),
        (Scope::JobLive(t, id), false) => (s.job_event(t, id), false),
        (Scope::Task(t, id, task), _) => (s.progress(t, id, task), true),
        (Scope::Tenant(t), true) => (s.tenant_jobs(t), false),
        (Scope::Tenant(t), false) => (s.tenant_job_events(t), false),
        (Scope::All, true) => (s.all_jobs(), false),
        (Scope::All, false) => (s.all_job_events(), false),
    };
    let (stored, messages) = bus.events().follow(filter, replay).await?;
    let marker = format!("{}.job.", s.prefix());
    let subjects = s.clone();
    let events = messages.filter_map(move |m| {
        let marker = marker.clone();
        let subjects = subjects.clone();
        async move {
            let m = match m {
                Ok(m) => m,
                Err(e) => return Some(Err(e.into())),
            };
            let is_event = m.subject.as_str().strip_prefix(&marker).is_some_and(|r| r.ends_with(".event"));
            let decoded = if is_event {
                protocol::decode::<JobEvent>(&m.payload).map(Event::Job)
            } else if let Some((job, task)) = subjects.ids_of_progress(&m.subject) {
                ProgressEvent::decode(&m.payload, job, task).map(Event::Progress)
            } else {
                tracing::warn!(subject = %m.subject, "event on an unknown subject skipped");
                return None;
            };
            match decoded {
                Ok(e) => Some(Ok(e)),
                Err(e) => {
                    tracing::warn!(subject = %m.subject, error = %e, "undecodable event skipped");
                    None
                }
            }
        }
    });
    Ok((stored, events))
}

/// How often a follower also asks for the job's status, so a terminal event
/// it never receives (published while NATS was down, or before its consumer
/// existed) cannot leave it waiting forever.
const STATUS_POLL: std::time::Duration = std::time::Duration::from_secs(2);

/// After a status poll finds the job ended, how long the follower still
/// waits for the events in flight (the terminal one among them).
const TAIL_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// The next event of a job's follower, or `None` once the job has ended:
/// its events stream ended, or the job's status (asked every `STATUS_POLL`)
/// says it ended and no terminal event came within `TAIL_WAIT`.
pub struct EndWatch<'a> {
    api: &'a crate::Client,
    job: JobId,
    poll: Option<tokio::time::Interval>,
    ended_at: Option<tokio::time::Instant>,
}

impl<'a> EndWatch<'a> {
    /// `poll`: whether to ask for the status (not for a finished job's replay).
    pub fn new(api: &'a crate::Client, job: JobId, poll: bool) -> Self {
        let poll = poll.then(|| tokio::time::interval_at(tokio::time::Instant::now() + STATUS_POLL, STATUS_POLL));
        Self { api, job, poll, ended_at: None }
    }

    /// The next event of `events`, or `None` when the job is over.
    pub async fn next<S>(&mut self, events: &mut S) -> anyhow::Result<Option<Event>>
    where
        S: Stream<Item = anyhow::Result<Event>> + Unpin,
    {
        loop {
            let ended_at = self.ended_at;
            let tail = async move {
                match ended_at {
                    Some(at) => tokio::time::sleep_until(at + TAIL_WAIT).await,
                    None => std::future::pending().await,
                }
            };
            let tick = async {
                match (&mut self.poll, ended_at) {
                    (Some(p), None) => p.tick().await,
                    _ => std::future::pending().await,
                }
            };
            tokio::select! {
                ev = events.next() => return ev.transpose(),
                _ = tick => {
                    if self.api.status(self.job).await?.status.is_terminal() {
                        self.ended_at = Some(tokio::time::Instant::now());
                    }
                }
                _ = tail => {
                    tracing::debug!(job = %self.job, "the job ended without its terminal event reaching this follower");
                    return Ok(None);
                }
            }
        }
    }
}
