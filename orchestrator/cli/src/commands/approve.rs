//! `flotilla approve <job> <call_id> --approve | --reject [--reason R] | --edit '<json>'`,
//! and for an MCP server's question (elicitation) `--content '<json>' |
//! --decline | --cancel`: answers one approval request through the job API
//! (docs/APPROVALS.md).

use clap::{ArgGroup, Args as ClapArgs};
use flotilla_config::Settings;
use flotilla_protocol::ids::JobId;
use flotilla_protocol::ids::{TaskId, Tenant};
use flotilla_protocol::{
    ApprovalsRequest, ApproveRequest, Decision, SCHEMA_VERSION, check_job_prefix, matches_short_id,
};

use super::connect;
use super::error::CliError;
use super::out::{self, outln};
use flotilla_client::Client;
use flotilla_client::JobRef;

/// Answer an approval request.
#[derive(ClapArgs, Debug)]
#[command(group(ArgGroup::new("decision").required(true).args(["approve", "reject", "edit", "content", "decline", "cancel"])))]
pub struct Args {
    /// The job: its id, its short id as displayed, or a unique prefix (at least 4 characters).
    pub job: JobRef,
    /// The tool call id, as `flotilla approvals` shows it.
    pub call_id: String,
    /// The task, when the call id is pending in several tasks of the job:
    /// its id or its short id as displayed (last 8 characters).
    #[arg(long)]
    pub task: Option<String>,
    /// Run the call as requested.
    #[arg(long)]
    pub approve: bool,
    /// Refuse the call; the model reads the reason.
    #[arg(long)]
    pub reject: bool,
    /// Why (with --reject).
    #[arg(long, requires = "reject")]
    pub reason: Option<String>,
    /// Run the call with these arguments instead (a JSON object).
    #[arg(long, value_name = "JSON")]
    pub edit: Option<String>,
    /// Elicitation: answer the MCP server with this content (a JSON object
    /// that fits the requested schema; fields left out get the schema's
    /// defaults).
    #[arg(long, value_name = "JSON")]
    pub content: Option<String>,
    /// Elicitation: decline to answer (the server reads `decline`).
    #[arg(long)]
    pub decline: bool,
    /// Elicitation: dismiss the question (the server reads `cancel`).
    #[arg(long)]
    pub cancel: bool,
    /// Your name for the audit trail (default: $USER).
    #[arg(long)]
    pub by: Option<String>,
}

/// Runs the command; `json`: print the approve reply (the recorded decision).
pub async fn run(settings: &Settings, tenant: &Tenant, args: Args, json: bool) -> anyhow::Result<i32> {
    let decision = if args.approve {
        Decision::Approve
    } else if args.reject {
        Decision::Reject { reason: args.reason.clone() }
    } else if args.decline {
        Decision::Decline
    } else if args.cancel {
        Decision::Cancel
    } else if let Some(text) = &args.content {
        let parsed: serde_json::Value =
            serde_json::from_str(text).map_err(|e| anyhow::anyhow!("--content is not valid JSON: {e}"))?;
        if !parsed.is_object() {
            anyhow::bail!(
                "--content must be a JSON object that fits the requested schema, e.g. '{{\"approve\": true}}'"
            );
        }
        Decision::Accept { content: parsed }
    } else {
        let text = args.edit.as_deref().unwrap_or_default();
        let parsed: serde_json::Value =
            serde_json::from_str(text).map_err(|e| anyhow::anyhow!("--edit is not valid JSON: {e}"))?;
        if !parsed.is_object() {
            anyhow::bail!("--edit must be a JSON object of tool arguments, e.g. '{{\"path\": \"/out.txt\"}}'");
        }
        Decision::Edit { args: parsed }
    };
    let by = args.by.clone().or_else(|| std::env::var("USER").ok());
    let api = connect(settings, tenant).await?;
    let job_id = api.resolve(&args.job).await?;
    let task_id = match &args.task {
        Some(task) => Some(pending_task(&api, job_id, &args.call_id, task).await?),
        None => None,
    };
    // No `authenticated_as`: the orchestrator records this tenant's job API
    // credential as the principal (docs/APPROVALS.md, "Who decided").
    let req = ApproveRequest {
        v: SCHEMA_VERSION,
        job_id,
        call_id: args.call_id,
        task_id,
        decision,
        by,
        authenticated_as: None,
    };
    let reply = api.call(&req, "not recorded").await?;
    if json {
        out::json(&reply)?;
        return Ok(0);
    }
    let r = &reply.record.request;
    let principal = match &reply.record.state {
        flotilla_protocol::ApprovalState::Decided { principal: Some(p), .. } => format!(", recorded as {p}"),
        _ => String::new(),
    };
    outln!(
        "{} call {} ({}) of job {}, task {}{principal}",
        req.decision.kind(),
        r.call_id,
        r.tool,
        r.job_id,
        r.task_id
    )?;
    Ok(0)
}

/// The task named by `--task`: a whole id as given, else the one task of
/// the job's pending requests for `call_id` whose id starts or ends with
/// `task` (the short id `watch` and `status` display).
async fn pending_task(api: &Client, job: JobId, call_id: &str, task: &str) -> anyhow::Result<TaskId> {
    if let Ok(id) = task.trim().parse::<TaskId>() {
        return Ok(id);
    }
    let short = check_job_prefix(task).map_err(|e| CliError::new("validation", e.replace("job id", "task id")))?;
    let req = ApprovalsRequest { v: SCHEMA_VERSION, job_id: Some(job) };
    let pending = api.call(&req, "approvals").await?;
    let mut tasks: Vec<TaskId> = pending
        .approvals
        .iter()
        .filter(|r| r.call_id == call_id && matches_short_id(&r.task_id.to_string(), &short))
        .map(|r| r.task_id)
        .collect();
    tasks.dedup();
    match tasks.as_slice() {
        [one] => Ok(*one),
        [] => Err(CliError::new(
            "not_found",
            format!("no pending request for call {call_id} of job {job} is in a task matching {short}"),
        )
        .into()),
        many => Err(CliError::new(
            "validation",
            format!(
                "task {short} is ambiguous: {} ({}); give the whole id",
                many.len(),
                many.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(", ")
            ),
        )
        .into()),
    }
}
