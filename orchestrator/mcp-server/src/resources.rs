//! Job files as MCP resources: `flotilla://jobs/<job id>/files/<path>`
//! (docs/MCP.md, "Use Flotilla from an MCP host"), so a host can read a
//! job's reports and outputs once `job_status` names them. Read through the
//! job API's `files_get` like `flotilla files get` (orchestrator/cli/src/commands/files.rs), checked
//! against the file's sha256. UTF-8 files come back as text, others as
//! base64 blobs. The job id may be a unique prefix, as for the tools.
//!
//! A URI that names no file of the caller's jobs is an error, never empty
//! `contents` (SEP-2164), and the error's `data` is `{"uri": ...}` so a
//! host can tell which of its reads failed. A malformed URI is invalid
//! params; a missing job or file is resource-not-found (-32002), which rmcp
//! sends as -32602 to 2026-07-28 clients, the code SEP-2164 settled on.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use rmcp::ErrorData;
use rmcp::model::{ReadResourceResult, ResourceContents, ResourceTemplate};

use flotilla_client::Client;
use flotilla_client::JobRef;

/// The URI scheme and prefix of job files.
const PREFIX: &str = "flotilla://jobs/";
/// RFC 6570: `{+path}` keeps the path's slashes.
pub const TEMPLATE: &str = "flotilla://jobs/{job_id}/files/{+path}";

/// The one resource template this server offers.
pub fn template() -> ResourceTemplate {
    ResourceTemplate::new(TEMPLATE, "job_file").with_title("A job's file").with_description(
        "A file of a job (running or finished, within retention): its inputs, the subagents' reports \
             (/reports/<task>.md) and outputs. job_id may be a unique prefix; path is absolute without its \
             leading slash, e.g. flotilla://jobs/<id>/files/inputs/notes.txt",
    )
}

/// `(job, /path)` from a job file URI, or why it is not one.
pub fn parse(uri: &str) -> Result<(JobRef, String), String> {
    let rest = uri.strip_prefix(PREFIX).ok_or_else(|| format!("{uri}: not a job file URI; use {TEMPLATE}"))?;
    let (job, path) = rest.split_once("/files/").ok_or_else(|| format!("{uri}: no /files/ part; use {TEMPLATE}"))?;
    let job: JobRef = job.parse().map_err(|e| format!("{uri}: {e}"))?;
    if path.is_empty() {
        return Err(format!("{uri}: names no file; use {TEMPLATE}"));
    }
    Ok((job, format!("/{path}")))
}

/// Reads the file `uri` names.
pub async fn read(api: &Client, uri: &str) -> Result<ReadResourceResult, ErrorData> {
    let (job, path) = parse(uri).map_err(|e| ErrorData::invalid_params(e, Some(naming(uri))))?;
    let id = api.resolve(&job).await.map_err(|e| not_found(uri, e))?;
    let (bytes, _) = api.download(id, &path).await.map_err(|e| not_found(uri, e))?;
    let contents = match String::from_utf8(bytes) {
        Ok(text) => ResourceContents::text(text, uri),
        Err(e) => ResourceContents::blob(STANDARD.encode(e.into_bytes()), uri),
    };
    Ok(ReadResourceResult::new(vec![contents]))
}

/// A job API refusal as MCP's "resource not found", with the API's message.
fn not_found(uri: &str, e: anyhow::Error) -> ErrorData {
    ErrorData::resource_not_found(format!("{uri}: {e:#}"), Some(naming(uri)))
}

/// The error data naming the URI read.
fn naming(uri: &str) -> serde_json::Value {
    serde_json::json!({ "uri": uri })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_name_a_job_and_an_absolute_path() {
        let id = flotilla_protocol::ids::JobId::new();
        let (job, path) = parse(&format!("flotilla://jobs/{id}/files/reports/t1.md")).unwrap();
        assert_eq!((job, path.as_str()), (JobRef::Id(id), "/reports/t1.md"));
        let (job, _) = parse("flotilla://jobs/0195f3a2/files/inputs/a.csv").unwrap();
        assert_eq!(job, JobRef::Prefix("0195f3a2".into()));
        assert!(parse("file:///etc/passwd").unwrap_err().contains("not a job file URI"));
        assert!(parse(&format!("flotilla://jobs/{id}/files/")).unwrap_err().contains("names no file"));
        assert!(parse("flotilla://jobs/xyz/files/a").unwrap_err().contains("flotilla://jobs/xyz"));
    }

    #[test]
    fn a_missing_file_is_resource_not_found_naming_the_uri() {
        let uri = "flotilla://jobs/0195f3a2/files/inputs/missing.txt";
        let e = not_found(uri, anyhow::anyhow!("no such file"));
        assert_eq!(e.code, rmcp::model::ErrorCode::RESOURCE_NOT_FOUND);
        assert_eq!(e.data, Some(serde_json::json!({"uri": uri})));
        assert!(e.message.contains("no such file"), "{}", e.message);
    }
}
