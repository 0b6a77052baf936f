//! Large results leave the conversation (docs/TOOLS.md, "Large results travel
//! by reference"): the policy is [`crate::tool::Eviction`]; this layer applies
//! it to every call's outcome, so no tool needs to know about it.

use super::{Call, Layer, Next, Reply};
use crate::tool::Eviction;

/// Replaces oversized successful results by a reference to their job file.
pub(crate) struct Evict<'s>(pub Option<&'s Eviction>);

#[async_trait::async_trait]
impl Layer for Evict<'_> {
    async fn handle<'a>(&self, call: Call<'a>, next: Next<'a>) -> Reply {
        let (ctx, name) = (call.ctx, call.name);
        let mut reply = next.run(call).await;
        if let Some(eviction) = self.0 {
            // Boxed: allocated after the tool ends, not held while it runs.
            Box::pin(eviction.apply(ctx, name, &mut reply.outcome)).await;
        }
        reply
    }
}
