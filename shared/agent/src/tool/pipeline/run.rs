//! The end of the pipeline: the tool itself, in its own task. Spawned so a
//! panicking tool becomes a `bug` error that names only the trace (the detail
//! goes to the log), not a dead agent; aborted when this future is dropped
//! (timeout, cancellation, the agent's wall-time limit), so no tool keeps
//! running after its agent gave up on it.

use tokio_util::task::AbortOnDropHandle;

use super::{Call, Reply};
use crate::tool::{ToolError, ToolOutcome};
use flotilla_protocol::ErrorKind;

/// Runs the tool of `call` with its (maybe edited) arguments and the gate the
/// layers prepared for it.
pub(super) async fn isolated(call: Call<'_>) -> Reply {
    let tool = match call.entry() {
        Ok(entry) => entry.tool.clone(),
        Err(e) => return Reply::refused(e),
    };
    let (name, traceparent) = (call.name, call.ctx.traceparent.as_deref());
    let mut ctx = call.ctx.clone();
    ctx.approvals = call.gate;
    let args = call.args.into_owned();
    // In the caller's span, so the tool's log lines keep job, task and trace ids.
    let task =
        tokio::spawn(tracing::Instrument::in_current_span(async move { tool.call_with_artifact(&ctx, args).await }));
    match AbortOnDropHandle::new(task).await {
        Ok((result, artifact)) => {
            Reply { outcome: ToolOutcome { result, duration: Default::default(), artifact }, from_tool: true }
        }
        Err(join) => {
            tracing::error!(tool = name, call_id = %call.ctx.call_id, traceparent = ?traceparent, error = %join, "tool panicked");
            Reply::refused(ToolError::new(
                ErrorKind::Bug,
                format!("internal error in tool {name}; reported under trace {}", traceparent.unwrap_or("-")),
            ))
        }
    }
}
