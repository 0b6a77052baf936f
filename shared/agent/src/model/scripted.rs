//! The `scripted` provider: deterministic model turns from a TOML file, so the
//! demo and the tests run the real agent loop, real tools and the real bus with
//! no model key and no randomness.
//!
//! A script is not a recording. Each turn is a set of minijinja templates
//! evaluated against the conversation, so tool-call arguments come from the
//! task description and from earlier tool results, and the demo really
//! computes its numbers. The provider is stateless: the turn to play is the
//! number of assistant messages already in the conversation, which also makes
//! a resumed (checkpointed) conversation continue where it stopped.
//!
//! The file format (top-level keys, `[vars]`, `[[turns]]`, `for_each`, the
//! template context and functions, how values print, compaction calls) is
//! documented in docs/SCRIPTED.md; this module implements it.

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use minijinja::{Environment, Value as JValue, context};
use serde::Deserialize;
use serde_json::Value;

use super::{ChatMessage, ChatModel, ModelError, ModelRequest, ModelResponse, Purpose, ToolCall};

use flotilla_protocol::{ErrorKind, Usage};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Script {
    /// Simulated model latency of every call, for benchmarks and tests.
    #[serde(default)]
    latency_ms: u64,
    #[serde(default)]
    vars: indexmap_like::Vars,
    /// Answer to a compaction call, a template over `transcript`.
    #[serde(default)]
    compaction: Option<String>,
    turns: Vec<Turn>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Turn {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    calls: Vec<CallTemplate>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CallTemplate {
    tool: String,
    #[serde(default)]
    for_each: Option<String>,
    args: String,
}

mod indexmap_like {
    //! `[vars]` keeps file order so later vars can use earlier ones.
    use serde::Deserialize;

    #[derive(Debug, Default)]
    pub struct Vars(pub Vec<(String, String)>);

    impl<'de> Deserialize<'de> for Vars {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            let table = toml::Table::deserialize(d)?;
            let mut out = Vec::new();
            for (k, v) in table {
                let s = v
                    .as_str()
                    .ok_or_else(|| serde::de::Error::custom(format!("vars.{k} must be a string expression")))?;
                out.push((k, s.to_string()));
            }
            Ok(Vars(out))
        }
    }
}

/// A model that plays a script.
pub struct ScriptedModel {
    name: String,
    script: Script,
    env: Environment<'static>,
}

impl ScriptedModel {
    /// Loads and checks the script at `path` (every template must compile).
    pub fn load(name: &str, path: &Path) -> Result<Self, ModelError> {
        let err = |message: String| ModelError { kind: ErrorKind::Validation, model: name.into(), message };
        let text =
            std::fs::read_to_string(path).map_err(|e| err(format!("cannot read script {}: {e}", path.display())))?;
        Self::from_str(name, &text).map_err(|e| err(format!("script {}: {}", path.display(), e.message)))
    }

    /// Parses a script from text.
    pub fn from_str(name: &str, text: &str) -> Result<Self, ModelError> {
        let err = |message: String| ModelError { kind: ErrorKind::Validation, model: name.into(), message };
        let script: Script = toml::from_str(text).map_err(|e| err(e.to_string()))?;
        if script.turns.is_empty() {
            return Err(err("a script needs at least one [[turns]]".into()));
        }
        // Every template is compiled once, here, under the name it is
        // reported by (a turn is played per model call: parsing its
        // templates again each time was most of the provider's cost).
        let mut env = environment();
        if let Some(c) = &script.compaction {
            env.add_template_owned("compaction", c.clone()).map_err(|e| err(format!("compaction: {e}")))?;
        }
        for (k, expr) in &script.vars.0 {
            let name = format!("vars.{k}");
            env.add_template_owned(name.clone(), value_template(expr)).map_err(|e| err(format!("{name}: {e}")))?;
        }
        for (i, t) in script.turns.iter().enumerate() {
            if t.content.is_none() && t.calls.is_empty() {
                return Err(err(format!("turns[{i}] has neither content nor calls")));
            }
            if let Some(c) = &t.content {
                let name = format!("turns[{i}].content");
                env.add_template_owned(name.clone(), c.clone()).map_err(|e| err(format!("{name}: {e}")))?;
            }
            for (j, c) in t.calls.iter().enumerate() {
                let name = format!("turns[{i}].calls[{j}].args");
                env.add_template_owned(name.clone(), c.args.clone()).map_err(|e| err(format!("{name}: {e}")))?;
                if let Some(f) = &c.for_each {
                    let name = format!("turns[{i}].calls[{j}].for_each");
                    env.add_template_owned(name.clone(), value_template(f)).map_err(|e| err(format!("{name}: {e}")))?;
                }
            }
        }
        Ok(Self { name: name.into(), script, env })
    }

    fn fail(&self, kind: ErrorKind, message: String) -> ModelError {
        ModelError { kind, model: self.name.clone(), message }
    }

    fn play(&self, request: &ModelRequest<'_>) -> Result<(Option<String>, Vec<ToolCall>), ModelError> {
        let messages = request.messages;
        if request.purpose == Purpose::Compaction {
            return self.summarise(messages).map(|s| (Some(s), Vec::new()));
        }
        let step = messages.iter().filter(|m| matches!(m, ChatMessage::Assistant { .. })).count()
            + request.compacted_turns as usize;
        let turn = self.script.turns.get(step).ok_or_else(|| {
            self.fail(ErrorKind::Limit, format!("script exhausted after {} turns", self.script.turns.len()))
        })?;
        // The conversation is converted to template values once a turn; the
        // vars go on top of it, each seeing those before it (a var may
        // shadow a name of the conversation: of merged maps, the last wins).
        let conversation = jv(conversation_context(messages, step));
        let mut vars = std::collections::BTreeMap::new();
        let scope = |vars: &std::collections::BTreeMap<String, JValue>| {
            if vars.is_empty() {
                conversation.clone()
            } else {
                minijinja::value::merge_maps([conversation.clone(), JValue::from(vars.clone())])
            }
        };
        for (k, _) in &self.script.vars.0 {
            let value = self.value(&format!("vars.{k}"), scope(&vars))?;
            vars.insert(k.clone(), value);
        }
        let base = scope(&vars);
        let content = match &turn.content {
            Some(_) => Some(self.render(&format!("turns[{step}].content"), base.clone())?),
            None => None,
        };
        let mut calls = Vec::new();
        for (j, c) in turn.calls.iter().enumerate() {
            let what = format!("turns[{step}].calls[{j}]");
            let items: Vec<Option<JValue>> = match &c.for_each {
                None => vec![None],
                Some(_) => {
                    let list = self.value(&format!("{what}.for_each"), base.clone())?;
                    if list.kind() != minijinja::value::ValueKind::Seq {
                        return Err(self.fail(ErrorKind::Bug, format!("{what}.for_each is not a list")));
                    }
                    let items =
                        list.try_iter().map_err(|e| self.fail(ErrorKind::Bug, format!("{what}.for_each: {e}")))?;
                    items.map(Some).collect()
                }
            };
            for (index, item) in items.into_iter().enumerate() {
                let scope = context! { item => item, index => index, ..base.clone() };
                let text = self.render(&format!("{what}.args"), scope)?;
                let arguments: Value = serde_json::from_str(&text).unwrap_or(Value::String(text));
                calls.push(ToolCall { id: format!("call_{step}_{}", calls.len()), name: c.tool.clone(), arguments });
            }
        }
        Ok((content, calls))
    }

    /// The answer to a compaction call: the script's `compaction` template
    /// or a digest of the transcript (the last user message).
    fn summarise(&self, messages: &[ChatMessage]) -> Result<String, ModelError> {
        let transcript = messages
            .iter()
            .rev()
            .find_map(|m| match m {
                ChatMessage::User { content } => Some(content.as_str()),
                _ => None,
            })
            .unwrap_or_default();
        if self.script.compaction.is_some() {
            return self.render("compaction", context! { transcript => transcript });
        }
        let digest: Vec<String> = transcript
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| l.chars().take(160).collect::<String>())
            .collect();
        Ok(format!("Earlier turns, digested ({} entries):\n{}", digest.len(), digest.join("\n")))
    }

    /// The value of the expression registered as `name` at load
    /// ([`value_template`]), as data: through JSON, so a var holds what a
    /// tool result or the input could (lists, maps, strings, numbers).
    fn value(&self, name: &str, ctx: JValue) -> Result<JValue, ModelError> {
        let fail = |e: &dyn std::fmt::Display| self.fail(ErrorKind::Bug, format!("{name}: {e}"));
        let captured = self.env.get_template(name).and_then(|t| t.render_captured(ctx)).map_err(|e| fail(&e))?;
        let value = captured.state().lookup(VALUE).unwrap_or_default();
        serde_json::to_value(&value).map(jv).map_err(|e| fail(&e))
    }

    /// Renders the template registered as `name` at load (its place in the script).
    fn render(&self, name: &str, ctx: JValue) -> Result<String, ModelError> {
        let rendered = self.env.get_template(name).and_then(|t| t.render(ctx));
        rendered.map_err(|e| self.fail(ErrorKind::Bug, format!("{name}: {e}")))
    }
}

/// The patterns `captures` was called with, compiled once each: a script
/// names a handful, and compiling one took longer than the rest of a turn.
/// Shared, not cloned: a cloned `Regex` starts with an empty match cache.
#[derive(Default)]
struct Regexes(std::sync::Mutex<std::collections::HashMap<String, Arc<regex::Regex>>>);

impl Regexes {
    /// More distinct patterns than a script could hold means they are built
    /// from the conversation; past this many, the cache starts over.
    const MAX: usize = 256;

    fn get(&self, pattern: &str) -> Result<Arc<regex::Regex>, minijinja::Error> {
        let mut cache = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(re) = cache.get(pattern) {
            return Ok(re.clone());
        }
        let re = regex::Regex::new(pattern)
            .map(Arc::new)
            .map_err(|e| minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, format!("bad regex: {e}")))?;
        if cache.len() >= Self::MAX {
            cache.clear();
        }
        cache.insert(pattern.to_string(), re.clone());
        Ok(re)
    }
}

/// The name [`value_template`] assigns.
const VALUE: &str = "value";

/// An expression of the script (a var, a `for_each`) as a template that
/// assigns its value: compiled once at load like every other template, where
/// an expression compiled at each call cost more than evaluating it.
fn value_template(expr: &str) -> String {
    format!("{{% set {VALUE} = ({expr}) %}}")
}

/// Any serializable value as a template value.
fn jv<T: serde::Serialize>(value: T) -> JValue {
    JValue::from(minijinja::value::Serde(value))
}

fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
    env.set_formatter(json_formatter);
    let compiled = Regexes::default();
    env.add_function("captures", move |text: String, pattern: String| -> Result<JValue, minijinja::Error> {
        let re = compiled.get(&pattern)?;
        let all: Vec<Vec<String>> = re
            .captures_iter(&text)
            .map(|c| c.iter().map(|m| m.map(|m| m.as_str().to_string()).unwrap_or_default()).collect())
            .collect();
        Ok(jv(all))
    });
    // `| string` as the formatter prints: lists and maps (and the booleans
    // and nulls inside them) as JSON, not minijinja's Python-style form.
    env.add_filter("string", |value: JValue| -> Result<String, minijinja::Error> {
        use minijinja::value::ValueKind;
        match value.kind() {
            ValueKind::Seq | ValueKind::Map | ValueKind::Iterable => serde_json::to_string(&value)
                .map_err(|e| minijinja::Error::new(minijinja::ErrorKind::BadSerialization, e.to_string())),
            ValueKind::Bool => Ok(value.is_true().to_string()),
            ValueKind::None => Ok("null".into()),
            _ => Ok(value.to_string()),
        }
    });
    env.add_function("from_json", |text: String| -> Result<JValue, minijinja::Error> {
        let v: Value = serde_json::from_str(&text)
            .map_err(|e| minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, e.to_string()))?;
        Ok(jv(v))
    });
    env
}

/// Prints lists, maps, booleans and null as JSON (`{{ r.value }}` of a `map_tasks` result is
/// `{"entries":[...]}`, which a later step or a reader can parse), anything
/// else as minijinja does (docs/SCRIPTED.md, "Rendering values").
fn json_formatter(
    out: &mut minijinja::Output,
    state: &mut minijinja::State,
    value: &JValue,
) -> Result<(), minijinja::Error> {
    use minijinja::value::ValueKind;
    if !matches!(
        value.kind(),
        ValueKind::Seq | ValueKind::Map | ValueKind::Iterable | ValueKind::Bool | ValueKind::None
    ) {
        return minijinja::escape_formatter(out, state, value);
    }
    let json = serde_json::to_string(value)
        .map_err(|e| minijinja::Error::new(minijinja::ErrorKind::BadSerialization, e.to_string()))?;
    out.write_str(&json).map_err(|e| minijinja::Error::new(minijinja::ErrorKind::WriteFailure, e.to_string()))
}

/// Builds the template context from the conversation.
fn conversation_context(messages: &[ChatMessage], step: usize) -> serde_json::Map<String, Value> {
    let mut input = String::new();
    let mut system = String::new();
    let mut results = Vec::new();
    let mut last = Vec::new();
    for m in messages {
        match m {
            ChatMessage::System { content } if system.is_empty() => system = content.clone(),
            ChatMessage::User { content } if input.is_empty() => input = content.clone(),
            ChatMessage::Assistant { .. } => last.clear(),
            ChatMessage::Tool { tool_call_id, name, content, is_error } => {
                let parsed: Value = serde_json::from_str(content).unwrap_or_else(|_| Value::String(content.clone()));
                let (value, error) = if *is_error {
                    (Value::Null, parsed.get("error").cloned().unwrap_or(parsed))
                } else {
                    (parsed, Value::Null)
                };
                let r = serde_json::json!({
                    "tool": name, "call_id": tool_call_id, "ok": !is_error, "value": value, "error": error,
                });
                results.push(r.clone());
                last.push(r);
            }
            _ => {}
        }
    }
    let mut ctx = serde_json::Map::new();
    ctx.insert("input".into(), input.into());
    ctx.insert("system".into(), system.into());
    ctx.insert("step".into(), step.into());
    ctx.insert("results".into(), results.into());
    ctx.insert("last".into(), last.into());
    ctx
}

#[async_trait]
impl ChatModel for ScriptedModel {
    async fn complete(&self, request: ModelRequest<'_>) -> Result<ModelResponse, ModelError> {
        if self.script.latency_ms > 0 {
            tokio::time::sleep(std::time::Duration::from_millis(self.script.latency_ms)).await;
        }
        let (content, tool_calls) = self.play(&request)?;
        // Count with the real tokenizer over the request a real endpoint
        // would get (tool schemas included), so the usage of a scripted run
        // (job events, the scale benchmark) measures what a model would read.
        let input_tokens = super::count_request(request.messages, request.tools) as u64;
        let output_tokens = super::count_output(content.as_deref(), &tool_calls);
        Ok(ModelResponse {
            content,
            tool_calls,
            usage: Usage { input_tokens, output_tokens, model_calls: 1, ..Usage::default() },
        })
    }

    fn identity(&self) -> super::ModelIdentity<'_> {
        super::ModelIdentity { provider: "flotilla.scripted", model: &self.name }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCRIPT: &str = r#"
[vars]
pairs = "captures(input, '(\\w+): revenue (-?[0-9.]+), cost (-?[0-9.]+)')"

[[turns]]
[[turns.calls]]
tool = "calc"
for_each = "pairs"
args = '{"name": {{ item[1] | tojson }}, "revenue": {{ item[2] }}, "cost": {{ item[3] }}}'

[[turns]]
content = "{% for r in last %}{{ pairs[loop.index0][1] }}={% if r.ok %}{{ r.value.margin }}{% else %}{{ r.error.message }}{% endif %};{% endfor %}"
"#;

    fn req(messages: &[ChatMessage]) -> ModelRequest<'_> {
        ModelRequest::new(messages, &[])
    }

    #[tokio::test]
    async fn arguments_come_from_input_and_answers_from_results() {
        let m = ScriptedModel::from_str("s", SCRIPT).unwrap();
        let mut msgs = vec![
            ChatMessage::System { content: "sys".into() },
            ChatMessage::User { content: "north: revenue 120, cost 75; south: revenue 0, cost 3".into() },
        ];
        let r = m.complete(req(&msgs)).await.unwrap();
        assert_eq!(r.tool_calls.len(), 2);
        assert_eq!(r.tool_calls[0].arguments, serde_json::json!({"name": "north", "revenue": 120, "cost": 75}));
        assert_eq!(r.tool_calls[1].arguments["revenue"], 0);
        assert!(r.usage.input_tokens > 0);
        msgs.push(ChatMessage::Assistant { content: None, tool_calls: r.tool_calls.clone() });
        msgs.push(ChatMessage::Tool {
            tool_call_id: "call_0_0".into(),
            name: "calc".into(),
            content: r#"{"margin":0.375}"#.into(),
            is_error: false,
        });
        msgs.push(ChatMessage::Tool {
            tool_call_id: "call_0_1".into(),
            name: "calc".into(),
            content: r#"{"error":{"kind":"business","message":"revenue must be greater than zero"}}"#.into(),
            is_error: true,
        });
        let r = m.complete(req(&msgs)).await.unwrap();
        assert_eq!(r.content.unwrap(), "north=0.375;south=revenue must be greater than zero;");
        assert!(r.tool_calls.is_empty());
        msgs.push(ChatMessage::Assistant { content: Some("x".into()), tool_calls: vec![] });
        let e = m.complete(req(&msgs)).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::Limit);
    }

    #[tokio::test]
    async fn compaction_calls_get_the_template_or_a_digest_and_compacted_turns_keep_the_place() {
        let script =
            "compaction = 'S({{ transcript | length }})'\n[[turns]]\ncontent = 'one'\n[[turns]]\ncontent = 'two'\n";
        let m = ScriptedModel::from_str("s", script).unwrap();
        let msgs = [ChatMessage::System { content: "Summarise.".into() }, ChatMessage::User { content: "abc".into() }];
        let compaction = ModelRequest { purpose: Purpose::Compaction, ..ModelRequest::new(&msgs, &[]) };
        assert_eq!(m.complete(compaction).await.unwrap().content.as_deref(), Some("S(3)"));
        // Without a template: one digest line per transcript entry.
        let plain = ScriptedModel::from_str("s", "[[turns]]\ncontent = 'one'\n").unwrap();
        let msgs = [ChatMessage::User { content: "user: go\nresult of task [c1]: 0.375".into() }];
        let r = plain.complete(ModelRequest { purpose: Purpose::Compaction, ..ModelRequest::new(&msgs, &[]) }).await;
        let digest = r.unwrap().content.unwrap();
        assert!(digest.contains("(2 entries)") && digest.contains("[c1]: 0.375"), "{digest}");
        // One turn summarised away: the next step plays turn 2, not turn 1.
        let msgs = [ChatMessage::User { content: "go".into() }];
        let step = ModelRequest { compacted_turns: 1, ..ModelRequest::new(&msgs, &[]) };
        assert_eq!(m.complete(step).await.unwrap().content.as_deref(), Some("two"));
        // Usage is the tokenizer's count of the request.
        let r = m.complete(ModelRequest::new(&msgs, &[])).await.unwrap();
        assert_eq!(r.usage.input_tokens, crate::model::count_request(&msgs, &[]) as u64);
        assert_eq!(r.usage.output_tokens, crate::model::count_output(r.content.as_deref(), &[]));
        assert!(r.usage.output_tokens > 0);
    }

    /// The demo's planner script (deploy/local/scripts/planner.toml) writes its
    /// table when the fan-out's results were compacted away, as a long list
    /// of regions makes them: each row says where its report is, instead of
    /// the script failing on an index past the end of `results`.
    #[tokio::test]
    async fn the_demo_planner_writes_its_table_after_the_reports_were_compacted() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/local/scripts/planner.toml");
        let m = ScriptedModel::load("planner", &path).unwrap();
        let msgs = [
            ChatMessage::User { content: "north: revenue 120, cost 75; south: revenue 80, cost 60".into() },
            ChatMessage::User { content: "[Summary of earlier turns]".into() },
        ];
        // Turns 1 to 3 (todos, fan-out, todos) were summarised: turn 4 plays.
        let step = ModelRequest { compacted_turns: 3, ..ModelRequest::new(&msgs, &[]) };
        let table = m.complete(step).await.unwrap_or_else(|e| panic!("{e:?}")).content.unwrap();
        let rows: Vec<&str> = table.lines().filter(|l| l.starts_with("| north") || l.starts_with("| south")).collect();
        assert_eq!(rows.len(), 2, "{table}");
        assert!(rows.iter().all(|r| r.contains("compacted out of the planner's context") && r.contains("/reports/")));
    }

    /// A `map_tasks` result printed as is: JSON, not minijinja's Python-style
    /// `{'entries': [...]}` (docs/SCRIPTED.md, "Rendering values").
    #[tokio::test]
    async fn lists_and_maps_render_as_json_and_scalars_as_before() {
        let script = r#"
[[turns]]
content = "{{ last[0].value }}|{{ last[0].value.entries }}|{{ last[0].value.entries[0].name }}|{{ last[0].value.n }}|{{ last[0].value | tojson }}"
"#;
        let m = ScriptedModel::from_str("s", script).unwrap();
        let value = r#"{"entries":[{"name":"north","ok":true,"value":{"margin":0.375}}],"n":1}"#;
        let msgs = [
            ChatMessage::User { content: "go".into() },
            ChatMessage::Tool {
                tool_call_id: "c".into(),
                name: "map_tasks".into(),
                content: value.into(),
                is_error: false,
            },
        ];
        let text = m.complete(req(&msgs)).await.unwrap().content.unwrap();
        let parts: Vec<&str> = text.split('|').collect();
        let parsed: Value = serde_json::from_str(parts[0]).unwrap_or_else(|e| panic!("{e}: {text}"));
        assert_eq!(parsed, serde_json::from_str::<Value>(value).unwrap());
        assert_eq!(parts[1], r#"[{"name":"north","ok":true,"value":{"margin":0.375}}]"#);
        assert_eq!(&parts[2..4], ["north", "1"], "strings and numbers print bare");
        assert_eq!(serde_json::from_str::<Value>(parts[4]).unwrap(), parsed, "tojson agrees");
        assert!(!text.contains('\''), "{text}");
    }

    /// `| string` of a map (a `grep` result, say) is JSON too, so `~` after it
    /// builds JSON text, not `{'matches': [...], 'truncated': False}`.
    #[tokio::test]
    async fn the_string_filter_prints_lists_and_maps_as_json() {
        let script = r#"
[[turns]]
content = "{{ 'got ' ~ (last[0].value | string) }}|{{ last[0].value.truncated | string }}|{{ 7 | string }}|{{ last[0].value.truncated }}|{{ last[0].value.none }}"
"#;
        let m = ScriptedModel::from_str("s", script).unwrap();
        let value = r#"{"matches":["a:1"],"truncated":false,"none":null}"#;
        let msgs = [
            ChatMessage::User { content: "go".into() },
            ChatMessage::Tool { tool_call_id: "c".into(), name: "grep".into(), content: value.into(), is_error: false },
        ];
        let text = m.complete(req(&msgs)).await.unwrap().content.unwrap();
        let parts: Vec<&str> = text.split('|').collect();
        let json = parts[0].strip_prefix("got ").unwrap_or_else(|| panic!("{text}"));
        assert_eq!(serde_json::from_str::<Value>(json).unwrap(), serde_json::from_str::<Value>(value).unwrap());
        assert_eq!(&parts[1..], ["false", "7", "false", "null"], "booleans and null as JSON: {text}");
    }

    /// A var or `for_each` is compiled once as a template that assigns it
    /// (`value_template`); it must give what evaluating it as an expression
    /// in the same context gives, converted to data.
    #[test]
    fn expressions_compiled_as_templates_give_what_evaluating_them_gives() {
        let exprs = [
            "captures(input, 'revenue ([0-9]+), cost ([0-9]+)')",
            "input | length",
            "input ~ '!'",
            "last[0].value.margin * 2",
            "[1, 'two', none, true, 2.5]",
            "{'a': [1, 2], 'b': {'c': none}}",
            "range(3)",
            "results | map(attribute='tool') | list",
            "step + 1",
            "nothing_defined_here",
            "(from_json('{\"x\": [1.25, -3]}')).x",
        ];
        let script: String =
            exprs.iter().enumerate().map(|(i, e)| format!("v{i} = {}\n", toml::Value::String((*e).into()))).collect();
        let m = ScriptedModel::from_str("s", &format!("[vars]\n{script}[[turns]]\ncontent = 'x'\n")).unwrap();
        let msgs = [
            ChatMessage::User { content: "north: revenue 120, cost 75".into() },
            ChatMessage::Assistant { content: None, tool_calls: vec![] },
            ChatMessage::Tool {
                tool_call_id: "c".into(),
                name: "calc".into(),
                content: r#"{"margin":0.375}"#.into(),
                is_error: false,
            },
        ];
        let ctx = conversation_context(&msgs, 1);
        for (i, expr) in exprs.iter().enumerate() {
            let got = m.value(&format!("vars.v{i}"), jv(&ctx)).map(|v| serde_json::to_value(&v).unwrap());
            let want = m
                .env
                .compile_expression(expr)
                .and_then(|e| e.eval(jv(&ctx)))
                .map(|v| serde_json::to_value(&v).unwrap());
            match (got, want) {
                (Ok(got), Ok(want)) => assert_eq!(got, want, "{expr}"),
                (Err(_), Err(_)) => {}
                (got, want) => panic!("{expr}: {got:?} against {want:?}"),
            }
        }
        // Each var sees those before it, over the conversation's names.
        let chained =
            "[vars]\ninput = \"'shadowed'\"\nn = \"input | length\"\n[[turns]]\ncontent = '{{ input }} {{ n }}'\n";
        let m = ScriptedModel::from_str("s", chained).unwrap();
        let (content, _) = m.play(&ModelRequest::new(&msgs[..1], &[])).unwrap();
        assert_eq!(content.as_deref(), Some("shadowed 8"));
        let e = ScriptedModel::from_str("s", "[vars]\nbad = \"(1\"\n[[turns]]\ncontent = 'x'\n").err().unwrap();
        assert!(e.message.contains("vars.bad"), "{}", e.message);
    }

    #[test]
    fn bad_scripts_are_refused_at_load() {
        for (text, needle) in [
            ("", "missing field `turns`"),
            ("turns = []", "at least one"),
            ("[[turns]]\ncontent = \"{% if %}\"", "turns[0].content"),
            ("[[turns]]\n", "neither content nor calls"),
        ] {
            let e = ScriptedModel::from_str("s", text).err().unwrap();
            assert!(e.message.contains(needle), "{needle}: {}", e.message);
        }
    }
}
