//! The tool-call record (docs/SECURITY.md, "Audit"): outermost, so every call
//! is recorded exactly once whichever layer stopped it, with the outcome the
//! model reads (after eviction) and the arguments the model sent.

use super::{Call, Layer, Next, Reply};
use crate::audit::Auditor;

/// Records each finished call through the auditor, when there is one.
pub(crate) struct Audit<'s>(pub Option<&'s Auditor>);

#[async_trait::async_trait]
impl Layer for Audit<'_> {
    async fn handle<'a>(&self, call: Call<'a>, next: Next<'a>) -> Reply {
        let (ctx, name, requested) = (call.ctx, call.name, call.requested);
        let reply = next.run(call).await;
        if let Some(auditor) = self.0 {
            let failed = reply.outcome.result.as_ref().err().map(|e| e.kind);
            // Boxed: allocated after the tool ends, not held while it runs.
            Box::pin(auditor.tool_call(ctx.call_site(), name, requested, failed, reply.outcome.duration)).await;
        }
        reply
    }
}
