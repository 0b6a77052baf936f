//! MCP servers and `tools` entries, checked the way a worker builds its tool
//! sets (`discover_mcp` and `build` of workers/src/tools/mod.rs): the
//! same [`McpHub`] discovers the servers (the hub `flotilla mcp tools` uses,
//! orchestrator/cli/src/commands/mcp.rs), and each entry resolves through
//! [`McpHub::tools_for`]; over the names found, the worker's own checks of a
//! type ([`flotilla_worker::runtime::validate`]). A stdio command that does
//! not exist is named with its fix before anything is started.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

use flotilla_config::{McpTransport, Settings, SubagentConfig, ToolRef};
use flotilla_mcp::app_context::{ContextError, TaskContextSpec};
use flotilla_mcp::{McpError, McpHub};

use super::Check;

/// Checks the servers `names` (start + tools/list) and every subagent type's
/// `tools` entries against what they list.
pub async fn check(settings: &Settings, names: &BTreeSet<String>) -> Vec<Check> {
    let hub = McpHub::new(&settings.mcp_servers);
    let mut checks = Vec::new();
    let mut missing = BTreeSet::new();
    for name in names {
        if let Some(problem) = settings.mcp_servers.get(name).and_then(|s| missing_command(name, &s.transport)) {
            checks.push(problem);
            missing.insert(name.clone());
        }
    }
    let tried: BTreeSet<String> = names.difference(&missing).cloned().collect();
    let mut down = missing;
    for (name, result) in hub.discover(&tried).await {
        match result {
            Ok(_) => checks.extend(listed(settings, &hub, &name)),
            Err(e) => {
                checks.push(unavailable(&name, &e));
                down.insert(name);
            }
        }
    }
    for (ty, config) in &settings.subagents {
        checks.extend(type_tools(ty.as_str(), config, &hub, &down));
        checks.extend(type_context(ty.as_str(), config, &hub));
    }
    hub.shutdown().await;
    checks
}

/// A stdio server whose command is not there: the problem, with the fix.
fn missing_command(name: &str, transport: &McpTransport) -> Option<Check> {
    let McpTransport::Stdio { command, .. } = transport else { return None };
    let key = format!("mcp_servers.{name}.command");
    if command.components().count() > 1 {
        let path = normalize(command);
        if path.is_file() {
            return None;
        }
        let in_target = |profile: &str| path.parent().is_some_and(|p| p.ends_with(format!("target/{profile}")));
        let fix = if in_target("debug") {
            "run `cargo build --bins` (a `--release` build writes target/release, not target/debug)".to_string()
        } else if in_target("release") {
            "run `cargo build --release --bins`".to_string()
        } else {
            format!("install it there, or fix `{key}` (a relative path resolves against the config file's directory)")
        };
        return Some(Check::problem(key, format!("mcp server {name}: command {} not found", path.display()), fix));
    }
    let on_path =
        std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(command).is_file()));
    (!on_path).then(|| {
        Check::problem(
            key.clone(),
            format!("mcp server {name}: command `{}` not found on PATH", command.display()),
            format!("install it, or set `{key}` to its full path"),
        )
    })
}

/// `a/b/../c` -> `a/c`, for messages an operator can read.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir if out.file_name().is_some() => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// A server that started: its tools as the server names them.
fn listed(settings: &Settings, hub: &McpHub, name: &str) -> Vec<Check> {
    let tools: Vec<String> =
        hub.server(name).ok().and_then(|c| c.tools()).unwrap_or_default().iter().map(|t| t.name.to_string()).collect();
    let mut checks = vec![Check::ok(
        format!("mcp_servers.{name}"),
        format!("started; lists {} tools: {}", tools.len(), tools.join(", ")),
    )];
    let read_only = settings.mcp_servers.get(name).map(|s| &s.read_only_tools);
    if let Some(listed) = read_only.filter(|l| !l.is_empty()) {
        let key = format!("mcp_servers.{name}.read_only_tools");
        let unknown: Vec<&str> = listed.iter().filter(|t| !tools.contains(t)).map(String::as_str).collect();
        checks.push(if unknown.is_empty() {
            let names: Vec<&str> = listed.iter().map(String::as_str).collect();
            Check::ok(key, format!("journaled without waiting for the ack: {}", names.join(", ")))
        } else {
            Check::problem(
                key,
                format!(
                    "names {}, which the server does not list (it offers: {})",
                    unknown.join(", "),
                    tools.join(", ")
                ),
                "use the names `flotilla mcp tools` prints before \"(model sees: ...)\", or drop the entry",
            )
        });
    }
    checks
}

/// A server that did not start or list its tools.
fn unavailable(name: &str, e: &McpError) -> Check {
    let key = format!("mcp_servers.{name}");
    let fix = match e {
        McpError::Config { .. } => format!("fix `{key}` as the message says (docs/MCP.md)"),
        McpError::Timeout { .. } => {
            format!("raise `{key}.init_timeout`, or see why it is slow with `RUST_LOG=info flotilla mcp tools {name}`")
        }
        _ => format!("see the server's stderr with `RUST_LOG=info flotilla mcp tools {name}`"),
    };
    Check::problem(key, e.to_string(), fix)
}

/// The tools one subagent type would get: one problem per entry that does
/// not resolve, or one `ok` listing the names the model would see.
fn type_tools(ty: &str, config: &SubagentConfig, hub: &McpHub, down: &BTreeSet<String>) -> Vec<Check> {
    let key = format!("subagents.{ty}.tools");
    let mut problems = Vec::new();
    let mut names: BTreeMap<String, String> = BTreeMap::new();
    let mut add = |tool: String, entry: String, problems: &mut Vec<Check>| {
        if let Some(first) = names.insert(tool.clone(), entry.clone()) {
            problems.push(Check::problem(
                key.clone(),
                format!("`{entry}` and `{first}` both give the model a tool named `{tool}`"),
                "drop one entry, or set `prefix = true` on the MCP server",
            ));
        }
    };
    for entry in &config.tools {
        match entry {
            ToolRef::Builtin(n) | ToolRef::Native(n) => add(n.clone(), entry.to_string(), &mut problems),
            ToolRef::Execute => {}
            ToolRef::Mcp { server, .. } if down.contains(server) => problems.push(Check::problem(
                key.clone(),
                format!("`{entry}` cannot resolve: MCP server {server} did not start"),
                format!("fix `mcp_servers.{server}` first (above)"),
            )),
            ToolRef::Mcp { server, tool } => match hub.tools_for(server, tool.as_deref()) {
                Ok(tools) => tools.iter().for_each(|t| add(t.spec().name, entry.to_string(), &mut problems)),
                Err(e) => problems.push(unresolved(&key, entry, server, &e)),
            },
        }
    }
    if config.sandbox.is_some() {
        add(flotilla_config::tool_ref::EXECUTE.into(), "[sandbox]".into(), &mut problems);
    }
    if !problems.is_empty() {
        return problems;
    }
    let names: Vec<String> = names.into_keys().collect();
    // The checks the worker makes as it builds the type (stop_at_tools,
    // output_schema, ...), over the tool names found here.
    if let Err(e) = flotilla_worker::runtime::validate(ty, config, &names) {
        return vec![Check::problem(e.key, e.message, "fix the key (docs/CONFIG.md lists every key)")];
    }
    vec![Check::ok(key, format!("{} tools: {}", names.len(), names.join(", ")))]
}

/// `mcp_resources` / `mcp_prompt`, checked as a worker checks them at start
/// (workers/src/mcp_context.rs): the servers exist, the prompt's argument
/// templates render. `None` when the type uses neither, or they pass.
fn type_context(ty: &str, config: &SubagentConfig, hub: &McpHub) -> Option<Check> {
    let spec =
        TaskContextSpec::from_config(ty, &config.system_prompt, &config.mcp_resources, config.mcp_prompt.as_ref(), hub);
    match spec {
        Ok(_) => None,
        Err(ContextError::Config { key, message, .. }) => Some(Check::problem(
            format!("subagents.{ty}.{key}"),
            message,
            "name a configured [mcp_servers.<name>] (docs/MCP.md, app-controlled context)",
        )),
        Err(e) => Some(Check::problem(format!("subagents.{ty}"), e.to_string(), "see docs/MCP.md")),
    }
}

/// An MCP entry naming a server or tool that does not exist.
fn unresolved(key: &str, entry: &ToolRef, server: &str, e: &McpError) -> Check {
    let fix = match e {
        McpError::UnknownTool { .. } => {
            format!("use a tool the server lists (`flotilla mcp tools {server}`), or `mcp:{server}` for all of them")
        }
        McpError::UnknownServer { .. } => format!("add [mcp_servers.{server}], or fix the entry"),
        _ => format!("see `flotilla mcp tools {server}`"),
    };
    Check::problem(key, format!("`{entry}`: {e}"), fix)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_drops_parent_and_current_components() {
        assert_eq!(normalize(Path::new("/a/b/../../target/./debug/x")), PathBuf::from("/target/debug/x"));
        assert_eq!(normalize(Path::new("/a/b")), PathBuf::from("/a/b"));
    }

    #[test]
    fn a_missing_built_binary_says_cargo_build() {
        let transport = McpTransport::Stdio {
            command: PathBuf::from("/nowhere/deploy/local/../../target/debug/finance-tools"),
            args: vec![],
            env: Default::default(),
            env_passthrough: vec![],
            cwd: None,
        };
        let c = missing_command("finance", &transport).expect("a problem");
        assert_eq!(c.key, "mcp_servers.finance.command");
        assert_eq!(c.message, "mcp server finance: command /nowhere/target/debug/finance-tools not found");
        assert!(c.fix.unwrap().starts_with("run `cargo build --bins`"));
    }
}
