//! `[tenants]`: what one tenant may take of a shared deployment, so a tenant
//! that floods the job API, the planning slots or a subagent type's queue
//! cannot starve another (docs/SECURITY.md "Tenant quotas and fairness",
//! keys in docs/CONFIG.md). `[nats.consumers]`: how long a JetStream
//! consumer a client left lives, and how many the client-reachable streams hold.
//!
//! Every limit applies to each tenant on its own; `[tenants.overrides.<tenant>]`
//! changes some of them for one tenant.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The limits of one tenant.
#[derive(Clone, Debug, PartialEq)]
pub struct TenantLimits {
    /// Jobs of the tenant one orchestrator plans at once (of its
    /// `[planner] concurrency` slots); the others wait, taking turns with
    /// other tenants' waiting jobs.
    pub max_running_jobs: usize,
    /// Unfinished jobs (waiting or running) the tenant may have; a submit
    /// past it is refused with a `limit` error.
    pub max_queued_jobs: usize,
    /// Tasks of the tenant published and not yet ended, per orchestrator: a
    /// `task` or `map_tasks` item waits for a free place, `start_task` is
    /// refused with a `limit` error. This bounds how far one tenant's tasks
    /// can run ahead of another's in a subagent type's queue.
    pub max_tasks_in_flight: usize,
    /// Items one `map_tasks` call may map.
    pub max_map_items: usize,
    /// Job API requests per second the tenant may make (a token bucket).
    pub api_rate: f64,
    /// Requests the bucket holds: a burst above `api_rate` this long.
    pub api_burst: u32,
}

impl Default for TenantLimits {
    fn default() -> Self {
        Self {
            max_running_jobs: 8,
            max_queued_jobs: 1000,
            max_tasks_in_flight: 1024,
            // The largest map Flotilla is measured at (docs/PERFORMANCE.md).
            max_map_items: 100_000,
            // Every `submit --wait` and `watch` polls about once a second; a
            // tenant with a hundred of them open stays under this.
            api_rate: 200.0,
            api_burst: 1000,
        }
    }
}

/// `[tenants.overrides.<tenant>]`: the keys set here replace `[tenants]`'s.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
#[allow(missing_docs)] // the keys of [`TenantLimits`]
pub struct TenantOverride {
    pub max_running_jobs: Option<usize>,
    pub max_queued_jobs: Option<usize>,
    pub max_tasks_in_flight: Option<usize>,
    pub max_map_items: Option<usize>,
    pub api_rate: Option<f64>,
    pub api_burst: Option<u32>,
}

/// `[tenants]`: the limits of every tenant (the keys of [`TenantLimits`]),
/// and their overrides.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
#[allow(missing_docs)] // the keys of [`TenantLimits`]
pub struct TenantsConfig {
    pub max_running_jobs: usize,
    pub max_queued_jobs: usize,
    pub max_tasks_in_flight: usize,
    pub max_map_items: usize,
    pub api_rate: f64,
    pub api_burst: u32,
    /// Other limits for some tenants, by tenant name.
    pub overrides: BTreeMap<String, TenantOverride>,
}

impl Default for TenantsConfig {
    fn default() -> Self {
        let d = TenantLimits::default();
        Self {
            max_running_jobs: d.max_running_jobs,
            max_queued_jobs: d.max_queued_jobs,
            max_tasks_in_flight: d.max_tasks_in_flight,
            max_map_items: d.max_map_items,
            api_rate: d.api_rate,
            api_burst: d.api_burst,
            overrides: BTreeMap::new(),
        }
    }
}

impl TenantsConfig {
    /// The limits every tenant gets unless overridden.
    pub fn defaults(&self) -> TenantLimits {
        TenantLimits {
            max_running_jobs: self.max_running_jobs,
            max_queued_jobs: self.max_queued_jobs,
            max_tasks_in_flight: self.max_tasks_in_flight,
            max_map_items: self.max_map_items,
            api_rate: self.api_rate,
            api_burst: self.api_burst,
        }
    }

    /// The limits of `tenant`.
    pub fn limits(&self, tenant: &str) -> TenantLimits {
        let mut l = self.defaults();
        if let Some(o) = self.overrides.get(tenant) {
            l.max_running_jobs = o.max_running_jobs.unwrap_or(l.max_running_jobs);
            l.max_queued_jobs = o.max_queued_jobs.unwrap_or(l.max_queued_jobs);
            l.max_tasks_in_flight = o.max_tasks_in_flight.unwrap_or(l.max_tasks_in_flight);
            l.max_map_items = o.max_map_items.unwrap_or(l.max_map_items);
            l.api_rate = o.api_rate.unwrap_or(l.api_rate);
            l.api_burst = o.api_burst.unwrap_or(l.api_burst);
        }
        l
    }

    /// Checks every value; `Err((key, message))` names the first bad one.
    pub fn check(&self) -> Result<(), (String, String)> {
        let sections = std::iter::once(("tenants".to_string(), self.defaults()))
            .chain(self.overrides.keys().map(|t| (format!("tenants.overrides.{t}"), self.limits(t))));
        for (section, l) in sections {
            let bad = |k: &str, m: &str| Err((format!("{section}.{k}"), m.to_string()));
            if l.max_running_jobs == 0 {
                return bad("max_running_jobs", "must be at least 1 (jobs of one tenant planned at once)");
            }
            if l.max_queued_jobs == 0 {
                return bad("max_queued_jobs", "must be at least 1 (unfinished jobs of one tenant)");
            }
            if l.max_tasks_in_flight == 0 {
                return bad("max_tasks_in_flight", "must be at least 1 (tasks of one tenant in flight)");
            }
            if l.max_map_items == 0 {
                return bad("max_map_items", "must be at least 1 (items of one map_tasks call)");
            }
            if !(l.api_rate.is_finite() && l.api_rate > 0.0) {
                return bad("api_rate", "must be a number above 0 (job API requests per second)");
            }
            if l.api_burst == 0 {
                return bad("api_burst", "must be at least 1 (requests above the rate in one burst)");
            }
        }
        Ok(())
    }
}

/// `[nats.consumers]`: the JetStream consumers clients create on the streams
/// their credential reaches (events and audit, deploy/nats/roles.conf).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ClientConsumers {
    /// Seconds a consumer nobody reads from lives: the streams' consumer
    /// limit, so even a durable consumer a client creates with a raw NATS
    /// client expires (and one asking for longer is refused).
    pub inactive_secs: u64,
    /// Consumers each of those streams holds at most (all clients together).
    pub max_per_stream: i32,
}

/// The shortest `[nats.consumers] inactive_secs`: what the ordered consumers
/// Flotilla's clients follow events with ask for.
pub const MIN_INACTIVE_SECS: u64 = 30;

impl Default for ClientConsumers {
    fn default() -> Self {
        Self { inactive_secs: 300, max_per_stream: 10_000 }
    }
}

impl ClientConsumers {
    /// The inactive threshold as a duration.
    pub fn inactive(&self) -> Duration {
        Duration::from_secs(self.inactive_secs)
    }

    /// Checks the values; `Err((key, message))` names the bad one.
    pub fn check(&self) -> Result<(), (String, String)> {
        // The ordered consumers of async-nats (event follows) ask for 30 s,
        // and a stream refuses a consumer asking for more than its limit.
        if !(MIN_INACTIVE_SECS..=86_400).contains(&self.inactive_secs) {
            return Err((
                "nats.consumers.inactive_secs".into(),
                format!("must be {MIN_INACTIVE_SECS} to 86400 (seconds an unread consumer lives)"),
            ));
        }
        if self.max_per_stream < 1 {
            return Err((
                "nats.consumers.max_per_stream".into(),
                "must be at least 1 (consumers on the events and audit streams)".into(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_override_replaces_only_its_keys_and_bad_values_name_their_key() {
        let mut c = TenantsConfig::default();
        c.overrides.insert("acme".into(), TenantOverride { max_tasks_in_flight: Some(3), ..Default::default() });
        let acme = c.limits("acme");
        assert_eq!((acme.max_tasks_in_flight, acme.max_running_jobs), (3, TenantLimits::default().max_running_jobs));
        assert_eq!(c.limits("globex"), TenantLimits::default());
        assert!(c.check().is_ok());
        c.overrides.insert("globex".into(), TenantOverride { api_rate: Some(0.0), ..Default::default() });
        assert_eq!(c.check().unwrap_err().0, "tenants.overrides.globex.api_rate");
        let bad = ClientConsumers { inactive_secs: 0, ..Default::default() };
        assert_eq!(bad.check().unwrap_err().0, "nats.consumers.inactive_secs");
    }
}
