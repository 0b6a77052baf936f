//! `[files]`: job files (retention, size limit) and large-result eviction.

use serde::{Deserialize, Serialize};

/// `[files]`: the job files every agent of a job shares.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct FilesConfig {
    /// Seconds a file is kept after its last write (the bucket's `max_age`).
    /// Keep it equal across processes: the last process to start sets it.
    pub max_age: u64,
    /// Largest file a tool may write, in bytes.
    pub max_file_bytes: u64,
    /// Tool results (and task reports) above this many tokens, estimated at 4
    /// characters per token, go to `/large_tool_results/...` and the model gets
    /// a reference instead. 0 turns eviction off.
    pub large_result_tokens: u64,
    /// Most bytes one `flotilla submit --file ...` (or `files put`) may
    /// upload in total through the job API (docs/TOOLS.md, "Job inputs").
    pub max_upload_bytes: u64,
    /// `[files.staging]`: quota and lifetime of uploads not committed yet.
    pub staging: crate::staging::StagingConfig,
}

impl Default for FilesConfig {
    fn default() -> Self {
        Self {
            max_age: 7 * 24 * 3600,
            max_file_bytes: 16 * 1024 * 1024,
            large_result_tokens: 20_000,
            max_upload_bytes: 64 * 1024 * 1024,
            staging: Default::default(),
        }
    }
}

impl FilesConfig {
    /// The eviction threshold in bytes of model text, `None` when off.
    pub fn large_result_bytes(&self) -> Option<usize> {
        (self.large_result_tokens > 0).then(|| (self.large_result_tokens as usize).saturating_mul(4))
    }
}
