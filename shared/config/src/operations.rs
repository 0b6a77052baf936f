//! The operator-facing sections: `[worker]` (heartbeats), `[metrics]`
//! (Prometheus endpoints) and `[dashboard]` (the orchestrator's web page).
//! Everything here is off or harmless by default: an endpoint is only opened
//! when an address is configured (or given on the command line).

use std::collections::BTreeMap;
use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

/// `[worker]`: behaviour of every `flotilla-worker` reading this file.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct WorkerConfig {
    /// Seconds between heartbeats on `<prefix>.worker.heartbeat.<worker>`.
    /// A worker's entry in the workers bucket expires after three of them.
    pub heartbeat: u64,
    /// Seconds a worker told to stop (SIGTERM) lets its running tasks finish
    /// before handing the rest back to the queue (docs/RELIABILITY.md).
    /// Keep a pod's `terminationGracePeriodSeconds` above it.
    pub grace: u64,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        Self { heartbeat: 5, grace: 30 }
    }
}

/// `[metrics]`: Prometheus text endpoints (`GET /metrics`). Unset = off.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsConfig {
    /// Listen address of the orchestrator's endpoint, e.g. `"127.0.0.1:9464"`.
    pub orchestrator: Option<SocketAddr>,
    /// Listen address of each worker's endpoint. Port 0 picks a free port per
    /// worker (several workers on one host share one config); the actual URL
    /// is advertised in the worker's heartbeat and shown by `flotilla workers`.
    pub worker: Option<SocketAddr>,
}

/// `[dashboard]`: the orchestrator's web dashboard and HTTP API
/// (docs/HTTP_API.md). Unset = off. It shows every tenant's jobs, so it
/// answers only requests addressed to one of its own names (the Host check
/// against DNS rebinding) and, with tokens configured, only requests carrying
/// one: the admin token (`token_env`) or a tenant's (`tenants.<name>.token_env`)
/// (docs/OPERATIONS.md, "Dashboard").
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct DashboardConfig {
    /// Listen address, e.g. `"127.0.0.1:8080"`.
    pub listen: Option<SocketAddr>,
    /// Host names (or IP addresses) the dashboard answers to besides
    /// `localhost`, `127.0.0.1`, `[::1]` and the `listen` address itself,
    /// e.g. `["dash.example.com"]`: the name in the browser's address bar,
    /// without the port. Any other `Host` gets 421.
    pub allowed_hosts: Vec<String>,
    /// Name of the environment variable holding the admin bearer token (read
    /// once at start, at least 16 characters), e.g. `"FLOTILLA_DASHBOARD_TOKEN"`:
    /// it sees every tenant and acts for any (`?tenant=`). Unset = no admin
    /// token. A non-loopback `listen` address needs this or a tenant token.
    pub token_env: Option<String>,
    /// Per-tenant API tokens, `[dashboard.tenants.<tenant>] token_env = "…"`:
    /// a tenant's token sees and acts on that tenant's jobs only.
    pub tenants: BTreeMap<String, DashboardTenant>,
    /// Serve a non-loopback `listen` address without a token, for a dashboard
    /// behind an authenticating reverse proxy that is the only way in.
    pub insecure_no_token: bool,
    /// Seconds a connection may take to send a request's headers, also the
    /// longest an idle keep-alive connection stays open (default 10).
    pub header_timeout_secs: Option<u64>,
    /// Connections open at once; one more is answered 503 (default 256).
    pub max_connections: Option<usize>,
    /// `POST /api/jobs` bodies read at once; one more is answered 503 with
    /// `Retry-After` (default 2): each may hold `[files] max_upload_bytes`.
    pub max_concurrent_uploads: Option<usize>,
}

/// `[dashboard.tenants.<tenant>]`: the API token bound to one tenant.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct DashboardTenant {
    /// Name of the environment variable holding this tenant's bearer token
    /// (read once at start, at least 16 characters), e.g. `"ACME_TOKEN"`.
    pub token_env: String,
}
