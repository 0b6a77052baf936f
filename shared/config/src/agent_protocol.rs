//! The Synadia Agent Protocol for NATS (docs/PROTOCOLS.md): a subagent type
//! backed by a protocol agent (`[subagents.<type>] agent = { … }`).

use serde::{Deserialize, Serialize};

/// `[subagents.<type>] agent = { name, owner }`: the protocol agent that
/// runs this type's tasks.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct AgentRef {
    /// The agent's name, as it registered in the `agents` service.
    pub name: String,
    /// The agent's owner: the `<owner>` token of its prompt subject.
    pub owner: String,
}
