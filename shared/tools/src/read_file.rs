//! `read_file(path, offset, limit)`: a page of a text file with line numbers.

use std::sync::Arc;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{FileToolEnv, as_text, binary, file_error};
use flotilla_agent::tool::{Tool, ToolContext, ToolError, ToolSpec};
use flotilla_config::permissions::Operation;
use flotilla_protocol::line_count;

/// Lines per page by default and at most.
const DEFAULT_LIMIT: usize = 200;
const MAX_LIMIT: usize = 2000;
/// Characters kept of one line.
const MAX_LINE_CHARS: usize = 2000;
/// Bytes of one page at most; a longer page stops early and says where to go on.
const MAX_PAGE_BYTES: usize = 50_000;

pub(super) struct ReadFile(pub Arc<FileToolEnv>);

#[derive(Deserialize)]
struct Args {
    path: String,
    #[serde(default)]
    offset: usize,
    #[serde(default = "default_limit")]
    limit: usize,
}

fn default_limit() -> usize {
    DEFAULT_LIMIT
}

#[async_trait]
impl Tool for ReadFile {
    /// It reads a job file and changes nothing.
    fn read_only(&self) -> bool {
        true
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "read_file".into(),
            description: "Read a text file of the job files: `limit` lines from line `offset` (0-based), numbered."
                .into(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "offset": {"type": "integer", "minimum": 0},
                    "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT}
                },
                "required": ["path"],
                "additionalProperties": false
            }),
        }
    }

    async fn call(&self, ctx: &ToolContext, args: Value) -> Result<Value, ToolError> {
        let (a, path) = self.0.authorized(ctx, "read_file", &[Operation::Read], args, |a: &Args| &a.path).await?;
        let bytes = self.0.files.read(&ctx.job_id, &path).await.map_err(file_error)?;
        let size = bytes.len();
        let text = as_text(bytes).ok_or_else(|| binary(&path, size))?;
        if text.is_empty() {
            return Ok(Value::String(format!("{path} is empty")));
        }
        // Iterated, never collected: a file of empty lines would otherwise
        // cost 16 bytes of index per byte of file.
        let total = line_count(&text) as usize;
        if a.offset >= total {
            return Err(ToolError::validation(format!(
                "offset {} is past the end of {path} ({total} lines)",
                a.offset
            )));
        }
        let mut out = String::new();
        let mut end = a.offset;
        for (i, line) in text.lines().enumerate().skip(a.offset).take(a.limit.min(MAX_LIMIT)) {
            if out.len() >= MAX_PAGE_BYTES {
                break;
            }
            let shown: String = line.chars().take(MAX_LINE_CHARS).collect();
            let cut = if shown.len() < line.len() { " [line truncated]" } else { "" };
            out.push_str(&format!("{:>6}\t{shown}{cut}\n", i + 1));
            end = i + 1;
        }
        if end < total {
            out.push_str(&format!("[lines {}-{end} of {total}; continue with offset={end}]", a.offset + 1));
        }
        Ok(Value::String(out))
    }
}
