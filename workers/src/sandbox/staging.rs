//! Moves job files in and out of a task's scratch dir around each `execute`
//! (`stage_in` / `stage_out` of `[subagents.<type>.sandbox]`), so commands
//! work on the job's shared files without the sandbox ever touching the bus.
//!
//! The type's file permission rules apply exactly as for the built-in file
//! tools: staging in needs `read`, staging out needs `write` (an `interrupt`
//! rule counts as not allowed here: there is no call to approve). Staging out
//! copies only regular files: a symlink the command left in `/scratch` could
//! point anywhere on the host and is skipped.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use flotilla_shared::builtin::FileToolEnv;
use flotilla_shared::files::FilePath;
use flotilla_shared::ids::JobId;
use flotilla_shared::permissions::{Mode, Operation};
use globset::{Glob, GlobSet, GlobSetBuilder};
use sha2::{Digest, Sha256};

/// Compiled staging rules of one sandbox.
pub struct Staging {
    stage_in: Option<GlobSet>,
    stage_out: Option<GlobSet>,
}

/// What one staging pass did, reported to the model.
#[derive(Default, Debug)]
pub struct Staged {
    /// Job paths copied (in or out).
    pub copied: Vec<String>,
    /// Job paths skipped, with why.
    pub skipped: Vec<String>,
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
    /// From the sandbox config's globs (validated at config load).
    pub fn new(stage_in: &[String], stage_out: &[String]) -> anyhow::Result<Self> {
        Ok(Self { stage_in: compile(stage_in)?, stage_out: compile(stage_out)? })
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
            let host = scratch.join(path.trim_start_matches('/'));
            if let Err(e) = write_host(&host, scratch, &bytes, owner) {
                out.skipped.push(format!("{path} ({e})"));
                continue;
            }
            digests.insert(path.clone(), Sha256::digest(&bytes).into());
            out.copied.push(path);
        }
        out
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
        for (host, rel) in regular_files(scratch) {
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
            let Ok(len) = std::fs::symlink_metadata(&host).map(|m| m.len()) else { continue };
            if len > env.files.max_file_bytes() {
                out.skipped.push(format!("{path} ({len} bytes exceeds the file size limit)"));
                continue;
            }
            let Ok(bytes) = std::fs::read(&host) else { continue };
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

/// Writes `bytes` at `host` (inside `scratch`), creating parents, handing
/// new dirs and the file to the sandbox user.
fn write_host(host: &Path, scratch: &Path, bytes: &[u8], owner: Option<(u32, u32)>) -> std::io::Result<()> {
    let parent = host.parent().unwrap_or(scratch);
    std::fs::create_dir_all(parent)?;
    // Never write through a symlink a previous command planted.
    if std::fs::symlink_metadata(host).is_ok_and(|m| !m.file_type().is_file()) {
        return Err(std::io::Error::other("exists and is not a regular file"));
    }
    std::fs::write(host, bytes)?;
    if let Some((uid, gid)) = owner {
        let mut dir = parent.to_path_buf();
        while dir.starts_with(scratch) && dir != scratch {
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid))?;
            dir = dir.parent().map(Path::to_path_buf).unwrap_or_default();
        }
        std::os::unix::fs::chown(host, Some(uid), Some(gid))?;
    }
    Ok(())
}

/// Every regular file under `root` (symlinks and specials skipped), with its
/// `/`-separated path relative to `root`.
fn regular_files(root: &Path) -> Vec<(PathBuf, String)> {
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
                out.push((p.clone(), rel.to_string()));
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
        let files: Vec<String> = regular_files(&d).into_iter().map(|(_, r)| r).collect();
        assert_eq!(files, vec!["out/a.txt".to_string(), "out/sub/b.txt".to_string()]);
        assert!(write_host(&d.join("out/leak"), &d, b"x", None).is_err(), "never writes through a symlink");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
