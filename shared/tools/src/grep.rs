//! `grep(pattern, path, glob, output_mode)`: a regular-expression search over
//! job files, with capped output and an explicit `truncated` flag.
//!
//! Only files the agent may read without approval are searched; files behind
//! an `interrupt` rule are searched only when the call itself targets that
//! file and a person approved it. The decision is made once, against the one
//! listing the search then reads (`FileToolEnv::scoped`), never on a separate
//! existence check that a concurrent write could invalidate.
//!
//! Matching is CPU work (over a second per 4 MiB for some patterns), so it
//! runs on tokio's blocking pool, line by line, under a deadline and a byte
//! budget: past either, the search stops and returns what it found with
//! `truncated: true` and a note (docs/TOOLS.md). The regex's compiled size
//! and lazy-DFA cache are capped, so no pattern can make a worker allocate
//! beyond them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{FileToolEnv, MAX_PATTERN_BYTES, as_text, compile_glob, file_error};
use flotilla_agent::tool::{Tool, ToolContext, ToolError, ToolSpec};
use flotilla_config::permissions::{Mode, Operation};
use flotilla_job_files::FileMeta;

/// Content matches returned at most.
const MAX_MATCHES: usize = 200;
/// Files returned at most (files and count modes).
const MAX_FILES: usize = 500;
/// Characters kept of a matching line.
const MAX_LINE_CHARS: usize = 300;
/// Bytes searched at most per call.
const MAX_SCAN_BYTES: u64 = 64 * 1024 * 1024;
/// Wall time of matching per call, at most.
const DEADLINE: Duration = Duration::from_secs(5);
/// Compiled program size of the regex, at most.
const REGEX_SIZE_LIMIT: usize = 1 << 20;
/// Lazy-DFA cache of the regex, at most.
const REGEX_DFA_LIMIT: usize = 2 << 20;
/// Lines matched between two looks at the clock.
const LINES_PER_CLOCK_CHECK: usize = 64;

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

#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "snake_case")]
enum OutputMode {
    #[default]
    FilesWithMatches,
    Content,
    Count,
}

#[async_trait]
impl Tool for Grep {
    /// It searches job files and changes nothing.
    fn read_only(&self) -> bool {
        true
    }

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
        let files = env.files.list(&ctx.job_id).await.map_err(file_error)?;
        let (a, base, approved) = env.scoped(ctx, "grep", args, |a: &Args| &a.path, &files).await?;
        let re = compile_regex(&a.pattern)?;
        // A glob without '/' matches file names; with one, whole paths.
        let glob = match &a.glob {
            Some(g) if !g.contains('/') => Some((compile_glob(g)?, true)),
            Some(g) => Some((compile_glob(g)?, false)),
            None => None,
        };
        let readable = |f: &FileMeta| match env.permissions.check(Operation::Read, &f.path) {
            Mode::Allow => true,
            Mode::Interrupt => approved && f.path == base,
            Mode::Deny => false,
        };
        let globbed = |f: &FileMeta| match &glob {
            Some((m, true)) => m.is_match(format!("/{}", f.path.name())),
            Some((m, false)) => m.is_match(f.path.as_str()),
            None => true,
        };
        let mut search = Search::new(a.output_mode, Instant::now() + DEADLINE);
        for f in files.iter().filter(|f| f.path.is_within(&base) && readable(f) && globbed(f)) {
            if !search.admit(f.size) {
                break;
            }
            let bytes = match env.files.read(&ctx.job_id, &f.path).await {
                Ok(b) => b,
                Err(flotilla_job_files::FileError::NotFound(_)) => continue, // deleted meanwhile
                Err(e) => return Err(file_error(e)),
            };
            let Some(text) = as_text(bytes) else { continue };
            let (re, path) = (re.clone(), f.path.to_string());
            search = tokio::task::spawn_blocking(move || {
                search.scan(&re, &path, &text);
                search
            })
            .await
            .map_err(|e| ToolError::new(flotilla_protocol::ErrorKind::Bug, format!("grep worker failed: {e}")))?;
            if search.stopped() {
                break;
            }
        }
        Ok(search.into_json())
    }
}

/// A regex under the size caps, from a pattern under the length cap.
fn compile_regex(pattern: &str) -> Result<regex::Regex, ToolError> {
    if pattern.len() > MAX_PATTERN_BYTES {
        return Err(ToolError::validation(format!(
            "pattern is {} bytes; the limit is {MAX_PATTERN_BYTES}",
            pattern.len()
        )));
    }
    regex::RegexBuilder::new(pattern)
        .size_limit(REGEX_SIZE_LIMIT)
        .dfa_size_limit(REGEX_DFA_LIMIT)
        .build()
        .map_err(|e| ToolError::validation(format!("invalid regex: {e}")))
}

/// The state of one grep call: what it found, and what it may still spend.
#[derive(Debug)]
struct Search {
    mode: OutputMode,
    deadline: Instant,
    scanned: u64,
    max_scan: u64,
    hits: Vec<Value>,
    truncated: bool,
    note: Option<String>,
}

impl Search {
    fn new(mode: OutputMode, deadline: Instant) -> Self {
        Self { mode, deadline, scanned: 0, max_scan: MAX_SCAN_BYTES, hits: Vec::new(), truncated: false, note: None }
    }

    fn cap(&self) -> usize {
        if self.mode == OutputMode::Content { MAX_MATCHES } else { MAX_FILES }
    }

    /// Whether the search ended early (a cap, the deadline or the budget).
    fn stopped(&self) -> bool {
        self.truncated
    }

    fn stop(&mut self, note: Option<String>) {
        self.truncated = true;
        self.note = self.note.take().or(note);
    }

    /// Whether a file of `size` bytes fits the byte budget; stops when not.
    fn admit(&mut self, size: u64) -> bool {
        if self.scanned.saturating_add(size) > self.max_scan {
            let note = format!(
                "stopped after {} bytes searched (limit {}); narrow path, glob or pattern",
                self.scanned, self.max_scan
            );
            self.stop(Some(note));
            return false;
        }
        self.scanned += size;
        true
    }

    /// Takes a hit unless the output cap is reached (then stops).
    fn push(&mut self, hit: Value) -> bool {
        if self.hits.len() == self.cap() {
            self.stop(None);
            return false;
        }
        self.hits.push(hit);
        true
    }

    /// Matches `text` line by line, looking at the clock every few lines.
    fn scan(&mut self, re: &regex::Regex, path: &str, text: &str) {
        let mut count = 0usize;
        for (i, line) in text.lines().enumerate() {
            if i % LINES_PER_CLOCK_CHECK == 0 && Instant::now() >= self.deadline {
                let note = format!(
                    "stopped at the {}s search deadline in {path}; narrow path, glob or pattern",
                    DEADLINE.as_secs()
                );
                self.stop(Some(note));
                break;
            }
            if !re.is_match(line) {
                continue;
            }
            match self.mode {
                OutputMode::FilesWithMatches => {
                    self.push(json!(path));
                    return;
                }
                OutputMode::Count => count += 1,
                OutputMode::Content => {
                    let shown: String = line.chars().take(MAX_LINE_CHARS).collect();
                    if !self.push(json!({"path": path, "line": i + 1, "text": shown})) {
                        return;
                    }
                }
            }
        }
        if count > 0 {
            self.push(json!({"path": path, "count": count}));
        }
    }

    fn into_json(self) -> Value {
        let key = match self.mode {
            OutputMode::FilesWithMatches => "files",
            OutputMode::Content => "matches",
            OutputMode::Count => "counts",
        };
        let mut out = json!({ key: self.hits, "truncated": self.truncated });
        if let Some(note) = self.note {
            out["note"] = json!(note);
        }
        out
    }
}

/// One text searched under an explicit deadline and byte budget, as `grep`
/// does per file (for tests of the limits).
#[cfg(test)]
pub(super) fn scan_for_test(re: &regex::Regex, text: &str, deadline: Instant, max_scan: u64) -> Value {
    let mut search = Search::new(OutputMode::Content, deadline);
    search.max_scan = max_scan;
    if search.admit(text.len() as u64) {
        search.scan(re, "/t", text);
    }
    search.into_json()
}
