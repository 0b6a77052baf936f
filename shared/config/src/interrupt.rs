//! `[subagents.<type>] interrupt_on` and `approval_timeout`: which tool calls
//! wait for a person (human in the loop, docs/APPROVALS.md).
//!
//! Keys are the final tool names the model sees (with any MCP prefix): a key naming no tool of the type is a config error, because a
//! misspelt key would otherwise silently switch approval off.

use serde::{Deserialize, Serialize};

use flotilla_protocol::DecisionKind;

/// One `interrupt_on` entry: `{ decisions = ["approve", "reject", "edit"] }`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct InterruptConfig {
    /// What a reviewer may answer (default: all three).
    #[serde(default = "all_decisions")]
    pub decisions: Vec<DecisionKind>,
}

impl Default for InterruptConfig {
    fn default() -> Self {
        Self { decisions: all_decisions() }
    }
}

fn all_decisions() -> Vec<DecisionKind> {
    DecisionKind::ALL.to_vec()
}

/// Default seconds an approval request waits before the call is rejected.
pub fn default_approval_timeout() -> u64 {
    300
}
