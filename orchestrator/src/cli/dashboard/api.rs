//! The HTTP API under `/api` (docs/HTTP_API.md; the OpenAPI document,
//! src/cli/dashboard/openapi.json, is served at `GET /api/openapi.json`).
//! Reads come from the read-only `JobsReader`, writes go through the job
//! API (src/cli/dashboard/actions.rs); every reply and error is JSON, errors
//! as `{"error": {"kind", "message"}}` like the CLI's `--json` errors.

use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use flotilla_agent::files::FilePath;
use flotilla_protocol::ids::{JobId, TaskId, Tenant};
use flotilla_protocol::{ApprovalsReply, ApproveReply, CancelReply, Decision, ListReply, StatusReply};
use serde::Deserialize;

use super::actions::{DecisionInput, NewFile};
use super::guard::Principal;
use super::{Dash, Failure, ListQuery, PageQuery};

/// The OpenAPI document (hand-written: the wire types live in
/// flotilla-protocol, which takes no HTTP dependency to derive schemas).
const OPENAPI: &str = include_str!("openapi.json");

/// The `/api` routes. Keep one `.route` a line: the OpenAPI test reads them.
pub fn routes() -> axum::Router<Dash> {
    axum::Router::new()
        .route("/api/jobs", get(list).post(submit))
        .route("/api/jobs/{id}", get(status))
        .route("/api/jobs/{id}/cancel", post(cancel))
        .route("/api/jobs/{id}/events", get(super::job_events))
        .route("/api/approvals", get(approvals))
        .route("/api/approvals/{call_id}", post(decide))
        .route("/api/workers", get(workers))
        .route("/api/openapi.json", get(openapi))
}

/// A [`Failure`] as the API's JSON error.
pub struct ApiError(Failure);

impl From<Failure> for ApiError {
    fn from(f: Failure) -> Self {
        Self(f)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let Failure(status, message) = self.0;
        let kind = match status {
            StatusCode::BAD_REQUEST | StatusCode::UNPROCESSABLE_ENTITY => "validation",
            StatusCode::FORBIDDEN => "permission",
            StatusCode::NOT_FOUND => "not_found",
            StatusCode::CONFLICT => "business",
            StatusCode::PAYLOAD_TOO_LARGE => "limit",
            StatusCode::SERVICE_UNAVAILABLE => "transient",
            StatusCode::GATEWAY_TIMEOUT => "timeout",
            _ => "bug",
        };
        (status, Json(serde_json::json!({"error": {"kind": kind, "message": message}}))).into_response()
    }
}

type ApiResult<T> = Result<T, ApiError>;

fn bad(message: impl Into<String>) -> ApiError {
    ApiError(Failure(StatusCode::BAD_REQUEST, message.into()))
}

/// `?tenant=`, for writes and the approvals list.
#[derive(Deserialize, Default)]
pub struct TenantQuery {
    pub tenant: Option<String>,
}

/// The tenant named by `?tenant=` (none when absent or empty).
pub fn parse_tenant(raw: Option<&str>) -> Result<Option<Tenant>, Failure> {
    match raw.filter(|t| !t.is_empty()) {
        Some(t) => Tenant::new(t).map(Some).map_err(|e| Failure(StatusCode::BAD_REQUEST, e.to_string())),
        None => Ok(None),
    }
}

async fn list(
    State(d): State<Dash>,
    Extension(who): Extension<Principal>,
    Query(q): Query<ListQuery>,
) -> ApiResult<Json<ListReply>> {
    Ok(Json(d.list(&who, &q).await?))
}

async fn status(
    State(d): State<Dash>,
    Extension(who): Extension<Principal>,
    Path(id): Path<String>,
    Query(q): Query<PageQuery>,
) -> ApiResult<Json<StatusReply>> {
    Ok(Json(d.job_page(&who, &id, &q).await?))
}

/// `POST /api/jobs` body.
#[derive(Deserialize)]
struct SubmitBody {
    input: String,
    #[serde(default)]
    files: Vec<FileBody>,
}

/// One file of a submit: its job path and its content, base64.
#[derive(Deserialize)]
struct FileBody {
    path: String,
    content_base64: String,
}

async fn submit(
    State(d): State<Dash>,
    Extension(who): Extension<Principal>,
    Query(q): Query<TenantQuery>,
    body: Result<Json<SubmitBody>, axum::extract::rejection::JsonRejection>,
) -> ApiResult<Response> {
    let Json(body) =
        body.map_err(|e| bad(format!("{}: expected {{\"input\": \"...\", \"files\": [...]}}", e.body_text())))?;
    let tenant = who.tenant_for(parse_tenant(q.tenant.as_deref())?)?;
    let mut files = Vec::with_capacity(body.files.len());
    for f in body.files {
        let path = FilePath::parse(&f.path).map_err(|e| bad(format!("invalid job path {:?}: {e}", f.path)))?;
        if path.is_root() {
            return Err(bad(format!("job path {:?} names the root directory, not a file", f.path)));
        }
        let bytes = STANDARD
            .decode(f.content_base64.as_bytes())
            .map_err(|e| bad(format!("{}: content_base64: {e}", f.path)))?;
        files.push(NewFile { path, bytes });
    }
    let id = d.submit(&tenant, body.input, files).await?;
    let reply = serde_json::json!({"job_id": id, "tenant": tenant});
    Ok((StatusCode::CREATED, [(header::LOCATION, format!("/api/jobs/{id}"))], Json(reply)).into_response())
}

/// `POST /api/jobs/{id}/cancel` body (optional).
#[derive(Deserialize, Default)]
struct CancelBody {
    reason: Option<String>,
}

async fn cancel(
    State(d): State<Dash>,
    Extension(who): Extension<Principal>,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> ApiResult<Json<CancelReply>> {
    let body: CancelBody = if body.iter().all(u8::is_ascii_whitespace) {
        CancelBody::default()
    } else {
        serde_json::from_slice(&body).map_err(|e| bad(format!("expected {{\"reason\": \"...\"}}: {e}")))?
    };
    Ok(Json(d.cancel(&who, &id, body.reason).await?))
}

/// `GET /api/approvals` query.
#[derive(Deserialize)]
struct ApprovalsQuery {
    tenant: Option<String>,
    job: Option<JobId>,
}

async fn approvals(
    State(d): State<Dash>,
    Extension(who): Extension<Principal>,
    Query(q): Query<ApprovalsQuery>,
) -> ApiResult<Json<ApprovalsReply>> {
    let tenant = match (&who, parse_tenant(q.tenant.as_deref())?) {
        // Reading needs no right to act: without a token every tenant is readable.
        (Principal::Anonymous, asked) => asked.unwrap_or_default(),
        (_, asked) => who.tenant_for(asked)?,
    };
    Ok(Json(d.approvals(&tenant, q.job).await?))
}

/// `POST /api/approvals/{call_id}` body: `flotilla approve`'s arguments.
#[derive(Deserialize)]
struct DecideBody {
    job_id: JobId,
    task_id: Option<TaskId>,
    by: Option<String>,
    /// `{"decision": "approve"}`, `{"decision": "reject", "reason": "…"}`
    /// or `{"decision": "edit", "args": {…}}` (docs/APPROVALS.md).
    #[serde(flatten)]
    decision: Decision,
}

async fn decide(
    State(d): State<Dash>,
    Extension(who): Extension<Principal>,
    Path(call_id): Path<String>,
    body: Result<Json<DecideBody>, axum::extract::rejection::JsonRejection>,
) -> ApiResult<Json<ApproveReply>> {
    let Json(b) = body.map_err(|e| {
        bad(format!("{}: expected {{\"job_id\", \"decision\": \"approve\"|\"reject\"|\"edit\", ...}}", e.body_text()))
    })?;
    let input = DecisionInput { job_id: b.job_id, call_id, task_id: b.task_id, decision: b.decision, by: b.by };
    Ok(Json(d.decide(&who, input).await?))
}

async fn workers(State(d): State<Dash>, Extension(who): Extension<Principal>) -> ApiResult<Response> {
    if matches!(who, Principal::Tenant(_)) {
        return Err(ApiError(Failure(
            StatusCode::FORBIDDEN,
            "the worker fleet is shown to the admin token only".into(),
        )));
    }
    let workers = d.reader.live_workers().await.map_err(super::unavailable)?;
    Ok(Json(workers).into_response())
}

async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI).into_response()
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    /// `(method, path)` of every `.route(...)` line in [`super::routes`].
    fn declared_routes() -> Vec<(String, String)> {
        let src = include_str!("api.rs");
        let body = src.split("pub fn routes()").nth(1).unwrap().split("\n}\n").next().unwrap();
        let mut out = Vec::new();
        for line in body.lines().filter(|l| l.trim_start().starts_with(".route(\"")) {
            let path = line.split('"').nth(1).unwrap().to_string();
            for method in ["get", "post", "put", "delete", "patch"] {
                if line.contains(&format!("{method}(")) {
                    out.push((method.to_string(), path.clone()));
                }
            }
        }
        out
    }

    #[test]
    fn every_api_route_is_in_the_openapi_document() {
        let doc: Value = serde_json::from_str(super::OPENAPI).expect("openapi.json parses");
        assert_eq!(doc["openapi"].as_str().map(|v| &v[..2]), Some("3."), "an OpenAPI 3 document");
        let routes = declared_routes();
        assert!(routes.len() >= 9, "the routes were read: {routes:?}");
        for (method, path) in &routes {
            let op = &doc["paths"][path][method];
            assert!(op.is_object(), "{method} {path} is missing from openapi.json");
            assert!(op["responses"].is_object(), "{method} {path} has no responses");
        }
        let documented: usize = doc["paths"].as_object().unwrap().values().map(|p| p.as_object().unwrap().len()).sum();
        assert_eq!(documented, routes.len(), "openapi.json documents a route the router does not serve");
    }
}
