//! `edit_file(path, old, new, replace_all)`: exact string replacement. Zero
//! matches, or several without `replace_all`, is an error that says which, so
//! the model adds context instead of editing the wrong place.

use std::sync::Arc;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{FileToolEnv, as_text, binary, denied, file_error};
use crate::permissions::{Mode, Operation};
use crate::tool::{Tool, ToolContext, ToolError, ToolSpec};

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
        let (a, path) = env.authorized(ctx, "edit_file", Operation::Write, args, |a: &Args| &a.path).await?;
        // Editing reveals content (match counts), so it needs read access too.
        if env.permissions.check(Operation::Read, &path) == Mode::Deny {
            return Err(denied(Operation::Read, &path));
        }
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
        let edited = if a.replace_all { text.replace(&a.old, &a.new) } else { text.replacen(&a.old, &a.new, 1) };
        env.files.write(&ctx.job_id, &path, edited.as_bytes()).await.map_err(file_error)?;
        let times = if a.replace_all { n } else { 1 };
        Ok(Value::String(format!("edited {path}: {times} replacement(s)")))
    }
}
