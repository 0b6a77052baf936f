//! MCP call latency: `calls` sequential calls of a trivial tool (`add` of the
//! finance-tools server over stdio) through the same path a subagent uses
//! (tool set validation -> MCP adapter -> session), with a persistent session
//! and with a session per call. Target (DESIGN.md): persistent p50 <= 1 ms;
//! the Python reference measured 7.5 ms persistent, 935 ms per call.

use std::time::{Duration, Instant};

use flotilla_agent::tool::{ToolContext, ToolSet};
use flotilla_config::Settings;
use flotilla_mcp::McpHub;
use flotilla_mcp::config::{self, McpServerSettings, McpTransport, RawMcpServer, SessionMode};
use serde_json::json;

use crate::{Row, ms, pct};

/// The finance server: `[mcp_servers.finance]` when configured over stdio,
/// else the `finance-tools` binary next to this one.
fn finance(settings: &Settings) -> anyhow::Result<McpServerSettings> {
    if let Some(s) = settings.mcp_servers.get("finance")
        && matches!(s.transport, McpTransport::Stdio { .. })
    {
        return Ok(s.clone());
    }
    let exe = std::env::current_exe()?.with_file_name("finance-tools");
    anyhow::ensure!(exe.is_file(), "{} not found: run `cargo build --bins`", exe.display());
    let raw = RawMcpServer { command: Some(exe.display().to_string()), ..Default::default() };
    config::validate("finance", raw, std::path::Path::new(".")).map_err(|p| anyhow::anyhow!("{}: {}", p.key, p.message))
}

fn ctx() -> ToolContext {
    ToolContext {
        job_id: flotilla_protocol::ids::JobId::new(),
        task_id: None,
        tenant: Default::default(),
        call_id: "bench".into(),
        idempotency_key: "bench".into(),
        traceparent: None,
        cancel: Default::default(),
        approvals: None,
    }
}

async fn latencies(server: McpServerSettings, calls: usize) -> anyhow::Result<Vec<Duration>> {
    let hub = McpHub::new(&[(server.name.clone(), server)].into());
    if let Some((_, Err(e))) = hub.discover(&["finance".to_string()].into()).await.pop() {
        anyhow::bail!("{e}");
    }
    let mut set = ToolSet::new(Duration::from_secs(30));
    for t in hub.tools_for("finance", Some("add"))? {
        set.add(t, "mcp:finance/add")?;
    }
    let name = set.names().pop().unwrap_or_default();
    let ctx = ctx();
    let mut out = Vec::with_capacity(calls);
    for i in 0..calls + 20 {
        let started = Instant::now();
        let r = set.invoke(&ctx, &name, &json!({"a": i, "b": 1})).await;
        let took = started.elapsed();
        r.result.map_err(|e| anyhow::anyhow!("call {i}: {e}"))?;
        if i >= 20 {
            out.push(took); // the first calls warm up the session and caches
        }
    }
    hub.shutdown().await;
    out.sort();
    Ok(out)
}

/// Rows (measure, result, target) for the bench table.
pub async fn measure(settings: &Settings, calls: usize) -> anyhow::Result<Vec<Row>> {
    let server = finance(settings)?;
    let persistent = latencies(McpServerSettings { session: SessionMode::Persistent, ..server.clone() }, calls).await?;
    let per_call_n = calls;
    let per_call = latencies(McpServerSettings { session: SessionMode::PerCall, ..server }, per_call_n).await?;
    Ok(vec![
        (
            format!("MCP stdio call, persistent session, p50 ({calls} calls)"),
            ms(pct(&persistent, 50.0)),
            "<= 1 ms".into(),
        ),
        ("MCP stdio call, persistent session, p99".into(), ms(pct(&persistent, 99.0)), String::new()),
        (
            format!("MCP stdio call, session per call, p50 ({per_call_n} calls)"),
            ms(pct(&per_call, 50.0)),
            String::new(),
        ),
        ("MCP stdio call, session per call, p99".into(), ms(pct(&per_call, 99.0)), String::new()),
    ])
}
