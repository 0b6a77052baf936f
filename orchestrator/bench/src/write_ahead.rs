//! What the write-ahead of a tool-calling turn costs a task: the
//! `overhead` scenario's dispatch -> report latency on two rigs side by
//! side whose finance type calls the demo's MCP `gross_margin` (the
//! `finance-tools` server over stdio, one persistent session). On one the
//! tool is an MCP tool like any other, so the turn calling it is stored
//! before the call runs (docs/RELIABILITY.md, "Step journal"); on the other
//! the operator lists it in `[mcp_servers.finance] read_only_tools`, so
//! the turn is journaled behind the loop. Their tasks alternate, so both
//! see the same moments of a noisy machine.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::setup::{self, FinanceModel, Rig};

/// The `finance-tools` MCP server beside this binary, or why the rows
/// cannot be measured; checked before the scenario starts anything.
pub fn server() -> anyhow::Result<PathBuf> {
    let server = std::env::current_exe()?.with_file_name("finance-tools");
    anyhow::ensure!(
        server.is_file(),
        "flotilla bench: the overhead scenario's MCP rows need the finance-tools MCP server beside this binary \
         ({} not found): build it with `cargo build --release --bins`",
        server.display()
    );
    Ok(server)
}

/// A one-worker rig whose finance type calls the MCP tool of `server`,
/// listed read-only or not.
async fn rig(server: &Path, read_only: bool) -> anyhow::Result<Rig> {
    let listed = if read_only { "read_only_tools = [\"gross_margin\"]\n" } else { "" };
    let extra = format!("[mcp_servers.finance]\ncommand = \"{}\"\nrequired = true\n{listed}", server.display());
    let (planner, finance) = (setup::planner(0), flotilla_testkit::scripts::finance_gross_margin(0));
    Rig::launch(1, |url| {
        let mut c = setup::config_with(url, &planner, FinanceModel::Scripted(&finance), 4, &extra);
        c.section_replace("tools = [\"calculate_margin\"]", "tools = [\"mcp:finance/gross_margin\"]");
        c
    })
    .await
}

/// Sorted dispatch -> report latencies of `n` tasks each: (the turn
/// awaited, the tool listed read-only).
pub async fn measure(server: &Path, n: usize) -> anyhow::Result<(Vec<Duration>, Vec<Duration>)> {
    let awaited = rig(server, false).await?;
    let listed = rig(server, true).await?;
    let latencies = crate::paired(&awaited, &listed, n).await?;
    awaited.stop();
    listed.stop();
    Ok(latencies)
}
