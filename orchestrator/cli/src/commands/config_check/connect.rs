//! `config check --connect`: what only the network can tell. NATS is reached
//! once with the config's credentials and TLS (`flotilla_bus::probe`, as every
//! process connects) and asked for the JetStream account; each used
//! OpenAI-compatible model answers one cheap `GET <base_url>/models`.

use std::time::Duration;

use flotilla_config::{Settings, redact_url};

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
/// <base_url>/v1/models` for `anthropic` (shared/models/src/probe.rs).
pub async fn models(settings: &Settings) -> Vec<Check> {
    let mut checks = Vec::new();
    for name in super::local::used_models(settings) {
        let Some(model) = settings.models.get(&name) else { continue };
        let Some((url, reached)) = flotilla_models::probe::endpoint(model, TIMEOUT).await else { continue };
        let key = format!("models.{name}.base_url");
        checks.push(match reached {
            Ok(status) => Check::ok(key, format!("GET {url} answered {status}")),
            Err((message, fix)) => Check::problem(key, format!("GET {url}: {message}"), fix),
        });
    }
    checks
}
