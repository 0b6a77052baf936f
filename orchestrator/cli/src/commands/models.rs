//! `flotilla models check [name]`: before a long job, one tiny tool-calling
//! request to each configured model (or the one named), the probe of
//! `flotilla_models::probe` (shared/models/src/probe.rs), so a person can fix
//! the endpoint or pick another model (docs/MODELS.md). Scripted models are
//! skipped: they call what their script says.

use clap::{Args as ClapArgs, Subcommand};
use flotilla_config::{ModelSettings, Settings};
use serde_json::json;

use super::out::{self, outln};

/// Check model endpoints.
#[derive(ClapArgs, Debug)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Send one tool-calling request to each configured model (or NAME) and
    /// say whether its tool call comes back well-formed. Scripted models are
    /// skipped. Exit 0 when every checked model passes (or none is left to
    /// check), 2 otherwise.
    Check {
        /// The name of a configured model; default: every non-scripted model.
        name: Option<String>,
    },
}

/// Runs the command.
pub async fn run(settings: &Settings, args: Args, json: bool) -> anyhow::Result<i32> {
    let Command::Check { name } = args.command;
    let names: Vec<String> = match name {
        Some(n) => {
            settings.model(&n)?;
            vec![n]
        }
        None => settings
            .models
            .iter()
            .filter(|(_, m)| !matches!(m, ModelSettings::Scripted { .. }))
            .map(|(n, _)| n.clone())
            .collect(),
    };
    if names.is_empty() {
        // Nothing can fail: a CI step over a scripted-only config (the demo's) passes.
        if json {
            out::json(&json!({ "models": [], "skipped": "every [models.*] entry is scripted" }))?;
        } else {
            outln!(
                "nothing to check: every [models.*] entry is scripted (scripted models call what their script says)"
            )?;
        }
        return Ok(0);
    }
    let mut results = Vec::new();
    for n in names {
        let checked = flotilla_models::probe::tool_calling(&n, settings.model(&n)?).await;
        if !json {
            let mark = if checked.ok { "ok     " } else { "PROBLEM" };
            outln!("{mark} {:<16} {:>6} ms  {}", checked.model, checked.latency_ms, checked.detail)?;
        }
        results.push(checked);
    }
    let passed = results.iter().all(|c| c.ok);
    if json {
        out::json(&json!({ "models": results }))?;
    }
    Ok(if passed { 0 } else { 2 })
}
