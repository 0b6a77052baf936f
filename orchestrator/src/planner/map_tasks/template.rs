//! The description template of a map: minijinja over `item` (and `index`),
//! compiled once and rendered per item. Undefined values are strict, so an
//! item missing a field the template names is an error for that item (with
//! its line) instead of a task whose description silently lacks the value.
//!
//! The template is the model's (and through it, whoever wrote the job), so
//! its work is bounded before it is done, never measured after
//! (docs/TOOLS.md, "map_tasks", template limits):
//!
//! - shape: only a subset of minijinja that cannot amplify a value (no `*`,
//!   `set`, `with`, macros; shape.rs says why fuel needs it);
//! - fuel: every render gets [`ITEM_FUEL`]. minijinja charges one fuel per
//!   instruction and about one per 64 bytes of data it creates, and refuses
//!   what it can size in advance (a replaced or indented string) before
//!   allocating it; with the shape, a render's time and memory are bounded
//!   by its fuel.
//! - output: the text goes into a writer that fails past
//!   [`MAX_DESCRIPTION_BYTES`], so an oversized description is never
//!   accumulated (output is charged only after the step that wrote it).
//! - per map: the fuel of every item's render counts against [`MAP_FUEL`]
//!   (a failed render counts its whole allowance), so many cheap-looking
//!   items cannot add up to an unbounded stall (validation, mod.rs).
//! - off the runtime: renders run on tokio's blocking pool, so a map being
//!   checked never holds up the job API of other tenants; validation also
//!   stops at [`VALIDATION_DEADLINE`] and when the call is cancelled.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use minijinja::{Environment, UndefinedBehavior, context};
use serde_json::Value;

/// The largest description one item may render to, and the largest
/// template: a task description travels in one task message, and a
/// description this long is almost certainly a template mistake (a loop
/// over the wrong value).
pub const MAX_DESCRIPTION_BYTES: usize = 64 * 1024;

/// Fuel of one item's render: about this many template steps, or 64 times
/// as many bytes of data. A plain template over an item's fields takes tens.
pub const ITEM_FUEL: u64 = 100_000;

/// Fuel of every item's render of one map call together.
pub const MAP_FUEL: u64 = 20_000_000;

/// Longest the check of a map's items may take, whatever the fuel says (a
/// machine under load).
pub const VALIDATION_DEADLINE: Duration = Duration::from_secs(30);

/// Longest one item's render may take at dispatch.
pub const ITEM_DEADLINE: Duration = Duration::from_secs(10);

const NAME: &str = "description";

/// A compiled description template (cheap to clone: shared).
#[derive(Clone)]
pub struct DescriptionTemplate {
    env: Arc<Environment<'static>>,
}

/// One render's outcome and the fuel it cost.
pub struct Rendered {
    /// The description, or why the item has none.
    pub text: Result<String, String>,
    /// Fuel charged: what the render used, its whole allowance when it failed.
    pub fuel: u64,
}

/// Collects the output, refusing to grow past the cap.
struct CappedOutput {
    text: Vec<u8>,
    over: bool,
}

impl io::Write for CappedOutput {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.text.len() + buf.len() > MAX_DESCRIPTION_BYTES {
            self.over = true;
            return Err(io::Error::other("description over its size limit"));
        }
        self.text.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl DescriptionTemplate {
    /// Compiles `source`, or says why it does not compile.
    pub fn compile(source: &str) -> Result<Self, String> {
        if source.len() > MAX_DESCRIPTION_BYTES {
            return Err(format!(
                "the description template is {} bytes; it may hold at most {MAX_DESCRIPTION_BYTES}",
                source.len()
            ));
        }
        super::shape::check(source)?;
        let mut env = Environment::new();
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        // Plain text, never HTML-escaped (the default keys off the name's extension).
        env.set_auto_escape_callback(|_| minijinja::AutoEscape::None);
        env.set_fuel(Some(ITEM_FUEL));
        env.add_template_owned(NAME, source.to_string()).map_err(|e| format!("the description template: {e:#}"))?;
        Ok(Self { env: Arc::new(env) })
    }

    /// The description of the item at `index`; an error names what was wrong
    /// (an undefined field, a failed filter, a limit) or a result that is empty.
    pub fn render(&self, item: &Value, index: usize) -> Result<String, String> {
        self.render_metered(item, index).text
    }

    /// Like [`render`](Self::render), with the fuel the render cost.
    pub fn render_metered(&self, item: &Value, index: usize) -> Rendered {
        let failed = |e: String| Rendered { text: Err(e), fuel: ITEM_FUEL };
        let template = match self.env.get_template(NAME) {
            Ok(t) => t,
            Err(e) => return failed(e.to_string()),
        };
        let item = minijinja::Value::from(minijinja::value::Serde(item));
        let mut out = CappedOutput { text: Vec::new(), over: false };
        let fuel = match template.render_captured_to(context! { item, index }, &mut out) {
            Ok(captured) => captured.state().fuel_levels().map_or(0, |(used, _)| used),
            Err(_) if out.over => {
                return failed(format!(
                    "renders to more than {MAX_DESCRIPTION_BYTES} bytes, the most a description holds"
                ));
            }
            Err(e) if e.kind() == minijinja::ErrorKind::OutOfFuel => {
                return failed(format!(
                    "the template needs more than its budget of {ITEM_FUEL} fuel for one item (about \
                     {ITEM_FUEL} template steps or {} MB of data); make it simpler",
                    ITEM_FUEL * 64 / 1_000_000
                ));
            }
            Err(e) => return failed(format!("{e:#}")),
        };
        let text = match String::from_utf8(out.text) {
            Ok(t) => t,
            Err(_) => return failed("renders to text that is not UTF-8".into()),
        };
        if text.trim().is_empty() {
            return Rendered { text: Err("renders to an empty description".into()), fuel };
        }
        Rendered { text: Ok(text), fuel }
    }

    /// Renders on the blocking pool (dispatch of one item): bounded by
    /// [`ITEM_FUEL`] and [`ITEM_DEADLINE`].
    pub async fn render_blocking(&self, item: Arc<Value>, index: usize) -> Result<String, String> {
        let this = self.clone();
        let job = tokio::task::spawn_blocking(move || this.render(&item, index));
        match tokio::time::timeout(ITEM_DEADLINE, job).await {
            Ok(Ok(text)) => text,
            Ok(Err(e)) => Err(format!("rendering the description failed: {e}")),
            Err(_) => Err(format!("rendering the description took longer than {} s", ITEM_DEADLINE.as_secs())),
        }
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
        let e = DescriptionTemplate::compile(&"x".repeat(MAX_DESCRIPTION_BYTES + 1)).err().unwrap();
        assert!(e.contains("at most 65536"), "{e}");
    }

    #[test]
    fn empty_and_oversized_descriptions_are_refused() {
        let t = DescriptionTemplate::compile("{{ item }}").unwrap();
        assert!(t.render(&json!(""), 0).unwrap_err().contains("empty"));
        let long = "x".repeat(MAX_DESCRIPTION_BYTES + 1);
        assert!(t.render(&json!(long), 0).unwrap_err().contains("more than 65536 bytes"));
        let exact = "x".repeat(MAX_DESCRIPTION_BYTES);
        assert_eq!(t.render(&json!(exact), 0).unwrap().len(), MAX_DESCRIPTION_BYTES);
    }

    #[test]
    fn a_plain_template_costs_little_fuel() {
        let t = DescriptionTemplate::compile(MARGIN).unwrap();
        let r = t.render_metered(&json!({"region": "north", "revenue": 120, "cost": 75.5}), 0);
        assert!(r.text.is_ok() && r.fuel > 0 && r.fuel < 100, "{}", r.fuel);
        let failed = t.render_metered(&json!({}), 0);
        assert_eq!(failed.fuel, ITEM_FUEL, "a failed render counts its whole allowance");
    }

    /// Templates that allocate or loop far beyond any description: each is
    /// refused within its fuel or by the output cap, naming the limit.
    /// Without fuel the loops would run for minutes and the filters would
    /// allocate terabytes.
    #[test]
    fn hostile_templates_are_stopped_by_their_fuel_or_the_output_cap() {
        let fuel = "budget of 100000 fuel";
        let item = json!({"s": "x".repeat(60_000)});
        let cases = [
            ("{% for i in range(5000) %}{% for j in range(5000) %}{% endfor %}{% endfor %}x", fuel),
            ("{{ item.s | indent(1000000000000) }}", fuel),
            ("{{ range(100000) | join(item.s) }}", fuel),
            ("{{ item.s | replace('', item.s) }}", fuel),
            ("{{ item.s ~ item.s ~ item.s ~ item.s ~ item.s }}", "more than 65536 bytes"),
            ("{% for i in range(1000) %}{{ item.s }}{% endfor %}", "more than 65536 bytes"),
        ];
        for (source, needle) in cases {
            let t = DescriptionTemplate::compile(source).unwrap();
            let r = t.render_metered(&item, 0);
            let e = r.text.expect_err(source);
            assert!(e.contains(needle), "{source}: {e}");
            assert_eq!(r.fuel, ITEM_FUEL, "{source}");
        }
        // What fuel pays for only afterwards is refused before it runs (shape.rs).
        for source in [r#"{{ "x" * 1000000000000 }}"#, "{{ '' ~ (range(1000) | list) * 100000 }}"] {
            let e = DescriptionTemplate::compile(source).err().unwrap();
            assert!(e.contains("uses `*`"), "{source}: {e}");
        }
    }
}
