//! The planner's todo list: always written whole.

use serde::{Deserialize, Serialize};

/// Where a todo stands. Moves pending -> in_progress -> completed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TodoStatus {
    /// Not started.
    Pending,
    /// Being worked on.
    InProgress,
    /// Done.
    Completed,
}

/// One item of the plan.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Todo {
    /// What is to be done.
    pub content: String,
    /// Its status.
    pub status: TodoStatus,
}
