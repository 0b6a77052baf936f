//! The sorted task ids behind a job's task pages, kept current from the
//! jobs bucket's stream. Task entries have one KV key each (jobs/tasks.rs),
//! so without this a page of a 100 000-task job lists 100 000 keys to find
//! its 100, and a filtered page reads every entry; the console re-fetches
//! the page of the job a person looks at about once a second.
//!
//! A view is the set of task ids of one job that one filter matches (every
//! id for no filter), with the last revision of the bucket it has read. Its
//! first read is the full pass; each later read takes only what was written
//! under `<job>.t.*` since that revision (shared/bus/src/job_records.rs,
//! `changes`), so a re-read of a settled job costs one consumer and a
//! running job's the writes since the last look. Revisions are the
//! stream's, so a view follows every orchestrator's writes and holds after a
//! failover. Each orchestrator keeps its own few views, each for a while
//! after its last use, so memory stays bounded (a BTreeSet of 16-byte ids).

use std::collections::{BTreeSet, VecDeque};
use std::ops::Bound;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flotilla_bus::{BusError, job_keys};
use flotilla_protocol::ids::{JobId, TaskId};
use flotilla_protocol::{self as protocol, TaskEntry, TaskFilter};

use crate::ports::JobBackend;

/// Views kept at once.
const VIEWS: usize = 4;

/// How long a view is kept after its last use.
const IDLE: Duration = Duration::from_secs(120);

/// One page of the ids a view holds.
#[derive(Debug, Default)]
pub(super) struct IdPage {
    /// Up to the limit asked for, after the cursor, in dispatch order.
    pub ids: Vec<TaskId>,
    /// Whether more ids follow the page.
    pub more: bool,
    /// How many ids the view holds in all.
    pub total: u64,
}

struct View {
    job: JobId,
    filter: TaskFilter,
    /// Held across a read, so two pages asked at once share one read.
    state: tokio::sync::Mutex<ViewState>,
    used: Mutex<Instant>,
}

#[derive(Default)]
struct ViewState {
    ids: BTreeSet<TaskId>,
    /// The bucket revision read up to (`0`: not read yet).
    seen: u64,
}

/// The views of this orchestrator.
#[derive(Default)]
pub(super) struct TaskViews {
    views: Mutex<VecDeque<Arc<View>>>,
}

impl TaskViews {
    /// Up to `limit` ids of `job`'s tasks that `filter` matches (every task
    /// for an empty filter), dispatched after `after`, read up to now.
    pub(super) async fn page(
        &self,
        backend: &dyn JobBackend,
        job: &JobId,
        filter: &TaskFilter,
        after: Option<TaskId>,
        limit: usize,
    ) -> Result<IdPage, BusError> {
        let view = self.view(job, filter);
        let mut state = view.state.lock().await;
        let all = filter.is_empty();
        let read = backend.changes(&job_keys::tasks(job), state.seen, all).await?;
        for (key, value) in read.entries {
            let Some(task) = job_keys::task_of(job, &key) else { continue };
            let matched = match value {
                None => false,
                Some(_) if all => true,
                Some(bytes) => match protocol::decode::<TaskEntry>(&bytes) {
                    Ok(entry) => filter.matches(&entry),
                    Err(e) => {
                        tracing::warn!(key, error = %e, "unreadable task entry left out of a filtered page");
                        false
                    }
                },
            };
            if matched {
                state.ids.insert(task);
            } else {
                state.ids.remove(&task);
            }
        }
        state.seen = state.seen.max(read.last);
        let from = after.map_or(Bound::Unbounded, Bound::Excluded);
        let mut rest = state.ids.range((from, Bound::Unbounded));
        let ids: Vec<TaskId> = rest.by_ref().take(limit).copied().collect();
        Ok(IdPage { ids, more: rest.next().is_some(), total: state.ids.len() as u64 })
    }

    /// The view of `job` through `filter`, made when there is none; the
    /// least recently used one goes when there are too many.
    fn view(&self, job: &JobId, filter: &TaskFilter) -> Arc<View> {
        let mut views = self.views.lock().unwrap_or_else(|e| e.into_inner());
        views.retain(|v| v.used.lock().unwrap_or_else(|e| e.into_inner()).elapsed() < IDLE);
        let view = match views.iter().position(|v| &v.job == job && &v.filter == filter) {
            Some(i) => views.remove(i).expect("a position found in the list"),
            None => Arc::new(View {
                job: *job,
                filter: filter.clone(),
                state: Default::default(),
                used: Mutex::new(Instant::now()),
            }),
        };
        *view.used.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
        views.push_front(view.clone());
        views.truncate(VIEWS);
        view
    }
}
