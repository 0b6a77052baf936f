//! Structured answers (`[subagents.<type>] output_schema`, docs/CONFIG.md;
//! docs/TOOLS.md, "Structured answers"): a run whose agent has an output
//! schema ends only with an answer that is JSON matching it. The model's
//! final text is parsed (a Markdown code fence around it is tolerated, as
//! models add one), validated, and returned as compact JSON, which the
//! planner then reads as a value rather than text. An answer that does not
//! match gets one repair turn: the model is told what is wrong and answers
//! again; a second miss fails the run with a `validation` error. Whether the
//! repair turn was used is read from the conversation, so a resumed run does
//! not get a second one.

use serde_json::Value;

use crate::model::ChatMessage;
use crate::tool::schema_problems;

/// How the repair turn's message starts.
pub const REPAIR_HEADER: &str = "[your answer does not match the required output schema]";

/// A compiled output schema.
pub struct OutputSchema {
    schema: Value,
    validator: jsonschema::Validator,
}

impl std::fmt::Debug for OutputSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutputSchema").field("schema", &self.schema).finish_non_exhaustive()
    }
}

/// What to do with a final answer.
#[derive(Debug, PartialEq)]
pub enum Checked {
    /// It matches: the value.
    Valid(Value),
    /// It does not, and the repair turn is still unused: send this message.
    Repair(String),
    /// It does not, after the repair turn: why.
    Invalid(String),
}

impl OutputSchema {
    /// Compiles `schema`; the error says why it is no JSON Schema.
    pub fn new(schema: Value) -> Result<Self, String> {
        let validator = jsonschema::validator_for(&schema).map_err(|e| e.to_string())?;
        Ok(Self { schema, validator })
    }

    /// The schema as configured (what a provider's structured-output option takes).
    pub fn schema(&self) -> &Value {
        &self.schema
    }

    /// Checks `answer`, the last model turn of `messages`.
    pub fn check(&self, answer: &str, messages: &[ChatMessage]) -> Checked {
        let problems = match parse(answer) {
            Ok(value) => match schema_problems(&self.validator, &value) {
                p if p.is_empty() => return Checked::Valid(value),
                p => p.join("; "),
            },
            Err(e) => format!("not JSON: {e}"),
        };
        let repaired =
            messages.iter().any(|m| matches!(m, ChatMessage::User { content } if content.starts_with(REPAIR_HEADER)));
        if repaired {
            return Checked::Invalid(format!(
                "the answer does not match the output schema after one repair turn: {problems}"
            ));
        }
        Checked::Repair(format!(
            "{REPAIR_HEADER}\nProblems: {problems}\nAnswer again with only a JSON value matching this schema, no other text:\n{}",
            self.schema
        ))
    }
}

/// The JSON value of an answer, with a surrounding code fence removed.
fn parse(answer: &str) -> Result<Value, serde_json::Error> {
    let text = answer.trim();
    let unfenced = text
        .strip_prefix("```")
        .and_then(|t| t.strip_suffix("```"))
        .map(|t| t.trim_start_matches(|c: char| c.is_ascii_alphanumeric()).trim())
        .unwrap_or(text);
    serde_json::from_str(unfenced)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> OutputSchema {
        OutputSchema::new(json!({
            "type": "object",
            "properties": {"region": {"type": "string"}, "margin": {"type": "number"}},
            "required": ["region", "margin"]
        }))
        .unwrap()
    }

    #[test]
    fn a_valid_answer_passes_fenced_or_not() {
        let s = schema();
        let want = Checked::Valid(json!({"region": "north", "margin": 0.375}));
        assert_eq!(s.check(r#"{"region": "north", "margin": 0.375}"#, &[]), want);
        assert_eq!(s.check("```json\n{\"region\": \"north\", \"margin\": 0.375}\n```", &[]), want);
    }

    #[test]
    fn an_invalid_answer_gets_one_repair_turn_then_fails() {
        let s = schema();
        let Checked::Repair(prompt) = s.check(r#"{"region": "north"}"#, &[]) else { panic!("a repair turn") };
        assert!(prompt.starts_with(REPAIR_HEADER) && prompt.contains("margin"), "{prompt}");
        let after = [ChatMessage::User { content: prompt }];
        let Checked::Invalid(e) = s.check("the margin is 0.375", &after) else { panic!("invalid") };
        assert!(e.contains("after one repair turn: not JSON"), "{e}");
    }

    #[test]
    fn a_schema_that_is_no_schema_is_refused() {
        assert!(OutputSchema::new(json!({"type": "no-such-type"})).is_err());
    }
}
