//! `glob(pattern)`: job file paths matching a glob (`*` stays within a
//! directory, `**` crosses directories; relative patterns start at `/`).

use std::sync::Arc;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{FileToolEnv, compile_glob, file_error, parse};
use flotilla_agent::tool::{Tool, ToolContext, ToolError, ToolSpec};

/// Paths returned at most.
const MAX_PATHS: usize = 500;

pub(super) struct Glob(pub Arc<FileToolEnv>);

#[derive(Deserialize)]
struct Args {
    pattern: String,
}

#[async_trait]
impl Tool for Glob {
    /// It lists job files and changes nothing.
    fn read_only(&self) -> bool {
        true
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "glob".into(),
            description: "Find job file paths matching a glob, e.g. /**/*.md (* stays in one directory, ** crosses)."
                .into(),
            input_schema: json!({
                "type": "object",
                "properties": {"pattern": {"type": "string", "minLength": 1}},
                "required": ["pattern"],
                "additionalProperties": false
            }),
        }
    }

    async fn call(&self, ctx: &ToolContext, args: Value) -> Result<Value, ToolError> {
        let a: Args = parse(args)?;
        let matcher = compile_glob(&a.pattern)?;
        let files = self.0.files.list(&ctx.job_id).await.map_err(file_error)?;
        let matched: Vec<&str> = files
            .iter()
            .filter(|f| matcher.is_match(f.path.as_str()) && self.0.listable(&f.path))
            .map(|f| f.path.as_str())
            .collect();
        let truncated = matched.len() > MAX_PATHS;
        Ok(json!({"paths": &matched[..matched.len().min(MAX_PATHS)], "truncated": truncated}))
    }
}
