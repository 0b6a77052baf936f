//! A tool never sees arguments that fail its input schema, and neither does a
//! reviewer: an unknown tool or a malformed call stops here, before the
//! approval gate, with an error that tells the model what to fix.

use serde_json::Value;

use super::{Call, Layer, Next, Reply};
use crate::tool::ToolError;

/// Refuses unknown tools and arguments that break the tool's schema.
pub(crate) struct Validate;

#[async_trait::async_trait]
impl Layer for Validate {
    async fn handle<'a>(&self, call: Call<'a>, next: Next<'a>) -> Reply {
        if let Err(e) = call.entry().and_then(|entry| validate(&entry.validator, &call.args)) {
            return Reply::refused(e);
        }
        next.run(call).await
    }
}

/// The first five ways `args` breaks the schema, each with its JSON pointer.
pub fn schema_problems(validator: &jsonschema::Validator, args: &Value) -> Vec<String> {
    validator
        .iter_errors(args)
        .take(5)
        .map(|e| {
            let at = e.instance_path().to_string();
            if at.is_empty() { e.to_string() } else { format!("{at}: {e}") }
        })
        .collect()
}

/// `args` is an object that fits the schema, or the validation error saying how not.
pub(super) fn validate(validator: &jsonschema::Validator, args: &Value) -> Result<(), ToolError> {
    if !args.is_object() {
        return Err(ToolError::validation(format!(
            "arguments must be a JSON object, got: {}",
            truncate(&args.to_string(), 200)
        )));
    }
    let problems = schema_problems(validator, args);
    if problems.is_empty() {
        Ok(())
    } else {
        Err(ToolError::validation(format!("invalid arguments: {}", problems.join("; "))))
    }
}

/// Cuts `s` to at most `max` bytes on a char boundary, marking the cut.
fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}
