//! `flotilla models check [name]`: before a long job, one tiny tool-calling
//! request to each configured model (or the one named), through the same
//! provider code the planner and workers use, asking it to call a `ping`
//! tool with `{"value": 42}`. A model passes when the call comes back
//! well-formed: the named tool, arguments that are a JSON object with that
//! value. Small local models and some servers answer with text, wrap the
//! call in prose, or return arguments that are no JSON; each of those is
//! named, so a person can fix the endpoint or pick another model
//! (docs/MODELS.md). Scripted models are skipped: they call what their
//! script says.

use std::sync::Arc;
use std::time::Instant;

use clap::{Args as ClapArgs, Subcommand};
use flotilla_agent::model::{ChatMessage, ChatModel, ModelRequest, ModelResponse};
use flotilla_agent::tool::ToolSpec;
use flotilla_config::{ModelSettings, Settings};
use serde::Serialize;
use serde_json::{Value, json};

use super::out::{self, outln};

/// Check model endpoints.
#[derive(ClapArgs, Debug)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Send one tool-calling request to each configured model (or NAME) and
    /// say whether its tool call comes back well-formed. Scripted models are
    /// skipped. Exit 0 when every checked model passes (or none is left to
    /// check), 2 otherwise.
    Check {
        /// A name under [models]; default: every non-scripted model.
        name: Option<String>,
    },
}

/// The outcome of one model's check.
#[derive(Debug, Serialize)]
struct Checked {
    model: String,
    ok: bool,
    /// What came back, or what is wrong and how to fix it.
    detail: String,
    latency_ms: u64,
}

/// Runs the command.
pub async fn run(settings: &Settings, args: Args, json: bool) -> anyhow::Result<i32> {
    let Command::Check { name } = args.command;
    let names: Vec<String> = match name {
        Some(n) => {
            settings.model(&n)?;
            vec![n]
        }
        None => settings
            .models
            .iter()
            .filter(|(_, m)| !matches!(m, ModelSettings::Scripted { .. }))
            .map(|(n, _)| n.clone())
            .collect(),
    };
    if names.is_empty() {
        // Nothing can fail: a CI step over a scripted-only config (the demo's) passes.
        if json {
            out::json(&json!({ "models": [], "skipped": "every [models.*] entry is scripted" }))?;
        } else {
            outln!(
                "nothing to check: every [models.*] entry is scripted (scripted models call what their script says)"
            )?;
        }
        return Ok(0);
    }
    let mut results = Vec::new();
    for n in names {
        let checked = check(&n, settings.model(&n)?).await;
        if !json {
            let mark = if checked.ok { "ok     " } else { "PROBLEM" };
            outln!("{mark} {:<16} {:>6} ms  {}", checked.model, checked.latency_ms, checked.detail)?;
        }
        results.push(checked);
    }
    let passed = results.iter().all(|c| c.ok);
    if json {
        out::json(&json!({ "models": results }))?;
    }
    Ok(if passed { 0 } else { 2 })
}

async fn check(name: &str, settings: &ModelSettings) -> Checked {
    let started = Instant::now();
    let outcome = match flotilla_models::build(name, settings) {
        Ok(model) => ask(model).await.map_err(|e| e.to_string()).and_then(|r| judge(&r)),
        Err(e) => Err(format!("cannot build the client: {e}")),
    };
    let latency_ms = started.elapsed().as_millis() as u64;
    match outcome {
        Ok(detail) => Checked { model: name.into(), ok: true, detail, latency_ms },
        Err(detail) => Checked { model: name.into(), ok: false, detail, latency_ms },
    }
}

const TOOL: &str = "ping";

async fn ask(model: Arc<dyn ChatModel>) -> Result<ModelResponse, flotilla_agent::model::ModelError> {
    let messages = [
        ChatMessage::System {
            content: "You check that tool calling works. Call the tool you are asked to call.".into(),
        },
        ChatMessage::User { content: format!("Call the `{TOOL}` tool with value 42. Do not answer with text.") },
    ];
    let tools = [ToolSpec {
        name: TOOL.into(),
        description: "Answers pong. Call it with the value you were given.".into(),
        input_schema: json!({
            "type": "object",
            "properties": {"value": {"type": "integer"}},
            "required": ["value"],
            "additionalProperties": false
        }),
    }];
    model.complete(ModelRequest::new(&messages, &tools)).await
}

/// `Ok(what came back)` for a well-formed call, else what is wrong.
fn judge(r: &ModelResponse) -> Result<String, String> {
    let tokens = format!("{} tokens in, {} out", r.usage.input_tokens, r.usage.output_tokens);
    let Some(call) = r.tool_calls.first() else {
        let text = r.content.as_deref().unwrap_or("").chars().take(120).collect::<String>();
        return Err(format!(
            "answered with text instead of a tool call ({text:?}): the endpoint may not support tool calling for \
             this model (llama.cpp: start the server with --jinja; Ollama: use a model with tool support)"
        ));
    };
    if call.name != TOOL {
        return Err(format!("called {:?} instead of {TOOL:?}", call.name));
    }
    match &call.arguments {
        Value::Object(args) if args.get("value").and_then(Value::as_i64) == Some(42) => {
            Ok(format!("{TOOL}({}) came back well-formed; {tokens}", call.arguments))
        }
        Value::Object(_) => Err(format!("arguments {} lack \"value\": 42", call.arguments)),
        other => Err(format!("arguments are not a JSON object: {other}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_agent::model::ToolCall;

    fn response(content: Option<&str>, calls: Vec<ToolCall>) -> ModelResponse {
        ModelResponse { content: content.map(str::to_string), tool_calls: calls, usage: Default::default() }
    }

    fn call(name: &str, arguments: Value) -> ToolCall {
        ToolCall { id: "c".into(), name: name.into(), arguments }
    }

    #[test]
    fn a_well_formed_call_passes_and_each_malformed_one_is_named() {
        assert!(judge(&response(None, vec![call("ping", json!({"value": 42}))])).is_ok());
        let text = judge(&response(Some("pong"), vec![])).unwrap_err();
        assert!(text.contains("answered with text instead of a tool call"), "{text}");
        assert!(judge(&response(None, vec![call("pong", json!({"value": 42}))])).unwrap_err().contains("instead of"));
        let raw = judge(&response(None, vec![call("ping", json!("{value: 42"))])).unwrap_err();
        assert!(raw.contains("not a JSON object"), "{raw}");
        assert!(judge(&response(None, vec![call("ping", json!({"v": 1}))])).unwrap_err().contains("lack"));
    }
}
