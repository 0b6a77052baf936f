//! A Flotilla job as an A2A task, and the unary methods over the job API
//! (docs/PROTOCOLS.md, "A2A v1.0", the mapping table).
//!
//! | A2A | Flotilla |
//! |---|---|
//! | task id, context id | the job id (both: a job is its own conversation) |
//! | `TASK_STATE_SUBMITTED` / `WORKING` | job `submitted` / `running` |
//! | `TASK_STATE_INPUT_REQUIRED` | job `running` with a pending approval or elicitation |
//! | `TASK_STATE_COMPLETED` / `FAILED` / `CANCELED` | job `completed` / `failed` / `cancelled` |
//! | artifact `answer` | the job's answer (text) |
//! | artifacts `report-<task>` | each finished task's `/reports/<task>.md`, by URL on the HTTP API |
//! | history | the job's input (user), its answer (agent) |

use std::time::Duration;

use flotilla_client::{Client, EndWatch, Event, NewFile, Scope};
use flotilla_protocol::ids::JobId;
use flotilla_protocol::{
    ApprovalKind, ApprovalRequest, ApproveRequest, Decision, DecisionKind, JobEventKind, JobRecord, JobStatus,
    ListRequest, ProgressKind, SCHEMA_VERSION,
};
use futures::Stream;
use serde_json::{Value, json};
use time::format_description::well_known::Rfc3339;

use super::{A2aError, A2aServer, Caller, stream};
use crate::wire::*;

/// The skill id of the planner (every other skill is a subagent type).
pub(crate) const PLANNER_SKILL: &str = "planner";

/// Tasks of a job a task's artifacts list at most (the status page's).
const ARTIFACT_TASKS: usize = 100;
/// `ListTasks` page size unless asked, and the most it gives.
const DEFAULT_PAGE: i32 = 50;
const MAX_PAGE: i32 = 100;
/// How long `CancelTask` waits for the job to end before it answers.
const CANCEL_WAIT: Duration = Duration::from_secs(10);

fn rfc3339(t: time::OffsetDateTime) -> String {
    t.format(&Rfc3339).unwrap_or_default()
}

/// The job a task id names, as the caller's tenant sees it (another
/// tenant's job is not found, exactly like a missing one).
pub(crate) fn job_id(id: &str) -> Result<JobId, A2aError> {
    id.parse().map_err(|_| A2aError::TaskNotFound(format!("no task {id}")))
}

pub(crate) fn state_of(status: JobStatus, waiting: bool) -> TaskState {
    match status {
        JobStatus::Submitted => TaskState::Submitted,
        JobStatus::Running if waiting => TaskState::InputRequired,
        JobStatus::Running => TaskState::Working,
        JobStatus::Completed => TaskState::Completed,
        JobStatus::Failed => TaskState::Failed,
        JobStatus::Cancelled => TaskState::Canceled,
    }
}

/// The question of a pending approval, as the agent message of an
/// input-required status: what to answer, in text, and the request's
/// details as a data part.
pub(crate) fn question(job: &str, a: &ApprovalRequest) -> Message {
    let (text, data) = match a.kind {
        ApprovalKind::Elicitation => (
            format!(
                "{} asks: {} Answer with a data part holding the content (its schema is in this message's data), \
                 a text answer, or \"decline\" / \"cancel\".",
                a.server.as_deref().unwrap_or("a tool"),
                a.message.as_deref().unwrap_or("(no message)")
            ),
            json!({"callId": a.call_id, "taskId": a.task_id.to_string(), "kind": "elicitation",
                   "requestedSchema": a.requested_schema, "expiresAt": rfc3339(a.expires_at)}),
        ),
        ApprovalKind::ToolCall => (
            format!(
                "Tool call {} of task {} ({}) waits for approval: answer \"approve\", \"reject\" (or \"reject: why\"), \
                 or a data part {{\"decision\": \"edit\", \"args\": {{...}}}}.",
                a.tool, a.task_id, a.subagent_type
            ),
            json!({"callId": a.call_id, "taskId": a.task_id.to_string(), "kind": "tool_call", "tool": a.tool,
                   "args": a.args, "decisions": a.decisions, "expiresAt": rfc3339(a.expires_at)}),
        ),
    };
    let mut m = Message::agent_text(job, job, text);
    m.parts.push(Part::data(data));
    m
}

/// The artifacts of a finished job: its answer and each finished task's report.
pub(crate) fn artifacts(job: &JobRecord, base: &str) -> Vec<Artifact> {
    let mut out = Vec::new();
    if let Some(answer) = &job.answer {
        out.push(Artifact {
            artifact_id: "answer".into(),
            name: "answer".into(),
            description: "The job's consolidated answer".into(),
            parts: vec![Part::text(answer.clone())],
            ..Default::default()
        });
    }
    for t in job.tasks.iter().filter(|t| t.status.is_some()) {
        let path = format!("/reports/{}.md", t.task_id);
        out.push(Artifact {
            artifact_id: format!("report-{}", t.task_id),
            name: path.clone(),
            description: format!("The report of task {} ({})", t.task_id, t.subagent_type),
            parts: vec![Part {
                url: Some(format!("{base}/api/jobs/{}/files/content?path={path}", job.id)),
                filename: format!("{}.md", t.task_id),
                media_type: "text/markdown".into(),
                ..Default::default()
            }],
            ..Default::default()
        });
    }
    out
}

fn history(job: &JobRecord, limit: Option<i32>) -> Vec<Message> {
    let id = job.id.to_string();
    let mut h = vec![Message {
        message_id: format!("{id}-input"),
        context_id: id.clone(),
        task_id: id.clone(),
        role: Role::User,
        parts: vec![Part::text(job.input.clone())],
        ..Default::default()
    }];
    if let Some(answer) = &job.answer {
        let mut m = Message::agent_text(&id, &id, answer.clone());
        m.message_id = format!("{id}-answer");
        h.push(m);
    }
    if let Some(n) = limit {
        let skip = h.len().saturating_sub(n.max(0) as usize);
        h.drain(..skip);
    }
    h
}

/// Builds the task of `job`; `pending` are its open approvals (oldest first).
pub(crate) fn task_of(job: &JobRecord, pending: &[ApprovalRequest], base: &str, history_len: Option<i32>) -> Task {
    let id = job.id.to_string();
    let state = state_of(job.status, !pending.is_empty());
    let message = match state {
        TaskState::InputRequired => pending.first().map(|a| question(&id, a)),
        TaskState::Failed | TaskState::Canceled => {
            job.error.as_ref().map(|e| Message::agent_text(&id, &id, format!("{}: {}", e.kind.as_str(), e.message)))
        }
        _ => None,
    };
    Task {
        id: id.clone(),
        context_id: id,
        status: TaskStatus { state, message, timestamp: Some(rfc3339(job.updated_at)) },
        artifacts: if state.is_terminal() { artifacts(job, base) } else { Vec::new() },
        history: history(job, history_len),
        metadata: Some(serde_json::Map::from_iter([
            ("flotillaTenant".into(), Value::String(job.tenant.to_string())),
            ("flotillaTasks".into(), json!(job.tasks_total)),
        ])),
    }
}

/// The task `job` as it stands now.
pub(crate) async fn current(
    client: &Client,
    job: JobId,
    base: &str,
    history_len: Option<i32>,
) -> Result<Task, A2aError> {
    let rec = client.status_page(job, Some(ARTIFACT_TASKS), None).await.map_err(A2aError::from_api)?.job;
    let pending = if rec.status == JobStatus::Running {
        client.approvals(Some(job)).await.map_err(A2aError::from_api)?.approvals
    } else {
        Vec::new()
    };
    Ok(task_of(&rec, &pending, base, history_len))
}

/// The job's input from a message: its text parts, then each data part as
/// JSON; its `raw` parts with a file name are uploaded as `/inputs/<name>`.
fn input_of(message: &Message) -> Result<(String, Vec<NewFile>), A2aError> {
    use base64::Engine as _;
    let mut text = Vec::new();
    let mut files = Vec::new();
    for p in &message.parts {
        if let Some(t) = &p.text {
            text.push(t.clone());
        } else if let Some(d) = &p.data {
            text.push(d.to_string());
        } else if let Some(raw) = &p.raw {
            let name = p.filename.rsplit('/').next().unwrap_or_default();
            if name.is_empty() || name.starts_with('.') {
                return Err(A2aError::InvalidParams(
                    "a file part (raw) needs a filename: it is stored as /inputs/<filename>".into(),
                ));
            }
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(raw)
                .map_err(|e| A2aError::InvalidParams(format!("file part {name}: raw is not base64: {e}")))?;
            files.push(NewFile { path: format!("/inputs/{name}"), bytes });
        } else if p.url.is_some() {
            return Err(A2aError::InvalidParams(
                "file parts by URL are not fetched (the server does not call out on a client's behalf): send the \
                 bytes as a raw part with a filename"
                    .into(),
            ));
        }
    }
    let input = text.join("\n");
    if input.trim().is_empty() {
        return Err(A2aError::InvalidParams(
            "the message has no text: the text of its parts is the job's input".into(),
        ));
    }
    Ok((input, files))
}

/// Submits the message's job, or answers the task's question when it
/// names one; registers its webhook. Returns the job and its client.
async fn start(
    s: &A2aServer,
    caller: &Caller,
    req: &SendMessageRequest,
    base: &str,
) -> Result<(Client, JobId), A2aError> {
    let client = s.client_for(caller.tenant_for(&req.tenant)?);
    let job = if req.message.task_id.is_empty() {
        let (input, files) = input_of(&req.message)?;
        let staged = client.upload(&files).await.map_err(A2aError::from_api)?;
        client.submit_with_files(input, staged).await.map_err(A2aError::from_api)?
    } else {
        let job = job_id(&req.message.task_id)?;
        answer(&client, caller, job, &req.message).await?;
        job
    };
    if let Some(cfg) = req.configuration.as_ref().and_then(|c| c.task_push_notification_config.clone()) {
        let cfg = TaskPushNotificationConfig { task_id: job.to_string(), ..cfg };
        super::push::register(s, &client, cfg, base).await?;
    }
    Ok((client, job))
}

/// `SendMessage`: the task once it ended or asks for input (at most
/// `[a2a] blocking_timeout_secs`), or at once with `returnImmediately`.
pub(crate) async fn send(
    s: &A2aServer,
    caller: &Caller,
    req: SendMessageRequest,
    base: &str,
) -> Result<Task, A2aError> {
    let (client, job) = start(s, caller, &req, base).await?;
    let cfg = req.configuration.unwrap_or_default();
    if !cfg.return_immediately {
        let _ = tokio::time::timeout(s.blocking_timeout(), settled(&client, job)).await;
    }
    current(&client, job, base, cfg.history_length).await
}

/// Waits until `job` ends or waits for a person.
async fn settled(client: &Client, job: JobId) -> Result<(), A2aError> {
    let scope = Scope::Job(client.tenant().clone(), job);
    let mut events = Box::pin(client.follow(scope, true).await.map_err(A2aError::from_api)?);
    let mut watch = EndWatch::new(client, job, true);
    // An approval asked before the follow started is in the replay.
    while let Some(ev) = watch.next(&mut events).await.map_err(A2aError::from_api)? {
        match ev {
            Event::Job(e) if e.kind.is_terminal() => return Ok(()),
            Event::Progress(p)
                if matches!(p.kind, ProgressKind::ApprovalRequested { .. })
                    && !client.approvals(Some(job)).await.map_err(A2aError::from_api)?.approvals.is_empty() =>
            {
                return Ok(());
            }
            _ => {}
        }
    }
    Ok(())
}

/// `SendStreamingMessage`: the task, then its updates until it ends.
pub(crate) async fn send_streaming(
    s: &A2aServer,
    caller: &Caller,
    req: SendMessageRequest,
    base: &str,
) -> Result<impl Stream<Item = StreamResponse> + Send + 'static + use<>, A2aError> {
    let (client, job) = start(s, caller, &req, base).await?;
    let mut first = current(&client, job, base, None).await?;
    // The updates replay the job's events from its start, so the new task
    // is announced as submitted, whatever its planner did since; its
    // `running` follows as the first update.
    if !first.status.state.is_terminal() {
        first.status.state = TaskState::Submitted;
    }
    Ok(stream::updates(client, job, first, base.to_string()))
}

/// `SubscribeToTask`: the task, then its updates until it ends; a task
/// that has ended cannot be subscribed to.
pub(crate) async fn subscribe(
    s: &A2aServer,
    caller: &Caller,
    req: TaskIdRequest,
    base: &str,
) -> Result<impl Stream<Item = StreamResponse> + Send + 'static + use<>, A2aError> {
    let client = s.client_for(caller.tenant_for(&req.tenant)?);
    let job = job_id(&req.id)?;
    let first = current(&client, job, base, None).await?;
    if first.status.state.is_terminal() {
        return Err(A2aError::Unsupported(format!(
            "task {} has ended ({}): read it with GetTask",
            req.id,
            first.status.state.as_str()
        )));
    }
    Ok(stream::updates(client, job, first, base.to_string()))
}

/// `GetTask`.
pub(crate) async fn get(s: &A2aServer, caller: &Caller, req: TaskIdRequest, base: &str) -> Result<Task, A2aError> {
    let client = s.client_for(caller.tenant_for(&req.tenant)?);
    current(&client, job_id(&req.id)?, base, req.history_length).await
}

/// `ListTasks`: the tenant's jobs newest first, a page at a time (the
/// page token is the job-API list's `next_after`).
pub(crate) async fn list(
    s: &A2aServer,
    caller: &Caller,
    req: ListTasksRequest,
    base: &str,
) -> Result<ListTasksResponse, A2aError> {
    let client = s.client_for(caller.tenant_for(&req.tenant)?);
    let size = req.page_size.unwrap_or(DEFAULT_PAGE);
    if !(1..=MAX_PAGE).contains(&size) {
        return Err(A2aError::InvalidParams(format!("pageSize {size}: give 1 to {MAX_PAGE}")));
    }
    let after_time = match &req.status_timestamp_after {
        Some(t) => Some(
            time::OffsetDateTime::parse(t, &Rfc3339)
                .map_err(|e| A2aError::InvalidParams(format!("statusTimestampAfter {t:?}: {e}")))?,
        ),
        None => None,
    };
    let wanted = req.status.filter(|s| *s != TaskState::Unspecified);
    let status = match wanted {
        None => None,
        Some(TaskState::Submitted) => Some(JobStatus::Submitted),
        Some(TaskState::Working | TaskState::InputRequired) => Some(JobStatus::Running),
        Some(TaskState::Completed) => Some(JobStatus::Completed),
        Some(TaskState::Failed) => Some(JobStatus::Failed),
        Some(TaskState::Canceled) => Some(JobStatus::Cancelled),
        // Flotilla never rejects or asks for authentication as a task state.
        Some(_) => return Ok(ListTasksResponse { page_size: size, ..Default::default() }),
    };
    let with_artifacts = req.include_artifacts.unwrap_or(false);
    if !req.context_id.is_empty() {
        // The context is the job: at most one task.
        let Ok(job) = req.context_id.parse::<JobId>() else {
            return Ok(ListTasksResponse { page_size: size, ..Default::default() });
        };
        let tasks = match current(&client, job, base, req.history_length).await {
            Ok(mut t) if wanted.is_none_or(|w| w == t.status.state) => {
                if !with_artifacts {
                    t.artifacts.clear();
                }
                vec![t]
            }
            Ok(_) | Err(A2aError::TaskNotFound(_)) => Vec::new(),
            Err(e) => return Err(e),
        };
        let total = tasks.len() as i32;
        return Ok(ListTasksResponse { tasks, next_page_token: String::new(), page_size: size, total_size: total });
    }
    let after = match req.page_token.as_str() {
        "" => None,
        t => Some(
            t.parse::<JobId>()
                .map_err(|_| A2aError::InvalidParams(format!("pageToken {t:?} is not one this server gave")))?,
        ),
    };
    let page = client
        .call(&ListRequest { v: SCHEMA_VERSION, status, limit: Some(size as usize), after, since: None }, "list")
        .await
        .map_err(A2aError::from_api)?;
    let waiting: std::collections::HashSet<JobId> = if page.jobs.iter().any(|j| j.status == JobStatus::Running) {
        client.approvals(None).await.map_err(A2aError::from_api)?.approvals.iter().map(|a| a.job_id).collect()
    } else {
        Default::default()
    };
    let mut tasks = Vec::new();
    for j in &page.jobs {
        if after_time.is_some_and(|t| j.updated_at <= t) {
            continue;
        }
        let state = state_of(j.status, waiting.contains(&j.id));
        if wanted.is_some_and(|w| w != state) {
            continue;
        }
        let task = if with_artifacts && state.is_terminal() {
            current(&client, j.id, base, req.history_length).await?
        } else {
            let mut rec = JobRecord::new(j.id, j.tenant.clone(), j.input.clone());
            rec.status = j.status;
            rec.updated_at = j.updated_at;
            rec.tasks_total = j.tasks as u64;
            let mut t = task_of(&rec, &[], base, req.history_length);
            t.status.state = state;
            t.artifacts.clear();
            t
        };
        tasks.push(task);
    }
    let total = tasks.len() as i32;
    Ok(ListTasksResponse {
        tasks,
        next_page_token: page.next_after.map(|j| j.to_string()).unwrap_or_default(),
        page_size: size,
        total_size: total,
    })
}

/// `CancelTask`: cancels the job, then answers its task once it ended (at
/// most [`CANCEL_WAIT`]).
pub(crate) async fn cancel(s: &A2aServer, caller: &Caller, req: TaskIdRequest, base: &str) -> Result<Task, A2aError> {
    let client = s.client_for(caller.tenant_for(&req.tenant)?);
    let job = job_id(&req.id)?;
    let now = current(&client, job, base, None).await?;
    if now.status.state.is_terminal() {
        return Err(A2aError::NotCancelable(format!(
            "task {} has already ended ({})",
            req.id,
            now.status.state.as_str()
        )));
    }
    let reason = format!("canceled over A2A by {}", caller.name);
    client.cancel(job, Some(reason)).await.map_err(A2aError::from_api)?;
    let ended = async {
        let scope = Scope::Job(client.tenant().clone(), job);
        let Ok(events) = client.follow(scope, false).await else { return };
        let mut events = Box::pin(events);
        let mut watch = EndWatch::new(&client, job, true);
        while let Ok(Some(ev)) = watch.next(&mut events).await {
            if matches!(&ev, Event::Job(e) if matches!(e.kind, JobEventKind::Cancelled { .. }) || e.kind.is_terminal())
            {
                return;
            }
        }
    };
    let _ = tokio::time::timeout(CANCEL_WAIT, ended).await;
    current(&client, job, base, None).await
}

/// A follow-up message to task `job`: the answer to its oldest open
/// question (or the one `metadata.callId` names), decided through the job
/// API's `approve` as the caller.
async fn answer(client: &Client, caller: &Caller, job: JobId, message: &Message) -> Result<(), A2aError> {
    let pending = client.approvals(Some(job)).await.map_err(A2aError::from_api)?.approvals;
    let wanted = message.metadata.as_ref().and_then(|m| m.get("callId")).and_then(Value::as_str);
    let approval = match wanted {
        Some(id) => pending.iter().find(|a| a.call_id == id),
        None => pending.first(),
    };
    let Some(approval) = approval else {
        let task = current(client, job, "", None).await?;
        return Err(A2aError::Unsupported(match (task.status.state.is_terminal(), wanted) {
            (true, _) => format!(
                "task {job} has ended ({}): send a message without taskId to start a new one",
                task.status.state.as_str()
            ),
            (false, Some(id)) => format!("task {job} has no open question {id}"),
            (false, None) => format!(
                "task {job} does not wait for input: a message to a task answers its question \
                 (TASK_STATE_INPUT_REQUIRED); Flotilla takes no other follow-up"
            ),
        }));
    };
    let decision = decision_of(approval, message)?;
    let req = ApproveRequest {
        v: SCHEMA_VERSION,
        job_id: job,
        call_id: approval.call_id.clone(),
        task_id: Some(approval.task_id),
        decision,
        by: Some(caller.name.clone()),
        authenticated_as: Some(caller.name.clone()),
    };
    client.call(&req, "approve refused").await.map_err(A2aError::from_api)?;
    Ok(())
}

/// The decision a message gives: a data part `{"decision": ...}` as the
/// HTTP API takes it, else for a question's content a data part (accept)
/// or a text (`{"answer": text}`, or decline / cancel), for a tool call
/// the words approve / reject[: reason].
fn decision_of(a: &ApprovalRequest, message: &Message) -> Result<Decision, A2aError> {
    let data = message.parts.iter().find_map(|p| p.data.clone());
    if let Some(d) = &data
        && d.get("decision").is_some()
    {
        let decision: Decision = serde_json::from_value(d.clone())
            .map_err(|e| A2aError::InvalidParams(format!("the data part's decision: {e}")))?;
        if !a.decisions.contains(&decision.kind()) {
            return Err(A2aError::InvalidParams(format!(
                "this question takes {}, not {}",
                a.decisions.iter().map(|k| k.as_str()).collect::<Vec<_>>().join(", "),
                decision.kind()
            )));
        }
        return Ok(decision);
    }
    let text = message.text();
    let word = text.trim();
    let lower = word.to_ascii_lowercase();
    match a.kind {
        ApprovalKind::Elicitation => Ok(match (data, lower.as_str()) {
            (Some(content), _) => Decision::Accept { content },
            (None, "decline") => Decision::Decline,
            (None, "cancel") => Decision::Cancel,
            (None, "") => return Err(A2aError::InvalidParams("the answer is empty".into())),
            (None, _) => Decision::Accept { content: json!({"answer": word}) },
        }),
        ApprovalKind::ToolCall => {
            if ["approve", "approved", "yes", "ok"].contains(&lower.as_str()) {
                return Ok(Decision::Approve);
            }
            if lower == "reject" || lower == "no" {
                return Ok(Decision::Reject { reason: None });
            }
            if let Some(reason) = lower.starts_with("reject:").then(|| word["reject:".len()..].trim().to_string()) {
                return Ok(Decision::Reject { reason: (!reason.is_empty()).then_some(reason) });
            }
            Err(A2aError::InvalidParams(format!(
                "{word:?} is not an answer to tool call {}: send \"approve\", \"reject\", \"reject: why\", or a data \
                 part {{\"decision\": \"edit\", \"args\": {{...}}}}",
                a.tool
            )))
        }
    }
    .and_then(|d: Decision| {
        if a.decisions.contains(&d.kind()) || a.decisions.is_empty() && d.kind() == DecisionKind::Approve {
            Ok(d)
        } else {
            Err(A2aError::InvalidParams(format!("this question does not take {}", d.kind())))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_protocol::ids::{SubagentType, TaskId, Tenant};

    fn approval(kind: ApprovalKind, decisions: Vec<DecisionKind>) -> ApprovalRequest {
        let now = time::OffsetDateTime::now_utc();
        ApprovalRequest {
            v: SCHEMA_VERSION,
            job_id: JobId::new(),
            task_id: TaskId::new(),
            tenant: Tenant::default(),
            subagent_type: SubagentType::new("finance").unwrap(),
            worker_id: "w".into(),
            call_id: "call_1".into(),
            tool: "transfer".into(),
            args: json!({"amount": 1}),
            input_schema: json!({"type": "object"}),
            decisions,
            kind,
            server: None,
            message: Some("Which account?".into()),
            requested_schema: None,
            requested_at: now,
            expires_at: now,
        }
    }

    fn says(parts: Vec<Part>) -> Message {
        Message { message_id: "m".into(), role: Role::User, parts, ..Default::default() }
    }

    #[test]
    fn a_reply_becomes_the_decision_the_question_takes() {
        use DecisionKind::*;
        let tool = approval(ApprovalKind::ToolCall, vec![Approve, Reject, Edit]);
        assert_eq!(decision_of(&tool, &says(vec![Part::text("approve")])).unwrap(), Decision::Approve);
        assert_eq!(
            decision_of(&tool, &says(vec![Part::text("Reject: too much")])).unwrap(),
            Decision::Reject { reason: Some("too much".into()) }
        );
        let edit = says(vec![Part::data(json!({"decision": "edit", "args": {"amount": 2}}))]);
        assert_eq!(decision_of(&tool, &edit).unwrap(), Decision::Edit { args: json!({"amount": 2}) });
        assert!(matches!(decision_of(&tool, &says(vec![Part::text("maybe")])), Err(A2aError::InvalidParams(_))));
        let ask = approval(ApprovalKind::Elicitation, vec![Accept, Decline, Cancel]);
        assert_eq!(
            decision_of(&ask, &says(vec![Part::text("savings")])).unwrap(),
            Decision::Accept { content: json!({"answer": "savings"}) }
        );
        assert_eq!(decision_of(&ask, &says(vec![Part::text("decline")])).unwrap(), Decision::Decline);
        assert!(decision_of(&ask, &says(vec![Part::text("approve")])).is_ok(), "free text is an answer");
        assert!(matches!(decision_of(&ask, &edit), Err(A2aError::InvalidParams(_))), "not a decision it takes");
    }

    #[test]
    fn job_states_map_onto_task_states() {
        assert_eq!(state_of(JobStatus::Running, true), TaskState::InputRequired);
        assert_eq!(state_of(JobStatus::Running, false), TaskState::Working);
        assert_eq!(state_of(JobStatus::Cancelled, false), TaskState::Canceled);
        let mut job = JobRecord::new(JobId::new(), Tenant::default(), "q".into());
        job.status = JobStatus::Completed;
        job.answer = Some("0.375".into());
        let t = task_of(&job, &[], "http://h", None);
        assert_eq!((t.id.as_str(), t.context_id.as_str()), (job.id.to_string().as_str(), job.id.to_string().as_str()));
        assert_eq!(t.artifacts[0].text(), "0.375");
        assert_eq!(t.history.len(), 2);
        assert_eq!(task_of(&job, &[], "http://h", Some(0)).history.len(), 0);
    }
}
