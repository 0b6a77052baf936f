//! `flotilla audit <job>`: the audit trail of one job, every tool call and
//! approval of the planner and its subagents, read from the audit stream.
//! Records hold a digest of the arguments, never the arguments themselves.

use std::time::Duration;

use clap::Args as ClapArgs;
use flotilla_bus::Bus;
use flotilla_config::Settings;
use flotilla_protocol::AuditRecord;
use flotilla_protocol::ids::{JobId, Tenant};

use super::out::{out, outln};
use super::table;

/// Show the audit records of a job (tool calls and approvals).
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// The job id.
    pub job: JobId,
    /// One JSON record per line instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Runs the command; exit code 1 when the job has no records.
pub async fn run(settings: &Settings, tenant: &Tenant, args: Args) -> anyhow::Result<i32> {
    let bus = Bus::connect(&settings.nats, "flotilla-cli", Duration::from_secs(5)).await?;
    let records = flotilla_bus::audit::read(&bus, tenant, &args.job).await?;
    if args.json {
        for r in &records {
            outln!("{}", serde_json::to_string(r)?)?;
        }
    } else {
        out!("{}", table(&records))?;
    }
    if records.is_empty() {
        eprintln!("no audit records for job {} of tenant {tenant}", args.job);
        return Ok(1);
    }
    Ok(0)
}

/// The human table, one line per record, oldest first.
fn table(records: &[AuditRecord]) -> String {
    let mut t = table::new(&["time", "action", "agent", "worker", "tool", "outcome", "ms", "args sha256", "trace"]);
    table::align_right(&mut t, &[6]);
    for r in records {
        let time = r.at.format(&time::format_description::well_known::Rfc3339).unwrap_or_default();
        let action = match r.action {
            flotilla_protocol::AuditAction::ToolCall => "tool_call",
            flotilla_protocol::AuditAction::Approval => "approval",
        };
        let outcome = match r.error_kind {
            Some(kind) => format!("{} ({kind})", r.outcome.as_str()),
            None => r.outcome.as_str().to_string(),
        };
        t.add_row([
            time.chars().take(24).collect(),
            action.to_string(),
            r.agent.clone(),
            r.worker.clone(),
            r.tool.clone(),
            outcome,
            r.duration_ms.to_string(),
            r.args_sha256.chars().take(12).collect(),
            r.trace_id.clone().unwrap_or_else(|| "-".into()),
        ]);
    }
    table::render(t, "")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(worker: &str, tool: &str, error_kind: Option<&str>) -> AuditRecord {
        serde_json::from_value(serde_json::json!({
            "v": 1, "at": "2025-01-01T10:00:00.123456Z", "action": "tool_call", "tenant": "default",
            "job_id": uuid::Uuid::now_v7(), "agent": "finance", "worker": worker, "tool": tool, "call_id": "c1",
            "args_sha256": "ab".repeat(32), "outcome": if error_kind.is_some() { "error" } else { "ok" },
            "error_kind": error_kind, "duration_ms": 7, "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736",
        }))
        .expect("audit record")
    }

    #[test]
    fn mcp_tool_names_and_worker_ids_longer_than_usual_keep_the_columns_aligned() {
        let text = table(&[
            record("laptop-7f3a-12345", "finance_calculate_gross_margin_by_region", Some("validation")),
            record("w1", "write_file", None),
        ]);
        let lines: Vec<&str> = text.lines().collect();
        let outcome = lines[0].find("outcome").unwrap();
        let trace = lines[0].find("trace").unwrap();
        assert_eq!(lines[1].find("error (validation)"), Some(outcome), "{text}");
        assert_eq!(lines[2].find("ok "), Some(outcome), "{text}");
        for row in &lines[1..] {
            assert_eq!(row.find("4bf92f35"), Some(trace), "{text}");
            assert!(row.contains("abababababab  4bf9"), "12 characters of the digest: {text}");
        }
    }
}
