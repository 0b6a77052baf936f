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

/// `[a2a]`: Flotilla's job API as an A2A v1.0 server on the HTTP API's
/// listener (`[dashboard] listen`, docs/PROTOCOLS.md "A2A v1.0"). Off unless
/// `enabled`; needs `[dashboard] listen`, whose tokens authenticate it.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct A2aConfig {
    /// Serve the agent card and the A2A endpoints.
    pub enabled: bool,
    /// The base URL clients reach the listener at (`https://flotilla.example`),
    /// written into the card's interfaces; unset, each card names the URL it
    /// was fetched from (`http://<Host>`).
    pub public_url: Option<String>,
    /// The card's agent name.
    pub name: String,
    /// The card's description; unset, one saying what Flotilla does.
    pub description: Option<String>,
    /// The longest a blocking `SendMessage` waits for its task to end or ask
    /// for input before it answers the task as it stands.
    pub blocking_timeout_secs: u64,
    /// Push notifications (webhooks).
    pub push: A2aPushConfig,
}

impl Default for A2aConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            public_url: None,
            name: "Flotilla".into(),
            description: None,
            blocking_timeout_secs: 60,
            push: A2aPushConfig::default(),
        }
    }
}

/// `[a2a.push]`: webhook delivery of task updates.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct A2aPushConfig {
    /// Accept push-notification configs (the card's `pushNotifications`).
    pub enabled: bool,
    /// Webhooks on loopback and private (RFC 1918, ULA) addresses are
    /// refused unless this is set: a client must not make the server call
    /// into its own network (SSRF). Link-local and metadata addresses are
    /// refused always (`url_policy`).
    pub allow_private: bool,
    /// Plain `http` webhooks beyond loopback (https otherwise).
    pub allow_insecure_http: bool,
    /// Tries per notification before it is dropped (with the workspace backoff).
    pub attempts: u32,
    /// Each try's time limit.
    pub timeout_secs: u64,
    /// Most webhooks one task may have.
    pub max_configs_per_task: usize,
}

impl Default for A2aPushConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            allow_private: false,
            allow_insecure_http: false,
            attempts: 5,
            timeout_secs: 10,
            max_configs_per_task: 10,
        }
    }
}

impl A2aConfig {
    /// Refuses values that cannot work, naming the key.
    pub fn validate(&self) -> Result<(), String> {
        if self.blocking_timeout_secs == 0 {
            return Err("[a2a] blocking_timeout_secs = 0: give at least 1".into());
        }
        if self.push.attempts == 0 || self.push.timeout_secs == 0 || self.push.max_configs_per_task == 0 {
            return Err("[a2a.push] attempts, timeout_secs and max_configs_per_task must be at least 1".into());
        }
        if let Some(url) = &self.public_url
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            return Err(format!("[a2a] public_url = {url:?}: give an http:// or https:// URL"));
        }
        Ok(())
    }
}
