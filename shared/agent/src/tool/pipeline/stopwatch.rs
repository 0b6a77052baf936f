//! How long a call took, as the model and the audit record see it: from
//! lookup to the end of eviction, approval waits included.

use std::time::Instant;

use super::{Call, Layer, Next, Reply};

/// Sets [`crate::tool::ToolOutcome::duration`] to the time the inner layers took.
pub(crate) struct Stopwatch;

#[async_trait::async_trait]
impl Layer for Stopwatch {
    async fn handle<'a>(&self, call: Call<'a>, next: Next<'a>) -> Reply {
        let started = Instant::now();
        let mut reply = next.run(call).await;
        reply.outcome.duration = started.elapsed();
        reply
    }
}
