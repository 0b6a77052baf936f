//! MCP elicitation (`elicitation/create`) answered by a person through
//! Flotilla approvals (docs/APPROVALS.md, "Elicitation").
//!
//! A server asks for input in the middle of a tool call; a worker has no
//! person at hand, so the request becomes an approval request and the answer
//! (content, decline or cancel) goes back to the server. SEP-1034 lets a
//! schema give defaults; [`apply_defaults`] fills the fields a person left
//! out so the server receives them, as the spec asks of clients.

use serde_json::Value;

/// Content with SEP-1034 defaults applied: every top-level property of
/// `schema` (`{"type":"object","properties":{..}}`) that has a `default`
/// and is missing from `content` is added with that default. Fields present
/// in `content` are kept as given; content that is not an object is returned
/// unchanged (the schema validation that follows reports it).
pub fn apply_defaults(schema: &Value, content: &Value) -> Value {
    let (Some(properties), Some(given)) = (schema.get("properties").and_then(Value::as_object), content.as_object())
    else {
        return content.clone();
    };
    let mut filled = given.clone();
    for (name, property) in properties {
        if let Some(default) = property.get("default") {
            filled.entry(name.clone()).or_insert_with(|| default.clone());
        }
    }
    Value::Object(filled)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "approve": {"type": "boolean"},
                "note": {"type": "string", "default": "none"},
                "count": {"type": "integer", "default": 3},
                "level": {"type": "string", "enum": ["low", "high"], "default": "low"}
            },
            "required": ["approve"]
        })
    }

    #[test]
    fn missing_fields_get_their_defaults() {
        let filled = apply_defaults(&schema(), &json!({"approve": true}));
        assert_eq!(filled, json!({"approve": true, "note": "none", "count": 3, "level": "low"}));
    }

    #[test]
    fn given_fields_are_kept_even_when_they_differ_from_the_default() {
        let filled =
            apply_defaults(&schema(), &json!({"approve": false, "note": "later", "count": 0, "level": "high"}));
        assert_eq!(filled, json!({"approve": false, "note": "later", "count": 0, "level": "high"}));
    }

    #[test]
    fn fields_without_default_stay_missing() {
        let filled = apply_defaults(&schema(), &json!({}));
        assert_eq!(filled, json!({"note": "none", "count": 3, "level": "low"}));
    }

    #[test]
    fn non_object_content_or_schema_is_returned_unchanged() {
        assert_eq!(apply_defaults(&schema(), &json!("yes")), json!("yes"));
        assert_eq!(apply_defaults(&json!({"type": "object"}), &json!({"a": 1})), json!({"a": 1}));
    }
}
