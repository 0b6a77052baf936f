//! `[jobs]`: how long finished jobs are kept (docs/OPERATIONS.md,
//! "What is kept how long").

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// `[jobs]`: job history.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct JobsConfig {
    /// Days a finished job (completed, failed, cancelled) is kept after its
    /// last change: then the orchestrator deletes its records, index entry
    /// and files. Fractions are allowed (0.5 = 12 hours). Running jobs never expire.
    pub retention_days: f64,
}

impl Default for JobsConfig {
    fn default() -> Self {
        Self { retention_days: 30.0 }
    }
}

impl JobsConfig {
    /// The retention as a duration.
    pub fn retention(&self) -> Duration {
        Duration::from_secs_f64(self.retention_days * 86_400.0)
    }
}
