//! A follow-up message to a running task: instructions the planner sends
//! with `message_task` (orchestrator/src/planner/async_tasks.rs) after the
//! task started. The worker running the task feeds it to the subagent as a
//! user message before its next model call (workers/src/inbox.rs). Subject
//! and stream: docs/PROTOCOL.md, "Follow-up messages".

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use super::Message;
use crate::ids::{JobId, SubagentType, TaskId};

/// Most bytes of text one follow-up message may carry: instructions, not
/// data (data goes to a job file the message names).
pub const MAX_FOLLOW_UP_BYTES: usize = 16 * 1024;

/// Published on `<prefix>.job.<tenant>.<job>.message.<type>.<task>` (kept in
/// the `<PREFIX>_MESSAGES` stream) with `Nats-Msg-Id` = `message:<id>`.
/// Readers accept unknown fields (a newer planner may add some).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FollowUp {
    /// Schema version.
    #[serde(default = "super::schema_version")]
    pub v: u32,
    /// This message (the planner's tool call id: a replayed call is deduplicated).
    pub id: String,
    /// The job.
    pub job_id: JobId,
    /// The task it is for.
    pub task_id: TaskId,
    /// That task's subagent type: the type token of the subject, so only a
    /// worker of this type may read it (docs/SECURITY.md).
    pub subagent_type: SubagentType,
    /// The instructions, at most [`MAX_FOLLOW_UP_BYTES`] bytes.
    pub text: String,
    /// When the planner sent it.
    #[serde(with = "time::serde::rfc3339")]
    pub sent_at: OffsetDateTime,
}

impl Message for FollowUp {
    const NAME: &'static str = "follow-up message";
}

impl FollowUp {
    /// Checks what a reader must not trust blindly: the text is non-empty,
    /// within [`MAX_FOLLOW_UP_BYTES`], and the message is for `task` of type `ty`.
    pub fn check(&self, task: &TaskId, ty: &SubagentType) -> Result<(), String> {
        if &self.task_id != task {
            return Err(format!("follow-up {} is for task {}, not {task}", self.id, self.task_id));
        }
        if &self.subagent_type != ty {
            return Err(format!("follow-up {} is for type {}, not {ty}", self.id, self.subagent_type));
        }
        check_text(&self.text)
    }
}

/// Whether `text` may be sent as a follow-up message (the planner checks
/// before publishing, the worker again on receipt).
pub fn check_text(text: &str) -> Result<(), String> {
    if text.trim().is_empty() {
        return Err("the message text is empty".into());
    }
    if text.len() > MAX_FOLLOW_UP_BYTES {
        return Err(format!(
            "the message text is {} bytes, over the {MAX_FOLLOW_UP_BYTES} byte limit; write long material to a job file and name it in the message",
            text.len()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(text: &str) -> FollowUp {
        FollowUp {
            v: 1,
            id: "call-7".into(),
            job_id: JobId::new(),
            task_id: TaskId::new(),
            subagent_type: SubagentType::new("finance").unwrap(),
            text: text.into(),
            sent_at: crate::now(),
        }
    }

    #[test]
    fn a_follow_up_round_trips_and_tolerates_unknown_fields() {
        let m = msg("also cover the south region");
        let mut v: serde_json::Value = serde_json::from_slice(&crate::encode(&m)).unwrap();
        v["priority"] = "high".into();
        let back: FollowUp = crate::decode(v.to_string().as_bytes()).unwrap();
        assert_eq!(back, m);
    }

    #[test]
    fn empty_oversized_and_misaddressed_messages_are_refused() {
        let m = msg("  ");
        let ty = m.subagent_type.clone();
        assert!(m.check(&m.task_id, &ty).unwrap_err().contains("empty"));
        let m = msg(&"x".repeat(MAX_FOLLOW_UP_BYTES + 1));
        assert!(m.check(&m.task_id, &ty).unwrap_err().contains("byte limit"));
        let m = msg("ok");
        assert!(m.check(&TaskId::new(), &ty).unwrap_err().contains("not"));
        let legal = SubagentType::new("legal").unwrap();
        assert!(m.check(&m.task_id, &legal).unwrap_err().contains("type finance"));
        assert_eq!(m.check(&m.task_id, &ty), Ok(()));
    }
}
