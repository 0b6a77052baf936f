//! Large-result eviction (docs/TOOLS.md, "Large results travel by
//! reference"): a tool result whose model text exceeds the limit is written to
//! the job's files at `/large_tool_results/<task>/<call id>` (`planner` instead
//! of a task for the planner) and the model reads a
//! [`flotilla_protocol::FileRef`] instead: path, size, line count, sha256, head
//! and tail. It pages through the rest with `read_file`/`grep`.
//!
//! A layer of the tool pipeline (tool/pipeline/evict.rs), so every tool
//! (native, MCP, built-in) gets it without knowing. The paging read tools are
//! exempt: their output is already bounded, and evicting a page of an evicted
//! result would loop.
//!
//! `/large_tool_results` is reserved (shared/job-files/src/reserved.rs):
//! agents' writes there are refused, this layer writes through
//! [`JobFiles::write_reserved`], and reads verify the stored sha256, so an
//! evicted result cannot be swapped for forged text after the fact.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::{ToolContext, ToolError, ToolOutcome};
use flotilla_job_files::{FilePath, JobFiles};
use flotilla_protocol::ErrorKind;

/// Directory of evicted results (a reserved directory of the job files).
pub use flotilla_job_files::LARGE_RESULTS_DIR;

/// Where and above which size results are evicted.
#[derive(Clone)]
pub struct Eviction {
    /// The job files.
    pub files: JobFiles,
    /// Model text above this many bytes is evicted.
    pub max_bytes: usize,
    /// Tools whose results are never evicted.
    pub exempt: BTreeSet<String>,
}

impl Eviction {
    /// The file an evicted result of this call goes to.
    pub fn path_for(ctx: &ToolContext) -> Result<FilePath, ToolError> {
        let owner = ctx.task_id.map(|t| t.to_string()).unwrap_or_else(|| "planner".into());
        FilePath::parse(LARGE_RESULTS_DIR)
            .and_then(|d| d.child(&owner))
            .and_then(|d| d.child(&ctx.call_id))
            .map_err(|e| ToolError::new(ErrorKind::Bug, format!("eviction path: {e}")))
    }

    /// Replaces an oversized successful result by a reference to its file.
    pub(crate) async fn apply(&self, ctx: &ToolContext, tool: &str, outcome: &mut ToolOutcome) {
        if outcome.result.is_err() || self.exempt.contains(tool) {
            return;
        }
        let text = outcome.to_model_text();
        if text.len() <= self.max_bytes {
            return;
        }
        outcome.result = self.evict(ctx, &text).await;
    }

    async fn evict(&self, ctx: &ToolContext, text: &str) -> Result<Value, ToolError> {
        let path = Self::path_for(ctx)?;
        if let Err(e) = self.files.write_reserved(&ctx.job_id, &path, text.as_bytes()).await {
            tracing::warn!(call_id = %ctx.call_id, error = %e, "large tool result not stored");
            return Err(ToolError::new(
                ErrorKind::Limit,
                format!(
                    "result of {} bytes is too large for the conversation and could not be stored: {e}",
                    text.len()
                ),
            ));
        }
        let reference = flotilla_protocol::digest::describe_file(path.as_str(), text);
        Ok(json!({
            "evicted": reference,
            "note": "result too large for the conversation; it is stored at `evicted.path`: page it with read_file(path, offset, limit) or search it with grep",
        }))
    }
}
