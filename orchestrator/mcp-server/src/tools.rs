//! The four tools of `flotilla mcp serve` (docs/MCP.md, "Use Flotilla from an
//! MCP host"): each one is a job API request over the bus through
//! [`Client`], like every other CLI command, so an MCP host sees exactly
//! what `flotilla submit|status|cancel|jobs` would show for the same tenant.
//! Every tool declares an output schema and returns structured content; a
//! refusal by the job API is a tool error (`isError: true`) carrying its
//! message, so the host's model can read why and correct itself. The
//! handler also serves job files as resources (src/resources.rs).
//!
//! Revisions (docs/MCP.md, "Protocol revisions"): rmcp 3.11 serves them
//! all from this one handler. A 2026-07-28 host asks `server/discover`
//! and then sends each request on its own, its revision, client info and
//! capabilities in the request's `_meta`, with no session; rmcp checks the
//! `_meta`, the `MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name` and
//! `Mcp-Param-*` headers against the body, and adds the caching hints that
//! revision requires (`ttlMs: 0`, `cacheScope: "private"`: a tenant's
//! answers are never shared, and job state changes under a host). An older
//! host's `initialize` is negotiated down to 2025-11-25, 2025-06-18 or
//! older, and its session goes on as before. This server's own part is
//! which revisions it offers ([`revisions`]) and that its tool list is as
//! private as the rest (`list_tools`).

use std::time::Duration;

use flotilla_client::{Client, JobRef, NewFile};
use flotilla_protocol::JobStatus;
use flotilla_protocol::files_api::StagedFile;
use flotilla_protocol::path::FilePath;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::ToolCallContext;
use rmcp::handler::server::wrapper::{Json, Parameters};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, ContentBlock, GetTaskParams,
    GetTaskResult, Implementation, ListResourceTemplatesResult, ListToolsResult, PaginatedRequestParams,
    ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, tool, tool_handler, tool_router};

use super::http::Caller;
use super::schema::{
    CancelJobParams, CancelJobResult, InputFile, JobStatusParams, JobStatusResult, ListJobsParams, ListJobsResult,
    RESULT_VERSION, SubmitJobParams, SubmitJobResult,
};

/// Jobs listed when `list_jobs` is given no limit.
const DEFAULT_LIST: usize = 20;
/// The most `list_jobs` returns in one call.
const MAX_LIST: usize = 200;
/// The newest revision this server is tested at (tests/e2e/mcp_server_conformance.rs).
const NEWEST: ProtocolVersion = ProtocolVersion::V_2026_07_28;

/// The server: one tenant's job API as MCP tools.
#[derive(Clone)]
pub struct JobTools {
    api: Client,
    /// `[files] max_upload_bytes`: the most `submit_job` files may hold in all.
    max_upload: u64,
    tool_router: ToolRouter<Self>,
}

#[tool_router(router = tool_router)]
impl JobTools {
    /// Tools acting through `api`; uploads capped at `max_upload` bytes.
    pub fn new(api: Client, max_upload: u64) -> Self {
        Self { api, max_upload, tool_router: Self::tool_router() }
    }

    /// Starts a job and returns its id at once; the job runs on the fleet.
    #[tool(
        name = "submit_job",
        description = "Submit a job to the Flotilla fleet: plain-language `input`, optionally with text `files` \
                       ({path, content}; a relative path goes under /inputs/). Returns the job id at once; poll \
                       job_status for progress and the answer. A host declaring the tasks extension gets a \
                       task (id = job id) to poll with tasks/get."
    )]
    async fn submit_job(
        &self,
        ctx: RequestContext<RoleServer>,
        Parameters(p): Parameters<SubmitJobParams>,
    ) -> Result<Json<SubmitJobResult>, String> {
        submit(&self.api(&ctx), p, self.max_upload).await.map(Json)
    }

    /// A job's state: status, todos, task counts and, once done, the answer.
    #[tool(
        name = "job_status",
        description = "A job's status (submitted, running, completed, failed, cancelled), the planner's todo list, \
                       task counts, and the answer once completed (or the error once failed). `job_id` may be a \
                       unique prefix of at least 4 characters. With `wait_seconds` (at most 60) the call first \
                       waits for the job to end, sending progress notifications for its events."
    )]
    async fn job_status(
        &self,
        ctx: RequestContext<RoleServer>,
        Parameters(p): Parameters<JobStatusParams>,
    ) -> Result<Json<JobStatusResult>, String> {
        let api = self.api(&ctx);
        let id = resolve(&api, &p.job_id).await?;
        let mut waited = 0;
        if let Some(secs) = p.wait_seconds.filter(|s| *s > 0) {
            let progress = ctx.meta.get_progress_token().map(|token| (token, ctx.peer.clone()));
            waited = super::wait::until_done(&api, id, Duration::from_secs(secs), progress)
                .await
                .map_err(|e| format!("{e:#}"))?;
        }
        let job = api.status(id).await.map_err(|e| format!("{e:#}"))?;
        Ok(Json(JobStatusResult { events_waited: waited, ..JobStatusResult::from(job) }))
    }

    /// Cancels a job; its running tasks are stopped.
    #[tool(
        name = "cancel_job",
        description = "Cancel a job: queued tasks are removed and running ones stopped. `job_id` may be a unique \
                       prefix; `reason` is recorded on the job."
    )]
    async fn cancel_job(
        &self,
        ctx: RequestContext<RoleServer>,
        Parameters(p): Parameters<CancelJobParams>,
    ) -> Result<Json<CancelJobResult>, String> {
        let api = self.api(&ctx);
        let id = resolve(&api, &p.job_id).await?;
        let reply = api.cancel(id, p.reason).await.map_err(|e| format!("{e:#}"))?;
        Ok(Json(CancelJobResult {
            v: RESULT_VERSION,
            job_id: reply.job_id.to_string(),
            purged_tasks: reply.purged_tasks,
        }))
    }

    /// This tenant's jobs, newest first.
    #[tool(
        name = "list_jobs",
        description = "This tenant's jobs, newest first, optionally only those with one `status`; at most `limit` \
                       (default 20, at most 200)."
    )]
    async fn list_jobs(
        &self,
        ctx: RequestContext<RoleServer>,
        Parameters(p): Parameters<ListJobsParams>,
    ) -> Result<Json<ListJobsResult>, String> {
        let limit = p.limit.unwrap_or(DEFAULT_LIST).clamp(1, MAX_LIST);
        let status: Option<JobStatus> = p.status.map(Into::into);
        let reply = self.api(&ctx).list(status, limit).await.map_err(|e| format!("{e:#}"))?;
        Ok(Json(ListJobsResult::from(reply)))
    }
}

impl JobTools {
    /// `submit_job` for a host that declared the tasks extension answers
    /// with a task handle (src/tasks.rs); every other call is the tool
    /// router's.
    async fn call_tool_in_span(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if request.name != "submit_job" || !super::tasks::requested(&context) {
            return self.tool_router.call(ToolCallContext::new(self, request, context)).await;
        }
        let args = serde_json::Value::Object(request.arguments.unwrap_or_default());
        let p: SubmitJobParams = serde_json::from_value(args)
            .map_err(|e| ErrorData::invalid_params(format!("submit_job arguments: {e}"), None))?;
        let api = self.api(&context);
        let submitted = match submit(&api, p, self.max_upload).await {
            Ok(s) => s,
            Err(e) => return Ok(CallToolResult::error(vec![ContentBlock::text(e)]).into()),
        };
        let job = super::tasks::job(&api, &submitted.job_id).await?;
        Ok(super::tasks::created(&job).into())
    }
    /// The job API as the request's caller: the tenant its bearer token
    /// stands for over HTTP (src/http.rs [`Caller`]), else the
    /// server's `--tenant`.
    fn api(&self, ctx: &RequestContext<RoleServer>) -> Client {
        let caller = ctx.extensions.get::<axum::http::request::Parts>().and_then(|p| p.extensions.get::<Caller>());
        match caller {
            Some(Caller(tenant)) if tenant != self.api.tenant() => self.api.for_tenant(tenant.clone()),
            _ => self.api.clone(),
        }
    }
}

/// Uploads `p.files` and submits the job (the client's one upload path,
/// as `flotilla submit --file` does).
async fn submit(api: &Client, p: SubmitJobParams, max_upload: u64) -> Result<SubmitJobResult, String> {
    let staged = upload(api, &p.files, max_upload).await.map_err(|e| format!("{e:#}"))?;
    let paths = staged.iter().map(|s| s.path.clone()).collect();
    let job = api.submit_with_files(p.input, staged).await.map_err(|e| format!("{e:#}"))?;
    Ok(SubmitJobResult { v: RESULT_VERSION, job_id: job.to_string(), status: "submitted".into(), files: paths })
}

/// Every revision rmcp knows up to [`NEWEST`]: `server/discover` lists
/// them, `initialize` negotiates within them and a request naming another
/// is refused. Capped, so a later rmcp that learns a newer revision does not
/// offer it to hosts before this server has been tried at it.
fn revisions() -> &'static [ProtocolVersion] {
    ProtocolVersion::known_up_to(&NEWEST)
}

/// A job id or unique prefix, as `flotilla status` takes it ([`JobRef`]).
async fn resolve(api: &Client, raw: &str) -> Result<flotilla_protocol::ids::JobId, String> {
    let job: JobRef = raw.parse()?;
    api.resolve(&job).await.map_err(|e| format!("{e:#}"))
}

/// Uploads the files ([`Client::upload`]), as `flotilla submit --file` does
/// for local files (orchestrator/cli/src/commands/files.rs): every path is checked and the total
/// capped at `max_upload` bytes before anything is sent.
async fn upload(api: &Client, files: &[InputFile], max_upload: u64) -> anyhow::Result<Vec<StagedFile>> {
    let mut checked = Vec::with_capacity(files.len());
    let mut total = 0u64;
    for f in files {
        checked.push(job_path(&f.path)?);
        total += f.content.len() as u64;
        if total > max_upload {
            anyhow::bail!(
                "the files come to more than [files] max_upload_bytes ({} bytes) at {}; send fewer or smaller files",
                max_upload,
                f.path
            );
        }
    }
    let new: Vec<NewFile> = files
        .iter()
        .zip(checked)
        .map(|(f, path)| NewFile { path: path.to_string(), bytes: f.content.clone().into_bytes() })
        .collect();
    api.upload(&new).await
}

/// A job path from a tool argument: absolute as given, relative under `/inputs/`.
fn job_path(raw: &str) -> anyhow::Result<FilePath> {
    let full = if raw.starts_with('/') { raw.to_string() } else { format!("/inputs/{raw}") };
    let path = FilePath::parse(&full).map_err(|e| anyhow::anyhow!("invalid file path {raw:?}: {e}"))?;
    if path.is_root() {
        anyhow::bail!("file path {raw:?} names the root directory, not a file");
    }
    Ok(path)
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for JobTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().enable_resources().enable_tasks().build())
            .with_server_info(Implementation::new("flotilla", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Flotilla runs long jobs on a fleet of agents. submit_job returns a job id at once (or a task, \
                 with the tasks extension); poll job_status until done is true. A job's files are resources: flotilla://jobs/<id>/files/<path>."
                    .to_string(),
            )
    }

    /// The revisions `revisions` lists.
    fn supported_protocol_versions(&self) -> std::borrow::Cow<'static, [ProtocolVersion]> {
        std::borrow::Cow::Borrowed(revisions())
    }

    /// Every tool call, in its span; `JobTools::call_tool_in_span` answers it.
    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        // The call as a span of the caller's trace (its `_meta.traceparent`),
        // named as the MCP semantic conventions name server spans.
        let span = tracing::info_span!(
            target: "gen_ai",
            parent: None,
            "tools/call",
            otel.name = %format_args!("tools/call {}", request.name),
            otel.kind = "server",
            otel.status_code = tracing::field::Empty,
            mcp.method.name = "tools/call",
            gen_ai.operation.name = "execute_tool",
            gen_ai.tool.name = %request.name,
        );
        if let Some(tp) = context.meta.0.0.get("traceparent").and_then(|v| v.as_str()) {
            flotilla_telemetry::trace::set_parent(&span, tp);
        }
        let response = self.call_tool_in_span(request, context).await;
        let failed = match &response {
            Ok(CallToolResponse::Complete(result)) => result.is_error == Some(true),
            Ok(_) => false,
            Err(_) => true,
        };
        if failed {
            span.record("otel.status_code", "ERROR");
        }
        response
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        let job = super::tasks::job(&self.api(&context), &request.task_id).await?;
        Ok(GetTaskResult::new(super::tasks::detailed(job)))
    }

    /// Cancels the job; a job that has already ended is refused with the job
    /// API's message.
    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let api = self.api(&context);
        let job = super::tasks::job(&api, &request.task_id).await?;
        let reason = Some("cancelled by the MCP host (tasks/cancel)".to_string());
        api.cancel(job.id, reason).await.map_err(super::tasks::error)?;
        Ok(())
    }

    /// The tools, with no caching hints of their own: at 2026-07-28 rmcp
    /// then fills in `ttlMs: 0` and `cacheScope: "private"`, as for every
    /// other list here. The generated default would say `public`, which lets
    /// an intermediary hand the answer to callers this server refuses;
    /// nothing behind the credential is offered for shared caching.
    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tool_router.list_all()))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(ListResourceTemplatesResult::with_all_items(vec![super::resources::template()]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        Ok(super::resources::read(&self.api(&context), &request.uri).await?.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tool_declares_an_object_output_schema_and_its_required_inputs() {
        let tools = JobTools::tool_router().list_all();
        let mut names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
        names.sort_unstable();
        assert_eq!(names, ["cancel_job", "job_status", "list_jobs", "submit_job"]);
        for t in &tools {
            let out = t.output_schema.as_ref().unwrap_or_else(|| panic!("{} has no output schema", t.name));
            assert_eq!(out.get("type"), Some(&serde_json::json!("object")), "{}", t.name);
        }
        let required = |name: &str| {
            let t = tools.iter().find(|t| t.name == name).unwrap();
            t.input_schema.get("required").cloned().unwrap_or_default()
        };
        assert_eq!(required("submit_job"), serde_json::json!(["input"]));
        assert_eq!(required("cancel_job"), serde_json::json!(["job_id"]));
        assert_eq!(required("list_jobs"), serde_json::Value::Null, "status and limit are optional");
        for t in &tools {
            let dialect = t.input_schema.get("$schema");
            assert_eq!(dialect, Some(&serde_json::json!("https://json-schema.org/draft/2020-12/schema")), "{}", t.name);
        }
        let header = |name: &str| {
            let t = tools.iter().find(|t| t.name == name).unwrap();
            t.input_schema["properties"]["job_id"].get("x-mcp-header").cloned()
        };
        for name in ["job_status", "cancel_job"] {
            assert_eq!(header(name), Some(serde_json::json!("Job-Id")), "{name}'s job_id is Mcp-Param-Job-Id");
        }
    }

    #[test]
    fn the_revisions_offered_run_from_2024_11_05_to_2026_07_28() {
        let offered: Vec<&str> = revisions().iter().map(ProtocolVersion::as_str).collect();
        assert_eq!(offered, ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"]);
    }

    #[test]
    fn relative_paths_go_under_inputs_and_the_root_is_refused() {
        assert_eq!(job_path("notes.txt").unwrap().as_str(), "/inputs/notes.txt");
        assert_eq!(job_path("/data/a.csv").unwrap().as_str(), "/data/a.csv");
        assert!(job_path("/").unwrap_err().to_string().contains("root"));
        assert!(job_path("../../etc/passwd").is_err());
    }
}
