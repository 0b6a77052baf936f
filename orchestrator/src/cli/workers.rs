//! `flotilla workers`: the live worker fleet, read from the workers KV bucket
//! (each worker's latest heartbeat; entries of silent workers expire).

use clap::Args as ClapArgs;
use flotilla_shared::config::Settings;
use flotilla_shared::ids::Tenant;
use flotilla_shared::protocol::WorkerHeartbeat;

use super::connect;

/// List live workers: host, types with capacity and tasks in flight, MCP health.
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// Print the heartbeats as a JSON array.
    #[arg(long)]
    pub json: bool,
}

/// Runs the command.
pub async fn run(settings: &Settings, tenant: &Tenant, args: Args) -> anyhow::Result<i32> {
    let api = connect(settings, tenant).await?;
    let workers = api.bus.live_workers().await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&workers)?);
    } else {
        print!("{}", table(&workers, flotilla_shared::protocol::now()));
    }
    Ok(0)
}

/// The human table: one line per worker and type.
pub fn table(workers: &[WorkerHeartbeat], now: time::OffsetDateTime) -> String {
    if workers.is_empty() {
        return "no live workers (start one with `flotilla-worker --config <file>`)\n".into();
    }
    let mut out = format!(
        "{:<24} {:<9} {:<16} {:>7} {:<14} {:>9} {:>6} {:>6} {:>5}  {}\n",
        "WORKER", "STATE", "HOST", "PID", "TYPE", "IN FLIGHT", "DONE", "FAILED", "SEEN", "MCP"
    );
    for w in workers {
        let seen = format!("{}s", (now - w.at).whole_seconds().max(0));
        let mcp = w
            .mcp_servers
            .iter()
            .map(|m| format!("{}:{}", m.name, if m.ok { "ok" } else { "down" }))
            .collect::<Vec<_>>()
            .join(",");
        for (i, t) in w.types.iter().enumerate() {
            let first = i == 0;
            out.push_str(&format!(
                "{:<24} {:<9} {:<16} {:>7} {:<14} {:>9} {:>6} {:>6} {:>5}  {}\n",
                if first { w.worker_id.as_str() } else { "" },
                if first { w.state.as_str() } else { "" },
                if first { w.host.as_str() } else { "" },
                if first { w.pid.to_string() } else { String::new() },
                t.subagent_type.as_str(),
                format!("{}/{}", t.in_flight, t.capacity),
                t.completed,
                t.failed,
                if first { seen.as_str() } else { "" },
                if first { mcp.as_str() } else { "" },
            ));
        }
    }
    out
}
