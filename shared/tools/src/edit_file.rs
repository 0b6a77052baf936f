//! `edit_file(path, old, new, replace_all)`: exact string replacement. Zero
//! matches, or several without `replace_all`, is an error that says which, so
//! the model adds context instead of editing the wrong place.
//!
//! The size of the result is computed from the match count before anything
//! is built: `replace_all` of a one-byte `old` by a 20 KB `new` in a 200 KB
//! file would otherwise allocate gigabytes and abort the worker, and the
//! redelivered task would abort the next replica too (docs/TOOLS.md, caps).
//! Editing reads the file (match counts reveal content), so a read rule
//! applies too: deny fails, interrupt asks the approval gate.

use std::sync::Arc;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{FileToolEnv, as_text, binary, file_error};
use flotilla_agent::tool::{Tool, ToolContext, ToolError, ToolSpec};
use flotilla_config::permissions::Operation;
use flotilla_job_files::FilePath;

pub(super) struct EditFile(pub Arc<FileToolEnv>);

#[derive(Deserialize)]
struct Args {
    path: String,
    old: String,
    new: String,
    #[serde(default)]
    replace_all: bool,
}

#[async_trait]
impl Tool for EditFile {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "edit_file".into(),
            description:
                "Replace the exact text `old` with `new` in a job file; `old` must occur once unless replace_all."
                    .into(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "old": {"type": "string", "minLength": 1},
                    "new": {"type": "string"},
                    "replace_all": {"type": "boolean"}
                },
                "required": ["path", "old", "new"],
                "additionalProperties": false
            }),
        }
    }

    async fn call(&self, ctx: &ToolContext, args: Value) -> Result<Value, ToolError> {
        let env = &self.0;
        let ops = [Operation::Write, Operation::Read];
        let (a, path) = env.authorized(ctx, "edit_file", &ops, args, |a: &Args| &a.path).await?;
        let bytes = env.files.read(&ctx.job_id, &path).await.map_err(file_error)?;
        let size = bytes.len();
        let text = as_text(bytes).ok_or_else(|| binary(&path, size))?;
        let n = text.matches(a.old.as_str()).count();
        match n {
            0 => {
                return Err(ToolError::business(format!(
                    "`old` was not found in {path}; read the file and copy the text exactly"
                )));
            }
            n if n > 1 && !a.replace_all => {
                return Err(ToolError::business(format!(
                    "`old` occurs {n} times in {path}; include more surrounding text to make it unique, or set replace_all"
                )));
            }
            _ => {}
        }
        let times = if a.replace_all { n } else { 1 };
        check_size(&path, text.len(), times, a.old.len(), a.new.len(), env.files.max_file_bytes())?;
        let edited = if a.replace_all { text.replace(&a.old, &a.new) } else { text.replacen(&a.old, &a.new, 1) };
        env.files.write(&ctx.job_id, &path, edited.as_bytes()).await.map_err(file_error)?;
        Ok(Value::String(format!("edited {path}: {times} replacement(s)")))
    }
}

/// Refuses an edit whose result would exceed `max` bytes, before it is built:
/// `len - times * old + times * new`, in checked arithmetic.
fn check_size(path: &FilePath, len: usize, times: usize, old: usize, new: usize, max: u64) -> Result<(), ToolError> {
    let size = times
        .checked_mul(new)
        .and_then(|added| len.saturating_sub(times.saturating_mul(old)).checked_add(added))
        .map(|s| s as u64)
        .unwrap_or(u64::MAX);
    if size > max {
        return Err(ToolError::validation(format!(
            "the edit would make {path} {size} bytes ({times} replacement(s) of {old} by {new} bytes); the file size limit is {max} bytes: make a smaller edit or replace fewer occurrences"
        )));
    }
    Ok(())
}
