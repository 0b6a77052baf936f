//! App-controlled MCP context (docs/MCP.md): resources and prompts are
//! chosen by the host's config, never by the model or a task message. A
//! subagent type may
//!
//! - name resources (`mcp_resources = ["<server>/<uri>"]`) whose text is
//!   appended to its system prompt before the task starts, and
//! - take its system prompt from a server prompt (`mcp_prompt = { server,
//!   name, arguments }`), whose argument values are minijinja templates over
//!   `task` (the task description) and `subagent_type`.
//!
//! Appending to the system prompt is the simplest sound design: the model
//! sees the text on its first call, nothing depends on the job files, and the
//! total is capped ([`MAX_CONTEXT_BYTES`]) so a large resource fails the task
//! clearly instead of silently eating the model's context window. Binary
//! resources and non-text prompt content are refused for the same reason.
//! Every request is bounded by the server's `call_timeout`; any failure fails
//! the task with an error naming the server and the resource or prompt.

use std::collections::BTreeMap;

use rmcp::model::{ContentBlock, GetPromptRequestParams, JsonObject, ReadResourceRequestParams, ResourceContents};

use super::error::McpError;
use super::hub::McpHub;
use flotilla_protocol::ErrorKind;

/// Most bytes of system prompt the resources and prompt may produce together.
pub const MAX_CONTEXT_BYTES: usize = 256 * 1024;

pub use flotilla_config::mcp::McpPromptConfig;

/// One `mcp_resources` entry: `<server>/<uri>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceRef {
    /// Server name.
    pub server: String,
    /// The resource URI on that server.
    pub uri: String,
}

impl ResourceRef {
    /// Parses `<server>/<uri>` (split at the first `/`).
    pub fn parse(entry: &str) -> Option<Self> {
        let (server, uri) = entry.split_once('/')?;
        (!server.is_empty() && !uri.is_empty()).then(|| Self { server: server.into(), uri: uri.into() })
    }
}

/// Why the MCP context of a subagent type is unusable.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ContextError {
    /// The config is wrong (checked at worker start).
    #[error("invalid config key `subagents.{ty}.{key}`: {message}")]
    Config {
        /// The subagent type.
        ty: String,
        /// `mcp_resources` or `mcp_prompt`.
        key: &'static str,
        /// What to fix.
        message: String,
    },
    /// Reading a resource failed.
    #[error("cannot load MCP resource {uri:?} from server `{server}`: {source}")]
    Resource {
        /// Server.
        server: String,
        /// URI.
        uri: String,
        /// Why.
        source: McpError,
    },
    /// Getting the prompt failed.
    #[error("cannot get MCP prompt `{name}` from server `{server}`: {source}")]
    Prompt {
        /// Server.
        server: String,
        /// Prompt name.
        name: String,
        /// Why.
        source: McpError,
    },
    /// The server answered with something that cannot go into a system prompt.
    #[error("MCP {what} from server `{server}` is unusable as context: {message}")]
    Unusable {
        /// Server.
        server: String,
        /// `resource "<uri>"` or `prompt "<name>"`.
        what: String,
        /// Why.
        message: String,
    },
    /// The loaded context is too large.
    #[error("MCP context of this task is {size} bytes, over the {max}-byte limit")]
    TooLarge {
        /// Bytes loaded.
        size: usize,
        /// The limit.
        max: usize,
    },
}

impl ContextError {
    /// The task error kind: a server's own classification when it failed,
    /// `validation` for content that cannot be used.
    pub fn kind(&self) -> ErrorKind {
        match self {
            ContextError::Resource { source, .. } | ContextError::Prompt { source, .. } => source.kind(),
            ContextError::Config { .. } | ContextError::Unusable { .. } | ContextError::TooLarge { .. } => {
                ErrorKind::Validation
            }
        }
    }
}

/// The validated MCP context of one subagent type.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TaskContextSpec {
    /// Resources appended to the system prompt, in order.
    pub resources: Vec<ResourceRef>,
    /// The prompt that replaces the static system prompt.
    pub prompt: Option<McpPromptConfig>,
}

fn template_env() -> minijinja::Environment<'static> {
    let mut env = minijinja::Environment::new();
    env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
    env
}

fn render_arguments(
    prompt: &McpPromptConfig,
    task: &str,
    ty: &str,
) -> Result<BTreeMap<String, String>, (String, minijinja::Error)> {
    let env = template_env();
    let ctx = minijinja::context! { task => task, subagent_type => ty };
    prompt
        .arguments
        .iter()
        .map(|(k, t)| env.render_str(t, &ctx).map(|v| (k.clone(), v)).map_err(|e| (k.clone(), e)))
        .collect()
}

impl TaskContextSpec {
    /// Validates a type's `mcp_resources` and `mcp_prompt` against the
    /// configured servers. `None` when the type uses neither.
    pub fn from_config(
        ty: &str,
        system_prompt: &str,
        resources: &[String],
        prompt: Option<&McpPromptConfig>,
        hub: &McpHub,
    ) -> Result<Option<Self>, ContextError> {
        if resources.is_empty() && prompt.is_none() {
            return Ok(None);
        }
        let config = |key, message: String| ContextError::Config { ty: ty.into(), key, message };
        let mut spec = TaskContextSpec::default();
        for entry in resources {
            let r = ResourceRef::parse(entry).ok_or_else(|| {
                config(
                    "mcp_resources",
                    format!("{entry:?} is not \"<server>/<uri>\" (e.g. \"finance/finance://rules\")"),
                )
            })?;
            hub.server(&r.server).map_err(|e| config("mcp_resources", e.to_string()))?;
            spec.resources.push(r);
        }
        if let Some(p) = prompt {
            if !system_prompt.trim().is_empty() {
                return Err(config(
                    "mcp_prompt",
                    "set either system_prompt or mcp_prompt, not both (the prompt becomes the system prompt)".into(),
                ));
            }
            hub.server(&p.server).map_err(|e| config("mcp_prompt", e.to_string()))?;
            render_arguments(p, "example task", ty).map_err(|(k, e)| {
                config("mcp_prompt", format!("argument `{k}`: {e} (templates see `task` and `subagent_type`)"))
            })?;
            spec.prompt = Some(p.clone());
        }
        Ok(Some(spec))
    }

    /// The system prompt of one task: the MCP prompt's text (or
    /// `system_prompt`), then every resource's text.
    pub async fn system_prompt(
        &self,
        hub: &McpHub,
        system_prompt: &str,
        task: &str,
        ty: &str,
    ) -> Result<String, ContextError> {
        let mut out = match &self.prompt {
            Some(p) => get_prompt(hub, p, task, ty).await?,
            None => system_prompt.to_string(),
        };
        if !self.resources.is_empty() {
            out.push_str("\n\n# Reference material (loaded from MCP resources before this task)\n");
        }
        for r in &self.resources {
            let text = read_resource(hub, r).await?;
            out.push_str(&format!("\n## {} ({})\n{}\n", r.uri, r.server, text.trim_end()));
            if out.len() > MAX_CONTEXT_BYTES {
                return Err(ContextError::TooLarge { size: out.len(), max: MAX_CONTEXT_BYTES });
            }
        }
        Ok(out)
    }
}

async fn read_resource(hub: &McpHub, r: &ResourceRef) -> Result<String, ContextError> {
    let failed = |source| ContextError::Resource { server: r.server.clone(), uri: r.uri.clone(), source };
    let conn = hub.server(&r.server).map_err(failed)?;
    let what = format!("resources/read {}", r.uri);
    let result = conn
        .request(&what, |peer| {
            let params = ReadResourceRequestParams::new(r.uri.clone());
            async move { peer.read_resource(params).await }
        })
        .await
        .map_err(failed)?;
    let unusable = |message: String| ContextError::Unusable {
        server: r.server.clone(),
        what: format!("resource {:?}", r.uri),
        message,
    };
    if result.contents.is_empty() {
        return Err(unusable("it has no contents".into()));
    }
    let mut parts = Vec::new();
    for c in result.contents {
        match c {
            ResourceContents::TextResourceContents { text, .. } => parts.push(text),
            ResourceContents::BlobResourceContents { mime_type, .. } => {
                return Err(unusable(format!(
                    "binary contents ({}) cannot be added to a system prompt; give the subagent a tool instead",
                    mime_type.as_deref().unwrap_or("no MIME type")
                )));
            }
            _ => return Err(unusable("contents of a kind this client does not know".into())),
        }
    }
    Ok(parts.join("\n"))
}

async fn get_prompt(hub: &McpHub, p: &McpPromptConfig, task: &str, ty: &str) -> Result<String, ContextError> {
    let failed = |source| ContextError::Prompt { server: p.server.clone(), name: p.name.clone(), source };
    let unusable = |message: String| ContextError::Unusable {
        server: p.server.clone(),
        what: format!("prompt {:?}", p.name),
        message,
    };
    let args = render_arguments(p, task, ty).map_err(|(k, e)| unusable(format!("argument `{k}`: {e}")))?;
    let args: JsonObject = args.into_iter().map(|(k, v)| (k, serde_json::Value::String(v))).collect();
    let conn = hub.server(&p.server).map_err(failed)?;
    let result = conn
        .request(&format!("prompts/get {}", p.name), |peer| {
            let params = GetPromptRequestParams::new(p.name.clone()).with_arguments(args.clone());
            async move { peer.get_prompt(params).await }
        })
        .await
        .map_err(failed)?;
    let mut parts = Vec::new();
    for m in result.messages {
        match m.content {
            ContentBlock::Text(t) => parts.push(t.text),
            other => {
                let kind = serde_json::to_value(&other).ok().and_then(|v| v["type"].as_str().map(String::from));
                return Err(unusable(format!(
                    "it holds {} content; only text can become a system prompt",
                    kind.as_deref().unwrap_or("non-text")
                )));
            }
        }
    }
    if parts.is_empty() {
        return Err(unusable("it has no messages".into()));
    }
    Ok(parts.join("\n\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_entries_split_at_the_first_slash() {
        assert_eq!(
            ResourceRef::parse("finance/finance://rules/gross-margin"),
            Some(ResourceRef { server: "finance".into(), uri: "finance://rules/gross-margin".into() })
        );
        assert_eq!(ResourceRef::parse("finance"), None);
        assert_eq!(ResourceRef::parse("/x"), None);
        assert_eq!(ResourceRef::parse("finance/"), None);
    }

    #[test]
    fn config_is_checked_against_servers_and_templates() {
        let hub = McpHub::new(&BTreeMap::new());
        let e = TaskContextSpec::from_config("t", "", &["finance/x://y".into()], None, &hub).unwrap_err();
        assert!(e.to_string().contains("subagents.t.mcp_resources") && e.to_string().contains("finance"), "{e}");
        let e = TaskContextSpec::from_config("t", "", &["nope".into()], None, &hub).unwrap_err();
        assert!(e.to_string().contains("\"<server>/<uri>\""), "{e}");
        assert_eq!(TaskContextSpec::from_config("t", "sys", &[], None, &hub).unwrap(), None);
        let p = McpPromptConfig {
            server: "finance".into(),
            name: "analyst".into(),
            arguments: [("task".to_string(), "{{ taks }}".to_string())].into(),
        };
        let e = TaskContextSpec::from_config("t", "static", &[], Some(&p), &hub).unwrap_err();
        assert!(e.to_string().contains("not both"), "{e}");
        let rendered = render_arguments(&p, "x", "t");
        assert!(rendered.is_err(), "an undefined variable is refused");
        let ok = McpPromptConfig { arguments: [("task".into(), "Do: {{ task }}".into())].into(), ..p };
        assert_eq!(render_arguments(&ok, "sum", "t").unwrap()["task"], "Do: sum");
    }
}
