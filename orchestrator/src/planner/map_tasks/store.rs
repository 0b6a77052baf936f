//! Where a map keeps its state between orchestrator restarts: job files
//! under `/maps/<id>/` (docs/TOOLS.md, "map_tasks").
//!
//! - `progress.json` ([`MapProgress`]): the done watermark (every item below
//!   it has its results line stored), the counts so far, the number of parts
//!   and whether the results file is written. It is small and rewritten per
//!   part, so a resume costs O(1) reads, not one per item.
//! - `part-<k>.jsonl`: the results lines of consecutive items, written before
//!   the progress record that counts them (a crash between the two rewrites
//!   the same part on resume).
//! - `/maps/<id>.jsonl`: the parts joined once every item has ended; the parts
//!   are removed only after the progress record says it is written.
//!
//! Items above the watermark that were already dispatched are not lost on a
//! restart: their dispatch key makes `Dispatcher::start` hand back the same
//! task, whose report is then awaited or read back.

use flotilla_agent::tool::ToolError;
use flotilla_job_files::{FileError, FilePath, JobFiles};
use flotilla_protocol::ErrorKind;
use flotilla_protocol::ids::JobId;
use serde::{Deserialize, Serialize};

/// Version of [`MapProgress`].
pub const PROGRESS_VERSION: u32 = 1;

/// A map's progress record (`/maps/<id>/progress.json`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MapProgress {
    /// Schema version; readers accept unknown fields.
    pub v: u32,
    /// Items in the items file.
    pub total: usize,
    /// Items `[0, done)` have their results line in the parts.
    pub done: usize,
    /// Completed items below `done`.
    pub completed: usize,
    /// Items below `done` that did not complete.
    pub failed: usize,
    /// Parts written (`part-000000` to `part-<parts - 1>`).
    pub parts: usize,
    /// Whether `/maps/<id>.jsonl` holds every line.
    #[serde(default)]
    pub finished: bool,
}

impl MapProgress {
    /// A map of `total` items that has not started.
    pub fn new(total: usize) -> Self {
        Self { v: PROGRESS_VERSION, total, done: 0, completed: 0, failed: 0, parts: 0, finished: false }
    }
}

/// One map's files.
#[derive(Clone)]
pub struct MapFiles {
    files: JobFiles,
    job: JobId,
    id: String,
}

impl MapFiles {
    /// The files of map `id` (a path-safe name) of `job`.
    pub fn new(files: JobFiles, job: JobId, id: String) -> Self {
        Self { files, job, id }
    }

    /// `/maps/<id>.jsonl`.
    pub fn results_path(&self) -> String {
        format!("/maps/{}.jsonl", self.id)
    }

    fn path(&self, raw: &str) -> Result<FilePath, ToolError> {
        FilePath::parse(raw).map_err(|e| ToolError::new(ErrorKind::Bug, format!("map file path {raw}: {e}")))
    }

    fn progress_path(&self) -> String {
        format!("/maps/{}/progress.json", self.id)
    }

    fn part_path(&self, k: usize) -> String {
        format!("/maps/{}/part-{k:06}.jsonl", self.id)
    }

    /// The stored progress, `None` for a map that never started.
    pub async fn load(&self) -> Result<Option<MapProgress>, ToolError> {
        let path = self.path(&self.progress_path())?;
        match self.files.read(&self.job, &path).await {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| ToolError::new(ErrorKind::Bug, format!("{path} is not a map progress record: {e}"))),
            Err(FileError::NotFound(_)) => Ok(None),
            Err(e) => Err(file_error(e)),
        }
    }

    /// Stores `progress`.
    pub async fn save(&self, progress: &MapProgress) -> Result<(), ToolError> {
        let bytes = serde_json::to_vec(progress).map_err(|e| ToolError::new(ErrorKind::Bug, e.to_string()))?;
        self.write(&self.progress_path(), bytes.as_slice()).await
    }

    /// Stores part `k` (JSONL lines).
    pub async fn write_part(&self, k: usize, lines: &str) -> Result<(), ToolError> {
        self.write(&self.part_path(k), lines.as_bytes()).await
    }

    /// Joins the parts into the results file, marks `progress` finished and
    /// removes the parts (a failed removal only leaves them behind).
    pub async fn finish(&self, progress: &mut MapProgress) -> Result<(), ToolError> {
        let mut all = Vec::new();
        for k in 0..progress.parts {
            let path = self.path(&self.part_path(k))?;
            all.extend(self.files.read(&self.job, &path).await.map_err(file_error)?);
        }
        self.write(&self.results_path(), &all).await.map_err(|e| ToolError {
            message: format!("{}; the results stay in {} parts under /maps/{}/", e.message, progress.parts, self.id),
            ..e
        })?;
        drop(all);
        progress.finished = true;
        self.save(progress).await?;
        for k in 0..progress.parts {
            let path = self.path(&self.part_path(k))?;
            if let Err(e) = self.files.delete(&self.job, &path).await {
                tracing::warn!(job_id = %self.job, error = %e, "map part not removed");
            }
        }
        Ok(())
    }

    /// Writes under the reserved `/maps` (shared/job-files/src/reserved.rs):
    /// no agent or client can forge a map's results or progress.
    async fn write(&self, raw: &str, bytes: &[u8]) -> Result<(), ToolError> {
        let path = self.path(raw)?;
        self.files.write_reserved(&self.job, &path, bytes).await.map(drop).map_err(file_error)
    }
}

/// A job-file error as the planner reads it.
pub fn file_error(e: FileError) -> ToolError {
    match e {
        FileError::NotFound(p) => ToolError::new(ErrorKind::NotFound, format!("file not found: {p}")),
        e @ FileError::TooLarge { .. } => ToolError::new(ErrorKind::Limit, e.to_string()),
        e @ (FileError::Path(_) | FileError::Reserved { .. }) => ToolError::validation(e.to_string()),
        e @ FileError::Tampered { .. } => ToolError::business(e.to_string()),
        e => ToolError::transient(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(files: &JobFiles, job: JobId) -> MapFiles {
        MapFiles::new(files.clone(), job, "call_1-ab12".into())
    }

    #[tokio::test]
    async fn progress_round_trips_and_a_new_map_has_none() {
        let (files, job) = (JobFiles::in_memory(1 << 20), JobId::new());
        let m = map(&files, job);
        assert_eq!(m.load().await.unwrap(), None);
        let p = MapProgress { done: 3, completed: 2, failed: 1, parts: 1, ..MapProgress::new(10) };
        m.save(&p).await.unwrap();
        assert_eq!(m.load().await.unwrap(), Some(p));
    }

    #[tokio::test]
    async fn finishing_joins_the_parts_in_order_then_removes_them() {
        let (files, job) = (JobFiles::in_memory(1 << 20), JobId::new());
        let m = map(&files, job);
        m.write_part(0, "{\"index\":0}\n{\"index\":1}\n").await.unwrap();
        m.write_part(1, "{\"index\":2}\n").await.unwrap();
        let mut p = MapProgress { done: 3, completed: 3, parts: 2, ..MapProgress::new(3) };
        m.finish(&mut p).await.unwrap();

        let results = files.read(&job, &FilePath::parse("/maps/call_1-ab12.jsonl").unwrap()).await.unwrap();
        assert_eq!(String::from_utf8(results).unwrap(), "{\"index\":0}\n{\"index\":1}\n{\"index\":2}\n");
        assert!(m.load().await.unwrap().unwrap().finished);
        let left: Vec<String> = files.list(&job).await.unwrap().into_iter().map(|f| f.path.to_string()).collect();
        assert_eq!(left, ["/maps/call_1-ab12.jsonl", "/maps/call_1-ab12/progress.json"]);
    }

    #[tokio::test]
    async fn results_over_the_file_cap_are_a_limit_error_that_keeps_the_parts() {
        let (files, job) = (JobFiles::in_memory(16), JobId::new());
        let m = map(&files, job);
        m.write_part(0, "0123456789\n").await.unwrap();
        m.write_part(1, "0123456789\n").await.unwrap();
        let mut p = MapProgress { done: 2, completed: 2, parts: 2, ..MapProgress::new(2) };
        let e = m.finish(&mut p).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::Limit);
        assert!(e.message.contains("stay in 2 parts under /maps/call_1-ab12/"), "{}", e.message);
        assert!(!p.finished);
        assert_eq!(files.list(&job).await.unwrap().len(), 2, "both parts kept");
    }
}
