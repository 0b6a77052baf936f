//! Task entries of a job, one KV key each (`<job>.t.<task>`), found by their
//! dispatch key through an index key (`<job>.k.<key>` -> task id), and the
//! job header's counters that follow them (docs/PROTOCOL.md).
//!
//! A dispatch claims its index key first (KV create: of two racing
//! dispatches with one key, one wins), then creates the entry, so a resumed
//! planner finds the task a key dispatched without dispatching it again, even
//! when the orchestrator stopped between the two writes. Every later write of
//! an entry is read-modify-write conditional on the revision read. Nothing
//! here keeps entries in memory: a 100 000-task job costs one header.
//!
//! A record of the old layout keeps its tasks inline in the header; they are
//! read and changed there.

use bytes::Bytes;
use flotilla_bus::{BusError, BusErrorKind, Cas, job_keys, retry};
use flotilla_protocol::ids::{JobId, TaskId, Tenant};
use flotilla_protocol::{self as protocol, ErrorInfo, JobRecord, StatusReply, TaskEntry, TaskFilter, TaskStatus};
use futures::{StreamExt, TryStreamExt};

use super::{JobStore, WRITE_BUDGET};

/// How many task entries a page reads at once.
const PAGE_READS: usize = 16;

/// Bytes of a `status` reply's JSON at most: a message is at most 1 MiB.
const REPLY_BUDGET: usize = protocol::MAX_MESSAGE_BYTES - 64 * 1024;

/// One page of a job's tasks.
#[derive(Debug, Default)]
pub struct TaskPage {
    /// Tasks in dispatch order.
    pub tasks: Vec<TaskEntry>,
    /// The cursor of the next page (the last task here), when there is one.
    pub next_after: Option<TaskId>,
}

impl JobStore {
    /// The task `job` dispatched under `key` (a tool call id, a map item key), if any.
    pub async fn task_by_key(&self, job: &JobId, key: &str) -> Result<Option<TaskEntry>, BusError> {
        let index = job_keys::index(job, key);
        match retry("task index read", WRITE_BUDGET, || self.backend.entry(&index)).await? {
            Some((bytes, _)) => {
                let task = parse_id(&bytes, &index)?;
                self.task(job, &task).await
            }
            None => self.inline(job, |t| t.call_id.as_deref() == Some(key)).await,
        }
    }

    /// The entry of `task` in `job`, if dispatched.
    pub async fn task(&self, job: &JobId, task: &TaskId) -> Result<Option<TaskEntry>, BusError> {
        match self.task_entry(job, task).await? {
            Some((entry, _)) => Ok(Some(entry)),
            None => self.inline(job, |t| &t.task_id == task).await,
        }
    }

    async fn task_entry(&self, job: &JobId, task: &TaskId) -> Result<Option<(TaskEntry, u64)>, BusError> {
        let key = job_keys::task(job, task);
        let Some((bytes, rev)) = retry("task entry read", WRITE_BUDGET, || self.backend.entry(&key)).await? else {
            return Ok(None);
        };
        let entry =
            protocol::decode(&bytes).map_err(|e| BusError::new(format!("task entry {key} is unreadable"), e))?;
        Ok(Some((entry, rev)))
    }

    /// An inline task of a record of the old layout (without copying
    /// the record: this runs on every new dispatch key).
    async fn inline(&self, job: &JobId, find: impl Fn(&TaskEntry) -> bool) -> Result<Option<TaskEntry>, BusError> {
        if let Some(live) = self.live.get(job).map(|l| l.clone()) {
            return Ok(live.look(|rec| rec.tasks.iter().find(|t| find(t)).cloned()));
        }
        Ok(self.stored_header(job).await?.and_then(|(rec, _)| rec.tasks.into_iter().find(|t| find(t))))
    }

    /// Records a new task entry under its dispatch key (`entry.call_id`);
    /// returns the stored entry, which is an earlier one when that key was
    /// already used.
    pub async fn add_task(&self, job: &JobId, mut entry: TaskEntry) -> Result<TaskEntry, BusError> {
        if let Some(key) = entry.call_id.clone() {
            let index = job_keys::index(job, &key);
            let id = Bytes::from(entry.task_id.to_string());
            let claimed = retry("task index write", WRITE_BUDGET, || self.backend.create(&index, id.clone())).await?;
            if claimed == Cas::Conflict {
                let stored = retry("task index read", WRITE_BUDGET, || self.backend.entry(&index)).await?;
                let (bytes, _) = stored.ok_or_else(|| {
                    BusError::with_kind(BusErrorKind::NotFound, format!("cannot read {index}"), "not found")
                })?;
                entry.task_id = parse_id(&bytes, &index)?;
                // The entry is missing only when the orchestrator stopped between the two writes.
                if let Some((existing, _)) = Box::pin(self.task_entry(job, &entry.task_id)).await? {
                    return Ok(existing);
                }
            }
        }
        let key = job_keys::task(job, &entry.task_id);
        let payload = Bytes::from(protocol::encode(&entry));
        match retry("task entry write", WRITE_BUDGET, || self.backend.create(&key, payload.clone())).await? {
            Cas::Stored(_) => {
                let state = entry.state();
                // Boxed, as the entry reads of this function: a planner's
                // dispatches wait here up to `[planner] max_in_flight` at
                // once (planner/dispatch.rs, `start_with`).
                Box::pin(self.update(job, |rec| {
                    rec.tasks_total += 1;
                    rec.task_counts.moved(None, state);
                }))
                .await?;
                Ok(entry)
            }
            Cas::Conflict => Ok(Box::pin(self.task_entry(job, &entry.task_id)).await?.map(|(e, _)| e).unwrap_or(entry)),
        }
    }

    /// Applies `change` to the entry of `task` and stores it when `change`
    /// says it changed something; returns the stored entry then, `None` when
    /// nothing changed (or there is no such task).
    pub async fn update_task(
        &self,
        job: &JobId,
        task: &TaskId,
        change: impl FnMut(&mut TaskEntry) -> bool + Send,
    ) -> Result<Option<TaskEntry>, BusError> {
        self.update_task_and_header(job, task, change, |_, _| {}).await
    }

    /// As [`update_task`](Self::update_task), and when the entry changed,
    /// also applies `header` to the job header in the same header write as
    /// the task counters.
    pub async fn update_task_and_header(
        &self,
        job: &JobId,
        task: &TaskId,
        mut change: impl FnMut(&mut TaskEntry) -> bool + Send,
        header: impl FnOnce(&mut JobRecord, &TaskEntry) + Send,
    ) -> Result<Option<TaskEntry>, BusError> {
        let key = job_keys::task(job, task);
        loop {
            let Some((mut entry, rev)) = self.task_entry(job, task).await? else {
                return self.update_inline(job, task, change, header).await;
            };
            let before = entry.state();
            if !change(&mut entry) {
                return Ok(None);
            }
            let payload = Bytes::from(protocol::encode(&entry));
            match retry("task entry write", WRITE_BUDGET, || self.backend.update(&key, payload.clone(), rev)).await? {
                // Changed meanwhile (a report racing a timeout): look again.
                Cas::Conflict => continue,
                Cas::Stored(_) => {
                    let after = entry.state();
                    let moved = entry.clone();
                    self.update(job, |rec| {
                        if before != after {
                            rec.task_counts.moved(Some(before), after);
                        }
                        header(rec, &moved);
                    })
                    .await?;
                    return Ok(Some(entry));
                }
            }
        }
    }

    /// `update_task_and_header` for a task inline in a record of the old layout.
    async fn update_inline(
        &self,
        job: &JobId,
        task: &TaskId,
        mut change: impl FnMut(&mut TaskEntry) -> bool + Send,
        header: impl FnOnce(&mut JobRecord, &TaskEntry) + Send,
    ) -> Result<Option<TaskEntry>, BusError> {
        self.update(job, |rec| {
            let entry = rec.task_mut(task)?;
            let before = entry.state();
            if !change(entry) {
                return None;
            }
            let entry = entry.clone();
            rec.task_counts.moved(Some(before), entry.state());
            header(rec, &entry);
            Some(entry)
        })
        .await
    }

    /// Up to `limit` tasks of `job` dispatched after `after`, in dispatch
    /// order: the ids from the job's view (jobs/task_views.rs: the first
    /// read lists the job's task keys, later ones what was written since),
    /// then the page's entries.
    pub async fn tasks_page(&self, job: &JobId, after: Option<TaskId>, limit: usize) -> Result<TaskPage, BusError> {
        let ids = self.task_views.page(&*self.backend, job, &TaskFilter::default(), after, limit).await?;
        if ids.total == 0 {
            let inline = self.get(job).await?.map(|r| r.tasks).unwrap_or_default();
            if !inline.is_empty() {
                return Ok(page_of(inline, after, limit));
            }
        }
        let next_after = ids.ids.last().copied().filter(|_| ids.more);
        Ok(TaskPage { tasks: self.entries_of(job, ids.ids).await?, next_after })
    }

    /// Up to `limit` tasks of `job` matching `filter`, dispatched after
    /// `after`, with how many match in all. A filter naming its `task`
    /// reads that one entry; any other reads the ids from the view of the
    /// job through that filter (jobs/task_views.rs: every entry once, then
    /// what was written since; docs/PROTOCOL.md, "status").
    pub async fn tasks_matching(
        &self,
        job: &JobId,
        filter: &TaskFilter,
        after: Option<TaskId>,
        limit: usize,
    ) -> Result<(TaskPage, u64), BusError> {
        if let Some(task) = &filter.task {
            let found: Vec<TaskEntry> = self.task(job, task).await?.into_iter().filter(|t| filter.matches(t)).collect();
            let matched = found.len() as u64;
            return Ok((page_of(found, after, limit), matched));
        }
        let ids = self.task_views.page(&*self.backend, job, filter, after, limit).await?;
        if ids.total == 0 {
            let mut inline = self.get(job).await?.map(|r| r.tasks).unwrap_or_default();
            inline.retain(|t| filter.matches(t));
            let matched = inline.len() as u64;
            return Ok((page_of(inline, after, limit), matched));
        }
        let next_after = ids.ids.last().copied().filter(|_| ids.more);
        let mut tasks = self.entries_of(job, ids.ids).await?;
        tasks.retain(|t| filter.matches(t)); // written since the view's read
        Ok((TaskPage { tasks, next_after }, ids.total))
    }

    /// The entries of `ids` in `job` (those that exist), in that order.
    async fn entries_of(&self, job: &JobId, ids: Vec<TaskId>) -> Result<Vec<TaskEntry>, BusError> {
        futures::stream::iter(ids)
            .map(|t| async move { self.task_entry(job, &t).await })
            .buffered(PAGE_READS)
            .try_filter_map(|e| async move { Ok(e.map(|(entry, _)| entry)) })
            .try_collect()
            .await
    }
}

impl JobStore {
    /// Ends every task of `job` still pending or running as `cancelled` with
    /// `why` (the job was cancelled, failed or timed out): after its planner
    /// stopped, no report of these is consolidated any more, so without this
    /// they would show `running` forever in `status`, `watch` and the
    /// dashboard (docs/RELIABILITY.md, "Never silence"). Only open entries
    /// are written; the header's counters follow. Returns how many.
    pub async fn settle_open_tasks(&self, job: &JobId, why: &ErrorInfo) -> Result<usize, BusError> {
        let open = self.read(job, |r| r.task_counts.pending + r.task_counts.running).await?;
        if open == 0 {
            return Ok(0);
        }
        let mut settled = 0;
        let mut after = None;
        loop {
            let page = self.tasks_page(job, after, SETTLE_PAGE).await?;
            for t in page.tasks.iter().filter(|t| t.status.is_none()) {
                let ended = self
                    .update_task(job, &t.task_id, |e| {
                        if e.status.is_some() {
                            return false; // its report came in meanwhile
                        }
                        e.status = Some(TaskStatus::Cancelled);
                        e.error = Some(why.clone());
                        e.finished_at = Some(protocol::now());
                        true
                    })
                    .await?;
                settled += usize::from(ended.is_some());
            }
            match page.next_after {
                Some(next) => after = Some(next),
                None => return Ok(settled),
            }
        }
    }
}

/// Task entries read at once while settling a job's open tasks.
const SETTLE_PAGE: usize = 256;

/// A page of inline tasks (records of the old layout, tasks inline).
fn page_of(mut tasks: Vec<TaskEntry>, after: Option<TaskId>, limit: usize) -> TaskPage {
    tasks.sort_by_key(|t| t.task_id);
    let start = after.map_or(0, |a| tasks.partition_point(|t| t.task_id <= a));
    let more = start + limit < tasks.len();
    let tasks: Vec<TaskEntry> = tasks.into_iter().skip(start).take(limit).collect();
    let next_after = if more { tasks.last().map(|t| t.task_id) } else { None };
    TaskPage { tasks, next_after }
}

fn parse_id(bytes: &[u8], key: &str) -> Result<TaskId, BusError> {
    std::str::from_utf8(bytes)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| BusError::new(format!("task index {key} is unreadable"), "not a task id"))
}

impl JobStore {
    /// The `status` reply of `job`: its header with one page of tasks
    /// (`None` when there is no such job, or it is not `tenant`'s). The page
    /// ends early when the reply would not fit in one message.
    pub async fn status(
        &self,
        job: &JobId,
        tenant: Option<&Tenant>,
        after: Option<TaskId>,
        limit: usize,
        filter: Option<&TaskFilter>,
    ) -> Result<Option<StatusReply>, BusError> {
        let Some(mut rec) = self.get(job).await? else { return Ok(None) };
        if tenant.is_some_and(|t| t != &rec.tenant) {
            return Ok(None);
        }
        let filter = filter.filter(|f| !f.is_empty());
        let (page, tasks_matched) = match filter {
            Some(f) => {
                let (page, matched) = self.tasks_matching(job, f, after, limit).await?;
                (page, Some(matched))
            }
            None if limit == 0 => (TaskPage::default(), None),
            None => (self.tasks_page(job, after, limit).await?, None),
        };
        rec.tasks.clear(); // a record of the old layout: its inline tasks come paged like any
        let mut used = protocol::encode(&rec).len();
        if used > REPLY_BUDGET {
            // Input and todos alone are too large for a reply: send their heads.
            rec.input = rec.input.chars().take(1024).collect();
            rec.todos.truncate(100);
            used = protocol::encode(&rec).len();
        }
        let more = page.next_after.is_some();
        let mut tasks = page.tasks.into_iter().peekable();
        while let Some(t) = tasks.peek() {
            used += protocol::encode(t).len() + 1;
            if used > REPLY_BUDGET {
                break;
            }
            rec.tasks.extend(tasks.next());
        }
        let cut = tasks.peek().is_some();
        let next_after = if cut || more { rec.tasks.last().map(|t| t.task_id).or(after) } else { None };
        Ok(Some(StatusReply { job: rec, next_after, tasks_matched }))
    }
}
