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

/// `[agent_protocol]`: Flotilla as a host of the protocol (docs/PROTOCOLS.md,
/// "Synadia Agent Protocol for NATS"): the orchestrator process registers
/// the agent `agent` in the `agents` micro service once per tenant of
/// `tenants`, the tenant being the `<owner>` token; each prompt on it is a
/// job of that tenant, streamed back as the protocol's chunks.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentProtocolConfig {
    /// Registers the agent (the `flotilla orchestrator` process runs the host).
    pub enabled: bool,
    /// The agent's name, the `<agent>` token of its subjects (`[a-z0-9-]+`).
    pub agent: String,
    /// The instance name, the `<name>` token (the protocol's session name).
    pub session: String,
    /// The tenants served: one registration each, `owner` = tenant.
    pub tenants: Vec<String>,
    /// Subagent types registered as agents of their own, named after the
    /// type, for every served tenant: a prompt on one runs one task of that
    /// type (a direct job, no planner) and streams its report back.
    pub subagents: Vec<String>,
    /// Seconds between heartbeats (`agents.hb.…`), 1 to 300.
    pub heartbeat_secs: u64,
    /// Seconds a running prompt's stream may stay quiet before an `ack`
    /// status chunk tells the caller it is alive, 1 to 60 (callers time a
    /// stream out after 60 s of silence).
    pub keepalive_secs: u64,
    /// `[agent_protocol.accounts.<tenant>]`: the connection on which a
    /// tenant's registration lives, in that tenant's own NATS account, so no
    /// other tenant's credential can discover it, prompt it or read its
    /// streams (the SDKs reply on the fixed `_INBOX.agents.>`, which NATS
    /// cannot split by user within one account; docs/SECURITY.md). A tenant
    /// without one is registered on the `[nats]` connection.
    pub accounts: std::collections::BTreeMap<String, crate::NatsConfig>,
}

impl Default for AgentProtocolConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            agent: "flotilla".into(),
            session: "default".into(),
            tenants: vec!["default".into()],
            subagents: Vec::new(),
            heartbeat_secs: 30,
            keepalive_secs: 15,
            accounts: Default::default(),
        }
    }
}

impl AgentProtocolConfig {
    /// The checks before a process starts; the error is (key, message).
    pub fn validate(&self) -> Result<(), (String, String)> {
        let token = |key: &str, v: &str, underscore: bool| {
            let ok = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || (underscore && c == '_');
            if v.is_empty() || v.len() > 63 || !v.chars().all(ok) {
                let allowed = if underscore { "a-z, 0-9, '-', '_'" } else { "a-z, 0-9, '-'" };
                return Err((key.to_string(), format!("{v:?} is not a protocol subject token (1 to 63 of {allowed})")));
            }
            Ok(())
        };
        token("agent_protocol.agent", &self.agent, false)?;
        token("agent_protocol.session", &self.session, true)?;
        if self.enabled && self.tenants.is_empty() {
            return Err(("agent_protocol.tenants".into(), "lists no tenant to serve (e.g. [\"default\"])".into()));
        }
        for t in &self.tenants {
            token("agent_protocol.tenants", t, true)?;
            flotilla_protocol::ids::Tenant::new(t)
                .map_err(|e| ("agent_protocol.tenants".to_string(), e.to_string()))?;
        }
        for ty in &self.subagents {
            token("agent_protocol.subagents", ty, false)?;
            if ty == &self.agent {
                return Err((
                    "agent_protocol.subagents".into(),
                    format!("{ty:?} is also agent_protocol.agent: the two registrations would share their subjects"),
                ));
            }
        }
        if let Some(t) = self.accounts.keys().find(|t| !self.tenants.contains(t)) {
            return Err((format!("agent_protocol.accounts.{t}"), format!("{t:?} is not in agent_protocol.tenants")));
        }
        if !(1..=300).contains(&self.heartbeat_secs) {
            return Err(("agent_protocol.heartbeat_secs".into(), "must be 1 to 300 (seconds)".into()));
        }
        if !(1..=60).contains(&self.keepalive_secs) {
            return Err(("agent_protocol.keepalive_secs".into(), "must be 1 to 60 (seconds)".into()));
        }
        Ok(())
    }
}
