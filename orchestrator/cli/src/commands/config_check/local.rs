//! The checks that need no network: the sections each process requires, the
//! models the planner and subagent types use, and each type's sandbox.

use std::collections::BTreeSet;

use flotilla_config::{ModelSettings, Settings};

use super::Check;

/// `[planner]` (the orchestrator refuses to start without it) and at least
/// one `[subagents.<type>]` (a worker has nothing to serve without one).
pub fn sections(settings: &Settings) -> Vec<Check> {
    let planner = match &settings.planner {
        Some(p) => Check::ok("planner", format!("model {:?}, {} tools", p.model, p.tools.len())),
        None => Check::problem(
            "planner",
            "missing: `flotilla orchestrator` refuses to start without a [planner] section",
            "add [planner] with at least `model` (docs/CONFIG.md)",
        ),
    };
    let subagents = if settings.subagents.is_empty() {
        Check::problem(
            "subagents",
            "no [subagents.<type>] section: a worker would have nothing to serve",
            "add [subagents.<type>] with description, model and tools (docs/CONFIG.md)",
        )
    } else {
        let types: Vec<&str> = settings.subagents.keys().map(|t| t.as_str()).collect();
        Check::ok("subagents", format!("{} types: {}", types.len(), types.join(", ")))
    };
    vec![planner, subagents]
}

/// The models the planner or a subagent type uses.
pub fn used_models(settings: &Settings) -> BTreeSet<String> {
    let planner = settings.planner.iter().map(|p| p.model.clone());
    planner.chain(settings.subagents.values().map(|s| s.model.clone())).filter(|m| !m.is_empty()).collect()
}

/// Each used model built as the orchestrator and workers build it
/// (`flotilla_models::build`, the factory of every provider): API-key variable set and non-empty,
/// base URL absolute, script readable.
pub fn models(settings: &Settings) -> Vec<Check> {
    let mut checks = Vec::new();
    for name in used_models(settings) {
        let Some(model) = settings.models.get(&name) else { continue };
        let key = format!("models.{name}");
        checks.push(match flotilla_models::build(&name, model) {
            Ok(_) => Check::ok(key, describe(model)),
            Err(e) => {
                Check::problem(key, e.to_string(), "set what the message names (docs/CONFIG.md, [models.<name>])")
            }
        });
    }
    for name in settings.models.keys().filter(|n| !used_models(settings).contains(*n)) {
        checks.push(Check::ok(format!("models.{name}"), "not used by [planner] or any subagent type: not checked"));
    }
    checks
}

/// What a model that built is.
fn describe(model: &ModelSettings) -> String {
    let key = |var: &Option<String>| var.as_ref().map_or("no API key".into(), |v| format!("API key in {v} is set"));
    match model {
        ModelSettings::OpenAi { base_url, model, api_key_env, .. } => {
            format!("openai {model} at {base_url}; {}", key(api_key_env))
        }
        ModelSettings::Anthropic { base_url, model, api_key_env, .. } => {
            format!("anthropic {model} at {base_url}; {}", key(api_key_env))
        }
        ModelSettings::Scripted { script } => format!("scripted {} loads", script.display()),
    }
}

/// Each type with a `[subagents.<type>.sandbox]` (it gets `execute`) starts
/// its sandbox as its worker would ([`flotilla_sandbox::probe`]).
pub async fn sandboxes(settings: &Settings) -> Vec<Check> {
    let mut checks = Vec::new();
    for (ty, config) in &settings.subagents {
        let Some(sb) = config.sandbox.clone() else { continue };
        let key = format!("subagents.{ty}.sandbox");
        let name = ty.to_string();
        let probe = tokio::task::spawn_blocking(move || flotilla_sandbox::probe(&name, &sb)).await;
        checks.push(match probe {
            Ok(Ok(())) => Check::ok(key, "bubblewrap runs a command (execute works here)"),
            Ok(Err(e)) => Check::problem(key, e.message, e.fix),
            Err(e) => Check::problem(key, format!("the probe panicked: {e}"), "report this bug"),
        });
    }
    checks
}
