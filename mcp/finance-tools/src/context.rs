//! The app-controlled side of finance-tools (docs/MCP.md): one resource
//! with the house rules of margin reporting, and one prompt that makes a
//! finance analyst's system prompt from a task. The host (Flotilla's worker),
//! not the model, decides to load them, before a subagent starts.

use rmcp::model::{JsonObject, Prompt, PromptArgument, Resource};

/// URI of the reporting rules resource.
pub const RULES_URI: &str = "finance://rules/gross-margin";

/// Text of [`RULES_URI`].
pub const RULES_TEXT: &str = "House rules for margin reports: gross margin is (revenue - cost) / revenue, \
rounded to 4 decimals. A region with revenue <= 0 is reported as not computable, never as zero. \
Answer with one markdown table: | region | revenue | cost | margin |.";

/// Name of the analyst prompt.
pub const ANALYST_PROMPT: &str = "analyst";

/// Why a prompt cannot be rendered.
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum PromptError {
    /// No prompt of that name.
    #[error("no prompt named {0:?} (this server offers: analyst)")]
    Unknown(String),
    /// A required argument is missing or not a string.
    #[error("prompt {prompt:?} needs the string argument {argument:?}")]
    MissingArgument {
        /// The prompt.
        prompt: String,
        /// The argument.
        argument: &'static str,
    },
}

/// Every resource, for resources/list.
pub fn resources() -> Vec<Resource> {
    vec![
        Resource::new(RULES_URI, "gross-margin-rules")
            .with_description("How margins are computed and reported")
            .with_mime_type("text/plain"),
    ]
}

/// The text of the resource at `uri`, if there is one.
pub fn read(uri: &str) -> Option<&'static str> {
    (uri == RULES_URI).then_some(RULES_TEXT)
}

/// Every prompt, for prompts/list.
pub fn prompts() -> Vec<Prompt> {
    vec![Prompt::new(
        ANALYST_PROMPT,
        Some("System prompt of a finance analyst for one task"),
        Some(vec![
            PromptArgument::new("task").with_description("The task to work on").with_required(true),
            PromptArgument::new("audience").with_description("Who reads the answer (default: the planner)"),
        ]),
    )]
}

/// The text of prompt `name` with `args`.
pub fn render_prompt(name: &str, args: &JsonObject) -> Result<String, PromptError> {
    if name != ANALYST_PROMPT {
        return Err(PromptError::Unknown(name.to_string()));
    }
    let task = args
        .get("task")
        .and_then(|v| v.as_str())
        .ok_or_else(|| PromptError::MissingArgument { prompt: name.to_string(), argument: "task" })?;
    let audience = args.get("audience").and_then(|v| v.as_str()).unwrap_or("the planner");
    Ok(format!(
        "You are a finance analyst writing for {audience}. Use the finance tools for every figure; \
         never compute a margin yourself. Your assignment: {task}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn analyst_prompt_renders_its_arguments_and_refuses_missing_ones() {
        let args = json!({"task": "margins of north", "audience": "the CFO"});
        let text = render_prompt(ANALYST_PROMPT, args.as_object().unwrap()).unwrap();
        assert!(text.starts_with("You are a finance analyst writing for the CFO."), "{text}");
        assert!(text.ends_with("Your assignment: margins of north"), "{text}");
        assert_eq!(
            render_prompt(ANALYST_PROMPT, &JsonObject::new()),
            Err(PromptError::MissingArgument { prompt: "analyst".into(), argument: "task" })
        );
        assert_eq!(render_prompt("x", &JsonObject::new()), Err(PromptError::Unknown("x".into())));
    }

    #[test]
    fn only_the_rules_resource_exists() {
        assert_eq!(read(RULES_URI), Some(RULES_TEXT));
        assert_eq!(read("finance://nope"), None);
        assert_eq!(resources()[0].uri, RULES_URI);
    }
}
