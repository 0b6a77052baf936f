//! A job's files tab and its file routes: list (one page of paths under a
//! prefix), download and upload, all through the job API's `files_*`
//! operations of the job's tenant (docs/PROTOCOL.md "Job files"), so the
//! orchestrator's checks apply as for `flotilla files` (reserved paths
//! such as `/reports/` cannot be written, `[files] max_file_bytes` holds).
//!
//! | route | what |
//! |---|---|
//! | `GET /jobs/<id>/files?prefix=&after=` | the tab (`/fragment/jobs/<id>/files` without the page) |
//! | `GET /api/jobs/<id>/files?prefix=&after=` | the same page as JSON (`files_ls`'s reply) |
//! | `GET /api/jobs/<id>/files/content?path=` | the file's bytes, as a download |
//! | `POST /api/jobs/<id>/files?path=` | stores the request body at `path` (the tab's upload box sends it with the page's CSRF token) |

use axum::Extension;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use flotilla_client::NewFile as Upload;
use flotilla_protocol::files_api::{FilesCommitRequest, FilesLsReply, FilesLsRequest};
use flotilla_protocol::path::FilePath;
use flotilla_protocol::{JobRecord, SCHEMA_VERSION};
use serde::{Deserialize, Serialize};

use super::api::{ApiError, is_length_limit};
use super::guard::Principal;
use super::{Dash, Failure, csrf_of, page, template_failure, view};
use crate::csrf::CsrfToken;

/// `?prefix=&after=` of a listing.
#[derive(Deserialize, Default)]
pub struct LsQuery {
    prefix: Option<String>,
    after: Option<String>,
}

/// `?path=` of a download or an upload.
#[derive(Deserialize)]
pub struct PathQuery {
    path: String,
}

/// Files on one page of the tab.
const PAGE: usize = 200;

impl Dash {
    /// One page of job `id`'s files, if `who` sees the job.
    async fn files_page(&self, who: &Principal, id: &str, q: &LsQuery) -> Result<(JobRecord, FilesLsReply), Failure> {
        let job = self.visible_job(who, id).await?;
        let req = FilesLsRequest {
            v: SCHEMA_VERSION,
            job_id: job.id,
            prefix: q.prefix.clone().filter(|p| !p.is_empty()),
            after: q.after.clone().filter(|a| !a.is_empty()),
            limit: Some(PAGE),
        };
        let listed = self.call(&job.tenant, &req, flotilla_client::TIMEOUT).await?;
        Ok((job, listed))
    }
}

#[derive(Serialize)]
struct FileRow {
    path: String,
    /// `path` percent-encoded for the download link.
    path_query: String,
    size: u64,
    modified: String,
}

pub async fn fragment(
    State(d): State<Dash>,
    Extension(who): Extension<Principal>,
    csrf: Option<Extension<CsrfToken>>,
    Path(id): Path<String>,
    Query(q): Query<LsQuery>,
) -> Result<Html<String>, Failure> {
    let (job, listed) = d.files_page(&who, &id, &q).await?;
    let rows: Vec<FileRow> = listed
        .files
        .iter()
        .map(|f| FileRow {
            path: f.path.clone(),
            path_query: view::query_value(&f.path),
            size: f.size,
            modified: f.modified.map(view::ts).unwrap_or_default(),
        })
        .collect();
    let prefix = q.prefix.clone().unwrap_or_default();
    let next = listed.next_after.map(|a| {
        format!("/jobs/{}/files?prefix={}&after={}", job.id, view::query_value(&prefix), view::query_value(&a))
    });
    let ctx = minijinja::context! {
        job_id => job.id.to_string(), job_status => job.status.as_str(), files => view::value(rows), prefix, next,
        can_act => who.may_act(&job.tenant).is_ok(), csrf => csrf_of(csrf),
    };
    view::render("files.html", ctx).map(Html).map_err(template_failure)
}

pub async fn page_handler(
    State(d): State<Dash>,
    who: Extension<Principal>,
    csrf: Option<Extension<CsrfToken>>,
    Path(id): Path<String>,
    Query(q): Query<LsQuery>,
) -> Result<Html<String>, Failure> {
    let fragment_url = format!(
        "/fragment/jobs/{id}/files?prefix={}&after={}",
        view::query_value(q.prefix.as_deref().unwrap_or_default()),
        view::query_value(q.after.as_deref().unwrap_or_default())
    );
    let Html(body) = fragment(State(d), who, csrf, Path(id.clone()), Query(q)).await?;
    page(&format!("files of job {id}"), &fragment_url, &format!("/jobs/{id}/events"), body)
}

/// `GET /api/jobs/<id>/files`.
pub async fn api_list(
    State(d): State<Dash>,
    Extension(who): Extension<Principal>,
    Path(id): Path<String>,
    Query(q): Query<LsQuery>,
) -> Result<axum::Json<FilesLsReply>, ApiError> {
    Ok(axum::Json(d.files_page(&who, &id, &q).await?.1))
}

/// `GET /api/jobs/<id>/files/content?path=`: the bytes as an attachment,
/// never rendered by the browser (a file may hold model-written HTML).
pub async fn api_content(
    State(d): State<Dash>,
    Extension(who): Extension<Principal>,
    Path(id): Path<String>,
    Query(q): Query<PathQuery>,
) -> Result<Response, ApiError> {
    let job = d.visible_job(&who, &id).await?;
    let path = FilePath::parse(&q.path)
        .map_err(|e| Failure(StatusCode::BAD_REQUEST, format!("invalid job path {:?}: {e}", q.path)))?;
    let (bytes, sha256) = d
        .client
        .for_tenant(job.tenant.clone())
        .download(job.id, path.as_str())
        .await
        .map_err(super::actions::refused)?;
    let name = path.as_str().rsplit('/').next().unwrap_or("file").replace(['"', '\\'], "_");
    let mut r = bytes.into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/octet-stream"));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    if let Ok(v) = HeaderValue::from_str(&format!("attachment; filename=\"{name}\"")) {
        h.insert(header::CONTENT_DISPOSITION, v);
    }
    if let Ok(v) = HeaderValue::from_str(&format!("\"{sha256}\"")) {
        h.insert(header::ETAG, v);
    }
    Ok(r)
}

/// `POST /api/jobs/<id>/files?path=`: the body, at most `[files]
/// max_file_bytes`, becomes the file at `path` of the job (replacing one
/// there); its body is read within that limit, holding an upload permit
/// like a submit.
pub async fn api_upload(
    State(d): State<Dash>,
    Extension(who): Extension<Principal>,
    Path(id): Path<String>,
    Query(q): Query<PathQuery>,
    body: axum::body::Body,
) -> Result<Response, ApiError> {
    let job = d.visible_job(&who, &id).await?;
    who.may_act(&job.tenant)?;
    let path = FilePath::parse(&q.path)
        .map_err(|e| Failure(StatusCode::BAD_REQUEST, format!("invalid job path {:?}: {e}", q.path)))?;
    if path.is_root() {
        return Err(
            Failure(StatusCode::BAD_REQUEST, format!("{:?} names the root directory, not a file", q.path)).into()
        );
    }
    let Ok(_permit) = d.uploads.clone().try_acquire_owned() else {
        return Ok(super::api::busy());
    };
    let limit = usize::try_from(d.max_file).unwrap_or(usize::MAX);
    let bytes = match axum::body::to_bytes(body, limit).await {
        Ok(b) => b,
        Err(e) if is_length_limit(&e) => {
            let msg = format!("the file is larger than [files] max_file_bytes ({} bytes)", d.max_file);
            let mut r = ApiError::from(Failure(StatusCode::PAYLOAD_TOO_LARGE, msg)).into_response();
            r.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
            return Ok(r);
        }
        Err(e) => return Err(Failure(StatusCode::BAD_REQUEST, format!("the body could not be read: {e}")).into()),
    };
    let client = d.client.for_tenant(job.tenant.clone());
    let upload = [Upload { path: path.to_string(), bytes: bytes.to_vec() }];
    let staged = client.upload(&upload).await.map_err(super::actions::refused)?;
    let req = FilesCommitRequest { v: SCHEMA_VERSION, job_id: job.id, files: staged };
    let stored = d.call(&job.tenant, &req, flotilla_client::FILE_TIMEOUT).await?;
    Ok((StatusCode::CREATED, axum::Json(stored)).into_response())
}
