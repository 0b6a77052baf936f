//! File operations inside a task's scratch dir that never follow a symlink.
//!
//! Everything in a scratch dir below its top was made by sandboxed commands,
//! which may plant symlinks (`ln -s /etc /scratch/data`), FIFOs or hard
//! links there for the worker to trip over when it stages files in and out
//! (docs/SANDBOX.md "Job files in and out of /scratch"). So the worker never
//! uses a path below the scratch dir: it opens the scratch dir once, then
//! every component with openat2(2) and `RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS`, creates dirs with mkdirat(2) in an opened parent,
//! and writes, reads and chowns through the opened descriptors. A symlink
//! anywhere on the way is an error, not a detour to the host.
//!
//! The scratch dir itself sits in the worker's private root (mode 0711,
//! owned by the worker; `super::Sandbox::start`), so its own path is trusted.
//! All of this is blocking: callers run it on `spawn_blocking`.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::AtFlags;
use nix::fcntl::{OFlag, OpenHow, ResolveFlag, openat2, readlinkat};
use nix::libc;
use nix::sys::stat::{Mode, fstatat, mkdirat};
use nix::unistd::{UnlinkatFlags, unlinkat};

/// Disk use counted for every entry at least (an inode and a block), so a
/// flood of empty files counts against the quota too.
pub const MIN_ENTRY_BYTES: u64 = 4096;

/// Opens the scratch dir itself (not following a symlink at its last component).
pub fn open_root(scratch: &Path) -> io::Result<File> {
    std::fs::OpenOptions::new().read(true).custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW).open(scratch)
}

fn how(flags: OFlag) -> OpenHow {
    OpenHow::new()
        .flags(flags | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW)
        .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_SYMLINKS | ResolveFlag::RESOLVE_NO_MAGICLINKS)
}

/// A clear reason for a refused component.
fn refused(rel: &Path, e: Errno) -> io::Error {
    let shown = format!("/scratch/{}", rel.display());
    match e {
        Errno::ELOOP | Errno::EXDEV => {
            io::Error::other(format!("{shown} is, or lies under, a symlink in /scratch: it is never followed"))
        }
        Errno::ENOTDIR => io::Error::other(format!("{shown}: a parent of it in /scratch is not a directory")),
        e => io::Error::other(format!("{shown}: {e}")),
    }
}

/// `ELOOP` when `name` in `dir` is a symlink (openat2 reports one met with
/// `O_DIRECTORY` as `ENOTDIR`), else `e`.
fn symlink_or(dir: &File, name: &std::ffi::OsStr, e: Errno) -> Errno {
    match fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(st) if st.st_mode & libc::S_IFMT == libc::S_IFLNK => Errno::ELOOP,
        _ => e,
    }
}

/// `rel` as its normal components; anything else (`..`, `/`) is refused.
fn components(rel: &Path) -> io::Result<Vec<&std::ffi::OsStr>> {
    rel.components()
        .map(|c| match c {
            Component::Normal(n) => Ok(n),
            _ => Err(io::Error::other(format!("{} is not a plain relative path", rel.display()))),
        })
        .collect()
}

/// Opens the dir `rel` beneath `root` one component at a time, creating the
/// missing ones (handed to `owner`).
fn open_dirs(root: &File, rel: &Path, owner: Option<(u32, u32)>) -> io::Result<File> {
    let mut dir = root.try_clone()?;
    let mut so_far = std::path::PathBuf::new();
    for name in components(rel)? {
        so_far.push(name);
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY;
        dir = match openat2(&dir, name, how(flags)) {
            Ok(fd) => File::from(fd),
            Err(Errno::ENOENT) => {
                mkdirat(&dir, name, Mode::from_bits_truncate(0o755)).map_err(|e| refused(&so_far, e))?;
                let made = File::from(openat2(&dir, name, how(flags)).map_err(|e| refused(&so_far, e))?);
                if let Some((uid, gid)) = owner {
                    std::os::unix::fs::fchown(&made, Some(uid), Some(gid))?;
                }
                made
            }
            Err(e) => return Err(refused(&so_far, symlink_or(&dir, name, e))),
        };
    }
    Ok(dir)
}

/// Writes `bytes` to the file `rel` beneath `root`, creating its parent dirs;
/// new dirs and the file go to `owner`. An existing entry must be a regular
/// file with no other hard link.
pub fn write(root: &File, rel: &Path, bytes: &[u8], owner: Option<(u32, u32)>) -> io::Result<()> {
    let (Some(parent), Some(name)) = (rel.parent(), rel.file_name()) else {
        return Err(io::Error::other(format!("{} names no file", rel.display())));
    };
    let dir = open_dirs(root, parent, owner)?;
    // O_NONBLOCK: a FIFO planted here must fail the open, not hang the worker.
    let flags = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_NONBLOCK;
    let fd = openat2(&dir, name, how(flags).mode(Mode::from_bits_truncate(0o644))).map_err(|e| refused(rel, e))?;
    let mut file = File::from(fd);
    let meta = file.metadata()?;
    if !meta.file_type().is_file() || meta.nlink() != 1 {
        return Err(io::Error::other(format!(
            "/scratch/{} exists and is not a regular file with a single link",
            rel.display()
        )));
    }
    file.set_len(0)?;
    file.write_all(bytes)?;
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::fchown(&file, Some(uid), Some(gid))?;
    }
    Ok(())
}

/// Reads the regular file `rel` beneath `root`, refusing one over `max` bytes.
pub fn read(root: &File, rel: &Path, max: u64) -> io::Result<Vec<u8>> {
    components(rel)?;
    let fd = openat2(root, rel, how(OFlag::O_RDONLY | OFlag::O_NONBLOCK)).map_err(|e| refused(rel, e))?;
    let file = File::from(fd);
    let meta = file.metadata()?;
    if !meta.file_type().is_file() {
        return Err(io::Error::other(format!("/scratch/{} is not a regular file", rel.display())));
    }
    if meta.len() > max {
        return Err(io::Error::other(format!("{} bytes exceeds the file size limit", meta.len())));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(max + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(io::Error::other("grew past the file size limit while read"));
    }
    Ok(bytes)
}

/// An entry a command left on a path staging must write to, which staging
/// refuses to write through: a symlink anywhere on the path, or in the
/// file's own place a FIFO, socket, device or a file with other hard links.
#[derive(Debug, Clone, PartialEq)]
pub struct Planted {
    /// The entry, relative to the scratch dir.
    pub entry: PathBuf,
    /// What it was, for the model: "a symlink to /etc", "a FIFO", ...
    pub what: String,
}

/// Finds the entry a command planted on the way to the file `rel` beneath
/// `root` and removes it (only that directory entry: a symlink is unlinked
/// in its opened parent, its target is never touched), so a retried call
/// can stage `rel`. `None` when nothing on the path was planted (a missing
/// dir, a plain file where a dir belongs, a dir where the file belongs:
/// those are reported, never removed).
pub fn remove_planted(root: &File, rel: &Path) -> io::Result<Option<Planted>> {
    let names = components(rel)?;
    let mut dir = root.try_clone()?;
    let mut so_far = PathBuf::new();
    for (i, name) in names.iter().enumerate() {
        so_far.push(name);
        let st = match fstatat(&dir, *name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(Errno::ENOENT) => return Ok(None),
            Err(e) => return Err(refused(&so_far, e)),
        };
        let last = i + 1 == names.len();
        let what = match st.st_mode & libc::S_IFMT {
            libc::S_IFLNK => match readlinkat(&dir, *name) {
                Ok(to) => format!("a symlink to {}", Path::new(&to).display()),
                Err(_) => "a symlink".to_string(),
            },
            libc::S_IFDIR if !last => {
                dir = File::from(
                    openat2(&dir, *name, how(OFlag::O_RDONLY | OFlag::O_DIRECTORY)).map_err(|e| refused(&so_far, e))?,
                );
                continue;
            }
            libc::S_IFREG if last && st.st_nlink > 1 => "a file with another hard link".to_string(),
            libc::S_IFIFO if last => "a FIFO".to_string(),
            libc::S_IFSOCK if last => "a socket".to_string(),
            libc::S_IFCHR | libc::S_IFBLK if last => "a device node".to_string(),
            _ => return Ok(None),
        };
        unlinkat(&dir, *name, UnlinkatFlags::NoRemoveDir).map_err(|e| refused(&so_far, e))?;
        return Ok(Some(Planted { entry: so_far, what }));
    }
    Ok(None)
}

/// Disk used under `scratch`: the allocated blocks of every entry (symlinks
/// not followed, so a sparse or linked file cannot hide), each entry at
/// least [`MIN_ENTRY_BYTES`].
pub fn usage(scratch: &Path) -> u64 {
    let mut total = 0u64;
    let mut stack = vec![scratch.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for e in entries.flatten() {
            // DirEntry::metadata is lstat: a symlink counts as itself.
            let Ok(m) = e.metadata() else { continue };
            total = total.saturating_add((m.blocks() * 512).max(MIN_ENTRY_BYTES));
            if m.file_type().is_dir() {
                stack.push(e.path());
            }
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Dir(std::path::PathBuf);
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    fn temp(tag: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("beneath-{tag}-{}", uuid::Uuid::now_v7()));
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }

    /// The attack of docs/SANDBOX.md: a command replaced `/scratch/data` by a
    /// symlink to a host dir, then a job file `/data/...` is staged in.
    #[test]
    fn a_symlinked_parent_is_never_followed() {
        let (scratch, host) = (temp("scratch"), temp("host"));
        std::fs::write(host.0.join("existing.txt"), "host data").unwrap();
        std::os::unix::fs::symlink(&host.0, scratch.0.join("data")).unwrap();
        let root = open_root(&scratch.0).unwrap();
        for rel in ["data/existing.txt", "data/sub/new.txt"] {
            let e = write(&root, Path::new(rel), b"evil", Some((65534, 65534))).unwrap_err();
            assert!(e.to_string().contains("symlink"), "{e}");
            let e = read(&root, Path::new(rel), 1 << 20).unwrap_err();
            assert!(e.to_string().contains("symlink"), "{e}");
        }
        assert_eq!(std::fs::read_to_string(host.0.join("existing.txt")).unwrap(), "host data");
        assert_eq!(std::fs::read_dir(&host.0).unwrap().count(), 1, "no new entries in the host dir");
        let me = std::fs::metadata(&scratch.0).unwrap().uid();
        assert_eq!(std::fs::metadata(&host.0).unwrap().uid(), me, "owner unchanged");
        // A symlink as the file itself, and a FIFO, are refused too.
        std::os::unix::fs::symlink(host.0.join("existing.txt"), scratch.0.join("leaf")).unwrap();
        assert!(write(&root, Path::new("leaf"), b"evil", None).is_err());
        nix::unistd::mkfifo(&scratch.0.join("fifo"), Mode::from_bits_truncate(0o666)).unwrap();
        assert!(write(&root, Path::new("fifo"), b"x", None).is_err());
        assert!(read(&root, Path::new("fifo"), 10).is_err());
        assert_eq!(std::fs::read_to_string(host.0.join("existing.txt")).unwrap(), "host data");
        // Plain dirs and files work and go to the owner.
        write(&root, Path::new("in/deep/f.txt"), b"ok", None).unwrap();
        assert_eq!(read(&root, Path::new("in/deep/f.txt"), 10).unwrap(), b"ok");
        assert!(read(&root, Path::new("in/deep/f.txt"), 1).is_err(), "size limit");
    }

    /// What staging reports and removes: the planted symlink itself (its
    /// target untouched), a FIFO or a hard link in the file's place; not a
    /// plain file, a dir, or a missing path.
    #[test]
    fn planted_entries_are_found_and_only_they_are_removed() {
        let (scratch, host) = (temp("scratch"), temp("host"));
        std::fs::write(host.0.join("existing.txt"), "host data").unwrap();
        std::os::unix::fs::symlink(&host.0, scratch.0.join("data")).unwrap();
        let root = open_root(&scratch.0).unwrap();
        let p = remove_planted(&root, Path::new("data/sub/new.txt")).unwrap().expect("the symlink");
        assert_eq!(p.entry, Path::new("data"));
        assert_eq!(p.what, format!("a symlink to {}", host.0.display()));
        assert!(std::fs::symlink_metadata(scratch.0.join("data")).is_err(), "the link is gone");
        assert_eq!(std::fs::read_to_string(host.0.join("existing.txt")).unwrap(), "host data");
        write(&root, Path::new("data/sub/new.txt"), b"ok", None).unwrap();
        std::fs::create_dir(scratch.0.join("q")).unwrap();
        nix::unistd::mkfifo(&scratch.0.join("q/fifo"), Mode::from_bits_truncate(0o666)).unwrap();
        let p = remove_planted(&root, Path::new("q/fifo")).unwrap().expect("the FIFO");
        assert_eq!((p.entry.as_path(), p.what.as_str()), (Path::new("q/fifo"), "a FIFO"));
        std::fs::hard_link(scratch.0.join("data/sub/new.txt"), scratch.0.join("q/linked")).unwrap();
        assert_eq!(
            remove_planted(&root, Path::new("q/linked")).unwrap().unwrap().what,
            "a file with another hard link"
        );
        assert_eq!(std::fs::read(scratch.0.join("data/sub/new.txt")).unwrap(), b"ok", "the other link stays");
        for rel in ["data/sub/new.txt", "data/sub", "data/sub/new.txt/below", "missing/x"] {
            assert_eq!(remove_planted(&root, Path::new(rel)).unwrap(), None, "{rel}");
        }
        assert!(scratch.0.join("data/sub/new.txt").exists());
    }

    #[test]
    fn removing_a_scratch_dir_leaves_symlink_targets_alone() {
        let (scratch, host) = (temp("scratch"), temp("host"));
        std::fs::write(host.0.join("keep.txt"), "keep").unwrap();
        std::os::unix::fs::symlink(&host.0, scratch.0.join("link")).unwrap();
        std::fs::remove_dir_all(&scratch.0).unwrap();
        assert_eq!(std::fs::read_to_string(host.0.join("keep.txt")).unwrap(), "keep");
    }

    #[test]
    fn usage_counts_blocks_and_entries_without_following_symlinks() {
        let (scratch, host) = (temp("scratch"), temp("host"));
        std::fs::write(host.0.join("big"), vec![1u8; 1 << 20]).unwrap();
        std::os::unix::fs::symlink(&host.0, scratch.0.join("link")).unwrap();
        assert!(usage(&scratch.0) < 64 * 1024, "the symlinked host dir is not counted");
        std::fs::write(scratch.0.join("mine"), vec![1u8; 1 << 20]).unwrap();
        assert!(usage(&scratch.0) >= 1 << 20);
        for i in 0..100 {
            std::fs::write(scratch.0.join(format!("empty{i}")), "").unwrap();
        }
        assert!(usage(&scratch.0) >= (1 << 20) + 100 * MIN_ENTRY_BYTES);
    }
}
