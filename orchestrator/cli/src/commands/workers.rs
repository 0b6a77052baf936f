//! `flotilla workers`: the live worker fleet, read from the workers KV bucket
//! (each worker's latest heartbeat; entries of silent workers expire).

use clap::Args as ClapArgs;
use flotilla_config::Settings;
use flotilla_protocol::WorkerHeartbeat;
use flotilla_protocol::ids::Tenant;

use super::connect;
use super::out::{self, out};
use super::table;

/// List live workers: host, resident memory, types with capacity and tasks in
/// flight, MCP health.
#[derive(ClapArgs, Debug)]
pub struct Args {}

/// Runs the command; `json`: print `{"workers": [...]}`, each worker's
/// latest heartbeat (docs/PROTOCOL.md, WorkerHeartbeat).
pub async fn run(settings: &Settings, tenant: &Tenant, _args: Args, json: bool) -> anyhow::Result<i32> {
    let api = connect(settings, tenant).await?;
    let workers = api.bus().live_workers().await?;
    if json {
        out::json(&serde_json::json!({ "workers": workers }))?;
    } else {
        out!("{}", table(&workers, flotilla_protocol::now()))?;
    }
    Ok(0)
}

/// The human table: one line per worker and type.
pub fn table(workers: &[WorkerHeartbeat], now: time::OffsetDateTime) -> String {
    if workers.is_empty() {
        return "no live workers (start one with `flotilla-worker --config <file>`)\n".into();
    }
    let mut t = table::new(&[
        "WORKER",
        "STATE",
        "HOST",
        "PID",
        "RSS",
        "TYPE",
        "IN FLIGHT",
        "DONE",
        "FAILED",
        "CANCELLED",
        "SEEN",
        "MCP",
    ]);
    table::align_right(&mut t, &[3, 4, 6, 7, 8, 9, 10]);
    for w in workers {
        let seen = format!("{}s", (now - w.at).whole_seconds().max(0));
        let mcp = w
            .mcp_servers
            .iter()
            .map(|m| format!("{}:{}", m.name, if m.ok { "ok" } else { "down" }))
            .collect::<Vec<_>>()
            .join(",");
        for (i, ty) in w.types.iter().enumerate() {
            // The worker's own columns on its first type's line only.
            let own = |s: String| if i == 0 { s } else { String::new() };
            t.add_row([
                own(w.worker_id.clone()),
                own(w.state.as_str().into()),
                own(w.host.clone()),
                own(w.pid.to_string()),
                own(w.rss_bytes.map(mib).unwrap_or_else(|| "-".into())),
                ty.subagent_type.to_string(),
                format!("{}/{}", ty.in_flight, ty.capacity),
                ty.completed.to_string(),
                ty.failed.to_string(),
                ty.cancelled.to_string(),
                own(seen.clone()),
                own(mcp.clone()),
            ]);
        }
    }
    table::render(t, "")
}

/// Bytes as MiB with one decimal: `24.0 MiB`.
fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn beat(id: &str, types: &[&str]) -> WorkerHeartbeat {
        let types: Vec<_> = types
            .iter()
            .map(
                |t| serde_json::json!({"subagent_type": t, "capacity": 2, "in_flight": 1, "completed": 3, "failed": 1, "cancelled": 2}),
            )
            .collect();
        serde_json::from_value(serde_json::json!({
            "v": 1, "worker_id": id, "host": "h", "pid": 42, "version": "0.1.0", "state": "running",
            "types": types, "started_at": "1970-01-01T00:00:00Z", "at": "1970-01-01T00:00:00Z", "interval_ms": 1000,
            "mcp_servers": [{"name": "finance", "ok": true}], "rss_bytes": 25_270_000,
        }))
        .expect("heartbeat")
    }

    #[test]
    fn columns_stay_aligned_when_a_worker_id_outgrows_the_usual_width() {
        let long = "worker-on-a-host-with-a-long-fqdn.example.internal-4242";
        let at = time::OffsetDateTime::UNIX_EPOCH + time::Duration::seconds(5);
        let text = table(&[beat("w1", &["finance"]), beat(long, &["finance", "research"])], at);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        let state = lines[0].find("STATE").unwrap();
        let ty = lines[0].find("TYPE").unwrap();
        let mcp = lines[0].find("MCP").unwrap();
        for row in &lines[1..3] {
            assert_eq!(row.find("running"), Some(state), "{text}");
            assert_eq!(row.find("finance:ok"), Some(mcp), "{text}");
        }
        // The second type's line leaves the worker's own columns blank.
        assert_eq!(lines[3].find("research"), Some(ty), "{text}");
        assert!(lines[3].starts_with(' ') && !lines[3].contains("running"), "{text}");
        assert!(lines[1].contains("1/2") && lines[1].contains("5s"), "{text}");
        // Memory on the worker's first line, right-aligned under its header.
        let rss_end = lines[0].find("RSS").unwrap() + "RSS".len();
        assert!(lines[1][..rss_end].ends_with("24.1 MiB"), "{text}");
        assert!(!lines[3].contains("MiB"), "{text}");
        // Cancelled tasks have their own column, not FAILED's.
        let failed_end = lines[0].find("FAILED").unwrap() + "FAILED".len();
        let cancelled_end = lines[0].find("CANCELLED").unwrap() + "CANCELLED".len();
        assert_eq!(lines[1][..failed_end].trim_end().chars().last(), Some('1'), "{text}");
        assert_eq!(lines[1][..cancelled_end].trim_end().chars().last(), Some('2'), "{text}");
    }
}
