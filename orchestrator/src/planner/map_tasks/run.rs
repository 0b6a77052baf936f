//! The map's dispatch loop: items in file order, at most `max_in_flight`
//! tasks outstanding, results released in item order into parts, the
//! progress record advanced per part (orchestrator/src/planner/map_tasks/store.rs).
//!
//! Memory stays bounded by the window, not by the map: the loop holds the
//! items file's text, the in-flight items, the lines that ended ahead of the
//! first unfinished item, and one part.

use std::time::Duration;

use async_trait::async_trait;
use flotilla_agent::tool::{ToolContext, ToolError};
use flotilla_protocol::ids::TaskId;
use flotilla_protocol::{ErrorInfo, ErrorKind};
use flotilla_retry::Backoff;
use futures::StreamExt;
use futures::stream::FuturesUnordered;

use super::items::{Item, Items};
use super::results::{Ordered, ResultLine};
use super::store::{MapFiles, MapProgress};
use super::template::DescriptionTemplate;

/// How one item's task ended.
#[derive(Clone, Debug, PartialEq)]
pub struct ItemOutcome {
    /// The task.
    pub task_id: TaskId,
    /// `completed`, `failed`, `cancelled`, ... (the task status's wire name).
    pub status: String,
    /// The (capped) report summary, "" on error.
    pub summary: String,
    /// Why it did not complete.
    pub error: Option<ErrorInfo>,
    /// The full report in the job files.
    pub report_path: Option<String>,
}

/// How a map reaches its tasks: the planner's `Dispatcher` in production
/// (orchestrator/src/planner/dispatch.rs), a fake in the tests.
#[async_trait]
pub trait ItemDispatch: Send + Sync {
    /// Starts (or, for a key seen before, finds) the task of one item.
    async fn start(&self, ctx: &ToolContext, ty: &str, description: String, key: &str) -> Result<TaskId, ToolError>;
    /// Waits until the task ends.
    async fn wait(&self, ctx: &ToolContext, task: TaskId) -> Result<ItemOutcome, ToolError>;
    /// Items one call of `tenant` may map (`[tenants] max_map_items`).
    fn max_items(&self, _tenant: &flotilla_protocol::ids::Tenant) -> usize {
        usize::MAX
    }
}

/// Results lines per part: a resume re-awaits at most this many finished items.
const PART_LINES: usize = 1000;
/// Or this many bytes of lines, whichever comes first.
const PART_BYTES: usize = 512 * 1024;
/// Attempts to start one item's task through transient errors.
const START_ATTEMPTS: u32 = 5;

/// One map run (fresh or resumed).
pub struct MapRun<'a> {
    /// Task dispatch.
    pub dispatch: &'a dyn ItemDispatch,
    /// The planner's call.
    pub ctx: &'a ToolContext,
    /// The subagent type of every task.
    pub ty: &'a str,
    /// The description template.
    pub template: &'a DescriptionTemplate,
    /// The items file's text.
    pub text: &'a str,
    /// Dispatch keys are `map:<map id>:<index>`.
    pub map_id: &'a str,
    /// Where progress and results go.
    pub files: &'a MapFiles,
    /// Tasks outstanding at most.
    pub max_in_flight: usize,
}

impl MapRun<'_> {
    /// Runs every item from `progress.done` to the end, storing parts and
    /// progress as items end; returns the progress with every item done.
    /// A cancelled call returns `cancelled` with the stored progress intact.
    pub async fn run(&self, mut progress: MapProgress) -> Result<MapProgress, ToolError> {
        let mut items = Items::from_index(self.text, progress.done);
        let mut ordered = Ordered::new(progress.done, progress.completed, progress.failed);
        let mut in_flight = FuturesUnordered::new();
        let mut exhausted = false;
        loop {
            while !exhausted && in_flight.len() < self.max_in_flight.max(1) {
                match items.next() {
                    Some(item) => in_flight.push(self.item(item)),
                    None => exhausted = true,
                }
            }
            let Some(line) = in_flight.next().await else { break };
            ordered.push(line?);
            let (lines, bytes) = ordered.buffered();
            if lines >= PART_LINES || bytes >= PART_BYTES {
                self.store_part(&mut progress, &mut ordered).await?;
            }
        }
        if ordered.buffered().0 > 0 {
            self.store_part(&mut progress, &mut ordered).await?;
        }
        Ok(progress)
    }

    /// Writes the released lines as the next part, then the progress that counts them.
    async fn store_part(&self, progress: &mut MapProgress, ordered: &mut Ordered) -> Result<(), ToolError> {
        let lines = ordered.take();
        self.files.write_part(progress.parts, &lines).await?;
        progress.parts += 1;
        progress.done = ordered.done();
        (progress.completed, progress.failed) = ordered.counts();
        self.files.save(progress).await
    }

    /// Starts and awaits one item's task. `Err` only for a cancelled call:
    /// every other failure is the item's results line.
    async fn item(&self, item: Result<Item, String>) -> Result<ResultLine, ToolError> {
        // Validated before the first dispatch; the file cannot change under a running map.
        let item = item.map_err(|e| ToolError::new(ErrorKind::Bug, format!("items file changed: {e}")))?;
        let failed = |task_id, error: ToolError| ResultLine {
            index: item.index,
            item: item.value.clone(),
            task_id,
            status: "failed".into(),
            summary: None,
            data: None,
            error: Some(ErrorInfo::new(error.kind, error.message)),
            report: None,
        };
        // On the blocking pool, like validation (template.rs); fuel bounds the render.
        let value = std::sync::Arc::new(item.value.clone());
        let description = match self.template.render_blocking(value, item.index).await {
            Ok(d) => d,
            Err(e) => return Ok(failed(None, ToolError::validation(format!("line {}: {e}", item.line)))),
        };
        let task_id = match self.start(description, item.index).await {
            Ok(id) => id,
            Err(e) if e.kind == ErrorKind::Cancelled => return Err(e),
            Err(e) => return Ok(failed(None, e)),
        };
        let outcome = match self.dispatch.wait(self.ctx, task_id).await {
            Ok(o) => o,
            Err(e) if e.kind == ErrorKind::Cancelled => return Err(e),
            Err(e) => return Ok(failed(Some(task_id), e)),
        };
        let completed = outcome.status == "completed";
        // The usual place, /reports/<task id>.md, goes without saying (and 45 bytes a line).
        let usual = format!("/reports/{}.md", outcome.task_id);
        let report = outcome.report_path.filter(|p| *p != usual);
        let data = completed.then(|| crate::reports::structured_answer(&outcome.summary)).flatten();
        Ok(ResultLine {
            index: item.index,
            item: item.value,
            task_id: Some(outcome.task_id),
            status: outcome.status,
            summary: (completed && data.is_none()).then_some(outcome.summary),
            data,
            error: outcome.error,
            report,
        })
    }

    /// Starts one item's task, retrying transient errors a few times.
    async fn start(&self, description: String, index: usize) -> Result<TaskId, ToolError> {
        let key = format!("map:{}:{index}", self.map_id);
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
        let mut attempt = 1;
        loop {
            match self.dispatch.start(self.ctx, self.ty, description.clone(), &key).await {
                Err(e) if e.kind == ErrorKind::Transient && attempt < START_ATTEMPTS => {
                    tracing::warn!(key, error = %e.message, "map item not dispatched yet; retrying");
                    attempt += 1;
                    tokio::select! {
                        () = tokio::time::sleep(backoff.next_delay()) => {}
                        () = self.ctx.cancel.cancelled() => return Err(ToolError::new(ErrorKind::Cancelled, "cancelled")),
                    }
                }
                other => return other,
            }
        }
    }
}
