//! A job's `map_tasks` calls as the job page's progress shows them: each
//! map keeps a small progress record in the job's files
//! (`/maps/<id>/progress.json`, docs/TOOLS.md "map_tasks"), read here
//! through the job API's `files_ls` and `files_get` like any file, so the
//! bar knows a map's item count before every item is dispatched.

use flotilla_client::Client;
use flotilla_protocol::SCHEMA_VERSION;
use flotilla_protocol::files_api::FilesLsRequest;
use flotilla_protocol::ids::{JobId, Tenant};
use serde::Deserialize;

use super::view::MapView;

/// The fields of a map's progress record the page shows; the record's
/// other fields are ignored.
#[derive(Deserialize)]
struct Progress {
    total: u64,
    done: u64,
    completed: u64,
    failed: u64,
    #[serde(default)]
    finished: bool,
}

/// Maps read per page at most: a job with more shows the first ones.
const MAX_MAPS: usize = 20;

/// The maps of `tenant`'s job `job`, oldest id first; a map whose record
/// cannot be read is left out (the page still shows the job's own counts).
pub async fn of_job(client: &Client, tenant: &Tenant, job: JobId) -> Vec<MapView> {
    let api = client.for_tenant(tenant.clone());
    let req =
        FilesLsRequest { v: SCHEMA_VERSION, job_id: job, prefix: Some("/maps/".into()), after: None, limit: None };
    let listed = match api.call(&req, "files_ls").await {
        Ok(l) => l,
        Err(e) => {
            tracing::debug!(job_id = %job, error = %format!("{e:#}"), "maps not listed");
            return Vec::new();
        }
    };
    let mut maps = Vec::new();
    for f in listed.files.iter().filter(|f| f.path.ends_with("/progress.json")).take(MAX_MAPS) {
        let Some(id) = f.path.strip_prefix("/maps/").and_then(|p| p.strip_suffix("/progress.json")) else { continue };
        let parsed = match api.download(job, &f.path).await {
            Ok((bytes, _)) => serde_json::from_slice::<Progress>(&bytes).ok(),
            Err(_) => None,
        };
        if let Some(p) = parsed {
            maps.push(MapView {
                id: id.to_string(),
                total: p.total,
                done: p.done,
                completed: p.completed,
                failed: p.failed,
                finished: p.finished,
            });
        }
    }
    maps
}
