//! One tiny tool-calling request to a model, through the same provider code
//! the planner and workers use, asking it to call a `ping` tool with
//! `{"value": 42}` (`flotilla models check`, docs/MODELS.md). A model passes
//! when the call comes back well-formed: the named tool, arguments that are
//! a JSON object with that value. Small local models and some servers
//! answer with text, wrap the call in prose, or return arguments that are no
//! JSON; each of those is named with its usual fix.

use std::sync::Arc;
use std::time::{Duration, Instant};

use flotilla_agent::model::{ChatMessage, ChatModel, ModelRequest, ModelResponse};
use flotilla_agent::tool::ToolSpec;
use flotilla_config::ModelSettings;
use serde::Serialize;
use serde_json::{Value, json};

/// The outcome of one model's check.
#[derive(Clone, Debug, Serialize)]
pub struct Checked {
    /// The name under `[models]`.
    pub model: String,
    /// Whether the tool call came back well-formed.
    pub ok: bool,
    /// What came back, or what is wrong and how to fix it.
    pub detail: String,
    /// Wall time of the request.
    pub latency_ms: u64,
}

/// Sends the `ping` request to model `name` built from `settings`.
pub async fn tool_calling(name: &str, settings: &ModelSettings) -> Checked {
    let started = Instant::now();
    let outcome = match crate::build(name, settings) {
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

/// Whether a model's endpoint answers its list of models and takes its key:
/// `GET <base_url>/models` for `openai` (base URLs end in `/v1`), `GET
/// <base_url>/v1/models` for `anthropic` (`flotilla config check --connect`).
/// `None` for a provider without an endpoint (scripted). The URL comes back
/// with the status, or with what is wrong and its fix.
pub async fn endpoint(settings: &ModelSettings, timeout: Duration) -> Option<(String, Result<u16, (String, String)>)> {
    let (url, auth) = match settings {
        ModelSettings::OpenAi { base_url, api_key_env, .. } => {
            (format!("{}/models", base_url.trim_end_matches('/')), Auth::Bearer(api_key_env.clone()))
        }
        ModelSettings::Anthropic { base_url, api_key_env, .. } => {
            (format!("{}/v1/models", base_url.trim_end_matches('/')), Auth::Anthropic(api_key_env.clone()))
        }
        _ => return None,
    };
    let reached = reach(&url, &auth, timeout).await;
    Some((url, reached))
}

/// How a provider sends its key (the variable named by `api_key_env`).
#[derive(Debug)]
enum Auth {
    /// `Authorization: Bearer <key>`.
    Bearer(Option<String>),
    /// `x-api-key: <key>` and `anthropic-version`.
    Anthropic(Option<String>),
}

async fn reach(url: &str, auth: &Auth, timeout: Duration) -> Result<u16, (String, String)> {
    flotilla_config::tls::install_crypto_provider();
    let client = reqwest::Client::builder()
        .timeout(timeout)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| (format!("cannot build an HTTP client: {e}"), "report this bug".to_string()))?;
    let key = |var: &Option<String>| var.as_deref().and_then(|v| std::env::var(v).ok()).map(|k| k.trim().to_string());
    let mut req = client.get(url);
    match auth {
        Auth::Bearer(var) => {
            if let Some(k) = key(var) {
                req = req.bearer_auth(k);
            }
        }
        Auth::Anthropic(var) => {
            req = req.header("anthropic-version", crate::anthropic::API_VERSION);
            if let Some(k) = key(var) {
                req = req.header("x-api-key", k);
            }
        }
    }
    let resp = req.send().await.map_err(|e| {
        let e = e.without_url();
        let cause = std::error::Error::source(&e).map(|s| format!(": {s}")).unwrap_or_default();
        (format!("unreachable: {e}{cause}"), "check the URL and that the endpoint runs".to_string())
    })?;
    let status = resp.status();
    match status.as_u16() {
        200..=299 => Ok(status.as_u16()),
        401 | 403 => Err((
            format!("the key was refused ({status})"),
            "set the API-key variable named by api_key_env to a valid key".into(),
        )),
        _ => Err((format!("answered {status}"), "check base_url (it should end in /v1 for most providers)".into())),
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

    const T: Duration = Duration::from_secs(5);

    /// A `/v1/models` on loopback that wants the key `sk-good`, as OpenAI
    /// (`Authorization: Bearer`) or Anthropic (`x-api-key` + `anthropic-version`) send it.
    async fn endpoint() -> String {
        use axum::http::{HeaderMap, StatusCode};
        let router = axum::Router::new().route(
            "/v1/models",
            axum::routing::get(|h: HeaderMap| async move {
                let bearer = h.get("authorization").is_some_and(|v| v == "Bearer sk-good");
                let anthropic = h.get("x-api-key").is_some_and(|v| v == "sk-good")
                    && h.get("anthropic-version").is_some_and(|v| v == crate::anthropic::API_VERSION);
                let ok = bearer || anthropic;
                if ok { StatusCode::OK } else { StatusCode::UNAUTHORIZED }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, router).await });
        format!("http://{addr}/v1")
    }

    #[tokio::test]
    async fn a_model_endpoint_answers_refuses_a_key_or_is_unreachable() {
        let base = endpoint().await;
        // SAFETY: this test alone reads these made-up variable names.
        unsafe {
            std::env::set_var("FLOTILLA_CHECK_TEST_GOOD", "sk-good");
            std::env::set_var("FLOTILLA_CHECK_TEST_BAD", "sk-bad");
        }
        let bearer = |v: &str| Auth::Bearer(Some(v.into()));
        assert_eq!(reach(&format!("{base}/models"), &bearer("FLOTILLA_CHECK_TEST_GOOD"), T).await, Ok(200));
        let (message, fix) = reach(&format!("{base}/models"), &bearer("FLOTILLA_CHECK_TEST_BAD"), T).await.unwrap_err();
        assert!(message.contains("401") && fix.contains("api_key_env"), "{message} / {fix}");
        let anthropic = Auth::Anthropic(Some("FLOTILLA_CHECK_TEST_GOOD".into()));
        assert_eq!(reach(&format!("{base}/models"), &anthropic, T).await, Ok(200));
        let (message, _) = reach(&format!("{base}/nothing-here"), &Auth::Bearer(None), T).await.unwrap_err();
        assert!(message.contains("404"), "{message}");
        let dead = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap();
        let (message, _) = reach(&format!("http://{dead}/v1/models"), &Auth::Bearer(None), T).await.unwrap_err();
        assert!(message.starts_with("unreachable:"), "{message}");
    }
}
