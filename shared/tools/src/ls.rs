//! `ls(path)`: the files and directories directly under a path.
//!
//! The path's own read rule is checked before anything about it is said, so
//! a denied path is a `permission` error whether or not it exists (no
//! existence oracle; see `FileToolEnv::scoped`).

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{FileToolEnv, file_error};
use flotilla_agent::tool::{Tool, ToolContext, ToolError, ToolSpec};
use flotilla_protocol::ErrorKind;

/// Entries listed at most.
const MAX_ENTRIES: usize = 500;

pub(super) struct Ls(pub Arc<FileToolEnv>);

#[derive(Deserialize)]
struct Args {
    #[serde(default = "root")]
    path: String,
}

fn root() -> String {
    "/".into()
}

#[async_trait]
impl Tool for Ls {
    /// It lists job files and changes nothing.
    fn read_only(&self) -> bool {
        true
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "ls".into(),
            description: "List files and directories directly under an absolute path of the job files.".into(),
            input_schema: json!({
                "type": "object",
                "properties": {"path": {"type": "string", "description": "default /"}},
                "additionalProperties": false
            }),
        }
    }

    async fn call(&self, ctx: &ToolContext, args: Value) -> Result<Value, ToolError> {
        let env = &self.0;
        let files = env.files.list(&ctx.job_id).await.map_err(file_error)?;
        let (_, dir, _) = env.scoped(ctx, "ls", args, |a: &Args| &a.path, &files).await?;
        // name -> Some(size) for a file, None for a directory
        let mut entries: BTreeMap<String, Option<u64>> = BTreeMap::new();
        for f in files.iter().filter(|f| f.path.is_within(&dir) && env.listable(&f.path)) {
            if f.path == dir {
                entries.insert(f.path.to_string(), Some(f.size));
                continue;
            }
            let base = if dir.is_root() { "" } else { dir.as_str() };
            let rest = &f.path.as_str()[base.len() + 1..];
            match rest.split_once('/') {
                Some((sub, _)) => {
                    entries.entry(format!("{base}/{sub}/")).or_insert(None);
                }
                None => {
                    entries.insert(f.path.to_string(), Some(f.size));
                }
            }
        }
        if entries.is_empty() && !dir.is_root() {
            return Err(ToolError::new(ErrorKind::NotFound, format!("no such file or directory: {dir}")));
        }
        let truncated = entries.len() > MAX_ENTRIES;
        let entries: Vec<Value> = entries
            .into_iter()
            .take(MAX_ENTRIES)
            .map(|(path, size)| match size {
                Some(size) => json!({"path": path, "size": size}),
                None => json!({"path": path, "dir": true}),
            })
            .collect();
        Ok(json!({"entries": entries, "truncated": truncated}))
    }
}
