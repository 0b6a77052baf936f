//! The job store over the in-memory bucket of orchestrator/src/fakes.rs:
//! O(1) writes per task, paging, dispatch keys across a restart, records
//! of the old layout (tasks inline), and permanent write errors failing fast.

use std::sync::Arc;

use bytes::Bytes;
use flotilla_bus::{BusErrorKind, job_keys};
use flotilla_protocol::ids::{JobId, SubagentType, TaskId, Tenant};
use flotilla_protocol::{JobRecord, TaskCounts, TaskEntry, TaskFilter, TaskState, TaskStatus, Todo, TodoStatus};

use super::JobStore;
use crate::fakes::FakeJobs;

fn finance() -> SubagentType {
    SubagentType::new("finance").unwrap()
}

async fn store_with_job() -> (JobStore, Arc<FakeJobs>, JobId) {
    let backend = Arc::new(FakeJobs::default());
    let store = JobStore::with_backend(backend.clone());
    let job = JobId::new();
    store.insert(JobRecord::new(job, Tenant::new("acme").unwrap(), "revenue by region".into())).await.unwrap();
    (store, backend, job)
}

/// One task's life as the dispatcher writes it: recorded, published, reported.
async fn run_task(store: &JobStore, job: &JobId, key: &str) -> TaskId {
    let entry = TaskEntry::dispatched(TaskId::new(), finance(), format!("task {key}"), key.into());
    let task = store.add_task(job, entry).await.unwrap().task_id;
    store.update_task(job, &task, |t| !std::mem::replace(&mut t.published, true)).await.unwrap();
    let done = |t: &mut TaskEntry| {
        t.status = Some(TaskStatus::Completed);
        t.summary = format!("the answer of {key}");
        true
    };
    store.update_task(job, &task, done).await.unwrap().expect("changed");
    task
}

#[tokio::test]
async fn bytes_written_per_task_do_not_grow_with_the_job_nor_with_its_input_and_todos() {
    let backend = Arc::new(FakeJobs::default());
    let store = JobStore::with_backend(backend.clone());
    let job = JobId::new();
    // A 5 000-region job text and todo list: ~150 KB and ~300 KB.
    let input = (0..5000).map(|i| format!("r{i}: revenue {}, cost {}; ", 100 + i, 50 + i)).collect::<String>();
    store.insert(JobRecord::new(job, Tenant::new("acme").unwrap(), input.clone())).await.unwrap();
    let todos: Vec<Todo> = (0..5000)
        .map(|i| Todo { content: format!("Gross margin of r{i} with some words"), status: TodoStatus::InProgress })
        .collect();
    store.set_todos(&job, todos).await.unwrap();
    let per_task = |n: u64, bytes: u64| bytes / n;
    let before = backend.bytes_written();
    for i in 0..100 {
        run_task(&store, &job, &format!("call-{i}")).await;
    }
    let first = per_task(100, backend.bytes_written() - before);
    let before = backend.bytes_written();
    for i in 100..1100 {
        run_task(&store, &job, &format!("call-{i}")).await;
    }
    let later = per_task(1000, backend.bytes_written() - before);

    // The old single-value record wrote the whole job per change: ~1000x here.
    assert!(later <= first + first / 10, "bytes per task grew from {first} to {later}");
    assert!(later < 4096, "the input and the todos are not rewritten per task: {later} bytes per task");
    // A new orchestrator reads the whole input and todo list back.
    let stored = JobStore::with_backend(backend.clone()).get(&job).await.unwrap().unwrap();
    assert_eq!((stored.input.len(), stored.todos.len()), (input.len(), 5000));
    let rec = store.get(&job).await.unwrap().unwrap();
    assert_eq!(rec.tasks_total, 1100);
    assert_eq!(rec.task_counts, TaskCounts { completed: 1100, ..TaskCounts::default() });
    assert!(rec.tasks.is_empty(), "the header holds no task");
}

#[tokio::test]
async fn status_pages_walk_every_task_in_dispatch_order_with_counts_first() {
    let (store, _, job) = store_with_job().await;
    let mut ids = Vec::new();
    for i in 0..250 {
        ids.push(run_task(&store, &job, &format!("call-{i}")).await);
    }
    let pending = TaskEntry::dispatched(TaskId::new(), finance(), "later".into(), "call-x".into());
    ids.push(store.add_task(&job, pending).await.unwrap().task_id);

    let (mut seen, mut after, mut pages) = (Vec::new(), None, 0);
    loop {
        let reply = store.status(&job, None, after, 100, None).await.unwrap().unwrap();
        assert_eq!(reply.job.tasks_total, 251);
        assert_eq!((reply.job.task_counts.completed, reply.job.task_counts.pending), (250, 1));
        seen.extend(reply.job.tasks.iter().map(|t| t.task_id));
        pages += 1;
        match reply.next_after {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    assert_eq!((pages, seen), (3, ids), "every task once, in dispatch order");
    let other = Tenant::new("globex").unwrap();
    assert!(
        store.status(&job, Some(&other), None, 10, None).await.unwrap().is_none(),
        "another tenant's job is missing"
    );
}

/// A filtered page holds only matching tasks, pages through them and
/// counts them; a filter naming one task finds it alone.
#[tokio::test]
async fn a_filtered_status_page_holds_the_matching_tasks_and_counts_them() {
    let (store, _, job) = store_with_job().await;
    let mut ids = Vec::new();
    for i in 0..30 {
        let task = run_task(&store, &job, &format!("call-{i}")).await;
        if i % 3 == 0 {
            store
                .update_task(&job, &task, |t| {
                    t.status = Some(TaskStatus::Failed);
                    t.worker_id = Some("w2".into());
                    true
                })
                .await
                .unwrap();
        }
        ids.push(task);
    }
    let failed = TaskFilter { state: Some(TaskState::Failed), ..TaskFilter::default() };
    let first = store.status(&job, None, None, 4, Some(&failed)).await.unwrap().unwrap();
    assert_eq!(first.tasks_matched, Some(10));
    assert_eq!(first.job.tasks.len(), 4);
    assert!(first.job.tasks.iter().all(|t| t.state() == TaskState::Failed), "{:?}", first.job.tasks);
    let rest = store.status(&job, None, first.next_after, 100, Some(&failed)).await.unwrap().unwrap();
    assert_eq!((rest.job.tasks.len(), rest.next_after), (6, None));
    let every: Vec<TaskId> = first.job.tasks.iter().chain(&rest.job.tasks).map(|t| t.task_id).collect();
    assert_eq!(every, ids.iter().step_by(3).copied().collect::<Vec<_>>(), "in dispatch order, each once");

    let by_worker_and_text =
        TaskFilter { worker: Some("w2".into()), text: Some("CALL-12".into()), ..TaskFilter::default() };
    let one = store.status(&job, None, None, 100, Some(&by_worker_and_text)).await.unwrap().unwrap();
    assert_eq!(one.job.tasks.iter().map(|t| t.task_id).collect::<Vec<_>>(), [ids[12]]);
    let by_id = TaskFilter { task: Some(ids[7]), ..TaskFilter::default() };
    let found = store.status(&job, None, None, 1, Some(&by_id)).await.unwrap().unwrap();
    assert_eq!((found.tasks_matched, found.job.tasks[0].task_id), (Some(1), ids[7]));
    let unfiltered = store.status(&job, None, None, 5, Some(&TaskFilter::default())).await.unwrap().unwrap();
    assert_eq!((unfiltered.tasks_matched, unfiltered.job.tasks.len()), (None, 5), "an empty filter is no filter");
}

/// Pages of a big job after the first read only what was written since
/// (jobs/task_views.rs), and still see every write: a new dispatch, a task
/// leaving a filter, and writes of another orchestrator on the same bucket.
#[tokio::test]
async fn repeated_pages_read_only_what_was_written_since_and_miss_no_write() {
    let (store, backend, job) = store_with_job().await;
    let mut ids = Vec::new();
    for i in 0..200 {
        ids.push(run_task(&store, &job, &format!("call-{i}")).await);
    }
    let failed = TaskFilter { state: Some(TaskState::Failed), ..TaskFilter::default() };
    let first = store.status(&job, None, None, 10, None).await.unwrap().unwrap();
    assert_eq!(first.job.tasks.iter().map(|t| t.task_id).collect::<Vec<_>>(), ids[..10]);
    store.status(&job, None, None, 10, Some(&failed)).await.unwrap().unwrap();
    let scanned = backend.scanned();
    for _ in 0..5 {
        let again = store.status(&job, None, first.next_after, 10, None).await.unwrap().unwrap();
        assert_eq!(again.job.tasks.iter().map(|t| t.task_id).collect::<Vec<_>>(), ids[10..20]);
        let none = store.status(&job, None, None, 10, Some(&failed)).await.unwrap().unwrap();
        assert_eq!(none.tasks_matched, Some(0));
    }
    assert_eq!(backend.scanned(), scanned, "re-reads of an unchanged job read no entry again");

    // Another orchestrator fails one task and dispatches another.
    let other = JobStore::with_backend(backend.clone());
    let fail = |t: &mut TaskEntry| {
        t.status = Some(TaskStatus::Failed);
        true
    };
    other.update_task(&job, &ids[42], fail).await.unwrap().expect("changed");
    let newest = run_task(&other, &job, "call-200").await;
    let scanned = backend.scanned();
    let matched = store.status(&job, None, None, 10, Some(&failed)).await.unwrap().unwrap();
    assert_eq!((matched.tasks_matched, matched.job.tasks[0].task_id), (Some(1), ids[42]));
    let last = store.status(&job, None, Some(ids[199]), 10, None).await.unwrap().unwrap();
    assert_eq!((last.job.tasks.len(), last.job.tasks[0].task_id, last.next_after), (1, newest, None));
    assert!(backend.scanned() - scanned <= 8, "only the writes since were read: {}", backend.scanned() - scanned);

    // And the failed one completes again: it leaves the filter.
    let complete = |t: &mut TaskEntry| {
        t.status = Some(TaskStatus::Completed);
        true
    };
    other.update_task(&job, &ids[42], complete).await.unwrap().expect("changed");
    let gone = store.status(&job, None, None, 10, Some(&failed)).await.unwrap().unwrap();
    assert_eq!((gone.tasks_matched, gone.job.tasks.len()), (Some(0), 0));
}

#[tokio::test]
async fn a_dispatch_key_finds_its_task_after_a_restart_even_between_its_two_writes() {
    let (store, backend, job) = store_with_job().await;
    let task = run_task(&store, &job, "map:m1:7").await;
    // A new orchestrator over the same bucket.
    let restarted = JobStore::with_backend(backend.clone());
    assert_eq!(restarted.task_by_key(&job, "map:m1:7").await.unwrap().unwrap().task_id, task);
    let again = TaskEntry::dispatched(TaskId::new(), finance(), "dup".into(), "map:m1:7".into());
    assert_eq!(restarted.add_task(&job, again).await.unwrap().task_id, task, "the key's first task");

    // Stopped after claiming the key, before writing the entry: the entry is
    // written under the claimed id, not a second one.
    let claimed = TaskId::new();
    backend.put_raw(&job_keys::index(&job, "call 9"), Bytes::from(claimed.to_string()));
    let entry = TaskEntry::dispatched(TaskId::new(), finance(), "nine".into(), "call 9".into());
    assert_eq!(restarted.add_task(&job, entry).await.unwrap().task_id, claimed);
    assert_eq!(restarted.get(&job).await.unwrap().unwrap().tasks_total, 2);
}

#[tokio::test]
async fn a_record_of_the_old_layout_with_inline_tasks_is_read() {
    let backend = Arc::new(FakeJobs::default());
    let job = JobId::new();
    let mut rec = JobRecord::new(job, Tenant::new("acme").unwrap(), "old".into());
    for i in 0..3 {
        let mut t = TaskEntry::dispatched(TaskId::new(), finance(), format!("t{i}"), format!("call-{i}"));
        t.published = true;
        t.status = (i > 0).then_some(TaskStatus::Completed);
        rec.tasks.push(t);
    }
    // As the old store wrote it: every task inline, no counts.
    let mut old = serde_json::to_value(&rec).unwrap();
    old.as_object_mut().unwrap().remove("tasks_total");
    old.as_object_mut().unwrap().remove("task_counts");
    backend.put_raw(&job_keys::header(&job), Bytes::from(serde_json::to_vec(&old).unwrap()));
    let store = JobStore::with_backend(backend);

    let reply = store.status(&job, None, None, 2, None).await.unwrap().unwrap();
    assert_eq!((reply.job.tasks_total, reply.job.task_counts.running, reply.job.task_counts.completed), (3, 1, 2));
    assert_eq!(reply.job.tasks.len(), 2);
    let last = store.status(&job, None, reply.next_after, 2, None).await.unwrap().unwrap();
    assert_eq!((last.job.tasks.len(), last.next_after), (1, None));
    let running = store.task_by_key(&job, "call-0").await.unwrap().expect("found inline");
    let ended = |t: &mut TaskEntry| t.status.replace(TaskStatus::Completed).is_none();
    store.update_task(&job, &running.task_id, ended).await.unwrap().expect("changed inline");
    let rec = store.get(&job).await.unwrap().unwrap();
    assert_eq!(rec.task_counts.completed, 3);
}

#[tokio::test]
async fn a_header_too_large_to_store_fails_fast_and_flags_the_job() {
    let (store, backend, job) = store_with_job().await;
    let oversized = store.oversized(&job);
    backend.set_max_value(4096);
    let todos: Vec<Todo> =
        (0..200).map(|i| Todo { content: format!("todo {i} with padding"), status: TodoStatus::Pending }).collect();

    let started = std::time::Instant::now();
    let err = store.set_todos(&job, todos).await.unwrap_err();

    assert_eq!(err.kind(), BusErrorKind::TooLarge);
    assert!(started.elapsed() < std::time::Duration::from_secs(1), "not retried: {:?}", started.elapsed());
    assert!(oversized.is_cancelled(), "the planner is told to fail the job");
    // Once the todos are dropped, they store again.
    store.set_todos(&job, Vec::new()).await.unwrap();
}

#[tokio::test]
async fn a_page_ends_early_rather_than_outgrow_a_message() {
    let (store, _, job) = store_with_job().await;
    for i in 0..1000 {
        let key = format!("call-{i}");
        let entry = TaskEntry::dispatched(TaskId::new(), finance(), format!("task {i}"), key);
        let task = store.add_task(&job, entry).await.unwrap().task_id;
        let long = |t: &mut TaskEntry| {
            t.summary = "x".repeat(1500);
            true
        };
        store.update_task(&job, &task, long).await.unwrap();
    }

    let (mut seen, mut after, mut pages) = (0, None, 0);
    loop {
        let reply = store.status(&job, None, after, 1000, None).await.unwrap().unwrap();
        let size = flotilla_protocol::encode(&reply).len();
        assert!(size <= flotilla_protocol::MAX_MESSAGE_BYTES, "a reply of {size} bytes");
        assert!(!reply.job.tasks.is_empty());
        seen += reply.job.tasks.len();
        pages += 1;
        match reply.next_after {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    assert_eq!(seen, 1000);
    assert!(pages > 1, "1.5 MB of summaries take more than one reply");
}

/// A job's outcome is written through an outage longer than
/// one write's retry budget, and given up only when told to stop.
#[tokio::test(start_paused = true)]
async fn an_outcome_is_retried_through_a_long_outage_until_stored_or_stopped() {
    let (store, backend, job) = store_with_job().await;
    let stop = tokio_util::sync::CancellationToken::new();
    // Enough failed writes to outlast several 60 s retry budgets (paused time).
    backend.fail_next_writes(200);
    let complete = |r: &mut JobRecord| {
        r.status = flotilla_protocol::JobStatus::Completed;
        r.answer = Some("42".into());
    };
    store.update_until_stored(&job, &stop, complete).await.unwrap();
    let stored = backend.stored(&job).unwrap();
    assert_eq!((stored.status, stored.answer.as_deref()), (flotilla_protocol::JobStatus::Completed, Some("42")));

    // Stopped (shutdown, or the lease lost) during an outage: it gives up
    // without storing, leaving the job for its next owner.
    backend.fail_next_writes(usize::MAX);
    stop.cancel();
    let fail = |r: &mut JobRecord| r.status = flotilla_protocol::JobStatus::Failed;
    assert!(store.update_until_stored(&job, &stop, fail).await.is_err());
    assert_eq!(backend.stored(&job).unwrap().status, flotilla_protocol::JobStatus::Completed);
}

#[tokio::test]
async fn listing_pages_newest_first_with_filters_and_a_cursor() {
    use super::ListQuery;
    use flotilla_protocol::JobStatus;
    let store = JobStore::with_backend(Arc::new(FakeJobs::default()));
    let acme = Tenant::new("acme").unwrap();
    let mut ids = Vec::new();
    for i in 0..7 {
        let id = JobId::new();
        let tenant = if i == 3 { Tenant::new("other").unwrap() } else { acme.clone() };
        store.insert(JobRecord::new(id, tenant, format!("job {i}"))).await.unwrap();
        if i % 2 == 0 {
            store.update(&id, |r| r.status = JobStatus::Completed).await.unwrap();
        }
        ids.push(id);
    }
    let mine: Vec<JobId> = ids.iter().rev().copied().filter(|id| *id != ids[3]).collect();
    let mut q = ListQuery::new(Some(acme.clone()), 4);
    let first = store.list(&q).await.unwrap();
    assert_eq!(first.jobs.iter().map(|j| j.id).collect::<Vec<_>>(), mine[..4], "newest first, tenant only");
    assert_eq!(first.next_after, Some(mine[3]));
    q.after = first.next_after;
    let second = store.list(&q).await.unwrap();
    assert_eq!(second.jobs.iter().map(|j| j.id).collect::<Vec<_>>(), mine[4..]);
    assert_eq!(second.next_after, None, "the last page says so");
    let done = store.list(&ListQuery { status: Some(JobStatus::Completed), ..ListQuery::new(None, 10) }).await.unwrap();
    assert_eq!(done.jobs.iter().map(|j| j.id).collect::<Vec<_>>(), [ids[6], ids[4], ids[2], ids[0]]);
    let failed = store.list(&ListQuery { status: Some(JobStatus::Failed), ..ListQuery::new(None, 10) }).await.unwrap();
    assert!(failed.jobs.is_empty() && failed.next_after.is_none());
    let future = protocol_now() + time::Duration::hours(1);
    let later = store.list(&ListQuery { since: Some(future), ..ListQuery::new(None, 10) }).await.unwrap();
    assert!(later.jobs.is_empty(), "nothing submitted after an hour from now");
    let recent = ListQuery { since: Some(protocol_now() - time::Duration::hours(1)), ..ListQuery::new(None, 10) };
    assert_eq!(store.list(&recent).await.unwrap().jobs.len(), 7);
}

fn protocol_now() -> time::OffsetDateTime {
    flotilla_protocol::now()
}
