//! The built-in file tools (seed 000 section 2.3) over the job's shared files:
//! `ls`, `read_file`, `write_file`, `edit_file`, `glob`, `grep`, one file each.
//!
//! An agent gets only the ones its config names (`[subagents.<type>] tools`,
//! `[planner] tools`), because every schema costs prompt tokens on every model
//! call: descriptions and schemas are kept short and exact.
//!
//! Every tool checks the agent's [`Permissions`] itself, in the process that
//! runs it: a `deny` is a `permission` error naming only the path asked for;
//! an `interrupt` goes through the agent's [`ApprovalGate`] (and is refused
//! when the agent has none); listings silently leave out what the agent may
//! not read, so a denial never reveals another path.

mod edit_file;
mod glob;
mod grep;
mod ls;
mod read_file;
mod write_file;

use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::files::{FileError, FilePath, JobFiles};
use crate::permissions::{Mode, Operation, Permissions};
use crate::protocol::ErrorKind;
use crate::tool::{Tool, ToolContext, ToolError};

/// Every built-in tool name.
pub const ALL: &[&str] = &["ls", "read_file", "write_file", "edit_file", "glob", "grep"];
/// The tools that never write (the planner's default set, and the tools whose
/// bounded output is never evicted).
pub const READ_ONLY: &[&str] = &["ls", "read_file", "glob", "grep"];

/// What the built-in tools of one agent share: the job files and the agent's rules.
pub struct FileToolEnv {
    /// The job files.
    pub files: JobFiles,
    /// The agent's permission rules.
    pub permissions: Permissions,
}

/// The built-in tool `name`, or `None` when there is no such built-in.
pub fn tool(name: &str, env: &Arc<FileToolEnv>) -> Option<Arc<dyn Tool>> {
    let env = env.clone();
    Some(match name {
        "ls" => Arc::new(ls::Ls(env)),
        "read_file" => Arc::new(read_file::ReadFile(env)),
        "write_file" => Arc::new(write_file::WriteFile(env)),
        "edit_file" => Arc::new(edit_file::EditFile(env)),
        "glob" => Arc::new(glob::Glob(env)),
        "grep" => Arc::new(grep::Grep(env)),
        _ => return None,
    })
}

impl FileToolEnv {
    /// Parses the arguments, then enforces the rule for `op` on the path
    /// `path_of` picks: allow runs, deny fails, interrupt asks the approval
    /// gate, whose (possibly edited) arguments are parsed and checked again.
    async fn authorized<A: DeserializeOwned>(
        &self,
        ctx: &ToolContext,
        tool: &str,
        op: Operation,
        args: Value,
        path_of: impl Fn(&A) -> &str,
    ) -> Result<(A, FilePath), ToolError> {
        let parsed: A = parse(args.clone())?;
        let path = parse_path(path_of(&parsed))?;
        match self.permissions.check(op, &path) {
            Mode::Allow => Ok((parsed, path)),
            Mode::Deny => Err(denied(op, &path)),
            Mode::Interrupt => {
                let Some(gate) = &ctx.approvals else {
                    return Err(ToolError::new(
                        ErrorKind::Permission,
                        format!(
                            "permission denied: {} of {path} needs human approval and this agent has no approval gate",
                            op.as_str()
                        ),
                    ));
                };
                let approved = gate.approve(ctx, tool, &args).await?;
                let parsed: A = parse(approved)?;
                let path = parse_path(path_of(&parsed))?;
                // The person approved this call; a path edited into a denied one stays denied.
                if self.permissions.check(op, &path) == Mode::Deny {
                    return Err(denied(op, &path));
                }
                Ok((parsed, path))
            }
        }
    }

    /// Like [`Self::authorized`] for a read scope (`ls`, `grep`): a path naming
    /// a file is authorized as a read of that file; a directory is not checked
    /// itself, because each entry under it is filtered by its own rule (so a
    /// default-deny agent can still list the subtrees it may read).
    async fn scoped<A: DeserializeOwned>(
        &self,
        ctx: &ToolContext,
        tool: &str,
        args: Value,
        path_of: impl Fn(&A) -> &str,
    ) -> Result<(A, FilePath), ToolError> {
        let parsed: A = parse(args.clone())?;
        let path = parse_path(path_of(&parsed))?;
        if path.is_root() || self.files.stat(&ctx.job_id, &path).await.map_err(file_error)?.is_none() {
            return Ok((parsed, path));
        }
        self.authorized(ctx, tool, Operation::Read, args, path_of).await
    }

    /// Whether a listing may show `path` (anything not denied).
    fn listable(&self, path: &FilePath) -> bool {
        self.permissions.check(Operation::Read, path) != Mode::Deny
    }
}

fn parse<A: DeserializeOwned>(args: Value) -> Result<A, ToolError> {
    serde_json::from_value(args).map_err(|e| ToolError::validation(format!("invalid arguments: {e}")))
}

fn parse_path(raw: &str) -> Result<FilePath, ToolError> {
    FilePath::parse(raw).map_err(|e| ToolError::validation(format!("invalid path: {e}")))
}

fn denied(op: Operation, path: &FilePath) -> ToolError {
    ToolError::new(ErrorKind::Permission, format!("permission denied: this agent may not {} {path}", op.as_str()))
}

fn file_error(e: FileError) -> ToolError {
    match e {
        FileError::Path(p) => ToolError::validation(format!("invalid path: {p}")),
        FileError::NotFound(p) => ToolError::new(ErrorKind::NotFound, format!("file not found: {p}")),
        e @ FileError::TooLarge { .. } => ToolError::new(ErrorKind::Limit, e.to_string()),
        e => ToolError::transient(e.to_string()),
    }
}

/// Bytes sniffed for NUL when deciding whether a file is binary.
const SNIFF_BYTES: usize = 8192;

/// The text of a file, or `None` when it is binary (a NUL byte near the start,
/// or not UTF-8).
fn as_text(bytes: Vec<u8>) -> Option<String> {
    if bytes[..bytes.len().min(SNIFF_BYTES)].contains(&0) {
        return None;
    }
    String::from_utf8(bytes).ok()
}

fn binary(path: &FilePath, size: usize) -> ToolError {
    ToolError::business(format!("{path} is a binary file ({size} bytes) and cannot be handled as text"))
}

/// Matches a tool's glob argument against absolute paths: `*` stops at `/`,
/// `**` crosses it; a relative pattern is taken from the root.
fn compile_glob(pattern: &str) -> Result<globset::GlobMatcher, ToolError> {
    let full = if pattern.starts_with('/') { pattern.to_string() } else { format!("/{pattern}") };
    globset::GlobBuilder::new(&full)
        .literal_separator(true)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| ToolError::validation(format!("invalid glob {pattern:?}: {}", e.kind())))
}
