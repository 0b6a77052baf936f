//! The worker's consume loops: one per served subagent type, each pulling from
//! the type's durable consumer only while it has a free slot, so a busy worker
//! never hoards messages that an idle replica could run. One pull asks for as
//! many tasks as there are free slots at that moment, each task delivered
//! taking one of the slots the pull holds; slots a pull did not fill are
//! given back when it ends. A task gives its slot back once its subagent
//! has finished, before its report is stored: the next pull goes out while
//! the report's ack travels, instead of after it.
//!
//! Stopping drains (docs/RELIABILITY.md): on SIGTERM the loops stop pulling,
//! running tasks go on (keeping their in-progress acks) for up to the grace
//! period and report as usual; only what is still running then is handed back.

use std::sync::Arc;
use std::time::Duration;

use flotilla_bus::{TOPOLOGY_BUDGET, TaskConsumer, retry};
use flotilla_retry::Backoff;
use futures::StreamExt;
use tokio_util::task::TaskTracker;

use crate::runtime::SubagentRuntime;
use crate::task::{self, WorkerContext};

/// How long a pull waits for a task before asking again.
const PULL_EXPIRES: Duration = Duration::from_secs(5);

/// How long handed-back tasks get to store their journal marker and send
/// their naks once the grace is over: the process exits within grace + this.
/// One that misses it is redelivered after `ack_wait` and still resumes
/// from its journal.
const HAND_BACK_WAIT: Duration = Duration::from_secs(2);

/// Runs until `ctx.shutdown` fires, then drains: no more pulls, running tasks
/// get up to `grace` to finish, and whatever still runs is handed back.
pub async fn run(ctx: Arc<WorkerContext>, runtimes: Vec<Arc<SubagentRuntime>>, grace: Duration) -> anyhow::Result<()> {
    let tracker = TaskTracker::new();
    let mut loops = Vec::new();
    for rt in runtimes {
        // Retried like the topology: NATS may restart while a worker starts.
        let declare = || async { ctx.bus.tasks().consumer(&rt.ty).await };
        let consumer = retry("declaring the task consumer", TOPOLOGY_BUDGET, declare).await?;
        loops.push(tokio::spawn(consume(ctx.clone(), rt, consumer, tracker.clone())));
    }
    tracing::info!(worker_id = %ctx.worker_id, "worker ready");
    ctx.shutdown.cancelled().await;
    // Each loop ends at once, its pull dropped; none starts a task after the
    // signal or leaves a pulled one behind.
    for l in loops {
        let _ = l.await;
    }
    tracker.close();
    tracing::info!(running = tracker.len(), grace_s = grace.as_secs(), "draining: letting running tasks finish");
    if tokio::time::timeout(grace, tracker.wait()).await.is_err() {
        tracing::warn!(running = tracker.len(), "grace period over: handing the running tasks back");
        ctx.hand_back.cancel();
        if tokio::time::timeout(HAND_BACK_WAIT, tracker.wait()).await.is_err() {
            tracing::warn!("tasks did not stop in time; the queue redelivers them after ack_wait");
        }
    }
    Ok(())
}

async fn consume(ctx: Arc<WorkerContext>, rt: Arc<SubagentRuntime>, consumer: TaskConsumer, tracker: TaskTracker) {
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
    loop {
        let first = tokio::select! {
            p = rt.slots.clone().acquire_owned() => p,
            _ = ctx.shutdown.cancelled() => return,
        };
        let Ok(first) = first else { return };
        // The slots this pull holds, one per task it asks for.
        let mut slots = vec![first];
        while let Ok(more) = rt.slots.clone().try_acquire_owned() {
            slots.push(more);
        }
        if ctx.shutdown.is_cancelled() {
            return;
        }
        // Cut short on shutdown: a task that arrives after the signal must not
        // start on a draining worker. Dropping the pull ends its inbox's
        // interest, so the server keeps the next task for another worker.
        let pull = tokio::select! {
            pull = consumer.pull(slots.len(), PULL_EXPIRES) => pull,
            _ = ctx.shutdown.cancelled() => return,
        };
        let pull = match pull {
            Ok(pull) => pull,
            Err(e) => {
                tracing::warn!(subagent_type = %rt.ty, error = %e, "pull failed; retrying");
                drop(slots);
                tokio::time::sleep(backoff.next_delay()).await;
                continue;
            }
        };
        let mut pull = std::pin::pin!(pull);
        loop {
            let delivered = tokio::select! {
                delivered = pull.next() => delivered,
                _ = ctx.shutdown.cancelled() => return,
            };
            match delivered {
                Some(Ok(delivery)) if ctx.shutdown.is_cancelled() => {
                    // Delivered as the signal came: back to the queue at once.
                    if let Err(e) = delivery.hand_back(None).await {
                        tracing::warn!(error = %e, "a task delivered during shutdown was not handed back; ack_wait redelivers it");
                    }
                    return;
                }
                Some(Ok(delivery)) => {
                    backoff.reset();
                    // The server delivers at most the tasks asked for.
                    let Some(slot) = slots.pop() else {
                        tracing::warn!(subagent_type = %rt.ty, "a pull delivered more tasks than it asked for; handing one back");
                        if let Err(e) = delivery.hand_back(None).await {
                            tracing::warn!(error = %e, "the extra task was not handed back; ack_wait redelivers it");
                        }
                        continue;
                    };
                    let (ctx, rt) = (ctx.clone(), rt.clone());
                    tracker.spawn(task::handle(ctx, rt, delivery, slot));
                }
                Some(Err(e)) => {
                    tracing::warn!(subagent_type = %rt.ty, error = %e, "pull failed; retrying");
                    drop(slots);
                    tokio::time::sleep(backoff.next_delay()).await;
                    break;
                }
                // All asked for came, or the wait expired: ask again.
                None => break,
            }
        }
    }
}
