//! The dashboard pages' HTML forms: submit on the jobs page, cancel and
//! approve/reject/edit (accept/decline/cancel for an MCP server's question) on a job page. They post urlencoded forms to
//! `/actions/*`, which the guard has already checked for CSRF
//! (src/csrf.rs: same origin and the page's `csrf` field), do
//! what the JSON API does (src/actions.rs) and redirect back
//! to the job's page (303), so a reload never posts twice. A refusal is a
//! short page with the reason and its status.

use axum::extract::{Path, State};
use axum::http::header;
use axum::response::{Html, IntoResponse, Response};
use axum::routing::post;
use axum::{Extension, Form};
use flotilla_protocol::Decision;
use flotilla_protocol::ids::{JobId, TaskId};
use serde::Deserialize;

use super::actions::DecisionInput;
use super::api::parse_tenant;
use super::guard::Principal;
use super::{Dash, Failure};

/// The form routes.
pub fn routes() -> axum::Router<Dash> {
    axum::Router::new()
        .route("/actions/submit", post(submit))
        .route("/actions/jobs/{id}/cancel", post(cancel))
        .route("/actions/approvals/{call_id}", post(decide))
}

/// A refusal as a page a person reads in the browser.
struct FormError(Failure);

impl From<Failure> for FormError {
    fn from(f: Failure) -> Self {
        Self(f)
    }
}

impl IntoResponse for FormError {
    fn into_response(self) -> Response {
        let Failure(status, message) = self.0;
        let text = super::view::escape(&message);
        let page = format!(
            "<!doctype html><title>refused</title><p id=\"error\" class=\"err\">{status}: {text}</p><p><a href=\"/\">back to the jobs</a></p>"
        );
        (status, Html(page)).into_response()
    }
}

fn to_job(id: JobId) -> Response {
    (axum::http::StatusCode::SEE_OTHER, [(header::LOCATION, format!("/jobs/{id}"))]).into_response()
}

/// The jobs page's submit box.
#[derive(Deserialize)]
struct SubmitForm {
    input: String,
    #[serde(default)]
    tenant: Option<String>,
}

async fn submit(
    State(d): State<Dash>,
    Extension(who): Extension<Principal>,
    Form(f): Form<SubmitForm>,
) -> Result<Response, FormError> {
    let tenant = who.tenant_for(parse_tenant(f.tenant.as_deref())?)?;
    Ok(to_job(d.submit(&tenant, f.input, Vec::new()).await?))
}

/// A job page's cancel button.
#[derive(Deserialize)]
struct CancelForm {
    #[serde(default)]
    reason: Option<String>,
}

async fn cancel(
    State(d): State<Dash>,
    Extension(who): Extension<Principal>,
    Path(id): Path<String>,
    Form(f): Form<CancelForm>,
) -> Result<Response, FormError> {
    let reason = f.reason.filter(|r| !r.trim().is_empty());
    Ok(to_job(d.cancel(&who, &id, reason).await?.job_id))
}

/// One pending approval's buttons: `decision` is the button pressed.
#[derive(Deserialize)]
struct DecideForm {
    job_id: JobId,
    #[serde(default)]
    task_id: Option<TaskId>,
    decision: String,
    #[serde(default)]
    reason: Option<String>,
    /// The edited arguments (JSON object), for `edit`.
    #[serde(default)]
    args: Option<String>,
    /// The answer to an MCP server's question (JSON object), for `accept`.
    #[serde(default)]
    content: Option<String>,
    /// `inbox` when posted from the approvals inbox, which it returns to
    /// (the job's page otherwise).
    #[serde(default)]
    from: Option<String>,
}

async fn decide(
    State(d): State<Dash>,
    Extension(who): Extension<Principal>,
    Path(call_id): Path<String>,
    Form(f): Form<DecideForm>,
) -> Result<Response, FormError> {
    let bad = |m: String| FormError(Failure(axum::http::StatusCode::BAD_REQUEST, m));
    let decision = match f.decision.as_str() {
        "approve" => Decision::Approve,
        "reject" => Decision::Reject { reason: f.reason.filter(|r| !r.trim().is_empty()) },
        "edit" => {
            let text = f.args.unwrap_or_default();
            let args =
                serde_json::from_str(&text).map_err(|e| bad(format!("the edited arguments are not JSON: {e}")))?;
            Decision::Edit { args }
        }
        "accept" => {
            let text = f.content.unwrap_or_default();
            let content = serde_json::from_str(&text).map_err(|e| bad(format!("the answer is not JSON: {e}")))?;
            Decision::Accept { content }
        }
        "decline" => Decision::Decline,
        "cancel" => Decision::Cancel,
        other => {
            return Err(bad(format!("unknown decision {other:?}: approve, reject, edit, accept, decline or cancel")));
        }
    };
    let input = DecisionInput { job_id: f.job_id, call_id, task_id: f.task_id, decision, by: None };
    d.decide(&who, input).await?;
    if f.from.as_deref() == Some("inbox") {
        return Ok((axum::http::StatusCode::SEE_OTHER, [(header::LOCATION, "/approvals")]).into_response());
    }
    Ok(to_job(f.job_id))
}
