//! `config check --connect`: what only the network can tell. NATS is reached
//! once with the config's credentials and TLS (`flotilla_bus::probe`, as every
//! process connects) and asked for the JetStream account; each used
//! OpenAI-compatible model answers one cheap `GET <base_url>/models`.

use std::time::Duration;

use flotilla_config::{ModelSettings, Settings, redact_url};

use super::Check;

/// Bound on each network check.
const TIMEOUT: Duration = Duration::from_secs(5);

/// NATS answers and has JetStream on.
pub async fn nats(settings: &Settings) -> Check {
    let url = redact_url(&settings.nats.url);
    match reach_nats(settings).await {
        Ok(detail) => Check::ok("nats.url", format!("{url} answers; {detail}")),
        Err((message, fix)) => Check::problem("nats.url", format!("{url}: {message}"), fix),
    }
}

async fn reach_nats(settings: &Settings) -> Result<String, (String, String)> {
    use flotilla_bus::probe::{self, ProbeError};
    match probe::jetstream_account(&settings.nats, TIMEOUT).await {
        Ok(a) => Ok(format!("JetStream on ({} streams, {} bytes stored)", a.streams, a.storage)),
        Err(e @ ProbeError::BadUrl(_)) => Err((e.to_string(), "set [nats] url to nats://host:port".to_string())),
        Err(e @ ProbeError::Credentials(_)) => Err((e.to_string(), "fix [nats.auth]".to_string())),
        Err(e @ (ProbeError::NoAnswer | ProbeError::Connect(_))) => Err((e.to_string(), nats_fix())),
        Err(e @ (ProbeError::JetStreamNoAnswer | ProbeError::JetStream(_))) => Err((e.to_string(), jetstream_fix())),
    }
}

fn nats_fix() -> String {
    "start nats-server (`nats-server --jetstream`), or set [nats] url / FLOTILLA_NATS__URL to a server that runs".into()
}

fn jetstream_fix() -> String {
    "enable JetStream on the server (`nats-server --jetstream`, or a `jetstream {}` block in its config)".into()
}

/// Each used model's endpoint answers its list of models: `GET
/// <base_url>/models` for `openai` (base URLs end in `/v1`), `GET
/// <base_url>/v1/models` for `anthropic` (shared/models/src/lib.rs).
pub async fn models(settings: &Settings) -> Vec<Check> {
    let mut checks = Vec::new();
    for name in super::local::used_models(settings) {
        let (url, auth) = match settings.models.get(&name) {
            Some(ModelSettings::OpenAi { base_url, api_key_env, .. }) => {
                (format!("{}/models", base_url.trim_end_matches('/')), Auth::Bearer(api_key_env.clone()))
            }
            Some(ModelSettings::Anthropic { base_url, api_key_env, .. }) => {
                (format!("{}/v1/models", base_url.trim_end_matches('/')), Auth::Anthropic(api_key_env.clone()))
            }
            _ => continue,
        };
        let key = format!("models.{name}.base_url");
        checks.push(match reach_model(&url, &auth).await {
            Ok(status) => Check::ok(key, format!("GET {url} answered {status}")),
            Err((message, fix)) => Check::problem(key, format!("GET {url}: {message}"), fix),
        });
    }
    checks
}

/// How a provider sends its key (the variable named by `api_key_env`).
#[derive(Debug)]
enum Auth {
    /// `Authorization: Bearer <key>`.
    Bearer(Option<String>),
    /// `x-api-key: <key>` and `anthropic-version`.
    Anthropic(Option<String>),
}

async fn reach_model(url: &str, auth: &Auth) -> Result<u16, (String, String)> {
    flotilla_config::tls::install_crypto_provider();
    let client = reqwest::Client::builder()
        .timeout(TIMEOUT)
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
            req = req.header("anthropic-version", flotilla_models::anthropic::API_VERSION);
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

    /// A `/v1/models` on loopback that wants the key `sk-good`, as OpenAI
    /// (`Authorization: Bearer`) or Anthropic (`x-api-key` + `anthropic-version`) send it.
    async fn endpoint() -> String {
        use axum::http::{HeaderMap, StatusCode};
        let router = axum::Router::new().route(
            "/v1/models",
            axum::routing::get(|h: HeaderMap| async move {
                let bearer = h.get("authorization").is_some_and(|v| v == "Bearer sk-good");
                let anthropic = h.get("x-api-key").is_some_and(|v| v == "sk-good")
                    && h.get("anthropic-version").is_some_and(|v| v == flotilla_models::anthropic::API_VERSION);
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
        assert_eq!(reach_model(&format!("{base}/models"), &bearer("FLOTILLA_CHECK_TEST_GOOD")).await, Ok(200));
        let (message, fix) =
            reach_model(&format!("{base}/models"), &bearer("FLOTILLA_CHECK_TEST_BAD")).await.unwrap_err();
        assert!(message.contains("401") && fix.contains("api_key_env"), "{message} / {fix}");
        let anthropic = Auth::Anthropic(Some("FLOTILLA_CHECK_TEST_GOOD".into()));
        assert_eq!(reach_model(&format!("{base}/models"), &anthropic).await, Ok(200));
        let (message, _) = reach_model(&format!("{base}/nothing-here"), &Auth::Bearer(None)).await.unwrap_err();
        assert!(message.contains("404"), "{message}");
        let dead = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap();
        let (message, _) = reach_model(&format!("http://{dead}/v1/models"), &Auth::Bearer(None)).await.unwrap_err();
        assert!(message.starts_with("unreachable:"), "{message}");
    }
}
