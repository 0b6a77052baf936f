//! `[files.staging]`: uploads in parts that are not committed yet
//! (docs/CONFIG.md, docs/PROTOCOL.md "Job files"). Staged parts share the
//! job-files bucket with every tenant's files, so each tenant may keep only
//! so much there, and only for so long.

use serde::{Deserialize, Serialize};

/// `[files.staging]`: the per-tenant quota and lifetime of staged upload parts.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct StagingConfig {
    /// Most bytes of uncommitted parts one tenant may keep at once; a
    /// `files_put` past it is refused with a `limit` error. At least
    /// `[files] max_upload_bytes`, so one whole upload always fits.
    pub max_tenant_bytes: u64,
    /// Seconds a staged part is kept: older parts no longer count against the
    /// quota and are deleted by the next `files_put` (of any tenant); the
    /// bucket's `[files] max_age` removes them too, whichever comes first.
    /// At least 60.
    pub max_age: u64,
}

impl Default for StagingConfig {
    fn default() -> Self {
        Self { max_tenant_bytes: 128 * 1024 * 1024, max_age: 3600 }
    }
}

impl StagingConfig {
    /// Checks the keys against the `[files]` settings they depend on; the
    /// error names the key and what it must be.
    pub fn check(&self, max_upload_bytes: u64) -> Result<(), (&'static str, String)> {
        if self.max_tenant_bytes < max_upload_bytes {
            return Err((
                "files.staging.max_tenant_bytes",
                format!("must be at least files.max_upload_bytes ({max_upload_bytes} bytes), so one upload fits"),
            ));
        }
        if self.max_age < 60 {
            return Err(("files.staging.max_age", "must be at least 60 (seconds a staged upload part is kept)".into()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_pass_and_bad_values_name_their_key() {
        assert!(StagingConfig::default().check(64 << 20).is_ok());
        let small = StagingConfig { max_tenant_bytes: 1, ..Default::default() };
        assert_eq!(small.check(2).unwrap_err().0, "files.staging.max_tenant_bytes");
        let short = StagingConfig { max_age: 59, ..Default::default() };
        assert_eq!(short.check(1).unwrap_err().0, "files.staging.max_age");
    }
}
