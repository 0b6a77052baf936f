//! The web dashboard (`[dashboard] listen`, off by default): a jobs list and,
//! per job, its todos, a task timeline, spend and each task's report, kept
//! live by Server-Sent Events read from the events stream. Pages are rendered
//! on the server ([`view`]); the only script is a few lines that append
//! events to a log and re-fetch the page fragment when something happens.
//!
//! | route | what |
//! |---|---|
//! | `GET /` | jobs of every tenant, newest first (`?status=running&tenant=t` filter; 200 a page, `?after=<job id>` the next, `?limit=N` up to 500) |
//! | `GET /jobs/<id>` | one job, with one page of its tasks (`?after=<task id>&tasks=N`, default 100) |
//! | `GET /fragment/jobs`, `/fragment/jobs/<id>` | the same without the page around it |
//! | `GET /events` | SSE of every job's job-level events, from now on |
//! | `GET /jobs/<id>/events` | SSE of one job's job and progress events, from its first to its last |
//! | `GET /api/jobs` (a `ListReply`: `jobs` and `next_after`, same query), `/api/jobs/<id>` (a `StatusReply`, same paging), `/api/workers` | JSON |
//!
//! It shows every tenant, so [`guard`] sits in front of every route: it
//! answers only its own host names (against DNS rebinding) and, with
//! `[dashboard] token_env`, only requests carrying the token; a non-loopback
//! `listen` address needs the token (docs/OPERATIONS.md, "Dashboard").
//!
//! It lives in the `flotilla` binary, not the orchestrator library (issue 11:
//! HTTP serving belongs to the binaries); all it reads comes through the
//! library's read-only [`JobsReader`], and src/cli/endpoints.rs binds it.

mod guard;
mod view;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use flotilla_config::DashboardConfig;
use flotilla_orchestrator::events::{Event, Scope};
use flotilla_orchestrator::reader::JobsReader;
use flotilla_protocol::ids::{JobId, TaskId, Tenant};
use flotilla_protocol::{JobRecord, JobStatus, ListReply, ProgressKind, StatusReply};
use futures::{Stream, StreamExt};
use serde::Deserialize;

/// What every handler reads: the dashboard observes and never changes a job.
#[derive(Clone)]
struct Dash {
    /// Job records of every tenant, live workers, the events stream (SSE).
    reader: JobsReader,
}

/// The dashboard's routes behind its [`guard`], for serving on `addr` (the
/// binary binds it: docs/OPERATIONS.md, "Dashboard"). Fails when `config`'s
/// access rules cannot be met (a token required or named but not set).
pub fn router(addr: SocketAddr, config: &DashboardConfig, reader: JobsReader) -> anyhow::Result<axum::Router> {
    let guard = Arc::new(guard::Guard::from_config(config, addr)?);
    Ok(routes(Dash { reader }).layer(axum::middleware::from_fn_with_state(guard, guard::check)))
}

fn routes(state: Dash) -> axum::Router {
    axum::Router::new()
        .route("/", get(jobs_page))
        .route("/fragment/jobs", get(jobs_fragment))
        .route("/jobs/{id}", get(job_page))
        .route("/fragment/jobs/{id}", get(job_fragment))
        .route("/events", get(all_events))
        .route("/jobs/{id}/events", get(job_events))
        .route("/api/jobs", get(api_jobs))
        .route("/api/jobs/{id}", get(api_job))
        .route("/api/workers", get(api_workers))
        .with_state(state)
}

/// An error page with a status code.
struct Failure(StatusCode, String);

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        (self.0, self.1).into_response()
    }
}

fn unavailable(e: impl std::fmt::Display) -> Failure {
    Failure(StatusCode::SERVICE_UNAVAILABLE, format!("the bus did not answer: {e}"))
}

fn template_failure(e: minijinja::Error) -> Failure {
    tracing::error!(error = %e, "dashboard template failed");
    Failure(StatusCode::INTERNAL_SERVER_ERROR, "template error (see the orchestrator log)".into())
}

/// Which page of the job list: `?status=&tenant=&limit=&after=` (the
/// `next_after` of the previous page, as in the `list` API, docs/PROTOCOL.md).
#[derive(Deserialize)]
struct ListQuery {
    status: Option<String>,
    tenant: Option<String>,
    limit: Option<usize>,
    after: Option<JobId>,
}

/// Jobs on one dashboard page unless `limit` says otherwise.
const DEFAULT_JOBS_PAGE: usize = 200;

/// Which page of a job's tasks.
#[derive(Deserialize, Default)]
struct PageQuery {
    after: Option<TaskId>,
    tasks: Option<usize>,
}

impl PageQuery {
    /// `?after=…` for the fragment URL of the same page.
    fn suffix(&self) -> String {
        self.after.map(|a| format!("?after={a}")).unwrap_or_default()
    }
}

impl Dash {
    async fn list(&self, q: &ListQuery) -> Result<ListReply, Failure> {
        let bad = |e: String| Failure(StatusCode::BAD_REQUEST, e);
        let status = match q.status.as_deref().filter(|s| !s.is_empty()) {
            Some(s) => Some(s.parse::<JobStatus>().map_err(bad)?),
            None => None,
        };
        let tenant = match q.tenant.as_deref().filter(|s| !s.is_empty()) {
            Some(t) => Some(Tenant::new(t).map_err(|e| bad(e.to_string()))?),
            None => None,
        };
        let limit = q.limit.unwrap_or(DEFAULT_JOBS_PAGE).min(flotilla_protocol::MAX_LIST_PAGE);
        self.reader.list(tenant, status, q.after, limit).await.map_err(unavailable)
    }

    async fn job(&self, id: &str) -> Result<JobRecord, Failure> {
        Ok(self.job_page(id, &PageQuery { tasks: Some(0), ..PageQuery::default() }).await?.job)
    }

    /// A job's header and one page of its tasks.
    async fn job_page(&self, id: &str, q: &PageQuery) -> Result<StatusReply, Failure> {
        let id: JobId = id.parse().map_err(|_| Failure(StatusCode::BAD_REQUEST, format!("{id:?} is not a job id")))?;
        let limit = q.tasks.unwrap_or(flotilla_protocol::DEFAULT_TASKS_PAGE).min(flotilla_protocol::MAX_TASKS_PAGE);
        let reply = self.reader.status(&id, q.after, limit).await.map_err(unavailable)?;
        reply.ok_or(Failure(StatusCode::NOT_FOUND, format!("no job {id}")))
    }
}

fn page(title: &str, fragment_url: &str, events_url: &str, body: String) -> Result<Html<String>, Failure> {
    view::render(
        "layout.html",
        minijinja::context! {
            title, fragment_url, events_url,
            body => minijinja::Value::from_safe_string(body),
        },
    )
    .map(Html)
    .map_err(template_failure)
}

async fn jobs_fragment(State(d): State<Dash>, Query(q): Query<ListQuery>) -> Result<Html<String>, Failure> {
    let page = d.list(&q).await?;
    let next = page.next_after.map(|a| {
        let status = q.status.as_deref().filter(|s| !s.is_empty()).map(|s| format!("status={s}&")).unwrap_or_default();
        let tenant = q.tenant.as_deref().filter(|s| !s.is_empty()).map(|t| format!("tenant={t}&")).unwrap_or_default();
        format!("/?{status}{tenant}after={a}")
    });
    let jobs = view::value(view::job_rows(&page.jobs));
    view::render("jobs.html", minijinja::context! { jobs, next }).map(Html).map_err(template_failure)
}

async fn jobs_page(State(d): State<Dash>, Query(q): Query<ListQuery>) -> Result<Html<String>, Failure> {
    let mut params: Vec<String> = Vec::new();
    params.extend(q.status.as_deref().filter(|s| !s.is_empty()).map(|s| format!("status={s}")));
    params.extend(q.tenant.as_deref().filter(|s| !s.is_empty()).map(|t| format!("tenant={t}")));
    params.extend(q.after.map(|a| format!("after={a}")));
    let Html(body) = jobs_fragment(State(d), Query(q)).await?;
    let fragment =
        if params.is_empty() { "/fragment/jobs".to_string() } else { format!("/fragment/jobs?{}", params.join("&")) };
    page("jobs", &fragment, "/events", body)
}

async fn job_fragment(
    State(d): State<Dash>,
    Path(id): Path<String>,
    Query(q): Query<PageQuery>,
) -> Result<Html<String>, Failure> {
    let reply = d.job_page(&id, &q).await?;
    let job = view::job_view(&reply.job, reply.next_after, flotilla_protocol::now());
    view::render("job.html", minijinja::context! { job => view::value(job) }).map(Html).map_err(template_failure)
}

async fn job_page(
    State(d): State<Dash>,
    Path(id): Path<String>,
    Query(q): Query<PageQuery>,
) -> Result<Html<String>, Failure> {
    let suffix = q.suffix();
    let Html(body) = job_fragment(State(d.clone()), Path(id.clone()), Query(q)).await?;
    let id = d.job(&id).await?.id;
    page(&format!("job {id}"), &format!("/fragment/jobs/{id}{suffix}"), &format!("/jobs/{id}/events"), body)
}

async fn api_jobs(State(d): State<Dash>, Query(q): Query<ListQuery>) -> Result<Json<ListReply>, Failure> {
    d.list(&q).await.map(Json)
}

async fn api_job(
    State(d): State<Dash>,
    Path(id): Path<String>,
    Query(q): Query<PageQuery>,
) -> Result<Json<StatusReply>, Failure> {
    d.job_page(&id, &q).await.map(Json)
}

async fn api_workers(State(d): State<Dash>) -> Result<Response, Failure> {
    let workers = d.reader.live_workers().await.map_err(unavailable)?;
    Ok(Json(workers).into_response())
}

/// Turns followed bus events into SSE messages named `job` or `progress`
/// (data: the event's JSON wire form); heartbeats are left out.
fn sse(events: impl Stream<Item = anyhow::Result<Event>> + Send + 'static) -> Response {
    let stream = events.take_while(|e| futures::future::ready(e.is_ok())).filter_map(|e| async move {
        let ev = e.ok()?;
        let name = match &ev {
            Event::Job(_) => "job",
            Event::Progress(p) if p.kind == ProgressKind::Heartbeat => return None,
            Event::Progress(_) => "progress",
        };
        Some(Ok::<_, Infallible>(SseEvent::default().event(name).data(ev.to_json())))
    });
    Sse::new(stream).keep_alive(KeepAlive::default()).into_response()
}

async fn all_events(State(d): State<Dash>) -> Result<Response, Failure> {
    let events = d.reader.follow(Scope::All, false).await.map_err(unavailable)?;
    Ok(sse(events))
}

async fn job_events(State(d): State<Dash>, Path(id): Path<String>) -> Result<Response, Failure> {
    let rec = d.job(&id).await?;
    let events = d.reader.follow(Scope::Job(rec.tenant, rec.id), true).await.map_err(unavailable)?;
    // The stream ends after the job's terminal event: nothing follows it.
    let mut ended = false;
    let events = events.take_while(move |e| {
        let go = !ended;
        ended |= matches!(e, Ok(Event::Job(j)) if j.kind.is_terminal());
        futures::future::ready(go)
    });
    Ok(sse(events))
}
