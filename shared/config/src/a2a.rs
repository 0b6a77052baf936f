//! A2A v1.0 (docs/PROTOCOLS.md): a subagent type backed by a remote A2A
//! agent (`[subagents.<type>] a2a = { … }`).

use serde::{Deserialize, Serialize};

/// `[subagents.<type>] a2a = { url, auth }`: the remote A2A agent that runs
/// this type's tasks.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct A2aAgentRef {
    /// The agent's base URL (its card is at `<url>/.well-known/agent-card.json`).
    pub url: String,
    /// How the worker authenticates to it; none by default.
    #[serde(default)]
    pub auth: Option<A2aAuth>,
}

/// Credentials for a remote A2A agent; secrets come from the environment,
/// never from the config file.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq, Default)]
#[serde(deny_unknown_fields)]
pub struct A2aAuth {
    /// Environment variable holding a bearer token.
    #[serde(default)]
    pub bearer_env: Option<String>,
}
