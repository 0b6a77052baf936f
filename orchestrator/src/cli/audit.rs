//! `flotilla audit <job>`: the audit trail of one job, every tool call and
//! approval of the planner and its subagents, read from the audit stream.
//! Records hold a digest of the arguments, never the arguments themselves.

use std::time::Duration;

use clap::Args as ClapArgs;
use flotilla_shared::bus::Bus;
use flotilla_shared::config::Settings;
use flotilla_shared::ids::{JobId, Tenant};
use flotilla_shared::protocol::AuditRecord;

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
    let records = flotilla_shared::audit::read(&bus, tenant, &args.job).await?;
    if args.json {
        for r in &records {
            println!("{}", serde_json::to_string(r)?);
        }
    } else {
        print!("{}", table(&records));
    }
    if records.is_empty() {
        eprintln!("no audit records for job {} of tenant {tenant}", args.job);
        return Ok(1);
    }
    Ok(0)
}

fn table(records: &[AuditRecord]) -> String {
    let mut out = format!(
        "{:<24} {:<9} {:<10} {:<16} {:<18} {:<22} {:>7}  {:<12} {}\n",
        "time", "action", "agent", "worker", "tool", "outcome", "ms", "args sha256", "trace"
    );
    for r in records {
        let time = r.at.format(&time::format_description::well_known::Rfc3339).unwrap_or_default();
        let action = match r.action {
            flotilla_shared::protocol::AuditAction::ToolCall => "tool_call",
            flotilla_shared::protocol::AuditAction::Approval => "approval",
        };
        let outcome = match r.error_kind {
            Some(kind) => format!("{} ({kind})", r.outcome.as_str()),
            None => r.outcome.as_str().to_string(),
        };
        out.push_str(&format!(
            "{:<24} {:<9} {:<10} {:<16} {:<18} {:<22} {:>7}  {:<12} {}\n",
            time.chars().take(24).collect::<String>(),
            action,
            r.agent,
            r.worker,
            r.tool,
            outcome,
            r.duration_ms,
            &r.args_sha256[..r.args_sha256.len().min(12)],
            r.trace_id.as_deref().unwrap_or("-"),
        ));
    }
    out
}
