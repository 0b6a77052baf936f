//! `flotilla approvals`: tool calls (and MCP servers' questions) waiting for
//! a person, oldest first.

use clap::Args as ClapArgs;
use flotilla_config::Settings;
use flotilla_protocol::ids::Tenant;
use flotilla_protocol::{ApprovalKind, ApprovalRequest, ApprovalsRequest, SCHEMA_VERSION};

use super::out::{self, out, outln};
use super::{connect, render, table};
use flotilla_client::JobRef;

/// List pending approval requests.
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// Only this job's requests (its id, its short id as displayed, or a unique prefix).
    #[arg(long)]
    pub job: Option<JobRef>,
}

/// Runs the command; `json`: print the approvals reply (`{"approvals":
/// [...]}`, the full requests, arguments included).
pub async fn run(settings: &Settings, tenant: &Tenant, args: Args, json: bool) -> anyhow::Result<i32> {
    let api = connect(settings, tenant).await?;
    let job_id = match &args.job {
        Some(job) => Some(api.resolve(job).await?),
        None => None,
    };
    let req = ApprovalsRequest { v: SCHEMA_VERSION, job_id };
    let list = api.call(&req, "approvals").await?;
    if json {
        out::json(&list)?;
        return Ok(0);
    }
    if list.approvals.is_empty() {
        outln!("no pending approvals")?;
        return Ok(0);
    }
    out!("{}", table(&list.approvals, flotilla_protocol::now()))?;
    Ok(0)
}

/// The human table, one line per request; arguments cut to a preview
/// (`--json` has them whole).
fn table(approvals: &[ApprovalRequest], now: time::OffsetDateTime) -> String {
    let mut t = table::new(&["JOB", "CALL", "TOOL", "DECISIONS", "EXPIRES", "ARGS"]);
    table::align_right(&mut t, &[4]);
    for r in approvals {
        let decisions: Vec<_> = r.decisions.iter().map(|d| d.as_str()).collect();
        t.add_row([
            r.job_id.to_string(),
            render::one_line(&r.call_id, 40),
            r.tool.clone(),
            decisions.join(","),
            format!("{}s", (r.expires_at - now).whole_seconds().max(0)),
            render::one_line(&shown(r), 60),
        ]);
    }
    table::render(t, "")
}

/// What the ARGS column shows: the call's arguments, or for an MCP
/// server's question (elicitation) the server and its message (`--json` has
/// the requested schema).
fn shown(r: &ApprovalRequest) -> String {
    match (r.kind, &r.message) {
        (ApprovalKind::Elicitation, Some(message)) => {
            format!("{} asks: {message}", r.server.as_deref().unwrap_or("server"))
        }
        _ => r.args.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(call_id: &str, tool: &str, args: serde_json::Value) -> ApprovalRequest {
        serde_json::from_value(serde_json::json!({
            "v": 1, "job_id": uuid::Uuid::now_v7(), "task_id": uuid::Uuid::now_v7(), "tenant": "default",
            "subagent_type": "finance", "worker_id": "w1", "call_id": call_id, "tool": tool, "args": args,
            "input_schema": {"type": "object"}, "decisions": ["approve", "reject"],
            "requested_at": "1970-01-01T00:00:00Z", "expires_at": "1970-01-01T00:05:00Z",
        }))
        .expect("approval request")
    }

    #[test]
    fn provider_call_ids_and_long_tool_names_keep_the_columns_aligned() {
        let now = time::OffsetDateTime::UNIX_EPOCH;
        let long_args = serde_json::json!({"path": "/out.txt", "content": "x".repeat(200)});
        let text = table(
            &[
                request("toolu_01A09q90qw90lq917835lq9", "finance_calculate_gross_margin", long_args),
                request("c1", "write_file", serde_json::json!({"path": "/a"})),
            ],
            now,
        );
        let lines: Vec<&str> = text.lines().collect();
        let decisions = lines[0].find("DECISIONS").unwrap();
        let args = lines[0].find("ARGS").unwrap();
        for row in &lines[1..] {
            assert_eq!(row.find("approve,reject"), Some(decisions), "{text}");
            assert_eq!(row.find("{\""), Some(args), "{text}");
        }
        assert!(lines[1].contains("300s") && lines[1].ends_with('…'), "{text}");
        assert!(lines[1].chars().count() < 250, "arguments are cut to a preview: {text}");
    }
}
