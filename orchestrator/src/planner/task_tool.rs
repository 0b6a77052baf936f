//! `task(description, subagent_type)`: delegates one
//! self-contained piece of work to a subagent type over the bus and returns
//! its report. Parallel calls in one planner turn are parallel tasks (up to
//! `[planner] max_in_flight` at once, docs/TOOLS.md); a failed
//! report is an error result for that call only.
//!
//! The call is [`Dispatcher::start`] keyed by its tool call id (so a resumed
//! planner re-attaches instead of dispatching again) followed by
//! [`Dispatcher::wait`] (orchestrator/src/planner/dispatch.rs, where the
//! dispatch logic and its tests live).

use async_trait::async_trait;
use flotilla_agent::tool::{Tool, ToolContext, ToolError, ToolSpec};
use flotilla_protocol::TaskStatus;
use serde::Deserialize;
use serde_json::Value;

use super::dispatch::{Dispatcher, TaskOutcome};

/// Dispatches one task and awaits its report.
pub struct TaskTool {
    /// Dispatch and report consolidation.
    pub dispatcher: Dispatcher,
}

#[derive(Deserialize)]
struct Args {
    description: String,
    subagent_type: String,
}

#[async_trait]
impl Tool for TaskTool {
    fn spec(&self) -> ToolSpec {
        self.dispatcher.delegating_spec(
            "task",
            "Delegate a self-contained task to an isolated subagent; returns its report. \
             The description must hold everything it needs.",
            true,
        )
    }

    async fn call(&self, ctx: &ToolContext, args: Value) -> Result<Value, ToolError> {
        let Args { description, subagent_type } =
            serde_json::from_value(args).map_err(|e| ToolError::validation(e.to_string()))?;
        let ty = self.dispatcher.subagent_type(&subagent_type)?;
        // Boxed: the dispatch's state is not kept for the whole wait.
        let task = Box::pin(self.dispatcher.start(ctx, &subagent_type, description, ctx.call_key())).await?;
        let outcome = self.dispatcher.wait(ctx, task).await?;
        tool_result(&outcome, self.dispatcher.report_tokens()).ok_or_else(|| outcome.error(&ty))
    }
}

/// The tool result of a completed task: its summary when it fits in
/// `report_tokens` tokens (as a value when it is a structured answer,
/// [`crate::reports::structured_answer`]); otherwise the summary cut to that many, with the
/// path of the full report in the job files (`/reports/<task>.md`) and how to
/// read it (orchestrator/src/reports.rs). `None` for a task that did not
/// complete (see [`TaskOutcome::error`]).
pub fn tool_result(outcome: &TaskOutcome, report_tokens: usize) -> Option<Value> {
    if outcome.status != TaskStatus::Completed {
        return None;
    }
    if outcome.report_file.is_none() && flotilla_agent::tokens::within(&outcome.summary, report_tokens) {
        return Some(
            crate::reports::structured_answer(&outcome.summary)
                .unwrap_or_else(|| Value::String(outcome.summary.clone())),
        );
    }
    Some(crate::reports::completed_view(outcome.task_id, &outcome.summary, outcome.report_file.as_ref(), report_tokens))
}
