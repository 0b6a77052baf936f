//! The map's port onto the planner's shared `Dispatcher`
//! (orchestrator/src/planner/dispatch.rs): the map's own outcome type keeps
//! the loop and its tests independent of the dispatcher's internals.

use async_trait::async_trait;
use flotilla_agent::tool::{ToolContext, ToolError};
use flotilla_protocol::ids::TaskId;

use super::run::{ItemDispatch, ItemOutcome};
use crate::planner::dispatch::Dispatcher;

#[async_trait]
impl ItemDispatch for Dispatcher {
    async fn start(&self, ctx: &ToolContext, ty: &str, description: String, key: &str) -> Result<TaskId, ToolError> {
        Dispatcher::start(self, ctx, ty, description, key).await
    }

    async fn wait(&self, ctx: &ToolContext, task: TaskId) -> Result<ItemOutcome, ToolError> {
        let o = Dispatcher::wait(self, ctx, task).await?;
        Ok(ItemOutcome {
            task_id: o.task_id,
            status: o.status.as_str().to_string(),
            summary: o.summary,
            error: o.error,
            report_path: o.report_path.map(|p| p.as_str().to_string()),
        })
    }
}
