//! Worker heartbeats on `<prefix>.worker.heartbeat.<worker>`: who is serving
//! which subagent types, with how many free slots, right now.
//!
//! A worker publishes one when it starts, then every `interval_ms`, and a last
//! one with `state = "stopping"` when it shuts down. The latest heartbeat of
//! each worker is also kept in the `<prefix>_workers` KV bucket whose entries
//! expire after a few intervals, so the live set can be read at any moment
//! without subscribing first (`flotilla workers`, the orchestrator's "no
//! worker serves `<type>`" check, the dashboard). A worker killed with SIGKILL
//! simply stops refreshing its entry and drops out when it expires.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use super::Message;
use crate::ids::SubagentType;

/// Whether a worker takes new tasks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkerState {
    /// Serving its types.
    #[default]
    Running,
    /// Told to stop: pulls no new tasks and lets its running ones finish
    /// within its grace period (`[worker] grace`).
    Draining,
    /// Its last beat: running tasks are reported or handed back; it is leaving.
    Stopping,
}

impl WorkerState {
    /// The snake_case wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkerState::Running => "running",
            WorkerState::Draining => "draining",
            WorkerState::Stopping => "stopping",
        }
    }
}

/// Load of one subagent type on one worker.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TypeLoad {
    /// The type.
    pub subagent_type: SubagentType,
    /// Tasks of this type the worker runs at once (`[subagents.<type>] concurrency`).
    pub capacity: u32,
    /// Tasks of this type running now.
    pub in_flight: u32,
    /// Tasks of this type that ended with a report since the worker started.
    #[serde(default)]
    pub completed: u64,
    /// Of those, how many failed or were refused (rejected).
    #[serde(default)]
    pub failed: u64,
    /// Of those, how many were cancelled (by their job's cancel or a task
    /// cancel): not failures of the worker. Absent from heartbeats of workers
    /// older than this field, which counted them under `failed`.
    #[serde(default)]
    pub cancelled: u64,
    /// Wall milliseconds of the tasks counted in `completed`, added up: the
    /// change of `busy_ms` over the change of `completed` between two beats
    /// is the mean task duration of that interval. Zero from workers older
    /// than this field.
    #[serde(default)]
    pub busy_ms: u64,
}

/// Health of one MCP server as seen by the worker (filled from the MCP hub).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpServerHealth {
    /// The server's name under `[mcp.<name>]`.
    pub name: String,
    /// Whether its session is usable now.
    pub ok: bool,
    /// Why not, or other detail (never a secret-bearing URL).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// One worker's liveness and load.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkerHeartbeat {
    /// Schema version.
    #[serde(default = "super::schema_version")]
    pub v: u32,
    /// The worker id (as in reports and progress events).
    pub worker_id: String,
    /// Host name.
    pub host: String,
    /// OS process id.
    pub pid: u32,
    /// Flotilla version of the worker binary.
    pub version: String,
    /// Running or stopping.
    #[serde(default)]
    pub state: WorkerState,
    /// The served types with their load.
    pub types: Vec<TypeLoad>,
    /// MCP servers of this worker and their health (empty when it uses none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mcp_servers: Vec<McpServerHealth>,
    /// `http://host:port/metrics` of this worker's Prometheus endpoint, when enabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics_url: Option<String>,
    /// Resident memory of the worker process in bytes, when the platform
    /// tells (Linux: `/proc/self/statm`); absent elsewhere and from older
    /// workers. Only the worker's own process: MCP servers and sandboxed
    /// commands it starts are not included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rss_bytes: Option<u64>,
    /// When the worker started.
    #[serde(with = "time::serde::rfc3339")]
    pub started_at: OffsetDateTime,
    /// When this heartbeat was sent.
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
    /// Milliseconds until the next heartbeat; a worker silent for about three
    /// intervals is gone.
    pub interval_ms: u64,
}

impl WorkerHeartbeat {
    /// Free slots for `ty` on this worker (0 when it does not serve it or is stopping).
    pub fn free_slots(&self, ty: &SubagentType) -> u32 {
        if self.state != WorkerState::Running {
            return 0;
        }
        self.types.iter().find(|t| &t.subagent_type == ty).map(|t| t.capacity.saturating_sub(t.in_flight)).unwrap_or(0)
    }

    /// Whether this worker serves `ty` and is not stopping.
    pub fn serves(&self, ty: &SubagentType) -> bool {
        self.state == WorkerState::Running && self.types.iter().any(|t| &t.subagent_type == ty)
    }
}

impl Message for WorkerHeartbeat {
    const NAME: &'static str = "worker heartbeat";
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{decode, encode, now};

    fn beat(state: WorkerState) -> WorkerHeartbeat {
        WorkerHeartbeat {
            v: 1,
            worker_id: "w1".into(),
            host: "h".into(),
            pid: 42,
            version: "0.1.0".into(),
            state,
            types: vec![TypeLoad {
                subagent_type: SubagentType::new("finance").unwrap(),
                capacity: 4,
                in_flight: 3,
                completed: 7,
                failed: 1,
                cancelled: 2,
                busy_ms: 1234,
            }],
            mcp_servers: vec![],
            metrics_url: None,
            rss_bytes: Some(24 << 20),
            started_at: now(),
            at: now(),
            interval_ms: 5000,
        }
    }

    #[test]
    fn heartbeats_round_trip_and_tell_free_slots() {
        let hb = beat(WorkerState::Running);
        let back: WorkerHeartbeat = decode(&encode(&hb)).unwrap();
        assert_eq!(back, hb);
        let fin = SubagentType::new("finance").unwrap();
        let legal = SubagentType::new("legal").unwrap();
        assert_eq!(hb.free_slots(&fin), 1);
        assert!(hb.serves(&fin) && !hb.serves(&legal));
        assert_eq!(hb.free_slots(&legal), 0);
        let stopping = beat(WorkerState::Stopping);
        assert!(!stopping.serves(&fin));
        assert_eq!(stopping.free_slots(&fin), 0);
        let json: serde_json::Value = serde_json::from_slice(&encode(&stopping)).unwrap();
        assert_eq!(json["state"], "stopping");
        assert!(json.get("mcp_servers").is_none(), "empty optional fields are omitted: {json}");
        assert_eq!((json["rss_bytes"].as_u64(), json["types"][0]["busy_ms"].as_u64()), (Some(24 << 20), Some(1234)));
        let unknown = WorkerHeartbeat { rss_bytes: None, ..stopping };
        let json: serde_json::Value = serde_json::from_slice(&encode(&unknown)).unwrap();
        assert!(json.get("rss_bytes").is_none(), "no RSS on this platform: omitted: {json}");
    }
}
