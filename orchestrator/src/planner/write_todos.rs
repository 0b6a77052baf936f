//! `write_todos`: the planner's plan, always written
//! whole, stored as the job's todo list (`<job>.todos`, orchestrator/src/jobs.rs)
//! and published as a job event.

use async_trait::async_trait;
use flotilla_agent::tool::{Tool, ToolContext, ToolError, ToolSpec};
use flotilla_protocol::{JobEventKind, Todo};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::jobs::JobStore;

/// Replaces the job's todo list.
pub struct WriteTodos {
    /// Where the list is kept.
    pub jobs: JobStore,
}

#[derive(Deserialize)]
struct Args {
    todos: Vec<Todo>,
}

#[async_trait]
impl Tool for WriteTodos {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "write_todos".into(),
            description: "Replace the whole todo list (pending -> in_progress -> completed).".into(),
            input_schema: json!({
                "type": "object",
                "properties": {"todos": {"type": "array", "items": {
                    "type": "object",
                    "properties": {
                        "content": {"type": "string"},
                        "status": {"enum": ["pending", "in_progress", "completed"]}
                    },
                    "required": ["content", "status"],
                    "additionalProperties": false
                }}},
                "required": ["todos"],
                "additionalProperties": false
            }),
        }
    }

    async fn call(&self, ctx: &ToolContext, args: Value) -> Result<Value, ToolError> {
        let Args { todos } = serde_json::from_value(args).map_err(|e| ToolError::validation(e.to_string()))?;
        let stored = todos.clone();
        self.jobs.set_todos(&ctx.job_id, stored).await.map_err(|e| match e.kind() {
            // The job fails with a `limit` error naming the list (orchestrator/src/planner/mod.rs).
            flotilla_bus::BusErrorKind::TooLarge => ToolError::new(
                flotilla_protocol::ErrorKind::Limit,
                format!("todo list of {} items not saved: too large ({e})", todos.len()),
            ),
            _ => ToolError::transient(format!("todo list not saved: {e}")),
        })?;
        self.jobs.emit(ctx.job_id, JobEventKind::TodosChanged { todos: todos.clone() }).await;
        let done = todos.iter().filter(|t| t.status == flotilla_protocol::TodoStatus::Completed).count();
        Ok(json!(format!("todo list updated: {} items, {done} completed", todos.len())))
    }
}
