//! The fleet pages: the live workers (types, slots, in flight, draining,
//! MCP health, memory, version), the task queues per subagent type, the
//! approvals inbox across jobs, and `/fleet/events`, the stream that keeps
//! them live.
//!
//! Workers come from their heartbeats (the workers bucket,
//! docs/PROTOCOL.md "Heartbeats"), queues from the JetStream consumers of
//! the tasks stream; neither is an event, so `/fleet/events` samples them:
//! every [`TICK`] one `fleet` event with the fleet's totals, which the
//! pages redraw from and chart (tasks ended per second, mean task time).
//! The fleet is shown to the admin token only; a tenant's token sees its
//! own approvals inbox.

use std::convert::Infallible;
use std::time::Duration;

use axum::Extension;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Response};
use flotilla_protocol::ids::Tenant;
use flotilla_protocol::{JobStatus, WorkerHeartbeat, WorkerState};
use serde::Serialize;
use time::OffsetDateTime;

use super::guard::Principal;
use super::{Dash, Failure, csrf_of, page, template_failure, unavailable, view};
use crate::csrf::CsrfToken;

/// How often `/fleet/events` samples the fleet.
pub const TICK: Duration = Duration::from_secs(2);

/// The fleet's pages and API are the admin token's (403 for a tenant's).
pub(crate) fn admin_only(who: &Principal) -> Result<(), Failure> {
    match who {
        Principal::Tenant(_) => {
            Err(Failure(StatusCode::FORBIDDEN, "the worker fleet is shown to the admin token only".into()))
        }
        Principal::Admin | Principal::Anonymous => Ok(()),
    }
}

/// One worker's row.
#[derive(Serialize)]
struct WorkerRow {
    id: String,
    host: String,
    pid: u32,
    version: String,
    state: &'static str,
    /// `type in_flight/capacity` for each type it serves.
    types: Vec<TypeCell>,
    in_flight: u32,
    capacity: u32,
    mcp: Vec<McpCell>,
    rss_mib: Option<String>,
    up_s: i64,
    /// Seconds since its last heartbeat.
    seen_s: i64,
    metrics_url: Option<String>,
}

#[derive(Serialize)]
struct TypeCell {
    name: String,
    in_flight: u32,
    capacity: u32,
    completed: u64,
    failed: u64,
    cancelled: u64,
}

#[derive(Serialize)]
struct McpCell {
    name: String,
    ok: bool,
    detail: String,
}

fn worker_rows(workers: &[WorkerHeartbeat], now: OffsetDateTime) -> Vec<WorkerRow> {
    let mut rows: Vec<WorkerRow> = workers
        .iter()
        .map(|w| WorkerRow {
            id: w.worker_id.clone(),
            host: w.host.clone(),
            pid: w.pid,
            version: w.version.clone(),
            state: w.state.as_str(),
            types: w
                .types
                .iter()
                .map(|t| TypeCell {
                    name: t.subagent_type.to_string(),
                    in_flight: t.in_flight,
                    capacity: t.capacity,
                    completed: t.completed,
                    failed: t.failed,
                    cancelled: t.cancelled,
                })
                .collect(),
            in_flight: w.types.iter().map(|t| t.in_flight).sum(),
            capacity: if w.state == WorkerState::Running { w.types.iter().map(|t| t.capacity).sum() } else { 0 },
            mcp: w
                .mcp_servers
                .iter()
                .map(|m| McpCell { name: m.name.clone(), ok: m.ok, detail: m.detail.clone().unwrap_or_default() })
                .collect(),
            rss_mib: w.rss_bytes.map(|b| format!("{:.1}", b as f64 / (1024.0 * 1024.0))),
            up_s: (now - w.started_at).whole_seconds().max(0),
            seen_s: (now - w.at).whole_seconds().max(0),
            metrics_url: w.metrics_url.clone(),
        })
        .collect();
    rows.sort_by(|a, b| a.id.cmp(&b.id));
    rows
}

pub async fn workers_fragment(
    State(d): State<Dash>,
    Extension(who): Extension<Principal>,
) -> Result<Html<String>, Failure> {
    admin_only(&who)?;
    let workers = d.client.live_workers().await.map_err(unavailable)?;
    let rows = worker_rows(&workers, flotilla_protocol::now());
    let (in_flight, capacity) = rows.iter().fold((0, 0), |(f, c), r| (f + r.in_flight, c + r.capacity));
    let draining = rows.iter().filter(|r| r.state != "running").count();
    let ctx = minijinja::context! { workers => view::value(rows), in_flight, capacity, draining };
    view::render("workers.html", ctx).map(Html).map_err(template_failure)
}

pub async fn workers_page(State(d): State<Dash>, who: Extension<Principal>) -> Result<Html<String>, Failure> {
    let Html(body) = workers_fragment(State(d), who).await?;
    page("workers", "/fragment/workers", "/fleet/events", body)
}

/// One queue's row.
#[derive(Serialize)]
struct QueueRow {
    subagent_type: String,
    pending: u64,
    in_flight: u64,
    redelivered: u64,
    dead_letters: u64,
    /// Seconds the oldest queued task has waited.
    oldest_s: Option<i64>,
}

pub async fn queues_fragment(
    State(d): State<Dash>,
    Extension(who): Extension<Principal>,
) -> Result<Html<String>, Failure> {
    admin_only(&who)?;
    let now = flotilla_protocol::now();
    let queues = d.client.queues().await.map_err(unavailable)?;
    let rows: Vec<QueueRow> = queues
        .iter()
        .map(|q| QueueRow {
            subagent_type: q.subagent_type.to_string(),
            pending: q.pending,
            in_flight: q.in_flight,
            redelivered: q.redelivered,
            dead_letters: q.dead_letters,
            oldest_s: q.oldest_wait(now).map(|w| w.whole_seconds().max(0)),
        })
        .collect();
    view::render("queues.html", minijinja::context! { queues => view::value(rows) }).map(Html).map_err(template_failure)
}

pub async fn queues_page(State(d): State<Dash>, who: Extension<Principal>) -> Result<Html<String>, Failure> {
    let Html(body) = queues_fragment(State(d), who).await?;
    page("queues", "/fragment/queues", "/fleet/events", body)
}

/// `GET /api/queues`: every queue's [`flotilla_protocol::QueueStats`] (admin only).
pub async fn api_queues(
    State(d): State<Dash>,
    Extension(who): Extension<Principal>,
) -> Result<axum::Json<Vec<flotilla_protocol::QueueStats>>, super::api::ApiError> {
    admin_only(&who)?;
    Ok(axum::Json(d.client.queues().await.map_err(unavailable)?))
}

/// The tenants whose approvals `who` may answer: its own, or for the admin
/// every tenant with a running job.
async fn inbox_tenants(d: &Dash, who: &Principal) -> Result<Vec<Tenant>, Failure> {
    if let Principal::Tenant(t) = who {
        return Ok(vec![t.clone()]);
    }
    let running = d
        .reader
        .list(None, Some(JobStatus::Running), None, flotilla_protocol::MAX_LIST_PAGE)
        .await
        .map_err(unavailable)?;
    let mut tenants: Vec<Tenant> = running.jobs.iter().map(|j| j.tenant.clone()).collect();
    tenants.sort();
    tenants.dedup();
    Ok(tenants)
}

pub async fn approvals_fragment(
    State(d): State<Dash>,
    Extension(who): Extension<Principal>,
    csrf: Option<Extension<CsrfToken>>,
) -> Result<Html<String>, Failure> {
    let now = flotilla_protocol::now();
    let mut requests = Vec::new();
    let mut errors = Vec::new();
    for tenant in inbox_tenants(&d, &who).await? {
        match d.approvals(&tenant, None).await {
            Ok(r) => requests.extend(r.approvals),
            Err(Failure(_, e)) => errors.push(format!("{tenant}: {e}")),
        }
    }
    requests.sort_by_key(|r| r.expires_at);
    let ctx = minijinja::context! {
        approvals => view::value(view::approval_rows(&requests, now)), errors, csrf => csrf_of(csrf),
    };
    view::render("approvals.html", ctx).map(Html).map_err(template_failure)
}

pub async fn approvals_page(
    State(d): State<Dash>,
    who: Extension<Principal>,
    csrf: Option<Extension<CsrfToken>>,
) -> Result<Html<String>, Failure> {
    // Job events (an approval is asked and answered in a task's progress,
    // which the all-jobs stream leaves out) refresh it; so does a decision.
    let Html(body) = approvals_fragment(State(d), who, csrf).await?;
    page("approvals", "/fragment/approvals", "/events?progress=1", body)
}

/// The fleet's totals at one moment: what `/fleet/events` sends.
#[derive(Serialize, Debug, Default, PartialEq)]
pub struct FleetSample {
    /// RFC 3339.
    at: String,
    /// Live workers, and how many of them drain or stop.
    workers: usize,
    draining: usize,
    /// Tasks running and slots, over every running worker.
    in_flight: u32,
    capacity: u32,
    /// Tasks ended on the live workers since each started.
    completed: u64,
    failed: u64,
    cancelled: u64,
    /// Wall milliseconds of those tasks, when the workers report it.
    busy_ms: u64,
}

fn sample(workers: &[WorkerHeartbeat], now: OffsetDateTime) -> FleetSample {
    let mut s = FleetSample {
        at: now.format(&time::format_description::well_known::Rfc3339).unwrap_or_default(),
        workers: workers.len(),
        ..FleetSample::default()
    };
    for w in workers {
        if w.state != WorkerState::Running {
            s.draining += 1;
        }
        for t in &w.types {
            s.in_flight += t.in_flight;
            if w.state == WorkerState::Running {
                s.capacity += t.capacity;
            }
            s.completed += t.completed;
            s.failed += t.failed;
            s.cancelled += t.cancelled;
            s.busy_ms += t.busy_ms;
        }
    }
    s
}

/// `GET /fleet/events`: a `fleet` event every [`TICK`] (admin only).
pub async fn events(State(d): State<Dash>, Extension(who): Extension<Principal>) -> Result<Response, Failure> {
    admin_only(&who)?;
    let client = d.client.clone();
    let ticks = tokio_stream_interval(TICK);
    let stream = futures::StreamExt::filter_map(ticks, move |_| {
        let client = client.clone();
        async move {
            let workers = client.live_workers().await.ok()?;
            let data = serde_json::to_string(&sample(&workers, flotilla_protocol::now())).ok()?;
            Some(Ok::<_, Infallible>(SseEvent::default().event("fleet").data(data)))
        }
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()).into_response())
}

/// A tick now and every `period` after.
fn tokio_stream_interval(period: Duration) -> impl futures::Stream<Item = ()> + Send + 'static {
    futures::stream::unfold(tokio::time::interval(period), |mut iv| async move {
        iv.tick().await;
        Some(((), iv))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_protocol::ids::SubagentType;
    use flotilla_protocol::{McpServerHealth, TypeLoad};

    fn beat(id: &str, state: WorkerState, in_flight: u32, completed: u64) -> WorkerHeartbeat {
        serde_json::from_value(serde_json::json!({
            "v": 1, "worker_id": id, "host": "h", "pid": 7, "version": "0.1.0", "state": state,
            "types": [TypeLoad {
                subagent_type: SubagentType::new("finance").unwrap(), capacity: 8, in_flight, completed,
                failed: 1, cancelled: 0, busy_ms: 1000,
            }],
            "mcp_servers": [McpServerHealth { name: "fin".into(), ok: false, detail: Some("refused".into()) }],
            "started_at": "1970-01-01T00:00:00Z", "at": "1970-01-01T00:00:08Z", "interval_ms": 2000,
            "rss_bytes": 24 * 1024 * 1024,
        }))
        .unwrap()
    }

    #[test]
    fn a_draining_worker_counts_its_tasks_but_not_its_slots() {
        let now = OffsetDateTime::UNIX_EPOCH + time::Duration::seconds(10);
        let s = sample(&[beat("w1", WorkerState::Running, 3, 10), beat("w2", WorkerState::Draining, 2, 5)], now);
        assert_eq!((s.workers, s.draining, s.in_flight, s.capacity, s.completed), (2, 1, 5, 8, 15));
    }

    #[test]
    fn the_workers_page_shows_load_memory_and_mcp_health() {
        let now = OffsetDateTime::UNIX_EPOCH + time::Duration::seconds(10);
        let rows =
            worker_rows(&[beat("w2", WorkerState::Draining, 2, 5), beat("w1", WorkerState::Running, 3, 10)], now);
        let html = view::render(
            "workers.html",
            minijinja::context! { workers => view::value(rows), in_flight => 5, capacity => 8 },
        )
        .unwrap();
        assert!(html.find("w1").unwrap() < html.find("w2").unwrap(), "sorted by id: {html}");
        assert!(html.contains("finance 3/8"), "{html}");
        assert!(html.contains("24.0 MiB"), "{html}");
        assert!(html.contains("draining"), "{html}");
        assert!(html.contains("fin: refused"), "{html}");
        assert!(html.contains("seen 2 s ago"), "{html}");
    }
}
