//! Moves job files in and out of a task's scratch dir around each `execute`
//! (`stage_in` / `stage_out` of `[subagents.<type>.sandbox]`), so commands
//! work on the job's shared files without the sandbox ever touching the bus.
//!
//! The type's file permission rules apply exactly as for the built-in file
//! tools: staging in needs `read`, staging out needs `write` (an `interrupt`
//! rule counts as not allowed here: there is no call to approve). Everything
//! below the scratch dir was made by sandboxed commands, so every file is
//! written and read through [`super::beneath`], which never follows a symlink
//! a command planted. A symlink (or FIFO, device, hard link) planted on a
//! path staging in must write is removed and fails the call
//! ([`Staged::planted_error`]); staging out lists regular files only, so a
//! symlink there is simply not a result.
//! Staging in stops at the scratch quota (`scratch_mb`, docs/SANDBOX.md).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use flotilla_config::permissions::{Mode, Operation};
use flotilla_job_files::FilePath;
use flotilla_protocol::ids::JobId;
use flotilla_tools::FileToolEnv;
use globset::{Glob, GlobSet, GlobSetBuilder};
use sha2::{Digest, Sha256};

use super::beneath;

/// Compiled staging rules of one sandbox.
pub struct Staging {
    stage_in: Option<GlobSet>,
    stage_out: Option<GlobSet>,
    /// Bytes a scratch dir may use (`scratch_mb`); staging in stops there.
    quota: u64,
}

/// What one staging pass did, reported to the model.
#[derive(Default, Debug)]
pub struct Staged {
    /// Job paths copied (in or out).
    pub copied: Vec<String>,
    /// Job paths skipped, with why.
    pub skipped: Vec<String>,
    /// Job paths staging in could not write because a command planted a
    /// symlink (or a FIFO, device, hard link) on the way; each such entry was
    /// removed, and `execute` fails the call rather than run the command on
    /// files that were not staged.
    pub planted: Vec<(String, beneath::Planted)>,
}

impl Staged {
    /// The clear error of a staging that met planted entries, saying what
    /// was done and what to do (docs/SANDBOX.md).
    pub fn planted_error(&self) -> Option<String> {
        if self.planted.is_empty() {
            return None;
        }
        let each: Vec<String> = self
            .planted
            .iter()
            .map(|(path, p)| {
                format!("cannot stage {path}: /scratch/{} was {} made by an earlier command", p.entry.display(), p.what)
            })
            .collect();
        Some(format!(
            "{}. Staging never writes through symlinks or special files, so this command was not run and \
             the entry was removed from /scratch (its target is untouched); retry the call, and keep \
             symlinks off the paths stage_in writes to",
            each.join("; ")
        ))
    }
}

fn compile(globs: &[String]) -> anyhow::Result<Option<GlobSet>> {
    if globs.is_empty() {
        return Ok(None);
    }
    let mut b = GlobSetBuilder::new();
    for g in globs {
        b.add(Glob::new(g)?);
    }
    Ok(Some(b.build()?))
}

impl Staging {
    /// From the sandbox config's globs (validated at config load) and the
    /// scratch quota in bytes.
    pub fn new(stage_in: &[String], stage_out: &[String], quota: u64) -> anyhow::Result<Self> {
        Ok(Self { stage_in: compile(stage_in)?, stage_out: compile(stage_out)?, quota })
    }

    /// Copies matching, readable job files into `scratch`. Returns the digest
    /// of each staged file so unchanged ones are not copied back.
    pub async fn stage_in(
        &self,
        env: &FileToolEnv,
        job: &JobId,
        scratch: &Path,
        owner: Option<(u32, u32)>,
        digests: &mut HashMap<String, [u8; 32]>,
    ) -> Staged {
        let mut out = Staged::default();
        let Some(set) = &self.stage_in else { return out };
        let files = match env.files.list(job).await {
            Ok(f) => f,
            Err(e) => {
                out.skipped.push(format!("(job files unavailable: {e})"));
                return out;
            }
        };
        let mut used = blocking(scratch, beneath::usage).await;
        for meta in files.into_iter().filter(|m| set.is_match(m.path.as_str())) {
            let path = meta.path.as_str().to_string();
            if env.permissions.check(Operation::Read, &meta.path) != Mode::Allow {
                out.skipped.push(format!("{path} (read not allowed)"));
                continue;
            }
            let bytes = match env.files.read(job, &meta.path).await {
                Ok(b) => b,
                Err(e) => {
                    out.skipped.push(format!("{path} ({e})"));
                    continue;
                }
            };
            let size = (bytes.len() as u64).max(beneath::MIN_ENTRY_BYTES);
            if used.saturating_add(size) > self.quota {
                out.skipped.push(format!(
                    "{path} (would pass the scratch quota of {} MiB: delete files under /scratch)",
                    self.quota >> 20
                ));
                continue;
            }
            let digest: [u8; 32] = Sha256::digest(&bytes).into();
            let rel = PathBuf::from(path.trim_start_matches('/'));
            let write = move |s: &Path| {
                let root = beneath::open_root(s).map_err(|e| (e, Ok(None)))?;
                beneath::write(&root, &rel, &bytes, owner).map_err(|e| (e, beneath::remove_planted(&root, &rel)))
            };
            match blocking(scratch, write).await {
                Ok(()) => {}
                Err((_, Ok(Some(planted)))) => {
                    out.planted.push((path, planted));
                    continue;
                }
                Err((e, _)) => {
                    out.skipped.push(format!("{path} ({e})"));
                    continue;
                }
            }
            used += size;
            digests.insert(path.clone(), digest);
            out.copied.push(path);
        }
        out
    }

    /// The disk use of `scratch` when it is over the quota (measured after
    /// each command: nothing stops a command mid-way, docs/SANDBOX.md).
    pub async fn over_quota(&self, scratch: &Path) -> Option<u64> {
        let used = blocking(scratch, beneath::usage).await;
        (used > self.quota).then_some(used)
    }

    /// The scratch quota in bytes.
    pub fn quota(&self) -> u64 {
        self.quota
    }

    /// Copies new or changed regular files of `scratch` matching `stage_out`
    /// back to the job files.
    pub async fn stage_out(
        &self,
        env: &FileToolEnv,
        job: &JobId,
        scratch: &Path,
        digests: &mut HashMap<String, [u8; 32]>,
    ) -> Staged {
        let mut out = Staged::default();
        let Some(set) = &self.stage_out else { return out };
        for rel in blocking(scratch, regular_files).await {
            let path = format!("/{rel}");
            if !set.is_match(&path) {
                continue;
            }
            let Ok(file_path) = FilePath::parse(&path) else {
                out.skipped.push(format!("{path} (not a valid job path)"));
                continue;
            };
            if env.permissions.check(Operation::Write, &file_path) != Mode::Allow {
                out.skipped.push(format!("{path} (write not allowed)"));
                continue;
            }
            let max = env.files.max_file_bytes();
            let read = move |s: &Path| beneath::read(&beneath::open_root(s)?, Path::new(&rel), max);
            let bytes = match blocking(scratch, read).await {
                Ok(b) => b,
                Err(e) => {
                    out.skipped.push(format!("{path} ({e})"));
                    continue;
                }
            };
            let digest: [u8; 32] = Sha256::digest(&bytes).into();
            if digests.get(&path) == Some(&digest) {
                continue;
            }
            match env.files.write(job, &file_path, &bytes).await {
                Ok(_) => {
                    digests.insert(path.clone(), digest);
                    out.copied.push(path);
                }
                Err(e) => out.skipped.push(format!("{path} ({e})")),
            }
        }
        out
    }
}

/// Runs blocking filesystem work on `scratch` off the async threads.
async fn blocking<T: Send + 'static>(scratch: &Path, f: impl FnOnce(&Path) -> T + Send + 'static) -> T {
    let scratch: Arc<Path> = scratch.into();
    tokio::task::spawn_blocking(move || f(&scratch)).await.expect("staging task panicked")
}

/// Every regular file under `root` (symlinks and specials skipped, symlinked
/// dirs not entered), as its `/`-separated path relative to `root`. Only a
/// list of candidates: [`beneath::read`] checks each again as it opens it.
fn regular_files(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for e in entries.flatten() {
            let Ok(t) = e.file_type() else { continue };
            let p = e.path();
            if t.is_dir() {
                stack.push(p);
            } else if t.is_file()
                && let Ok(rel) = p.strip_prefix(root)
                && let Some(rel) = rel.to_str()
            {
                out.push(rel.to_string());
            }
        }
    }
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_regular_files_are_listed() {
        let d = std::env::temp_dir().join(format!("staging-{}", uuid::Uuid::now_v7()));
        std::fs::create_dir_all(d.join("out/sub")).unwrap();
        std::fs::write(d.join("out/a.txt"), "a").unwrap();
        std::fs::write(d.join("out/sub/b.txt"), "b").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", d.join("out/leak")).unwrap();
        std::os::unix::fs::symlink("/etc", d.join("out/etc")).unwrap();
        let files: Vec<String> = regular_files(&d);
        assert_eq!(files, vec!["out/a.txt".to_string(), "out/sub/b.txt".to_string()]);
        std::fs::remove_dir_all(&d).unwrap();
    }
}
