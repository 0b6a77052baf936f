//! The map's port onto the planner's shared `Dispatcher`
//! (orchestrator/src/planner/dispatch.rs): the map's own outcome type keeps
//! the loop and its tests independent of the dispatcher's internals.

use async_trait::async_trait;
use flotilla_agent::tool::{ToolContext, ToolError};
use flotilla_protocol::ErrorKind;
use flotilla_protocol::ids::{TaskId, Tenant};

use super::run::{ItemDispatch, ItemOutcome};
use crate::planner::dispatch::Dispatcher;

#[async_trait]
impl ItemDispatch for Dispatcher {
    async fn start(&self, ctx: &ToolContext, ty: &str, description: String, key: &str) -> Result<TaskId, ToolError> {
        Dispatcher::start(self, ctx, ty, description, key).await
    }

    fn max_items(&self, tenant: &Tenant) -> usize {
        self.tenant_limits(tenant).max_map_items
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

/// A map of `total` items within `max` (`[tenants] max_map_items`), or a
/// `limit` error before anything is dispatched: one call must not turn a huge
/// file into as many tasks (docs/SECURITY.md "Tenant quotas and fairness").
pub(super) fn check_item_count(total: usize, max: usize, path: &str) -> Result<(), ToolError> {
    if total <= max {
        return Ok(());
    }
    Err(ToolError::new(
        ErrorKind::Limit,
        format!(
            "{path} holds {total} items; one map_tasks call maps at most {max} ([tenants] max_map_items): \
             split the file and map the parts one after another; nothing was dispatched"
        ),
    ))
}
