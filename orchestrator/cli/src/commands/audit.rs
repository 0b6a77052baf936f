//! `flotilla audit <job>`: the audit trail of one job, every tool call and
//! approval of the planner and its subagents, read from the audit stream.
//! Records hold a digest of the arguments, never the arguments themselves.
//! The job is looked up first (`status`), so an unknown job is a `not_found`
//! error (exit 2) like everywhere else, not an empty trail.

use clap::Args as ClapArgs;
use flotilla_config::Settings;
use flotilla_protocol::AuditRecord;
use flotilla_protocol::ids::{JobId, Tenant};
use serde::Serialize;

use super::out::{self, out};
use super::{connect, render, table};
use flotilla_client::JobRef;

/// Show the audit records of a job (tool calls and approvals).
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// The job: its id, its short id as displayed, or a unique prefix (at least 4 characters).
    pub job: JobRef,
}

/// What `audit --json` prints: the job and its records, oldest first.
#[derive(Serialize)]
struct Trail<'a> {
    job_id: JobId,
    records: &'a [AuditRecord],
}

/// Runs the command; exit code 1 when the job has no records, 2 (an error)
/// when there is no such job.
pub async fn run(settings: &Settings, tenant: &Tenant, args: Args, json: bool) -> anyhow::Result<i32> {
    let api = connect(settings, tenant).await?;
    let job = api.resolve(&args.job).await?;
    // The header only: an unknown job (or another tenant's) is `not_found`.
    api.status_page(job, Some(0), None).await?;
    let records = flotilla_bus::audit::read(api.bus(), tenant, &job).await?;
    if json {
        out::json(&Trail { job_id: job, records: &records })?;
    } else {
        out!("{}", table(&records))?;
    }
    if records.is_empty() {
        eprintln!("no audit records for job {job} of tenant {tenant}");
        return Ok(1);
    }
    Ok(0)
}

/// The human table, one line per record, oldest first.
fn table(records: &[AuditRecord]) -> String {
    let mut t = table::new(&["TIME", "ACTION", "AGENT", "WORKER", "TOOL", "OUTCOME", "MS", "ARGS SHA256", "TRACE"]);
    table::align_right(&mut t, &[6]);
    for r in records {
        let action = match r.action {
            flotilla_protocol::AuditAction::ToolCall => "tool_call",
            flotilla_protocol::AuditAction::Approval => "approval",
        };
        let mut outcome = match r.error_kind {
            Some(kind) => format!("{} ({kind})", r.outcome.as_str()),
            None => r.outcome.as_str().to_string(),
        };
        // An approval's decision and reviewer (docs/APPROVALS.md, "Audit").
        if let Some(decision) = &r.decision {
            outcome.push_str(&format!(": {decision}"));
            if let Some(by) = &r.by {
                outcome.push_str(&format!(" by {by}"));
            }
        }
        t.add_row([
            render::time_ms(r.at),
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
        assert!(lines[0].starts_with("TIME "), "an upper-case header like every other table: {text}");
        let outcome = lines[0].find("OUTCOME").unwrap();
        let trace = lines[0].find("TRACE").unwrap();
        assert_eq!(lines[1].find("error (validation)"), Some(outcome), "{text}");
        assert_eq!(lines[2].find("ok "), Some(outcome), "{text}");
        for row in &lines[1..] {
            assert_eq!(row.find("4bf92f35"), Some(trace), "{text}");
            assert!(row.contains("abababababab  4bf9"), "12 characters of the digest: {text}");
        }
    }

    #[test]
    fn an_approval_shows_its_decision_and_reviewer() {
        let mut approved = record("w1", "deploy", None);
        approved.action = flotilla_protocol::AuditAction::Approval;
        approved.decision = Some("approve".into());
        approved.by = Some("ana".into());
        let mut expired = approved.clone();
        expired.decision = Some("expired".into());
        expired.by = None;
        let text = table(&[approved, expired]);
        assert!(text.lines().nth(1).unwrap().contains("ok: approve by ana"), "{text}");
        assert!(text.lines().nth(2).unwrap().contains("ok: expired "), "{text}");
    }
}
