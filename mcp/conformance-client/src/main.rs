//! `mcp-conformance-client <server-url>`: the client the official MCP
//! conformance suite (`@modelcontextprotocol/conformance`, client mode)
//! drives. The suite starts a scenario server, runs this binary with its URL
//! and `MCP_CONFORMANCE_SCENARIO` set, and grades what reaches the server.
//!
//! Everything goes through Flotilla's own MCP client (`flotilla_mcp`:
//! config validation and URL rules, session with timeouts, discovery, calls),
//! exactly as a worker uses it, so the suite grades the code subagents run.
//! Scenario-independent: initialize, list tools, call each tool once with
//! arguments made from its input schema (the client has no model to choose
//! them). Exit code 0 when every step succeeded, 1 otherwise.
//!
//! `auth/*` scenarios: the suite's `MCP_CONFORMANCE_CONTEXT` (client id,
//! secret, private key) becomes an `[mcp_servers.<name>.oauth]` section, the
//! secrets environment variables it names, as an operator would configure a
//! worker (docs/MCP.md "OAuth"). The only piece a worker does not have is the
//! [`Headless`] authorizer: the suite's authorization endpoint redirects at
//! once, so following it without a browser stands in for the person.
//!
//! Revisions: the suite names the revision a scenario is graded at in
//! `MCP_CONFORMANCE_PROTOCOL_VERSION`. At 2026-07-28 the client negotiates as
//! a worker does (`server/discover`, falling back to `initialize`); at an
//! older one it pins that revision (`protocol_version` in the server's
//! config), as an operator would for a server that answers
//! `server/discover` with something else than an error (the suite's
//! 2025-11-25 mock servers answer every unknown method with `{}`).
//!
//! Arguments: a scenario that says which calls to make (`toolCalls` in
//! `MCP_CONFORMANCE_CONTEXT`) gets exactly those; otherwise each tool is
//! called once with arguments made from its schema, except the echo tool of
//! the JSON Schema scenarios, which gets the input schema the model is shown
//! for the scenario's other tool (through a `ToolSet`, as a worker's
//! subagent sees it), so the suite grades what survives on the way to the
//! model.
//!
//! Elicitation: where a worker asks a person through approvals
//! (docs/APPROVALS.md, "Elicitation"), this client's [`AcceptAsIs`] accepts
//! with empty content, so the server receives exactly what Flotilla's
//! handler adds: the schema's defaults (SEP-1034).

use std::collections::BTreeMap;
use std::path::Path;

use std::sync::Arc;

use anyhow::{Context, bail};
use flotilla_agent::tool::ToolSet;
use flotilla_mcp::McpHub;
use flotilla_mcp::config::{self, RawMcpOAuth, RawMcpOAuthIdp, RawMcpServer};
use flotilla_mcp::elicitation::{Elicitation, Responder};
use flotilla_mcp::oauth::{self, Authorizer};
use rmcp::model::{ElicitResult, ElicitationAction, JsonObject, RequestMetaObject};
use serde_json::{Value, json};

const SERVER: &str = "conformance";

/// Variables the context's secrets are put in (read back by flotilla_mcp::oauth).
const SECRET_ENV: &str = "CONFORMANCE_CLIENT_SECRET";
const KEY_ENV: &str = "CONFORMANCE_PRIVATE_KEY";
const ID_TOKEN_ENV: &str = "CONFORMANCE_ID_TOKEN";
const WORKLOAD_JWT_ENV: &str = "CONFORMANCE_WORKLOAD_JWT";

/// The Client ID Metadata Document the suite's CIMD scenario expects.
const CLIENT_METADATA_URL: &str = "https://conformance-test.local/client-metadata.json";

/// The echo tool of the JSON Schema scenarios and its argument.
const SCHEMA_ECHO_TOOL: &str = "json_schema_echo";

fn main() -> anyhow::Result<()> {
    let url = std::env::args().nth(1).context("usage: mcp-conformance-client <server-url>")?;
    let scenario = std::env::var("MCP_CONFORMANCE_SCENARIO").unwrap_or_default();
    let context: Value = std::env::var("MCP_CONFORMANCE_CONTEXT")
        .ok()
        .and_then(|c| serde_json::from_str(&c).ok())
        .unwrap_or(Value::Null);
    eprintln!("scenario {scenario:?} against {url}");
    let oauth = scenario.starts_with("auth/").then(|| oauth_section(&scenario, &context));
    let pinned = std::env::var("MCP_CONFORMANCE_PROTOCOL_VERSION").ok().filter(|v| v.as_str() < "2026-07-28");
    // Still one thread: no other thread can read the environment meanwhile.
    let secrets = [
        (SECRET_ENV, "client_secret"),
        (KEY_ENV, "private_key_pem"),
        (ID_TOKEN_ENV, "idp_id_token"),
        (WORKLOAD_JWT_ENV, "valid_jwt"),
    ];
    for (var, key) in secrets {
        if let Some(v) = context[key].as_str() {
            unsafe { std::env::set_var(var, v) };
        }
    }
    tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(run(url, oauth, pinned, context))
}

/// The `[oauth]` section an operator would write for this scenario's server.
fn oauth_section(scenario: &str, context: &Value) -> RawMcpOAuth {
    let client_id = context["client_id"].as_str().map(str::to_string);
    let secret = context["client_secret"].is_string().then(|| SECRET_ENV.to_string());
    let key = context["private_key_pem"].is_string().then(|| KEY_ENV.to_string());
    let client_credentials = scenario.starts_with("auth/client-credentials");
    // Cross-app access (SEP-990): the context carries the identity provider and the user's ID token.
    let idp = context["idp_token_endpoint"].as_str().map(|endpoint| RawMcpOAuthIdp {
        issuer: context["idp_issuer"].as_str().map(str::to_string),
        token_endpoint: Some(endpoint.to_string()),
        client_id: context["idp_client_id"].as_str().map(str::to_string),
        client_secret_env: None,
        id_token_env: Some(ID_TOKEN_ENV.into()),
    });
    // Workload identity (SEP-1933): the context carries the platform's signed workload JWT.
    let workload = context["valid_jwt"].is_string();
    let grant = match (&idp, client_credentials) {
        _ if workload => "workload_identity",
        (Some(_), _) => "enterprise_managed",
        (None, true) => "client_credentials",
        (None, false) => "authorization_code",
    };
    RawMcpOAuth {
        grant: Some(grant.into()),
        idp,
        client_id,
        client_secret_env: secret,
        private_key_env: key,
        signing_alg: context["signing_algorithm"].as_str().map(str::to_string),
        client_metadata_url: (grant == "authorization_code").then(|| CLIENT_METADATA_URL.to_string()),
        client_name: Some("flotilla-conformance-client".into()),
        redirect_uri: Some("http://localhost:3000/callback".into()),
        assertion_env: workload.then(|| WORKLOAD_JWT_ENV.to_string()),
        // The DPoP scenarios' servers want sender-constrained tokens, as an
        // operator of such a server would know and configure.
        dpop: scenario.starts_with("auth/dpop").then_some(true),
        ..Default::default()
    }
}

/// Follows the authorization URL without a browser: the suite's endpoint
/// answers with a redirect to the callback at once.
struct Headless(reqwest::Client);

#[async_trait::async_trait]
impl Authorizer for Headless {
    async fn authorize(&self, _server: &str, url: &str) -> Result<String, String> {
        let response = self.0.get(url).send().await.map_err(|e| e.to_string())?;
        let location = response.headers().get(reqwest::header::LOCATION).and_then(|l| l.to_str().ok());
        location.map(str::to_string).ok_or_else(|| format!("authorization endpoint answered {}", response.status()))
    }
}

/// Accepts every question with no content of its own: what the server gets
/// is the schema's defaults, applied by `flotilla_mcp::elicitation`.
struct AcceptAsIs;

#[async_trait::async_trait]
impl Responder for AcceptAsIs {
    async fn respond(&self, elicitation: Elicitation) -> ElicitResult {
        eprintln!("elicitation from {}: {}", elicitation.server, elicitation.message);
        ElicitResult::new(ElicitationAction::Accept).with_content(json!({}))
    }
}

async fn run(url: String, oauth: Option<RawMcpOAuth>, pinned: Option<String>, context: Value) -> anyhow::Result<()> {
    flotilla_config::tls::install_crypto_provider();
    let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build()?;
    oauth::set_runtime(Some(Arc::new(Headless(http))), None);
    let raw = RawMcpServer {
        url: Some(url),
        init_timeout: Some(20.0),
        call_timeout: Some(20.0),
        oauth,
        protocol_version: pinned,
        // The names the suite's server gave, for calling them back.
        prefix: Some(false),
        ..Default::default()
    };
    let settings =
        config::validate(SERVER, raw, Path::new(".")).map_err(|p| anyhow::anyhow!("{}: {}", p.key, p.message))?;
    let hub = McpHub::new(&BTreeMap::from([(SERVER.to_string(), settings)]));
    let conn = hub.server(SERVER)?.clone();
    let n = conn.discover().await?;
    eprintln!("initialized; {n} tools");
    let calls = match context["toolCalls"].as_array() {
        Some(given) => given
            .iter()
            .map(|c| {
                (
                    c["name"].as_str().unwrap_or_default().to_string(),
                    c["arguments"].as_object().cloned().unwrap_or_default(),
                )
            })
            .collect(),
        None => planned_calls(&hub)?,
    };
    let mut failed = false;
    for (tool, args) in calls {
        let r = conn.call_with(&tool, args.clone(), RequestMetaObject::default(), Some(Arc::new(AcceptAsIs))).await;
        match r {
            Ok(result) => {
                println!("{tool} {} -> {}", Value::Object(args), serde_json::to_string(&result)?);
                failed |= result.is_error == Some(true);
            }
            Err(e) => {
                eprintln!("{tool}: {e}");
                failed = true;
            }
        }
    }
    hub.shutdown().await;
    if failed {
        bail!("some calls failed");
    }
    Ok(())
}

/// One call per tool, in the order listed, with arguments made from the
/// schema the model is shown; the schema echo tool gets the other tool's
/// schema as the model is shown it.
fn planned_calls(hub: &McpHub) -> anyhow::Result<Vec<(String, JsonObject)>> {
    let mut set = ToolSet::new(std::time::Duration::from_secs(20));
    for tool in hub.tools_for(SERVER, None)? {
        set.add(tool, &format!("mcp:{SERVER}"))?;
    }
    let specs = set.model_specs(&[], false);
    let shown = specs.iter().find(|s| s.name != SCHEMA_ECHO_TOOL).map(|s| s.input_schema.clone());
    Ok(specs
        .iter()
        .map(|spec| {
            let args = match (spec.name.as_str(), &shown) {
                (SCHEMA_ECHO_TOOL, Some(schema)) => JsonObject::from_iter([("schema".to_string(), schema.clone())]),
                _ => example_arguments(&spec.input_schema),
            };
            (spec.name.clone(), args)
        })
        .collect())
}

/// Arguments for a call: every required property gets an example of its type
/// (`a`/`b` numbers become 2 and 3, so sums are checkable).
fn example_arguments(schema: &Value) -> JsonObject {
    let required: Vec<&str> =
        schema["required"].as_array().map(|r| r.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
    let mut out = JsonObject::new();
    for (i, name) in required.iter().enumerate() {
        let prop = &schema["properties"][*name];
        let value = if let Some(d) = prop.get("default") {
            d.clone()
        } else {
            match prop["type"].as_str().unwrap_or("string") {
                "number" | "integer" => json!(i + 2),
                "boolean" => json!(true),
                "array" => json!([]),
                "object" => json!({}),
                _ => json!("test"),
            }
        };
        out.insert(name.to_string(), value);
    }
    out
}
