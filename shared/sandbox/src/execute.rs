//! `execute(command, timeout)`: runs `/bin/sh -c <command>` in the task's
//! sandbox and returns its exit status and (capped) output.

use std::sync::Arc;

use async_trait::async_trait;
use flotilla_agent::tool::{ErrorKind, Tool, ToolContext, ToolError, ToolSpec};
use flotilla_protocol::ids::SubagentType;
use flotilla_tools::FileToolEnv;
use serde_json::{Value, json};

use super::audit::{self, ExecutionAudit};
use super::{Sandbox, SandboxError};

/// Longest accepted command text.
const MAX_COMMAND_BYTES: usize = 16 * 1024;

/// The `execute` tool of one subagent type.
pub struct ExecuteTool {
    sandbox: Arc<Sandbox>,
    subagent_type: SubagentType,
    /// Job files and the type's permissions, for staging.
    files: Arc<FileToolEnv>,
}

impl ExecuteTool {
    /// The tool over `sandbox`, staging through `files`.
    pub fn new(sandbox: Arc<Sandbox>, subagent_type: SubagentType, files: Arc<FileToolEnv>) -> Self {
        Self { sandbox, subagent_type, files }
    }
}

#[async_trait]
impl Tool for ExecuteTool {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "execute".into(),
            description: format!(
                "Run a shell command (sh -c) in an isolated sandbox: no network, read-only system, \
                 writable /scratch (kept for this task) and /tmp. Returns exit_code, stdout, stderr \
                 (each cut at {} bytes; truncated says so).",
                self.sandbox.config.max_output_bytes
            ),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "command": {"type": "string", "minLength": 1, "maxLength": MAX_COMMAND_BYTES},
                    "timeout": {"type": "integer", "minimum": 1, "maximum": self.sandbox.config.max_timeout,
                                "description": format!("seconds, default {}", self.sandbox.config.timeout)}
                },
                "required": ["command"],
                "additionalProperties": false
            }),
        }
    }

    async fn call(&self, ctx: &ToolContext, args: Value) -> Result<Value, ToolError> {
        let command = args["command"].as_str().unwrap_or_default();
        let Some(task) = ctx.task_id else {
            return Err(ToolError::new(ErrorKind::Permission, "execute runs only inside a task"));
        };
        let Some(session) = self.sandbox.session(&task) else {
            return Err(ToolError::new(ErrorKind::Bug, "no sandbox session for this task"));
        };
        let limits = self.sandbox.limits(args["timeout"].as_u64());
        let mut staged = session.staged.lock().await;
        let staged_in = self
            .sandbox
            .staging
            .stage_in(&self.files, &ctx.job_id, &session.scratch, session.owner(), &mut staged)
            .await;
        // A command planted a symlink where a job file goes: the next command
        // must not run on files that were not staged (docs/SANDBOX.md).
        if let Some(why) = staged_in.planted_error() {
            return Err(ToolError::new(ErrorKind::Validation, why));
        }
        let run = self.sandbox.backend.run(&session.scratch, session.owner(), command, &limits, &ctx.cancel).await;
        // Nothing stops a command from filling the disk mid-way; it is caught here, before its
        // output can travel on (docs/SANDBOX.md "Limits").
        let over = self.sandbox.staging.over_quota(&session.scratch).await;
        let staged_out = match over {
            None => self.sandbox.staging.stage_out(&self.files, &ctx.job_id, &session.scratch, &mut staged).await,
            Some(_) => Default::default(),
        };
        drop(staged);
        let mut record = ExecutionAudit {
            tenant: ctx.tenant.clone(),
            job_id: ctx.job_id,
            task_id: task,
            subagent_type: self.subagent_type.clone(),
            worker_id: session.progress.worker_id().to_string(),
            call_id: ctx.call_id.clone(),
            command_sha256: audit::command_digest(command),
            execution: None,
        };
        let e = match run {
            Ok(e) => e,
            Err(SandboxError::Cancelled) => {
                audit::record(&record, session.progress.as_ref()).await;
                return Err(ToolError::new(ErrorKind::Cancelled, "cancelled"));
            }
            Err(err) => {
                tracing::error!(error = %err, "sandbox failed to start");
                audit::record(&record, session.progress.as_ref()).await;
                return Err(ToolError::transient("the sandbox could not start; try again later"));
            }
        };
        record.execution = Some(e.clone());
        audit::record(&record, session.progress.as_ref()).await;
        if e.timed_out {
            return Err(ToolError::new(
                ErrorKind::Timeout,
                format!(
                    "the command ran out of its {}s wall-time limit and was killed with all its processes",
                    limits.wall.as_secs()
                ),
            ));
        }
        if let Some(used) = over {
            return Err(ToolError::new(
                ErrorKind::Limit,
                format!(
                    "the command left /scratch using {} MiB, over its scratch quota of {} MiB \
                     (subagents.{}.sandbox.scratch_mb); nothing was staged out: delete files under /scratch (the command's exit code was {:?})",
                    used.div_ceil(1 << 20),
                    self.sandbox.staging.quota() >> 20,
                    self.subagent_type,
                    e.exit_code
                ),
            ));
        }
        let mut out = json!({
            "exit_code": e.exit_code,
            "stdout": e.stdout,
            "stderr": e.stderr,
            "truncated": e.truncated,
        });
        if let Some(sig) = e.signal {
            out["signal"] = json!(sig);
        }
        if !staged_in.copied.is_empty() {
            out["staged_in"] = json!(staged_in.copied);
        }
        if !staged_out.copied.is_empty() {
            out["staged_out"] = json!(staged_out.copied);
        }
        let skipped: Vec<String> = staged_in.skipped.into_iter().chain(staged_out.skipped).collect();
        if !skipped.is_empty() {
            out["staging_skipped"] = json!(skipped);
        }
        Ok(out)
    }
}
