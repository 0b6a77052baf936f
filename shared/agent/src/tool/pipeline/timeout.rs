//! The tool timeout, and cancellation. A tool may ask a person from inside
//! its call (a permission rule with mode `interrupt`, docs/TOOLS.md
//! "Permissions"); that wait is governed by `approval_timeout`
//! (docs/APPROVALS.md), so the tool's clock stops meanwhile. [`Waits`] is the
//! shared stopwatch: the gate the tool asks through starts and ends waits on
//! it ([`Waits::start`]), [`expiry`] reads it.
//!
//! When the timeout fires or the call is cancelled, the inner layers' future
//! is dropped, which aborts the tool's task (pipeline/run.rs).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::{Call, Layer, Next, Reply};
use crate::tool::ToolError;
use flotilla_protocol::ErrorKind;

/// Stops a call that runs longer than its timeout, people's time excluded,
/// or whose context is cancelled.
pub(crate) struct Timeout(pub Duration);

#[async_trait::async_trait]
impl Layer for Timeout {
    async fn handle<'a>(&self, call: Call<'a>, next: Next<'a>) -> Reply {
        let (ctx, name, waits) = (call.ctx, call.name, call.waits.subscribe());
        tokio::select! {
            reply = next.run(call) => reply,
            _ = expiry(self.0, waits) => Reply::refused(ToolError::new(
                ErrorKind::Timeout,
                format!("tool {name} timed out after {}s", self.0.as_secs_f32()),
            )),
            _ = ctx.cancel.cancelled() => Reply::refused(ToolError::new(ErrorKind::Cancelled, "cancelled")),
        }
    }
}

/// How long a running tool has waited for approval decisions, and whether
/// it is waiting now: the tool timeout's clock stops meanwhile.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Paused {
    /// Approval waits in progress.
    waiting: usize,
    /// Since when the current wait runs, when `waiting > 0`.
    since: Option<tokio::time::Instant>,
    /// Finished waits, summed.
    total: Duration,
}

/// The approval waits of one call. The sender lives as long as the call (the
/// [`super::Call`] and any gate handed to the tool hold it), so a closed
/// channel only means the call is over.
#[derive(Clone)]
pub(crate) struct Waits(Arc<watch::Sender<Paused>>);

impl Default for Waits {
    fn default() -> Self {
        Self(Arc::new(watch::Sender::new(Paused::default())))
    }
}

impl Waits {
    /// Starts a wait; it ends when the guard is dropped (also when the wait
    /// is aborted).
    pub fn start(&self) -> Resume {
        self.0.send_modify(|p| {
            p.waiting += 1;
            if p.waiting == 1 {
                p.since = Some(tokio::time::Instant::now());
            }
        });
        Resume(self.0.clone())
    }

    fn subscribe(&self) -> watch::Receiver<Paused> {
        self.0.subscribe()
    }
}

/// Ends one approval wait when dropped.
pub(crate) struct Resume(Arc<watch::Sender<Paused>>);

impl Drop for Resume {
    fn drop(&mut self) {
        self.0.send_modify(|p| {
            p.waiting -= 1;
            if p.waiting == 0
                && let Some(since) = p.since.take()
            {
                p.total += since.elapsed();
            }
        });
    }
}

/// Resolves when the tool has run for `timeout`, approval waits excluded.
async fn expiry(timeout: Duration, mut pause: watch::Receiver<Paused>) {
    let started = tokio::time::Instant::now();
    loop {
        let p = *pause.borrow_and_update();
        if p.waiting > 0 {
            // Stopped clock: wait for the decision.
            if pause.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
            continue;
        }
        let deadline = started + timeout + p.total;
        if tokio::time::Instant::now() >= deadline {
            return;
        }
        tokio::select! {
            _ = tokio::time::sleep_until(deadline) => {}
            _ = pause.changed() => {}
        }
    }
}
