//! The staging quota of `files_put` (docs/CONFIG.md, `[files.staging]`).
//!
//! Staged parts live in the bucket every tenant's files share, until a
//! commit or submit assembles them or they expire, so without a bound one
//! tenant could fill the store for all. Before a part is stored, the parts
//! already staged are counted from the store itself (an upload's parts may
//! reach any orchestrator of the queue group, so no process's memory knows
//! them all):
//!
//! - parts older than `max_age` are deleted (any tenant's) and count for nothing;
//! - the upload's own parts plus this one must fit `[files] max_upload_bytes`
//!   (counted as they arrive, not only at commit);
//! - the tenant's parts plus this one must fit `max_tenant_bytes`.
//!
//! Puts of one tenant take a lock in this process, so parallel parts do not
//! all pass the same count; across orchestrators the quota can be passed by
//! at most one part per orchestrator. The count lists the bucket (as
//! `files_ls` does), which is cheap for thousands of objects.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use flotilla_config::staging::StagingConfig;
use flotilla_job_files::JobFiles;
use flotilla_protocol::ErrorKind;
use flotilla_protocol::files_api::UploadId;
use flotilla_protocol::ids::Tenant;
use time::OffsetDateTime;

use super::{Refusal, refusal};

/// Most expired parts one put deletes, so a put after a long quiet spell stays short.
const SWEEP_BATCH: usize = 256;

/// The quota and the per-tenant locks.
pub(super) struct Staging {
    /// `[files.staging] max_tenant_bytes`.
    max_tenant_bytes: u64,
    /// `[files.staging] max_age`.
    max_age: Duration,
    /// `[files] max_upload_bytes`: the most one upload may stage.
    max_upload_bytes: u64,
    /// One lock per tenant: its puts are counted one at a time.
    locks: Mutex<HashMap<Tenant, Arc<tokio::sync::Mutex<()>>>>,
}

/// The part being admitted.
pub(super) struct Part<'a> {
    pub tenant: &'a Tenant,
    pub upload: &'a UploadId,
    pub index: u32,
    pub size: u64,
}

impl Staging {
    pub(super) fn new(config: &StagingConfig, max_upload_bytes: u64) -> Self {
        Self {
            max_tenant_bytes: config.max_tenant_bytes,
            max_age: Duration::from_secs(config.max_age),
            max_upload_bytes,
            locks: Mutex::default(),
        }
    }

    /// Stores `bytes` as `part` if the quota admits it.
    pub(super) async fn put(&self, files: &JobFiles, part: Part<'_>, bytes: &[u8]) -> Result<(), Refusal> {
        let lock = {
            let mut locks = self.locks.lock().unwrap_or_else(|e| e.into_inner());
            locks.entry(part.tenant.clone()).or_default().clone()
        };
        let _held = lock.lock().await;
        let (tenant_bytes, upload_bytes) = self.count(files, &part).await?;
        if upload_bytes + part.size > self.max_upload_bytes {
            return Err((
                ErrorKind::Limit,
                format!(
                    "upload {} would stage {} bytes, over [files] max_upload_bytes ({} bytes); send fewer or \
                     smaller files",
                    part.upload,
                    upload_bytes + part.size,
                    self.max_upload_bytes
                ),
            ));
        }
        if tenant_bytes + part.size > self.max_tenant_bytes {
            return Err((
                ErrorKind::Limit,
                format!(
                    "tenant {} has {tenant_bytes} bytes staged in uploads not committed yet; this part would pass \
                     [files.staging] max_tenant_bytes ({} bytes): commit or submit the staged uploads, or wait \
                     until they expire ([files.staging] max_age, {} s)",
                    part.tenant,
                    self.max_tenant_bytes,
                    self.max_age.as_secs()
                ),
            ));
        }
        files.stage_part(part.tenant, part.upload, part.index, bytes).await.map_err(refusal)
    }

    /// The bytes `part`'s tenant and upload have staged, without the part it
    /// replaces; deletes expired parts on the way.
    async fn count(&self, files: &JobFiles, part: &Part<'_>) -> Result<(u64, u64), Refusal> {
        let (tenant, upload) = (part.tenant.as_str(), part.upload.to_string());
        let now = OffsetDateTime::now_utc();
        let (mut tenant_bytes, mut upload_bytes, mut swept) = (0, 0, 0);
        for staged in files.staged_parts().await.map_err(refusal)? {
            let expired = staged.modified.is_some_and(|m| now - m > self.max_age);
            if expired {
                if swept < SWEEP_BATCH {
                    swept += 1;
                    if let Err(e) = files.delete_staged(&staged).await {
                        tracing::debug!(error = %e, "expired upload part not deleted; max_age will");
                    }
                }
                continue;
            }
            if staged.tenant != tenant {
                continue;
            }
            let same_upload = staged.upload == upload;
            if same_upload && staged.index == part.index {
                continue; // replaced by this put
            }
            tenant_bytes += staged.size;
            if same_upload {
                upload_bytes += staged.size;
            }
        }
        if swept > 0 {
            tracing::info!(parts = swept, "expired upload parts deleted");
        }
        Ok((tenant_bytes, upload_bytes))
    }
}
