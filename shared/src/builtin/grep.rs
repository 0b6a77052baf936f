//! `grep(pattern, path, glob, output_mode)`: a regular-expression search over
//! job files, with capped output and an explicit `truncated` flag.
//!
//! Only files the agent may read without approval are searched; files behind
//! an `interrupt` rule are searched only when the call itself targets that
//! file and was approved.

use std::sync::Arc;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{FileToolEnv, as_text, compile_glob, file_error};
use crate::permissions::{Mode, Operation};
use crate::tool::{Tool, ToolContext, ToolError, ToolSpec};

/// Content matches returned at most.
const MAX_MATCHES: usize = 200;
/// Files returned at most (files and count modes).
const MAX_FILES: usize = 500;
/// Characters kept of a matching line.
const MAX_LINE_CHARS: usize = 300;
/// Bytes searched at most per call.
const MAX_SCAN_BYTES: u64 = 64 * 1024 * 1024;

pub(super) struct Grep(pub Arc<FileToolEnv>);

#[derive(Deserialize)]
struct Args {
    pattern: String,
    #[serde(default = "root")]
    path: String,
    #[serde(default)]
    glob: Option<String>,
    #[serde(default)]
    output_mode: OutputMode,
}

fn root() -> String {
    "/".into()
}

#[derive(Clone, Copy, Default, Deserialize, PartialEq)]
#[serde(rename_all = "snake_case")]
enum OutputMode {
    #[default]
    FilesWithMatches,
    Content,
    Count,
}

#[async_trait]
impl Tool for Grep {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "grep".into(),
            description:
                "Search job files for a regex under `path` (default /), optionally only files matching `glob`.".into(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "pattern": {"type": "string", "minLength": 1},
                    "path": {"type": "string"},
                    "glob": {"type": "string"},
                    "output_mode": {"enum": ["files_with_matches", "content", "count"]}
                },
                "required": ["pattern"],
                "additionalProperties": false
            }),
        }
    }

    async fn call(&self, ctx: &ToolContext, args: Value) -> Result<Value, ToolError> {
        let env = &self.0;
        let (a, base) = env.scoped(ctx, "grep", args, |a: &Args| &a.path).await?;
        let re = regex::RegexBuilder::new(&a.pattern)
            .size_limit(1 << 20)
            .build()
            .map_err(|e| ToolError::validation(format!("invalid regex: {e}")))?;
        // A glob without '/' matches file names; with one, whole paths.
        let glob = match &a.glob {
            Some(g) if !g.contains('/') => Some((compile_glob(g)?, true)),
            Some(g) => Some((compile_glob(g)?, false)),
            None => None,
        };
        let files = env.files.list(&ctx.job_id).await.map_err(file_error)?;
        let mut hits: Vec<Value> = Vec::new();
        let mut truncated = false;
        let mut scanned = 0u64;
        for f in files.iter().filter(|f| f.path.is_within(&base)) {
            let readable = match env.permissions.check(Operation::Read, &f.path) {
                Mode::Allow => true,
                Mode::Interrupt => f.path == base, // approved above
                Mode::Deny => false,
            };
            let globbed = match &glob {
                Some((m, true)) => m.is_match(format!("/{}", f.path.name())),
                Some((m, false)) => m.is_match(f.path.as_str()),
                None => true,
            };
            if !readable || !globbed {
                continue;
            }
            if scanned + f.size > MAX_SCAN_BYTES {
                truncated = true;
                break;
            }
            scanned += f.size;
            let bytes = match env.files.read(&ctx.job_id, &f.path).await {
                Ok(b) => b,
                Err(crate::files::FileError::NotFound(_)) => continue, // deleted meanwhile
                Err(e) => return Err(file_error(e)),
            };
            let Some(text) = as_text(bytes) else { continue };
            let cap = if a.output_mode == OutputMode::Content { MAX_MATCHES } else { MAX_FILES };
            match a.output_mode {
                OutputMode::FilesWithMatches => {
                    if re.is_match(&text) {
                        hits.push(json!(f.path.as_str()));
                    }
                }
                OutputMode::Count => {
                    let n = text.lines().filter(|l| re.is_match(l)).count();
                    if n > 0 {
                        hits.push(json!({"path": f.path.as_str(), "count": n}));
                    }
                }
                OutputMode::Content => {
                    for (i, line) in text.lines().enumerate().filter(|(_, l)| re.is_match(l)) {
                        if hits.len() == cap {
                            truncated = true;
                            break;
                        }
                        let shown: String = line.chars().take(MAX_LINE_CHARS).collect();
                        hits.push(json!({"path": f.path.as_str(), "line": i + 1, "text": shown}));
                    }
                }
            }
            if hits.len() > cap || (truncated && a.output_mode == OutputMode::Content) {
                hits.truncate(cap);
                truncated = true;
                break;
            }
        }
        let key = match a.output_mode {
            OutputMode::FilesWithMatches => "files",
            OutputMode::Content => "matches",
            OutputMode::Count => "counts",
        };
        Ok(json!({ key: hits, "truncated": truncated }))
    }
}
