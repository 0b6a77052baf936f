//! `task(description, subagent_type)` (seed 000 section 2.5): delegates one
//! self-contained piece of work to a subagent type over the bus and returns
//! its report. Parallel calls in one planner turn are parallel tasks; a failed
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
use serde_json::{Value, json};

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
        )
    }

    async fn call(&self, ctx: &ToolContext, args: Value) -> Result<Value, ToolError> {
        let Args { description, subagent_type } =
            serde_json::from_value(args).map_err(|e| ToolError::validation(e.to_string()))?;
        let ty = self.dispatcher.subagent_type(&subagent_type)?;
        let task = self.dispatcher.start(ctx, &subagent_type, description, ctx.call_key()).await?;
        let outcome = self.dispatcher.wait(ctx, task).await?;
        tool_result(&outcome).ok_or_else(|| outcome.error(&ty))
    }
}

/// The tool result of a completed task: its summary, or, when the report was
/// too large for a message, the reference to the full report in the job files.
/// `None` for a task that did not complete (see [`TaskOutcome::error`]).
pub fn tool_result(outcome: &TaskOutcome) -> Option<Value> {
    match (outcome.status, &outcome.report_file) {
        (TaskStatus::Completed, Some(file)) => Some(json!({
            "report_file": file,
            "note": "the report is too large to show here; read report_file.path with read_file or grep",
        })),
        (TaskStatus::Completed, None) => Some(Value::String(outcome.summary.clone())),
        _ => None,
    }
}
