//! The description template of a map: minijinja over `item` (and `index`),
//! compiled once and rendered per item. Undefined values are strict, so an
//! item missing a field the template names is an error for that item (with
//! its line) instead of a task whose description silently lacks the value.

use minijinja::{Environment, UndefinedBehavior, context};
use serde_json::Value;

/// The largest description one item may render to: a task description
/// travels in one task message, and a description this long is almost
/// certainly a template mistake (a loop over the wrong value).
pub const MAX_DESCRIPTION_BYTES: usize = 64 * 1024;

const NAME: &str = "description";

/// A compiled description template.
pub struct DescriptionTemplate {
    env: Environment<'static>,
}

impl DescriptionTemplate {
    /// Compiles `source`, or says why it does not compile.
    pub fn compile(source: &str) -> Result<Self, String> {
        let mut env = Environment::new();
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        // Plain text, never HTML-escaped (the default keys off the name's extension).
        env.set_auto_escape_callback(|_| minijinja::AutoEscape::None);
        env.add_template_owned(NAME, source.to_string()).map_err(|e| format!("the description template: {e:#}"))?;
        Ok(Self { env })
    }

    /// The description of the item at `index`; an error names what was wrong
    /// (an undefined field, a failed filter) or a result too long or empty.
    pub fn render(&self, item: &Value, index: usize) -> Result<String, String> {
        let template = self.env.get_template(NAME).map_err(|e| e.to_string())?;
        let item = minijinja::Value::from(minijinja::value::Serde(item));
        let text = template.render(context! { item, index }).map_err(|e| format!("{e:#}"))?;
        if text.len() > MAX_DESCRIPTION_BYTES {
            return Err(format!(
                "renders to {} bytes; a description holds at most {MAX_DESCRIPTION_BYTES}",
                text.len()
            ));
        }
        if text.trim().is_empty() {
            return Err("renders to an empty description".into());
        }
        Ok(text)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const MARGIN: &str = "Margin of {{ item.region }}: revenue {{ item.revenue }}, cost {{ item.cost }}";

    #[test]
    fn a_description_is_rendered_from_the_item() {
        let t = DescriptionTemplate::compile(MARGIN).unwrap();
        let item = json!({"region": "north", "revenue": 120, "cost": 75.5});
        assert_eq!(t.render(&item, 0).unwrap(), "Margin of north: revenue 120, cost 75.5");
        let t = DescriptionTemplate::compile("#{{ index }} {{ item }} <b>").unwrap();
        assert_eq!(t.render(&json!("a&b"), 7).unwrap(), "#7 a&b <b>", "plain text, not HTML-escaped");
    }

    #[test]
    fn a_missing_field_is_an_error_naming_it() {
        let t = DescriptionTemplate::compile(MARGIN).unwrap();
        let e = t.render(&json!({"region": "north", "revenue": 120}), 3).unwrap_err();
        assert!(e.contains("undefined"), "{e}");
        assert!(t.render(&json!(5), 0).is_err(), "a number has no fields");
    }

    #[test]
    fn a_template_that_does_not_compile_is_refused() {
        let e = DescriptionTemplate::compile("Margin of {{ item.region ").err().unwrap();
        assert!(e.starts_with("the description template"), "{e}");
    }

    #[test]
    fn empty_and_oversized_descriptions_are_refused() {
        let t = DescriptionTemplate::compile("{{ item }}").unwrap();
        assert!(t.render(&json!(""), 0).unwrap_err().contains("empty"));
        let long = "x".repeat(MAX_DESCRIPTION_BYTES + 1);
        assert!(t.render(&json!(long), 0).unwrap_err().contains("at most"));
    }
}
