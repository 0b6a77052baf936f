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

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, bail};
use flotilla_mcp::McpHub;
use flotilla_mcp::config::{self, RawMcpServer};
use rmcp::model::{JsonObject, RequestMetaObject};
use serde_json::{Value, json};

const SERVER: &str = "conformance";

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let url = std::env::args().nth(1).context("usage: mcp-conformance-client <server-url>")?;
    let scenario = std::env::var("MCP_CONFORMANCE_SCENARIO").unwrap_or_default();
    eprintln!("scenario {scenario:?} against {url}");
    flotilla_config::tls::install_crypto_provider();
    let raw = RawMcpServer { url: Some(url), init_timeout: Some(20.0), call_timeout: Some(20.0), ..Default::default() };
    let settings =
        config::validate(SERVER, raw, Path::new(".")).map_err(|p| anyhow::anyhow!("{}: {}", p.key, p.message))?;
    let hub = McpHub::new(&BTreeMap::from([(SERVER.to_string(), settings)]));
    let conn = hub.server(SERVER)?.clone();
    let n = conn.discover().await?;
    eprintln!("initialized; {n} tools");
    let mut failed = false;
    for tool in conn.tools().unwrap_or_default() {
        let args = example_arguments(&Value::Object((*tool.input_schema).clone()));
        let r = conn.call(&tool.name, args.clone(), RequestMetaObject::default()).await;
        match r {
            Ok(result) => {
                println!("{} {} -> {}", tool.name, Value::Object(args), serde_json::to_string(&result)?);
                failed |= result.is_error == Some(true);
            }
            Err(e) => {
                eprintln!("{}: {e}", tool.name);
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
