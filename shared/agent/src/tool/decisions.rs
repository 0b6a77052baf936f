//! Which decisions may be recorded on an approval request (docs/APPROVALS.md):
//! the request must still be pending and unexpired, the tool's policy must
//! offer the decision, and edited arguments or elicitation content must fit
//! their schema. The orchestrator checks before it records a decision, the
//! worker's gate again before it acts on one; both read the same rules here,
//! next to the gate, and the bus only stores the records.

use flotilla_protocol::{ApprovalRecord, ApprovalRequest, ApprovalState, Decision, DecisionKind};

use super::schema_problems;

/// Why a decision cannot be recorded.
#[derive(Debug, thiserror::Error, PartialEq)]
#[non_exhaustive]
pub enum DecisionError {
    /// The request was answered already.
    #[error("call {call_id} was already answered ({how})")]
    Settled {
        /// The call.
        call_id: String,
        /// What happened to it.
        how: String,
    },
    /// The request's deadline passed.
    #[error("the approval request for call {call_id} expired at {at}; the call was rejected")]
    Expired {
        /// The call.
        call_id: String,
        /// Its deadline.
        at: String,
    },
    /// The request's job was cancelled while it waited.
    #[error("the approval request for call {call_id} was cancelled with its job ({reason}); the call was not run")]
    Cancelled {
        /// The call.
        call_id: String,
        /// The job's cancel reason.
        reason: String,
    },
    /// The policy does not offer this decision for the tool.
    #[error("{decision} is not allowed for {tool} (allowed: {allowed})")]
    NotAllowed {
        /// The refused decision.
        decision: DecisionKind,
        /// The tool.
        tool: String,
        /// What is allowed.
        allowed: String,
    },
    /// Edited arguments do not fit the tool's input schema.
    #[error("the edited arguments do not fit {tool}: {problems}")]
    InvalidEdit {
        /// The tool.
        tool: String,
        /// What is wrong.
        problems: String,
    },
    /// Elicitation content does not fit the requested schema.
    #[error("the content does not fit the schema {server} asked for: {problems}")]
    InvalidContent {
        /// The MCP server that asked.
        server: String,
        /// What is wrong.
        problems: String,
    },
}

/// Checks that `decision` may be recorded on `record` at `now`: still pending,
/// not expired, allowed by the tool's policy and, for an edit, arguments that
/// fit the tool's input schema (the worker validates them again).
pub fn check_decision(
    record: &ApprovalRecord,
    decision: &Decision,
    now: time::OffsetDateTime,
) -> Result<(), DecisionError> {
    let r = &record.request;
    match &record.state {
        ApprovalState::Pending => {}
        ApprovalState::Decided { decision, by, .. } | ApprovalState::Used { decision, by, .. } => {
            let by = by.as_deref().map(|b| format!(" by {b}")).unwrap_or_default();
            return Err(DecisionError::Settled { call_id: r.call_id.clone(), how: format!("{}{by}", decision.kind()) });
        }
        ApprovalState::Expired { .. } => {
            return Err(DecisionError::Settled { call_id: r.call_id.clone(), how: "expired unanswered".into() });
        }
        ApprovalState::Cancelled { reason, .. } => {
            return Err(DecisionError::Cancelled { call_id: r.call_id.clone(), reason: reason.clone() });
        }
    }
    if now >= r.expires_at {
        let at = r.expires_at.format(&time::format_description::well_known::Rfc3339).unwrap_or_default();
        return Err(DecisionError::Expired { call_id: r.call_id.clone(), at });
    }
    if !r.decisions.contains(&decision.kind()) {
        let allowed: Vec<_> = r.decisions.iter().map(|d| d.as_str()).collect();
        return Err(DecisionError::NotAllowed {
            decision: decision.kind(),
            tool: r.tool.clone(),
            allowed: allowed.join(", "),
        });
    }
    if let Decision::Accept { content } = decision {
        check_content(r, content)?;
    }
    if let Decision::Edit { args } = decision {
        let invalid = |problems: String| DecisionError::InvalidEdit { tool: r.tool.clone(), problems };
        if !args.is_object() {
            return Err(invalid("arguments must be a JSON object".into()));
        }
        if !r.input_schema.is_null() {
            let validator = jsonschema::validator_for(&r.input_schema).map_err(|e| invalid(e.to_string()))?;
            let problems = schema_problems(&validator, args);
            if !problems.is_empty() {
                return Err(invalid(problems.join("; ")));
            }
        }
    }
    Ok(())
}

/// Checks that `content` answers `request`'s question (elicitation): a JSON
/// object that fits the requested schema. The orchestrator checks before it
/// records an answer; the worker again before the server gets it.
pub fn check_content(request: &ApprovalRequest, content: &serde_json::Value) -> Result<(), DecisionError> {
    let server = request.server.clone().unwrap_or_else(|| request.tool.clone());
    let invalid = |problems: String| DecisionError::InvalidContent { server: server.clone(), problems };
    if !content.is_object() {
        return Err(invalid("the content must be a JSON object".into()));
    }
    if let Some(schema) = request.requested_schema.as_ref().filter(|s| !s.is_null()) {
        let validator = jsonschema::validator_for(schema).map_err(|e| invalid(e.to_string()))?;
        let problems = schema_problems(&validator, content);
        if !problems.is_empty() {
            return Err(invalid(problems.join("; ")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_protocol::ids::{JobId, TaskId};
    use std::time::Duration;

    #[test]
    fn decisions_are_checked_against_state_deadline_policy_and_schema() {
        use flotilla_protocol::SCHEMA_VERSION;
        use serde_json::json;
        let now = flotilla_protocol::now();
        let rec = |decisions: Vec<DecisionKind>| ApprovalRecord {
            v: SCHEMA_VERSION,
            request: ApprovalRequest {
                v: SCHEMA_VERSION,
                job_id: JobId::new(),
                task_id: TaskId::new(),
                tenant: Default::default(),
                subagent_type: flotilla_protocol::ids::SubagentType::new("ops").unwrap(),
                worker_id: "w".into(),
                call_id: "c1".into(),
                tool: "deploy".into(),
                args: json!({"env": "staging"}),
                input_schema: json!({"type": "object", "properties": {"env": {"enum": ["staging", "prod"]}},
                                     "required": ["env"], "additionalProperties": false}),
                decisions,
                kind: Default::default(),
                server: None,
                message: None,
                requested_schema: None,
                requested_at: now,
                expires_at: now + Duration::from_secs(60),
            },
            state: ApprovalState::Pending,
            round: 1,
        };
        let all = rec(DecisionKind::ALL.to_vec());
        assert_eq!(check_decision(&all, &Decision::Approve, now), Ok(()));
        assert_eq!(check_decision(&all, &Decision::Edit { args: json!({"env": "prod"}) }, now), Ok(()));
        let e = check_decision(&all, &Decision::Edit { args: json!({"env": "moon"}) }, now).unwrap_err();
        assert!(matches!(e, DecisionError::InvalidEdit { .. }), "{e}");
        let e = check_decision(&all, &Decision::Edit { args: json!("prod") }, now).unwrap_err();
        assert!(e.to_string().contains("JSON object"), "{e}");
        let e = check_decision(&all, &Decision::Approve, now + Duration::from_secs(61)).unwrap_err();
        assert!(matches!(e, DecisionError::Expired { .. }), "{e}");
        let narrow = rec(vec![DecisionKind::Approve, DecisionKind::Reject]);
        let e = check_decision(&narrow, &Decision::Edit { args: json!({"env": "prod"}) }, now).unwrap_err();
        assert_eq!(e.to_string(), "edit is not allowed for deploy (allowed: approve, reject)");
        let mut done = all.clone();
        done.state = ApprovalState::Decided {
            decision: Decision::Approve,
            by: Some("ana".into()),
            principal: None,
            decided_at: now,
        };
        let e = check_decision(&done, &Decision::Reject { reason: None }, now).unwrap_err();
        assert_eq!(e.to_string(), "call c1 was already answered (approve by ana)");

        // An elicitation's content must fit the requested schema; a tool
        // call's decisions are not answers to it.
        let mut asked = rec(DecisionKind::ELICITATION.to_vec());
        asked.request.server = Some("finance".into());
        asked.request.requested_schema = Some(json!({"type": "object",
            "properties": {"approve": {"type": "boolean"}, "note": {"type": "string", "default": "none"}},
            "required": ["approve"]}));
        check_decision(&asked, &Decision::Accept { content: json!({"approve": true}) }, now).unwrap();
        check_decision(&asked, &Decision::Decline, now).unwrap();
        let e = check_decision(&asked, &Decision::Accept { content: json!({"approve": "yes"}) }, now).unwrap_err();
        assert!(matches!(e, DecisionError::InvalidContent { .. }), "{e}");
        assert!(e.to_string().starts_with("the content does not fit the schema finance asked for: "), "{e}");
        let e = check_decision(&asked, &Decision::Accept { content: json!({}) }, now).unwrap_err();
        assert!(e.to_string().contains("approve"), "a missing required field: {e}");
        let e = check_decision(&asked, &Decision::Accept { content: json!([true]) }, now).unwrap_err();
        assert!(e.to_string().contains("JSON object"), "{e}");
        let e = check_decision(&asked, &Decision::Approve, now).unwrap_err();
        assert_eq!(e.to_string(), "approve is not allowed for deploy (allowed: accept, decline, cancel)");
        let e = check_decision(&all, &Decision::Accept { content: json!({}) }, now).unwrap_err();
        assert!(matches!(e, DecisionError::NotAllowed { .. }), "{e}");
    }
}
