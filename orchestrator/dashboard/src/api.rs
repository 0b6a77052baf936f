//! The HTTP API under `/api` (docs/HTTP_API.md; the OpenAPI document,
//! src/openapi.json, is served at `GET /api/openapi.json`).
//! Reads come from the read-only [`crate::JobRecords`], writes go through the job
//! API (src/actions.rs); every reply and error is JSON, errors
//! as `{"error": {"kind", "message"}}` like the CLI's `--json` errors.

use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use flotilla_protocol::ids::{JobId, TaskId, Tenant};
use flotilla_protocol::path::FilePath;
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
        .route("/api/jobs/{id}/files", get(super::job_files::api_list).post(super::job_files::api_upload))
        .route("/api/jobs/{id}/files/content", get(super::job_files::api_content))
        .route("/api/workers", get(workers))
        .route("/api/queues", get(super::fleet::api_queues))
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

/// `POST /api/jobs` body. The base64 contents are borrowed from the body
/// read, not copied (base64 has no JSON escapes).
#[derive(Deserialize)]
struct SubmitBody<'a> {
    input: String,
    #[serde(default, borrow)]
    files: Vec<FileBody<'a>>,
}

/// One file of a submit: its job path and its content, base64.
#[derive(Deserialize)]
struct FileBody<'a> {
    path: String,
    #[serde(borrow)]
    content_base64: std::borrow::Cow<'a, str>,
}

/// How long a client refused for [`Dash::uploads`] should wait.
const UPLOAD_RETRY_SECS: u64 = 5;
/// Room in a submit body for the job text and the JSON around the files.
const SUBMIT_OVERHEAD: usize = 1 << 20;

impl Dash {
    /// The most a submit body may hold: the files' limit, base64-encoded,
    /// and [`SUBMIT_OVERHEAD`].
    fn submit_limit(&self) -> usize {
        usize::try_from(self.max_upload.saturating_mul(4) / 3).unwrap_or(usize::MAX).saturating_add(SUBMIT_OVERHEAD)
    }
}

/// `POST /api/jobs`. Its body is read here, not by an extractor, so that a
/// permit of `[dashboard] max_concurrent_uploads` is held first (one more
/// upload gets 503 + `Retry-After` before a byte of it is read), the read
/// stops at the limit (413 naming it, and the connection is closed rather
/// than the rest read), and each file is checked against `[files]
/// max_file_bytes` before it is decoded (docs/HTTP_API.md, "Limits").
async fn submit(
    State(d): State<Dash>,
    Extension(who): Extension<Principal>,
    Query(q): Query<TenantQuery>,
    headers: axum::http::HeaderMap,
    body: axum::body::Body,
) -> ApiResult<Response> {
    let tenant = who.tenant_for(parse_tenant(q.tenant.as_deref())?)?;
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().to_ascii_lowercase().starts_with("application/json"));
    if !json {
        let msg = "expected Content-Type: application/json and {\"input\": \"...\", \"files\": [...]}";
        return Err(bad(msg));
    }
    let Ok(_permit) = d.uploads.clone().try_acquire_owned() else {
        return Ok(busy());
    };
    let limit = d.submit_limit();
    let bytes = match axum::body::to_bytes(body, limit).await {
        Ok(b) => b,
        Err(e) if is_length_limit(&e) => return Ok(too_large(&d, limit)),
        Err(e) => return Err(bad(format!("the request body could not be read: {e}"))),
    };
    let (input, files) = decode(&d, &bytes)?;
    drop(bytes);
    let id = d.submit(&tenant, input, files).await?;
    let reply = serde_json::json!({"job_id": id, "tenant": tenant});
    Ok((StatusCode::CREATED, [(header::LOCATION, format!("/api/jobs/{id}"))], Json(reply)).into_response())
}

/// The job text and the decoded files of a submit body.
fn decode(d: &Dash, bytes: &[u8]) -> ApiResult<(String, Vec<NewFile>)> {
    let body: SubmitBody<'_> = serde_json::from_slice(bytes)
        .map_err(|e| bad(format!("{e}: expected {{\"input\": \"...\", \"files\": [...]}}")))?;
    let mut files = Vec::with_capacity(body.files.len());
    for f in body.files {
        let path = FilePath::parse(&f.path).map_err(|e| bad(format!("invalid job path {:?}: {e}", f.path)))?;
        if path.is_root() {
            return Err(bad(format!("job path {:?} names the root directory, not a file", f.path)));
        }
        let decoded_len = (f.content_base64.len() as u64 / 4) * 3;
        if decoded_len > d.max_file.saturating_add(2) {
            let max = d.max_file;
            let msg = format!("{}: the file is larger than [files] max_file_bytes ({max} bytes)", f.path);
            return Err(ApiError(Failure(StatusCode::PAYLOAD_TOO_LARGE, msg)));
        }
        let bytes = STANDARD
            .decode(f.content_base64.as_bytes())
            .map_err(|e| bad(format!("{}: content_base64: {e}", f.path)))?;
        if bytes.len() as u64 > d.max_file {
            let (max, len) = (d.max_file, bytes.len());
            let msg = format!("{}: {len} bytes, more than [files] max_file_bytes ({max} bytes)", f.path);
            return Err(ApiError(Failure(StatusCode::PAYLOAD_TOO_LARGE, msg)));
        }
        files.push(NewFile { path, bytes });
    }
    Ok((body.input, files))
}

/// Whether a body read stopped at its length limit.
pub(crate) fn is_length_limit(e: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = source {
        if err.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        source = err.source();
    }
    false
}

/// 503 for an upload over `[dashboard] max_concurrent_uploads`.
pub(crate) fn busy() -> Response {
    let msg =
        format!("too many uploads at once ([dashboard] max_concurrent_uploads): retry in {UPLOAD_RETRY_SECS} seconds");
    let mut r = ApiError(Failure(StatusCode::SERVICE_UNAVAILABLE, msg)).into_response();
    r.headers_mut().insert(header::RETRY_AFTER, header::HeaderValue::from(UPLOAD_RETRY_SECS));
    r
}

/// 413 for a body over [`Dash::submit_limit`]; the rest of it is not read,
/// so the connection is closed after this answer.
fn too_large(d: &Dash, limit: usize) -> Response {
    let msg = format!(
        "the request body is larger than {limit} bytes: [files] max_upload_bytes ({} bytes) of files, base64, \
         and 1 MiB for the rest",
        d.max_upload
    );
    let mut r = ApiError(Failure(StatusCode::PAYLOAD_TOO_LARGE, msg)).into_response();
    r.headers_mut().insert(header::CONNECTION, header::HeaderValue::from_static("close"));
    r
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
    super::fleet::admin_only(&who)?;
    let workers = d.client.live_workers().await.map_err(super::unavailable)?;
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
