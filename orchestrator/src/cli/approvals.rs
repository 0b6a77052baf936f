//! `flotilla approvals`: tool calls waiting for a person, oldest first.

use std::time::Duration;

use clap::Args as ClapArgs;
use flotilla_shared::config::Settings;
use flotilla_shared::ids::{JobId, Tenant};
use flotilla_shared::protocol::{ApiReply, ApprovalsReply, ApprovalsRequest, SCHEMA_VERSION};

use super::connect;

/// List pending approval requests.
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// Only this job's requests.
    #[arg(long)]
    pub job: Option<JobId>,
    /// Print JSON (the full requests, arguments included).
    #[arg(long)]
    pub json: bool,
}

/// Runs the command.
pub async fn run(settings: &Settings, tenant: &Tenant, args: Args) -> anyhow::Result<i32> {
    let api = connect(settings, tenant).await?;
    let req = ApprovalsRequest { v: SCHEMA_VERSION, job_id: args.job };
    let reply: ApiReply<ApprovalsReply> = api.bus.request(tenant, "approvals", &req, Duration::from_secs(10)).await?;
    let list = reply.into_result().map_err(|e| anyhow::anyhow!("{e}"))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&list.approvals)?);
        return Ok(0);
    }
    if list.approvals.is_empty() {
        println!("no pending approvals");
        return Ok(0);
    }
    println!("{:<36}  {:<16}  {:<20}  {:<20}  {:>7}  ARGS", "JOB", "CALL", "TOOL", "DECISIONS", "EXPIRES");
    let now = flotilla_shared::protocol::now();
    for r in &list.approvals {
        let decisions: Vec<_> = r.decisions.iter().map(|d| d.as_str()).collect();
        let mut args = r.args.to_string();
        if args.len() > 60 {
            let mut end = 57;
            while !args.is_char_boundary(end) {
                end -= 1;
            }
            args = format!("{}...", &args[..end]);
        }
        println!(
            "{:<36}  {:<16}  {:<20}  {:<20}  {:>6}s  {}",
            r.job_id,
            r.call_id,
            r.tool,
            decisions.join(","),
            (r.expires_at - now).whole_seconds().max(0),
            args
        );
    }
    Ok(0)
}
