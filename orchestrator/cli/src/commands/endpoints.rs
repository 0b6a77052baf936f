//! The orchestrator's HTTP endpoints, both off unless configured: Prometheus
//! metrics (`[metrics] orchestrator`) and the web dashboard with its HTTP
//! API (`[dashboard] listen`, docs/HTTP_API.md). The metrics endpoint only
//! reads; the dashboard reads job records and changes jobs only through the
//! job API on the bus, as any client does.
//!
//! The library builds the metrics route ([`Orchestrator::metrics_router`]) and
//! hands out a read-only [`Orchestrator::jobs_reader`]; the dashboard's routes
//! are the `flotilla-dashboard` crate's; its client connection, binding and
//! serving sockets are the binary's business, so the library opens no port
//! of its own.

use std::time::Duration;

use flotilla_bus::Bus;
use flotilla_config::Settings;
use flotilla_orchestrator::reader::JobsReader;
use flotilla_orchestrator::service::Orchestrator;
use flotilla_protocol::ids::{JobId, TaskId, Tenant};
use flotilla_protocol::{JobStatus, ListReply, StatusReply, TaskFilter};
use flotilla_telemetry::metrics::ListenError;
use tokio_util::sync::CancellationToken;

/// Binds and serves the configured endpoints until `shutdown` fires; fails
/// when an address cannot be bound (the error names the config key and the
/// address) or the dashboard's access rules cannot be met.
pub async fn start(
    settings: &Settings,
    orchestrator: &Orchestrator,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    if let Some(addr) = settings.metrics.orchestrator {
        let router = orchestrator.metrics_router();
        flotilla_telemetry::metrics::serve("orchestrator metrics", addr, router, shutdown.clone().cancelled_owned())
            .await
            .map_err(|e| bind_error("[metrics] orchestrator", e))?;
    }
    if let Some(addr) = settings.dashboard.listen {
        // The dashboard's writes are job API requests like the CLI's, on a
        // connection of their own (named so in the server's connection list).
        let bus = Bus::connect(&settings.nats, "flotilla-dashboard", Duration::from_secs(30)).await?;
        let client = flotilla_client::Client::new(bus, Default::default());
        let records = std::sync::Arc::new(Records(orchestrator.jobs_reader()));
        let a2a = settings.a2a.enabled.then(|| a2a_server(settings, client.clone()));
        let mounted = a2a.as_ref().map(|s| s.api_router().layer(axum::middleware::map_request(a2a_caller)));
        let mut router = flotilla_dashboard::router_with(
            addr,
            &settings.dashboard,
            records,
            client,
            &settings.files,
            mounted.unwrap_or_default(),
        )?;
        if let Some(a2a) = &a2a {
            // The card is public (A2A clients read it to learn how to
            // authenticate): no token, it holds no tenant's data; but behind
            // the Host check, since its URLs echo the request's Host.
            router = router.merge(flotilla_dashboard::public_with(addr, &settings.dashboard, a2a.card_router())?);
        }
        let limits = flotilla_dashboard::serve_limits(&settings.dashboard)?;
        let what = "dashboard";
        let listen_error = |source| bind_error("[dashboard] listen", ListenError { what, addr, source });
        let listener = tokio::net::TcpListener::bind(addr).await.map_err(listen_error)?;
        let bound = listener.local_addr().map_err(listen_error)?;
        tokio::spawn(flotilla_http_serve::serve(listener, router, limits, shutdown.cancelled_owned()));
        tracing::info!(url = %format!("http://{bound}/"), "dashboard");
    }
    Ok(())
}

/// The A2A server of `[a2a]` (docs/PROTOCOLS.md, "A2A v1.0"): one skill
/// for the planner and one per subagent type; a bearer scheme on its card
/// when the listener takes tokens.
fn a2a_server(settings: &Settings, client: flotilla_client::Client) -> flotilla_a2a::server::A2aServer {
    use flotilla_a2a::server::Skill;
    let planner = Skill {
        id: "planner".into(),
        description: "Plans the request, delegates its tasks to the subagent types below and answers with their \
                      consolidated reports; every message goes to it"
            .into(),
    };
    let types =
        settings.subagents.iter().map(|(ty, c)| Skill { id: ty.to_string(), description: c.description.clone() });
    let skills = std::iter::once(planner).chain(types).collect();
    let d = &settings.dashboard;
    let bearer = d.token_env.is_some() || !d.tenants.is_empty();
    flotilla_a2a::server::A2aServer::new(client, &settings.a2a, skills, bearer)
}

/// The A2A caller of a request the dashboard's guard let through: a
/// tenant's token acts for its tenant, the admin token for any (the
/// request's `tenant` field, default `default`), no token for the default
/// tenant only (a loopback listener, as for the HTTP API's writes).
async fn a2a_caller(mut req: axum::extract::Request) -> axum::extract::Request {
    use flotilla_a2a::server::Caller;
    use flotilla_dashboard::Principal;
    let caller = match req.extensions().get::<Principal>() {
        Some(Principal::Tenant(t)) => Some(Caller {
            tenant: t.clone(),
            any_tenant: false,
            name: format!("A2A client with the token of tenant {t}"),
        }),
        Some(Principal::Admin) => {
            Some(Caller { tenant: Tenant::default(), any_tenant: true, name: "A2A client with the admin token".into() })
        }
        Some(Principal::Anonymous) => {
            Some(Caller { tenant: Tenant::default(), any_tenant: false, name: "A2A client".into() })
        }
        None => None,
    };
    if let Some(c) = caller {
        req.extensions_mut().insert(c);
    }
    req
}

/// The dashboard's view of every tenant's job records: the orchestrator's
/// read-only job reader.
struct Records(JobsReader);

#[async_trait::async_trait]
impl flotilla_dashboard::JobRecords for Records {
    async fn list(
        &self,
        tenant: Option<Tenant>,
        status: Option<JobStatus>,
        after: Option<JobId>,
        limit: usize,
    ) -> anyhow::Result<ListReply> {
        Ok(self.0.list(tenant, status, after, limit).await?)
    }

    async fn status(
        &self,
        id: &JobId,
        after: Option<TaskId>,
        limit: usize,
        filter: Option<&TaskFilter>,
    ) -> anyhow::Result<Option<StatusReply>> {
        Ok(self.0.status(id, after, limit, filter).await?)
    }
}

/// A listener that could not be opened, naming the config key that asked for it.
fn bind_error(key: &str, e: ListenError) -> anyhow::Error {
    anyhow::anyhow!(e.naming(key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_port_in_use_names_the_config_key_and_the_address() {
        let taken = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = taken.local_addr().unwrap();
        let e = flotilla_telemetry::metrics::serve("dashboard", addr, axum::Router::new(), std::future::pending())
            .await
            .unwrap_err();
        let text = bind_error("[dashboard] listen", e).to_string();
        assert!(text.starts_with(&format!("[dashboard] listen = \"{addr}\"")), "{text}");
        assert!(text.contains("another process listens there"), "{text}");
    }
}
