//! A worker asks for as many tasks as it has free slots, in one pull, and
//! for none beyond them (workers/src/worker.rs): a task it could not run now
//! stays queued, undelivered, for the next worker that starts.

use flotilla_protocol::QueueStats;
use flotilla_testkit::{Deployment, EventLog, TIMEOUT, TestConfig, eventually};
use serde_json::Value;

use crate::durability::regions;

fn started_on(worker: &'static str) -> impl Fn(&str, &Value) -> bool {
    move |s, v| s.contains(".progress.") && v["event"] == "started" && v["worker_id"] == worker
}

async fn finance_queue(d: &Deployment) -> Option<QueueStats> {
    d.client().queues().await.ok()?.into_iter().find(|q| q.subagent_type.as_str() == "finance")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_takes_as_many_tasks_as_it_has_free_slots_and_leaves_the_rest_queued() {
    // Two slots, two model calls of 4 s per task: w1's two tasks hold both
    // slots for about 8 s, longer than a second worker takes to start.
    let mut d = Deployment::start(0, |url| TestConfig::demo(url, 2, 4000)).await;
    d.add_worker("w1");
    let mut log = EventLog::subscribe(&d.raw.client, "flotilla.job.>").await;
    let job = d.submit(&regions(3)).await;
    log.until_count(TIMEOUT, 2, "two tasks to start on w1", started_on("w1")).await;
    // The third task is delivered to nobody while both of w1's slots are busy.
    let q = eventually(TIMEOUT, "two tasks in flight and one waiting", || async {
        finance_queue(&d).await.filter(|q| q.in_flight + q.pending == 3)
    })
    .await;
    assert_eq!((q.in_flight, q.pending), (2, 1), "w1 holds only what it runs: {q:?}");

    d.add_worker("w2");
    let third = log.until(TIMEOUT, "the third task to start on w2", started_on("w2")).await;
    assert!(third.get("attempt").is_none(), "a first attempt, taken from the queue, not handed back: {third}");
    let end = log.job_end(TIMEOUT).await;
    assert_eq!(end["event"], "completed", "{end}");
    let rec = d.status(job).await;
    let on = |w: &str| rec.tasks.iter().filter(|t| t.worker_id.as_deref() == Some(w)).count();
    assert_eq!((on("w1"), on("w2"), rec.tasks.len()), (2, 1, 3), "{:?}", rec.tasks);
}
