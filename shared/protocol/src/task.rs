//! The task message: one delegation from the planner to a subagent type.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use super::Message;
use crate::ids::{JobId, SubagentType, TaskId, Tenant};

/// Published on `<prefix>.task.<subagent_type>` with `Nats-Msg-Id` = task id.
///
/// Only `description` and `subagent_type` come from the planner model; the
/// worker's static config decides the subagent's model, tools and permissions,
/// so nothing here can widen them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskMessage {
    /// Schema version.
    #[serde(default = "super::schema_version")]
    pub v: u32,
    /// The job the task belongs to.
    pub job_id: JobId,
    /// This task (UUIDv7, also the JetStream dedup id).
    pub task_id: TaskId,
    /// Which subagent type runs it.
    pub subagent_type: SubagentType,
    /// The complete brief: goal, inputs, expected output.
    pub description: String,
    /// Owner of the job.
    #[serde(default)]
    pub tenant: Tenant,
    /// Dispatch attempt by the planner, from 1.
    #[serde(default = "one")]
    pub attempt: u32,
    /// When the task must be finished; workers stop it after this.
    #[serde(default, with = "time::serde::rfc3339::option", skip_serializing_if = "Option::is_none")]
    pub deadline: Option<OffsetDateTime>,
    /// W3C traceparent of the dispatching planner step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// When the planner created it.
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
}

fn one() -> u32 {
    1
}

impl Message for TaskMessage {
    const NAME: &'static str = "task message";
}
