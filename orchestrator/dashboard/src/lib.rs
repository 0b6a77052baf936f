//! The web dashboard and HTTP API (`[dashboard] listen`, off by default): a
//! jobs list and, per job, its todos, a task timeline, spend and each task's
//! report, kept live by Server-Sent Events read from the events stream; forms
//! to submit, cancel and answer approvals; the JSON API of docs/HTTP_API.md.
//! Pages are rendered on the server (`view`); one small script in the
//! layout appends events to a log, re-fetches the page fragment when
//! something happens (at most once a second), and draws what only the
//! events tell (in-flight tasks, the charts).
//!
//! | route | what |
//! |---|---|
//! | `GET /` | jobs, newest first (`?status=running&tenant=t` filter; 200 a page, `?after=<job id>` the next, `?limit=N` up to 500), with a submit box |
//! | `GET /jobs/<id>` | one job: progress, one page of its tasks (`?after=<task id>&tasks=N`, default 100; filters `state`, `type`, `worker`, `q`), its pending approvals and a cancel button |
//! | `GET /jobs/<id>/tasks/<task>` | one task: its step timeline and report (`task_page`) |
//! | `GET /jobs/<id>/files` | the job's files tab (`job_files`) |
//! | `GET /workers`, `/queues`, `/approvals` | the fleet pages and the approvals inbox (`fleet`) |
//! | `GET /fragment/jobs`, `/fragment/jobs/<id>` | the same without the page around it |
//! | `GET /events` | SSE of every visible job's job-level events, from now on |
//! | `GET /jobs/<id>/events` (also `/api/jobs/<id>/events`) | SSE of one job's job and progress events, from its first to its last (from now on with `?live=1`) |
//! | `GET /jobs/<id>/tasks/<task>/events`, `/fleet/events` | SSE of one task's progress from its first; the fleet's totals every 2 s |
//! | `POST /actions/submit`, `/actions/jobs/<id>/cancel`, `/actions/approvals/<call id>` | the pages' forms (`forms`) |
//! | `/api/*` | the JSON API (`api`, docs/HTTP_API.md) |
//! | `GET /login`, `POST /login` | the sign-in form that sets a browser's cookie (`login`) |
//!
//! It shows every tenant, so `guard` sits in front of every route: it
//! answers only its own host names (against DNS rebinding), with tokens
//! configured only requests carrying one (the admin token, or a tenant's,
//! which `access` confines to its tenant), and refuses a browser's write
//! without CSRF proof (`csrf`); a non-loopback `listen` address needs a
//! token (docs/OPERATIONS.md, "Dashboard").
//!
//! A library the `flotilla` binary binds (orchestrator/cli/src/commands/endpoints.rs),
//! not part of the orchestrator library (HTTP serving belongs to the
//! binaries): [`router`] returns the routes, [`serve_limits`] the serve
//! loop's bounds (`flotilla-http-serve`). Every tenant's job records come
//! through a read-only [`JobRecords`] the binary hands in (the
//! orchestrator's job reader: the job API lists one tenant's jobs at a
//! time); all it changes goes through the job API (`actions`), and the
//! workers and events it shows come through the job-API client
//! (`flotilla-client`). It must not depend on the orchestrator library.

#![deny(missing_docs)]

mod access;
mod actions;
mod api;
mod csrf;
mod fleet;
mod forms;
mod guard;
mod job_files;
mod login;
mod maps;
mod task_page;
mod view;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Extension;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use flotilla_client::{Client, Event, Scope};
use flotilla_config::{DashboardConfig, FilesConfig};
use flotilla_protocol::ids::{JobId, SubagentType, TaskId, Tenant};
use flotilla_protocol::{JobRecord, JobStatus, ListReply, ProgressKind, StatusReply, TaskFilter, TaskState};
use futures::{Stream, StreamExt};
use serde::Deserialize;

use csrf::CsrfToken;
pub use guard::Principal;

/// Every tenant's job records, read-only: what the dashboard lists and
/// shows (the orchestrator's job store, handed in by the binary).
#[async_trait::async_trait]
pub trait JobRecords: Send + Sync + 'static {
    /// One page of jobs, newest first: of `tenant` (every tenant's when
    /// `None`), with `status` when given, older than `after` (the previous
    /// page's `next_after`), at most `limit`.
    async fn list(
        &self,
        tenant: Option<Tenant>,
        status: Option<JobStatus>,
        after: Option<JobId>,
        limit: usize,
    ) -> anyhow::Result<ListReply>;

    /// Job `id`'s header with at most `limit` of its tasks after `after`
    /// (of those matching `filter`, when given), whatever its tenant
    /// (`None` when there is no such job).
    async fn status(
        &self,
        id: &JobId,
        after: Option<TaskId>,
        limit: usize,
        filter: Option<&TaskFilter>,
    ) -> anyhow::Result<Option<StatusReply>>;
}

/// What every handler reads and writes through.
#[derive(Clone)]
struct Dash {
    /// Job records of every tenant.
    reader: Arc<dyn JobRecords>,
    /// The job-API client of the writes (`actions`: the same requests
    /// the CLI sends, for the tenant each acts for), the workers listing and
    /// the events stream (SSE).
    client: Client,
    /// `[files] max_upload_bytes`: the most a submit's files may hold in all.
    max_upload: u64,
    /// `[files] max_file_bytes`: the most one file of a submit may hold.
    max_file: u64,
    /// One permit per `POST /api/jobs` body being read
    /// (`[dashboard] max_concurrent_uploads`): each may buffer up to
    /// [`Dash::submit_limit`] bytes, so together they stay bounded.
    uploads: Arc<tokio::sync::Semaphore>,
}

/// `[dashboard] header_timeout_secs` unless set.
const HEADER_TIMEOUT_SECS: u64 = 10;
/// `[dashboard] max_connections` unless set.
const MAX_CONNECTIONS: usize = 256;
/// `[dashboard] max_concurrent_uploads` unless set.
const MAX_CONCURRENT_UPLOADS: usize = 2;
/// The largest body of any other route: forms, a cancel, a decision.
const OTHER_BODY_LIMIT: usize = 1 << 20;

/// The serve loop's bounds from `[dashboard]` (`flotilla-http-serve`);
/// a zero is refused, naming its key.
pub fn serve_limits(config: &DashboardConfig) -> anyhow::Result<flotilla_http_serve::Limits> {
    let secs = positive("[dashboard] header_timeout_secs", config.header_timeout_secs, HEADER_TIMEOUT_SECS)?;
    let max_connections = positive("[dashboard] max_connections", config.max_connections, MAX_CONNECTIONS)?;
    Ok(flotilla_http_serve::Limits {
        header_timeout: std::time::Duration::from_secs(secs),
        max_connections,
        connections_key: "[dashboard] max_connections",
    })
}

fn positive<T: Copy + Default + PartialEq>(key: &str, set: Option<T>, default: T) -> anyhow::Result<T> {
    match set {
        Some(v) if v == T::default() => anyhow::bail!("{key} = 0: give at least 1, or leave it out"),
        Some(v) => Ok(v),
        None => Ok(default),
    }
}

/// The dashboard's routes behind its `guard`, for serving on `addr` (the
/// binary binds it: docs/OPERATIONS.md, "Dashboard"). Writes go as job API
/// requests through `client`; a submit's files are limited by `files`'
/// `max_upload_bytes` in all and `max_file_bytes` each. Fails when
/// `config`'s access rules cannot be met (a token required or named but not
/// set) or one of its limits is zero.
pub fn router(
    addr: SocketAddr,
    config: &DashboardConfig,
    reader: Arc<dyn JobRecords>,
    client: Client,
    files: &FilesConfig,
) -> anyhow::Result<axum::Router> {
    router_with(addr, config, reader, client, files, axum::Router::new())
}

/// [`router`] with `mounted`'s routes behind the same guard (the binary's
/// A2A server, docs/PROTOCOLS.md): each of its requests carries the
/// authenticated [`Principal`] as an extension, and a bearer-token request
/// passes without CSRF proof, as for `/api/*`.
pub fn router_with(
    addr: SocketAddr,
    config: &DashboardConfig,
    reader: Arc<dyn JobRecords>,
    client: Client,
    files: &FilesConfig,
    mounted: axum::Router,
) -> anyhow::Result<axum::Router> {
    let guard = Arc::new(guard::Guard::from_config(config, addr)?);
    let uploads =
        positive("[dashboard] max_concurrent_uploads", config.max_concurrent_uploads, MAX_CONCURRENT_UPLOADS)?;
    let state = Dash {
        reader,
        client,
        max_upload: files.max_upload_bytes,
        max_file: files.max_file_bytes,
        uploads: Arc::new(tokio::sync::Semaphore::new(uploads)),
    };
    // `POST /api/jobs` reads its body itself, within its own limit (api.rs).
    Ok(routes(state)
        .merge(mounted)
        .layer(axum::extract::DefaultBodyLimit::max(OTHER_BODY_LIMIT))
        .layer(axum::middleware::from_fn_with_state(guard, guard::check)))
}

/// `public` behind the dashboard's Host check only, no token: for routes
/// served beside the dashboard that anyone may read, such as the A2A agent
/// card. Merge the result into [`router_with`]'s router.
pub fn public_with(addr: SocketAddr, config: &DashboardConfig, public: axum::Router) -> anyhow::Result<axum::Router> {
    let guard = Arc::new(guard::Guard::from_config(config, addr)?);
    Ok(public.layer(axum::middleware::from_fn_with_state(guard, guard::check_host)))
}

fn routes(state: Dash) -> axum::Router {
    axum::Router::new()
        .route("/", get(jobs_page))
        .route("/fragment/jobs", get(jobs_fragment))
        .route("/jobs/{id}", get(job_page))
        .route("/fragment/jobs/{id}", get(job_fragment))
        .route("/events", get(all_events))
        .route("/jobs/{id}/events", get(job_events))
        .route("/jobs/{id}/tasks/{task}", get(task_page::page_handler))
        .route("/fragment/jobs/{id}/tasks/{task}", get(task_page::fragment))
        .route("/jobs/{id}/tasks/{task}/events", get(task_page::events))
        .route("/jobs/{id}/files", get(job_files::page_handler))
        .route("/fragment/jobs/{id}/files", get(job_files::fragment))
        .route("/workers", get(fleet::workers_page))
        .route("/fragment/workers", get(fleet::workers_fragment))
        .route("/approvals", get(fleet::approvals_page))
        .route("/fragment/approvals", get(fleet::approvals_fragment))
        .route("/queues", get(fleet::queues_page))
        .route("/fragment/queues", get(fleet::queues_fragment))
        .route("/fleet/events", get(fleet::events))
        .merge(api::routes())
        .merge(forms::routes())
        .with_state(state)
}

/// An error page with a status code.
#[derive(Debug)]
struct Failure(StatusCode, String);

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        (self.0, self.1).into_response()
    }
}

pub(crate) fn unavailable(e: impl std::fmt::Display) -> Failure {
    Failure(StatusCode::SERVICE_UNAVAILABLE, format!("the bus did not answer: {e}"))
}

pub(crate) fn template_failure(e: minijinja::Error) -> Failure {
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

/// Which page of a job's tasks: `?after=<task id>&tasks=N`, and the task
/// table's filters `state`, `type`, `worker` and `q` (text in the id,
/// description, summary or error). An empty field filters nothing.
#[derive(Deserialize, Default, Clone)]
struct PageQuery {
    after: Option<TaskId>,
    tasks: Option<usize>,
    #[serde(default)]
    state: Option<String>,
    #[serde(default, rename = "type")]
    subagent_type: Option<String>,
    #[serde(default)]
    worker: Option<String>,
    #[serde(default)]
    q: Option<String>,
}

impl PageQuery {
    /// The filter its fields describe (`None` when they filter nothing); a
    /// state or type that cannot be one is a 400 naming it.
    fn filter(&self) -> Result<Option<TaskFilter>, Failure> {
        let bad = |e: String| Failure(StatusCode::BAD_REQUEST, e);
        let given = |v: &Option<String>| v.as_deref().map(str::trim).filter(|v| !v.is_empty()).map(String::from);
        let state = match given(&self.state) {
            Some(s) => {
                Some(serde_json::from_value::<TaskState>(serde_json::Value::String(s.clone())).map_err(|_| {
                    bad(format!("state={s:?} is not one of pending, running, completed, failed, rejected, cancelled"))
                })?)
            }
            None => None,
        };
        let subagent_type = match given(&self.subagent_type) {
            Some(t) => Some(SubagentType::new(&t).map_err(|e| bad(format!("type={t:?}: {e}")))?),
            None => None,
        };
        let filter = TaskFilter { task: None, state, subagent_type, worker: given(&self.worker), text: given(&self.q) };
        Ok((!filter.is_empty()).then_some(filter))
    }

    /// The query string of the same filters (no `after`), each value
    /// percent-encoded, starting with `?` when not empty.
    fn filters_query(&self) -> String {
        let pairs: Vec<String> =
            [("state", &self.state), ("type", &self.subagent_type), ("worker", &self.worker), ("q", &self.q)]
                .into_iter()
                .filter_map(|(k, v)| {
                    v.as_deref().filter(|v| !v.is_empty()).map(|v| format!("{k}={}", view::query_value(v)))
                })
                .collect();
        if pairs.is_empty() { String::new() } else { format!("?{}", pairs.join("&")) }
    }

    /// The query string of the same page and filters, for the fragment URL.
    fn suffix(&self) -> String {
        let filters = self.filters_query();
        match self.after {
            Some(a) if filters.is_empty() => format!("?after={a}"),
            Some(a) => format!("{filters}&after={a}"),
            None => filters,
        }
    }
}

impl Dash {
    /// One page of the jobs `who` sees.
    async fn list(&self, who: &Principal, q: &ListQuery) -> Result<ListReply, Failure> {
        let bad = |e: String| Failure(StatusCode::BAD_REQUEST, e);
        let status = match q.status.as_deref().filter(|s| !s.is_empty()) {
            Some(s) => Some(s.parse::<JobStatus>().map_err(bad)?),
            None => None,
        };
        let tenant = who.list_scope(api::parse_tenant(q.tenant.as_deref())?)?;
        let limit = q.limit.unwrap_or(DEFAULT_JOBS_PAGE).min(flotilla_protocol::MAX_LIST_PAGE);
        self.reader.list(tenant, status, q.after, limit).await.map_err(unavailable)
    }

    /// Job `id`'s header, whatever its tenant (callers check who sees it).
    async fn job(&self, id: &str) -> Result<JobRecord, Failure> {
        let id: JobId = id.parse().map_err(|_| Failure(StatusCode::BAD_REQUEST, format!("{id:?} is not a job id")))?;
        let reply = self.reader.status(&id, None, 0, None).await.map_err(unavailable)?;
        reply.map(|r| r.job).ok_or(Failure(StatusCode::NOT_FOUND, format!("no job {id}")))
    }

    /// A job's header and one page of its tasks, if `who` sees it.
    async fn job_page(&self, who: &Principal, id: &str, q: &PageQuery) -> Result<StatusReply, Failure> {
        let id: JobId = id.parse().map_err(|_| Failure(StatusCode::BAD_REQUEST, format!("{id:?} is not a job id")))?;
        let limit = q.tasks.unwrap_or(flotilla_protocol::DEFAULT_TASKS_PAGE).min(flotilla_protocol::MAX_TASKS_PAGE);
        let filter = q.filter()?;
        let reply = self.reader.status(&id, q.after, limit, filter.as_ref()).await.map_err(unavailable)?;
        reply.filter(|r| who.sees(&r.job.tenant)).ok_or(Failure(StatusCode::NOT_FOUND, format!("no job {id}")))
    }
}

pub(crate) fn page(title: &str, fragment_url: &str, events_url: &str, body: String) -> Result<Html<String>, Failure> {
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

/// The CSRF token for the page's forms (none for bearer-token requests,
/// which need none).
pub(crate) fn csrf_of(token: Option<Extension<CsrfToken>>) -> String {
    token.map(|Extension(CsrfToken(t))| t).unwrap_or_default()
}

async fn jobs_fragment(
    State(d): State<Dash>,
    Extension(who): Extension<Principal>,
    csrf: Option<Extension<CsrfToken>>,
    Query(q): Query<ListQuery>,
) -> Result<Html<String>, Failure> {
    let page = d.list(&who, &q).await?;
    let next = page.next_after.map(|a| {
        let status = q.status.as_deref().filter(|s| !s.is_empty()).map(|s| format!("status={s}&")).unwrap_or_default();
        let tenant = q.tenant.as_deref().filter(|s| !s.is_empty()).map(|t| format!("tenant={t}&")).unwrap_or_default();
        format!("/?{status}{tenant}after={a}")
    });
    let jobs = view::value(view::job_rows(&page.jobs));
    let own_tenant = match &who {
        Principal::Tenant(t) => Some(t.to_string()),
        Principal::Admin | Principal::Anonymous => None,
    };
    let ctx = minijinja::context! { jobs, next, csrf => csrf_of(csrf), own_tenant };
    view::render("jobs.html", ctx).map(Html).map_err(template_failure)
}

async fn jobs_page(
    State(d): State<Dash>,
    who: Extension<Principal>,
    csrf: Option<Extension<CsrfToken>>,
    Query(q): Query<ListQuery>,
) -> Result<Html<String>, Failure> {
    let mut params: Vec<String> = Vec::new();
    params.extend(q.status.as_deref().filter(|s| !s.is_empty()).map(|s| format!("status={s}")));
    params.extend(q.tenant.as_deref().filter(|s| !s.is_empty()).map(|t| format!("tenant={t}")));
    params.extend(q.after.map(|a| format!("after={a}")));
    let Html(body) = jobs_fragment(State(d), who, csrf, Query(q)).await?;
    let fragment =
        if params.is_empty() { "/fragment/jobs".to_string() } else { format!("/fragment/jobs?{}", params.join("&")) };
    page("jobs", &fragment, "/events", body)
}

async fn job_fragment(
    State(d): State<Dash>,
    Extension(who): Extension<Principal>,
    csrf: Option<Extension<CsrfToken>>,
    Path(id): Path<String>,
    Query(q): Query<PageQuery>,
) -> Result<Html<String>, Failure> {
    let reply = d.job_page(&who, &id, &q).await?;
    let given = |v: &Option<String>| v.clone().unwrap_or_default();
    let filter = view::FilterView {
        state: given(&q.state),
        subagent_type: given(&q.subagent_type),
        worker: given(&q.worker),
        q: given(&q.q),
        active: q.filter()?.is_some(),
        query: q.filters_query(),
    };
    let maps = maps::of_job(&d.client, &reply.job.tenant, reply.job.id).await;
    let extra = view::JobProgress { maps, filter, matched: reply.tasks_matched };
    let job = view::job_view(&reply.job, reply.next_after, flotilla_protocol::now(), &extra);
    let can_act = !reply.job.status.is_terminal() && who.may_act(&reply.job.tenant).is_ok();
    // Pending approvals come from the job API; without an answer the page
    // still shows the job, with a note instead of the buttons.
    let (approvals, approvals_error) = if can_act {
        match d.approvals(&reply.job.tenant, Some(reply.job.id)).await {
            Ok(a) => (view::approval_rows(&a.approvals, flotilla_protocol::now()), None),
            Err(Failure(_, e)) => (Vec::new(), Some(e)),
        }
    } else {
        (Vec::new(), None)
    };
    let ctx = minijinja::context! {
        job => view::value(job), csrf => csrf_of(csrf), can_act,
        approvals => view::value(approvals), approvals_error,
    };
    view::render("job.html", ctx).map(Html).map_err(template_failure)
}

async fn job_page(
    State(d): State<Dash>,
    who: Extension<Principal>,
    csrf: Option<Extension<CsrfToken>>,
    Path(id): Path<String>,
    Query(q): Query<PageQuery>,
) -> Result<Html<String>, Failure> {
    let suffix = q.suffix();
    let id = d.job_page(&who, &id, &PageQuery { tasks: Some(0), ..PageQuery::default() }).await?.job.id;
    let Html(body) = job_fragment(State(d), who, csrf, Path(id.to_string()), Query(q)).await?;
    page(&format!("job {id}"), &format!("/fragment/jobs/{id}{suffix}"), &format!("/jobs/{id}/events"), body)
}

/// Turns followed bus events into SSE messages named `job` or `progress`
/// (data: the event's JSON wire form); heartbeats are left out.
pub(crate) fn sse(events: impl Stream<Item = anyhow::Result<Event>> + Send + 'static) -> Response {
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

/// `?progress=1` on `/events`: progress events too.
#[derive(Deserialize, Default)]
struct EventsQuery {
    #[serde(default)]
    progress: Option<String>,
}

/// Every visible job's job-level events (and their tasks' progress with
/// `?progress=1`): a tenant's token follows its tenant only.
async fn all_events(
    State(d): State<Dash>,
    Extension(who): Extension<Principal>,
    Query(q): Query<EventsQuery>,
) -> Result<Response, Failure> {
    let scope = match who {
        Principal::Tenant(t) => Scope::Tenant(t),
        Principal::Admin | Principal::Anonymous => Scope::All,
    };
    let with_progress = q.progress.as_deref().is_some_and(|p| p == "1" || p == "true");
    let events = d.client.follow(scope, with_progress).await.map_err(unavailable)?;
    Ok(sse(events))
}

/// `?live=1` on a job's `/events`: from now on, no replay.
#[derive(Deserialize, Default)]
struct JobEventsQuery {
    #[serde(default)]
    live: Option<String>,
}

/// One job's events, from its first (from now on with `?live=1`) to its
/// terminal one (`/jobs/<id>/events` and `/api/jobs/<id>/events`).
async fn job_events(
    State(d): State<Dash>,
    Extension(who): Extension<Principal>,
    Path(id): Path<String>,
    Query(q): Query<JobEventsQuery>,
) -> Result<Response, Failure> {
    let rec = d.visible_job(&who, &id).await?;
    let live = q.live.as_deref().is_some_and(|p| p == "1" || p == "true");
    let scope = if live { Scope::JobLive(rec.tenant, rec.id) } else { Scope::Job(rec.tenant, rec.id) };
    let events = d.client.follow(scope, true).await.map_err(unavailable)?;
    // The stream ends right after the job's terminal event: nothing follows
    // it, so the response ends then instead of waiting for another event.
    let events = futures::stream::unfold((Box::pin(events), false), |(mut events, ended)| async move {
        if ended {
            return None;
        }
        let item = events.next().await?;
        let terminal = matches!(&item, Ok(Event::Job(j)) if j.kind.is_terminal());
        Some((item, (events, terminal)))
    });
    Ok(sse(events))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serve_limits_default_when_unset_and_a_zero_names_its_key() {
        let limits = serve_limits(&DashboardConfig::default()).unwrap();
        assert_eq!(limits.header_timeout, std::time::Duration::from_secs(HEADER_TIMEOUT_SECS));
        assert_eq!(limits.max_connections, MAX_CONNECTIONS);
        let cfg = DashboardConfig { max_connections: Some(0), ..DashboardConfig::default() };
        let e = serve_limits(&cfg).unwrap_err().to_string();
        assert!(e.contains("[dashboard] max_connections = 0"), "{e}");
    }
}
