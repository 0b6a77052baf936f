//! `write_file(path, content)`: creates or overwrites a file and says which.

use std::sync::Arc;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{FileToolEnv, file_error};
use flotilla_agent::tool::{Tool, ToolContext, ToolError, ToolSpec};
use flotilla_config::permissions::Operation;

pub(super) struct WriteFile(pub Arc<FileToolEnv>);

#[derive(Deserialize)]
struct Args {
    path: String,
    content: String,
}

#[async_trait]
impl Tool for WriteFile {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "write_file".into(),
            description: "Create or overwrite a text file in the job files (absolute path).".into(),
            input_schema: json!({
                "type": "object",
                "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                "required": ["path", "content"],
                "additionalProperties": false
            }),
        }
    }

    async fn call(&self, ctx: &ToolContext, args: Value) -> Result<Value, ToolError> {
        let (a, path) = self.0.authorized(ctx, "write_file", &[Operation::Write], args, |a: &Args| &a.path).await?;
        if path.is_root() {
            return Err(ToolError::validation("cannot write to / : name a file, e.g. /notes.md"));
        }
        let created = self.0.files.write(&ctx.job_id, &path, a.content.as_bytes()).await.map_err(file_error)?;
        let verb = if created { "created" } else { "overwrote" };
        Ok(Value::String(format!("{verb} {path} ({} bytes)", a.content.len())))
    }
}
