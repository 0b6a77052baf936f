//! The pipeline every tool call passes through, as small layers in one fixed
//! order. Each layer does one thing before and/or after the rest of the call
//! ([`Next`]) and may stop the call with its own verdict; a layer that is not
//! configured (no auditor, no eviction) lets the call pass untouched.
//!
//! From the outside in ([`invoke`]):
//!
//! 1. [`audit::Audit`]: one tool-call record of every call, whatever stopped
//!    it, with the model's arguments and the outcome the model reads
//!    (docs/SECURITY.md, "Audit").
//! 2. [`stopwatch::Stopwatch`]: the call's duration, eviction included.
//! 3. [`evict::Evict`]: oversized results go to the job files, the model reads
//!    a reference (docs/TOOLS.md, "Large results travel by reference").
//! 4. [`validate::Validate`]: an unknown tool or arguments that break the
//!    schema stop here, before a person is asked about them.
//! 5. [`approve::Approve`]: gated tools wait for a person; edited arguments are
//!    validated again; every decision is audited once (docs/APPROVALS.md).
//!    Outside the timeout, so a person's wait never counts against the tool.
//! 6. [`sanitize::Sanitize`]: the tool's own error text loses paths, traces and
//!    secrets (docs/SECURITY.md, "Sanitized errors"); the pipeline's own
//!    errors (timeout, cancelled, bug) pass as written.
//! 7. [`timeout::Timeout`]: the tool timeout and cancellation; the clock stops
//!    while a person decides a question the tool asked from inside its call.
//!
//! and at the end [`run::isolated`]: the tool in its own task, aborted when
//! the call is dropped, a panic turned into a `bug` error.
//!
//! Layers are `dyn` and borrow their settings from the tool set for one call:
//! no allocation beyond the boxed futures, and tests can compose other orders
//! to show where the order matters (pipeline/tests.rs).

mod approve;
mod audit;
mod evict;
mod run;
mod sanitize;
mod stopwatch;
mod timeout;
mod validate;

#[cfg(test)]
mod tests;

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::set::Entry;
use super::{ApprovalGate, ToolContext, ToolError, ToolOutcome};
use timeout::Waits;

pub use validate::schema_problems;

/// One call on its way through the layers.
pub(crate) struct Call<'a> {
    /// Who is calling; layers read it, the tool gets a copy carrying `gate`.
    pub ctx: &'a ToolContext,
    /// The tool's name as the model wrote it (maybe no tool at all).
    pub name: &'a str,
    /// The model's arguments: what the tool-call record digests, whatever a
    /// reviewer made of them.
    pub requested: &'a Value,
    /// The arguments the tool runs with: the model's, or a reviewer's edit.
    pub args: Cow<'a, Value>,
    /// The gate the tool sees from inside its call; [`approve::Approve`]
    /// wraps the caller's.
    pub gate: Option<Arc<dyn ApprovalGate>>,
    /// Time people spent on questions the tool asked during the call: shared
    /// by the gate that asks ([`approve::Approve`]) and the clock that
    /// excludes it ([`timeout::Timeout`]).
    pub waits: Waits,
    /// The tool set, to find the tool or name the ones there are.
    tools: &'a BTreeMap<String, Entry>,
}

impl<'a> Call<'a> {
    /// A call of `name` with `args`, before any layer saw it.
    pub fn new(tools: &'a BTreeMap<String, Entry>, ctx: &'a ToolContext, name: &'a str, args: &'a Value) -> Self {
        Self {
            ctx,
            name,
            requested: args,
            args: Cow::Borrowed(args),
            gate: ctx.approvals.clone(),
            waits: Waits::default(),
            tools,
        }
    }

    /// The tool called, or the validation error that lists the tools there
    /// are. Every layer that needs the tool asks here, so no order of layers
    /// can run an unknown tool.
    pub fn entry(&self) -> Result<&'a Entry, ToolError> {
        self.tools.get(self.name).ok_or_else(|| {
            let names: Vec<&str> = self.tools.keys().map(String::as_str).collect();
            ToolError::validation(format!("unknown tool {:?}; available tools: {}", self.name, names.join(", ")))
        })
    }
}

/// What comes back out through the layers.
pub(crate) struct Reply {
    /// The outcome so far; [`stopwatch::Stopwatch`] sets its duration.
    pub outcome: ToolOutcome,
    /// Whether an error in `outcome` is the tool's own text (untrusted: it
    /// may carry host paths, traces or secrets) rather than a layer's.
    pub from_tool: bool,
}

impl Reply {
    /// A layer's own verdict: the call goes no further.
    pub fn refused(error: ToolError) -> Self {
        Self { outcome: ToolOutcome { result: Err(error), duration: Duration::ZERO, artifact: None }, from_tool: false }
    }
}

/// One step of the pipeline: work before and after `next`, or a verdict
/// instead of calling it.
#[async_trait::async_trait]
pub(crate) trait Layer: Send + Sync {
    /// Handles `call`, passing it on with `next.run(call)` unless it stops here.
    async fn handle<'a>(&self, call: Call<'a>, next: Next<'a>) -> Reply;
}

/// The layers after the current one, then the tool itself.
#[derive(Clone, Copy)]
pub(crate) struct Next<'a> {
    rest: &'a [&'a dyn Layer],
}

impl<'a> Next<'a> {
    /// `layers` in order, outermost first.
    pub fn new(layers: &'a [&'a dyn Layer]) -> Self {
        Self { rest: layers }
    }

    /// Runs `call` through the remaining layers and the tool.
    ///
    /// Every layer's future holds this one while the tool runs, so the
    /// tool's end is boxed: inline, its state would be in each layer's
    /// future, and a planner turn keeps up to `[planner] max_in_flight`
    /// `task` calls waiting, each in its pipeline (docs/PERFORMANCE.md, "Scale").
    pub async fn run(self, call: Call<'a>) -> Reply {
        match self.rest.split_first() {
            Some((layer, rest)) => layer.handle(call, Next { rest }).await,
            None => Box::pin(run::isolated(call)).await,
        }
    }
}

/// The tool set's settings the layers read.
pub(crate) struct Policy<'s> {
    /// Where call records and approval decisions go, once the bus is up.
    pub auditor: Option<&'s crate::audit::Auditor>,
    /// Where oversized results go, if anywhere.
    pub eviction: Option<&'s super::Eviction>,
    /// Tools whose calls wait for a person first.
    pub gated: &'s BTreeSet<String>,
    /// How long a tool may run, people's time excluded.
    pub timeout: Duration,
}

/// Runs `call` through every layer in the order of the module docs.
pub(crate) async fn invoke(policy: &Policy<'_>, call: Call<'_>) -> ToolOutcome {
    let audit = audit::Audit(policy.auditor);
    let evict = evict::Evict(policy.eviction);
    let approve = approve::Approve { gated: policy.gated, auditor: policy.auditor };
    let timeout = timeout::Timeout(policy.timeout);
    let layers: [&dyn Layer; 7] =
        [&audit, &stopwatch::Stopwatch, &evict, &validate::Validate, &approve, &sanitize::Sanitize, &timeout];
    Next::new(&layers).run(call).await.outcome
}
