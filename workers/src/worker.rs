//! The worker's consume loops: one per served subagent type, each pulling from
//! the type's durable consumer only while it has a free slot, so a busy worker
//! never hoards messages that an idle replica could run.

use std::sync::Arc;
use std::time::Duration;

use flotilla_agent::retry::Backoff;
use futures::StreamExt;
use tokio_util::task::TaskTracker;

use crate::runtime::SubagentRuntime;
use crate::task::{self, WorkerContext};

/// How long a pull waits for a task before asking again.
const PULL_EXPIRES: Duration = Duration::from_secs(5);

/// Runs until `ctx.shutdown` fires, then waits up to `grace` for running tasks.
pub async fn run(ctx: Arc<WorkerContext>, runtimes: Vec<Arc<SubagentRuntime>>, grace: Duration) -> anyhow::Result<()> {
    let tracker = TaskTracker::new();
    let mut loops = Vec::new();
    for rt in runtimes {
        let consumer = ctx.bus.tasks().consumer(&rt.ty).await?;
        loops.push(tokio::spawn(consume(ctx.clone(), rt, consumer, tracker.clone())));
    }
    tracing::info!(worker_id = %ctx.worker_id, "worker ready");
    ctx.shutdown.cancelled().await;
    for l in &loops {
        l.abort();
    }
    tracker.close();
    if tokio::time::timeout(grace, tracker.wait()).await.is_err() {
        tracing::warn!("tasks still running after the grace period; they will be redelivered");
    }
    Ok(())
}

async fn consume(
    ctx: Arc<WorkerContext>,
    rt: Arc<SubagentRuntime>,
    consumer: async_nats::jetstream::consumer::PullConsumer,
    tracker: TaskTracker,
) {
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
    loop {
        let Ok(permit) = rt.slots.clone().acquire_owned().await else { return };
        let batch = consumer.batch().max_messages(1).expires(PULL_EXPIRES).messages().await;
        let mut batch = match batch {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(subagent_type = %rt.ty, error = %e, "pull failed; retrying");
                tokio::time::sleep(backoff.next_delay()).await;
                continue;
            }
        };
        match batch.next().await {
            Some(Ok(msg)) => {
                backoff.reset();
                let (ctx, rt) = (ctx.clone(), rt.clone());
                tracker.spawn(async move {
                    task::handle(ctx, rt, msg).await;
                    drop(permit);
                });
            }
            Some(Err(e)) => {
                tracing::debug!(subagent_type = %rt.ty, error = %e, "pull ended");
                tokio::time::sleep(backoff.next_delay()).await;
            }
            None => {} // expired with no task: ask again
        }
    }
}
