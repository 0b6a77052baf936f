//! The tool's own error text is untrusted: it may carry host paths, stack
//! traces or secrets. The model reads a sanitized copy, the log keeps the
//! secret-redacted detail under the trace id (docs/SECURITY.md, "Sanitized
//! errors"). Errors a layer wrote (timeout, cancelled, bug, validation,
//! rejection) pass as written: they name only what the pipeline knows.

use super::{Call, Layer, Next, Reply};

/// Sanitizes errors that came from the tool.
pub(crate) struct Sanitize;

#[async_trait::async_trait]
impl Layer for Sanitize {
    async fn handle<'a>(&self, call: Call<'a>, next: Next<'a>) -> Reply {
        let (name, traceparent) = (call.name, call.ctx.traceparent.as_deref());
        let mut reply = next.run(call).await;
        if reply.from_tool
            && let Err(e) = &mut reply.outcome.result
        {
            let trace = traceparent.and_then(flotilla_protocol::trace::trace_id);
            e.message = crate::sanitize::sanitize_logged(&e.message, &format!("error of tool {name}"), trace);
        }
        reply
    }
}
