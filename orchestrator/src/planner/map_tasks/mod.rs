//! `map_tasks(subagent_type, description, items)`: one task per line of a
//! JSONL job file, for fan-outs far larger than a planner turn or its context
//! can hold (contract in docs/TOOLS.md, "map_tasks").
//!
//! The planner's conversation gets one small aggregate result,
//! `{"total", "completed", "failed", "results": "/maps/<id>.jsonl"}`; every
//! item's outcome goes to the results file, which it reads with the file
//! tools. All items and the template are validated before the first
//! dispatch, so a bad line costs no task. At most `[planner] max_in_flight`
//! tasks of one call are outstanding; the call survives an orchestrator
//! restart through its progress record and idempotent dispatch keys
//! (orchestrator/src/planner/map_tasks/store.rs).
//!
//! The map id is the call id (path-safe characters only) plus a short hash of
//! the arguments, so a replayed call finds its own map and a model that
//! reuses call ids across turns still gets a fresh map per call.

mod dispatcher;
mod items;
mod results;
mod run;
mod shape;
mod store;
mod template;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use flotilla_agent::tool::{Tool, ToolContext, ToolError, ToolSpec};
use flotilla_job_files::{FilePath, JobFiles};
use flotilla_protocol::ErrorKind;
use flotilla_protocol::ids::SubagentType;
use serde::Deserialize;
use serde_json::{Value, json};

use super::dispatch::Dispatcher;
pub use run::ItemDispatch;
use run::MapRun;
use store::{MapFiles, MapProgress, file_error};
use template::DescriptionTemplate;

/// Validation problems listed in one error before "and N more".
const MAX_LISTED_PROBLEMS: usize = 5;

/// The `map_tasks` planner tool.
pub struct MapTasks {
    /// Task dispatch (the planner's `Dispatcher`).
    pub dispatch: Arc<dyn ItemDispatch>,
    /// Subagent types with their descriptions, from config.
    pub types: BTreeMap<SubagentType, String>,
    /// The job files (items in, results out).
    pub files: JobFiles,
    /// `[planner] max_in_flight`: tasks of one call outstanding at most.
    pub max_in_flight: usize,
}

#[derive(Deserialize)]
struct Args {
    subagent_type: String,
    description: String,
    items: String,
}

#[async_trait]
impl Tool for MapTasks {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "map_tasks".into(),
            description: "One subagent task per line (a JSON value) of a JSONL job file, for large fan-outs. \
                          `description` is a template over `item`, e.g. \"Margin of {{ item.region }}\". \
                          Returns counts and `results`: a JSONL file, a line per item in order (item, task_id, \
                          status, summary or error)."
                .into(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "subagent_type": {"type": "string"},
                    "description": {"type": "string", "minLength": 1},
                    "items": {"type": "string", "minLength": 1, "description": "path of the JSONL job file"}
                },
                "required": ["subagent_type", "description", "items"],
                "additionalProperties": false
            }),
        }
    }

    async fn call(&self, ctx: &ToolContext, args: Value) -> Result<Value, ToolError> {
        let map_id = map_id(&ctx.call_key().replace(':', "-"), &args);
        let Args { subagent_type, description, items } =
            serde_json::from_value(args).map_err(|e| ToolError::validation(e.to_string()))?;
        self.check_type(&subagent_type)?;
        let template = DescriptionTemplate::compile(&description).map_err(ToolError::validation)?;
        let path = FilePath::parse(&items).map_err(|e| ToolError::validation(format!("items {items:?}: {e}")))?;
        let bytes = self.files.read(&ctx.job_id, &path).await.map_err(|e| match e {
            flotilla_job_files::FileError::NotFound(_) => ToolError::validation(format!(
                "items file {path} not found: write the JSONL file first (or upload it with `flotilla submit --file`)"
            )),
            e => file_error(e),
        })?;
        let text = items::into_text(bytes).map_err(|e| ToolError::validation(format!("items file {path} {e}")))?;
        let files = MapFiles::new(self.files.clone(), ctx.job_id, map_id.clone());
        let (text, progress) = match files.load().await? {
            Some(p) => {
                let p = resume_check(p, &text, &path)?;
                (text, p)
            }
            None => {
                dispatcher::check_item_count(items::count(&text), self.dispatch.max_items(&ctx.tenant), path.as_str())?;
                let (text, total) = validate_off_runtime(text, template.clone(), ctx).await;
                let total = total.map_err(|e| ToolError::validation(format!("{path}: {e}")))?;
                let p = MapProgress::new(total);
                files.save(&p).await?;
                (text, p)
            }
        };
        let text = text.as_str();
        let mut progress = if progress.finished || progress.done == progress.total {
            progress
        } else {
            tracing::info!(job_id = %ctx.job_id, map_id, total = progress.total, done = progress.done, "map running");
            let run = MapRun {
                dispatch: self.dispatch.as_ref(),
                ctx,
                ty: &subagent_type,
                template: &template,
                text,
                map_id: &map_id,
                files: &files,
                max_in_flight: self.max_in_flight,
            };
            run.run(progress).await?
        };
        if !progress.finished {
            files.finish(&mut progress).await?;
        }
        Ok(json!({
            "total": progress.total,
            "completed": progress.completed,
            "failed": progress.failed,
            "results": files.results_path(),
        }))
    }
}

impl MapTasks {
    /// The tool over the planner's dispatcher and the job files.
    pub fn new(dispatcher: Dispatcher, files: JobFiles, max_in_flight: usize) -> Self {
        Self { types: dispatcher.types().clone(), dispatch: Arc::new(dispatcher), files, max_in_flight }
    }

    fn check_type(&self, ty: &str) -> Result<(), ToolError> {
        match SubagentType::new(ty) {
            Ok(t) if self.types.contains_key(&t) => Ok(()),
            _ => {
                let valid: Vec<&str> = self.types.keys().map(|t| t.as_str()).collect();
                Err(ToolError::validation(format!("unknown subagent_type {ty:?}; valid types: {}", valid.join(", "))))
            }
        }
    }
}

/// A stored progress record, checked against the items file it counted.
fn resume_check(progress: MapProgress, text: &str, path: &FilePath) -> Result<MapProgress, ToolError> {
    let total = items::count(text);
    if total != progress.total {
        return Err(ToolError::new(
            ErrorKind::Business,
            format!(
                "{path} changed while its map ran ({} items when it started, {total} now); \
                 map the new file under another path",
                progress.total
            ),
        ));
    }
    Ok(progress)
}

/// [`validate`] on the blocking pool: a map's check renders every item, and
/// a tenant's template must not hold up the runtime that answers every
/// other tenant. The call's cancellation stops it between items.
async fn validate_off_runtime(
    text: String,
    template: DescriptionTemplate,
    ctx: &ToolContext,
) -> (String, Result<usize, String>) {
    let cancel = ctx.cancel.clone();
    let job = tokio::task::spawn_blocking(move || {
        let stop = || cancel.is_cancelled();
        let checked = validate(&text, &template, template::MAP_FUEL, template::VALIDATION_DEADLINE, &stop);
        (text, checked)
    });
    match job.await {
        Ok(done) => done,
        // The text went down with the panicked thread; the caller only needs the error.
        Err(e) => (String::new(), Err(format!("checking the items failed: {e}"))),
    }
}

/// Parses every item and renders its description; returns the item count or
/// the first problems with their lines. The renders of all items together
/// may cost at most `budget` fuel ([`template::MAP_FUEL`]) and take at most
/// `deadline`; `stop` (a cancelled call) ends the check between items.
fn validate(
    text: &str,
    template: &DescriptionTemplate,
    budget: u64,
    deadline: std::time::Duration,
    stop: &dyn Fn() -> bool,
) -> Result<usize, String> {
    let (mut total, mut problems, mut listed) = (0, 0usize, Vec::new());
    let (started, mut fuel) = (std::time::Instant::now(), 0u64);
    for item in items::Items::new(text) {
        total += 1;
        if fuel > budget {
            return Err(format!(
                "rendering the description of every item needs more than the budget of one map_tasks call \
                 ({budget} fuel: about {budget} template steps in all); stopped before item {total}: make the \
                 template simpler or split the items into several files; nothing was dispatched"
            ));
        }
        if started.elapsed() > deadline {
            return Err(format!(
                "checking the items took longer than {} s; stopped before item {total}: make the template \
                 simpler or split the items into several files; nothing was dispatched",
                deadline.as_secs()
            ));
        }
        if stop() {
            return Err("the call was cancelled while its items were checked; nothing was dispatched".into());
        }
        let problem = match item {
            Ok(item) => {
                let rendered = template.render_metered(&item.value, item.index);
                fuel += rendered.fuel;
                rendered.text.err().map(|e| format!("line {}: {e}", item.line))
            }
            Err(e) => Some(e),
        };
        if let Some(p) = problem {
            problems += 1;
            if listed.len() < MAX_LISTED_PROBLEMS {
                listed.push(p);
            }
        }
    }
    if problems > 0 {
        let more = problems - listed.len();
        let more = if more > 0 { format!(" (and {more} more)") } else { String::new() };
        return Err(format!("{}{more}; nothing was dispatched", listed.join("; ")));
    }
    if total == 0 {
        return Err("holds no items (one JSON value per line)".into());
    }
    Ok(total)
}

/// The map id of a call: its path-safe call id and 8 hex digits of the
/// arguments' sha256.
fn map_id(call_id: &str, args: &Value) -> String {
    let safe: String =
        call_id.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_').take(64).collect();
    let digest = flotilla_protocol::digest::sha256_hex(args.to_string().as_bytes());
    if safe.is_empty() { format!("map-{}", &digest[..8]) } else { format!("{safe}-{}", &digest[..8]) }
}
