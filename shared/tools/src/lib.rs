//! The built-in file tools over the job's shared files:
//! `ls`, `read_file`, `write_file`, `edit_file`, `glob`, `grep`, one file each.
//!
//! An agent gets only the ones its config names (`[subagents.<type>] tools`,
//! `[planner] tools`), because every schema costs prompt tokens on every model
//! call: descriptions and schemas are kept short and exact.
//!
//! Every tool checks the agent's [`Permissions`] itself, in the process that
//! runs it: a `deny` is a `permission` error naming only the path asked for;
//! an `interrupt` goes through the agent's [`ApprovalGate`](flotilla_agent::tool::ApprovalGate) (and is refused
//! when the agent has none); listings silently leave out what the agent may
//! not read, so a denial never reveals another path.

#![deny(missing_docs)]

mod edit_file;
mod glob;
mod grep;
mod ls;
mod read_file;
#[cfg(test)]
mod tests;
mod write_file;

use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde_json::Value;

use flotilla_agent::tool::{Tool, ToolContext, ToolError};
use flotilla_config::permissions::{Mode, Operation, Permissions};
use flotilla_job_files::{FileError, FileMeta, FilePath, JobFiles, reserved_prefix};
use flotilla_protocol::ErrorKind;

pub use flotilla_config::builtin_tools::{ALL, READ_ONLY};

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
    /// Parses the arguments, then enforces the rules for every operation in
    /// `ops` on the path `path_of` picks: any deny fails, any interrupt asks
    /// the approval gate once (whose possibly edited arguments are parsed and
    /// checked again), and a write into a reserved directory always fails.
    async fn authorized<A: DeserializeOwned>(
        &self,
        ctx: &ToolContext,
        tool: &str,
        ops: &[Operation],
        args: Value,
        path_of: impl Fn(&A) -> &str,
    ) -> Result<(A, FilePath), ToolError> {
        let parsed: A = parse(args.clone())?;
        let path = parse_path(path_of(&parsed))?;
        let Some(op) = self.needs_approval(ops, &path)? else {
            return Ok((parsed, path));
        };
        let approved = self.approve(ctx, tool, op, &path, &args).await?;
        let parsed: A = parse(approved)?;
        let path = parse_path(path_of(&parsed))?;
        // The person approved this call; a path edited into a denied one stays denied.
        self.needs_approval(ops, &path)?;
        Ok((parsed, path))
    }

    /// Fails on a denied operation or a write into a reserved directory;
    /// otherwise the first operation that needs approval, if any.
    fn needs_approval(&self, ops: &[Operation], path: &FilePath) -> Result<Option<Operation>, ToolError> {
        if ops.contains(&Operation::Write)
            && let Some(prefix) = reserved_prefix(path)
        {
            return Err(reserved(path, prefix));
        }
        let mut interrupt = None;
        for &op in ops {
            match self.permissions.check(op, path) {
                Mode::Allow => {}
                Mode::Deny => return Err(denied(op, path)),
                Mode::Interrupt => interrupt = interrupt.or(Some(op)),
            }
        }
        Ok(interrupt)
    }

    /// Asks the agent's approval gate about this call; refuses when it has none.
    async fn approve(
        &self,
        ctx: &ToolContext,
        tool: &str,
        op: Operation,
        path: &FilePath,
        args: &Value,
    ) -> Result<Value, ToolError> {
        let Some(gate) = &ctx.approvals else {
            return Err(ToolError::new(
                ErrorKind::Permission,
                format!(
                    "permission denied: {} of {path} needs human approval and this agent has no approval gate",
                    op.as_str()
                ),
            ));
        };
        gate.approve(ctx, tool, args).await
    }

    /// Authorizes a read scope (`ls`, `grep`) against one listing `files` of
    /// the job, so the decision never rests on a separate existence check
    /// that could change before the files are read (docs/TOOLS.md).
    ///
    /// The path's own read rule decides, whether or not it exists: allow
    /// runs, deny fails, interrupt asks the gate, so a denied path answers
    /// `permission` both when it exists and when it does not. The exception
    /// is a directory with entries the agent may see: it is not checked
    /// itself, because each entry is filtered by its own rule (so a
    /// default-deny agent can still list the subtrees it may read). Returns
    /// whether a person approved reading the path.
    async fn scoped<A: DeserializeOwned>(
        &self,
        ctx: &ToolContext,
        tool: &str,
        args: Value,
        path_of: impl Fn(&A) -> &str,
        files: &[FileMeta],
    ) -> Result<(A, FilePath, bool), ToolError> {
        let parsed: A = parse(args.clone())?;
        let path = parse_path(path_of(&parsed))?;
        let mode = self.permissions.check(Operation::Read, &path);
        if path.is_root() || mode == Mode::Allow || self.has_visible_entries(files, &path) {
            return Ok((parsed, path, false));
        }
        if mode == Mode::Deny {
            return Err(denied(Operation::Read, &path));
        }
        let approved = self.approve(ctx, tool, Operation::Read, &path, &args).await?;
        let parsed: A = parse(approved)?;
        let path = parse_path(path_of(&parsed))?;
        if self.permissions.check(Operation::Read, &path) == Mode::Deny {
            return Err(denied(Operation::Read, &path));
        }
        Ok((parsed, path, true))
    }

    /// Whether `dir` is a directory holding a file a listing may show.
    fn has_visible_entries(&self, files: &[FileMeta], dir: &FilePath) -> bool {
        files.iter().any(|f| f.path != *dir && f.path.is_within(dir) && self.listable(&f.path))
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

fn reserved(path: &FilePath, prefix: &str) -> ToolError {
    ToolError::new(
        ErrorKind::Permission,
        format!("permission denied: {prefix} is reserved for the runtime's own results; write {path} elsewhere"),
    )
}

fn file_error(e: FileError) -> ToolError {
    match e {
        FileError::Reserved { path, prefix } => reserved(&path, prefix),
        e @ FileError::Tampered { .. } => ToolError::new(ErrorKind::Business, e.to_string()),
        FileError::Path(p) => ToolError::validation(format!("invalid path: {p}")),
        FileError::NotFound(p) => ToolError::new(ErrorKind::NotFound, format!("file not found: {p}")),
        e @ FileError::TooLarge { .. } => ToolError::new(ErrorKind::Limit, e.to_string()),
        e => ToolError::transient(e.to_string()),
    }
}

/// Longest glob or regex argument, in bytes: patterns compile into automata
/// whose size grows with the pattern, and no useful pattern is this long.
const MAX_PATTERN_BYTES: usize = 2048;

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
    if pattern.len() > MAX_PATTERN_BYTES {
        return Err(ToolError::validation(format!(
            "glob is {} bytes; the limit is {MAX_PATTERN_BYTES}",
            pattern.len()
        )));
    }
    let full = if pattern.starts_with('/') { pattern.to_string() } else { format!("/{pattern}") };
    globset::GlobBuilder::new(&full)
        .literal_separator(true)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| ToolError::validation(format!("invalid glob {pattern:?}: {}", e.kind())))
}
