//! A reference to a large text kept in the job's files: big results are
//! written to files, and what travels is their path, summary, line count and
//! checksum. Evicted tool results and oversized task reports travel as
//! one of these instead of their bytes.

use serde::{Deserialize, Serialize};

/// Characters of the head preview at most.
pub const HEAD_CHARS: usize = 1000;
/// Characters of the tail preview at most.
pub const TAIL_CHARS: usize = 500;

/// Where a large text went, and enough of it to decide what to read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRef {
    /// Absolute path in the job's files; read it with `read_file` or `grep`.
    pub path: String,
    /// Size in bytes.
    pub size_bytes: u64,
    /// Number of lines.
    pub lines: u64,
    /// SHA-256 of the bytes, lowercase hex.
    pub sha256: String,
    /// The first characters (at most `HEAD_CHARS`).
    pub head: String,
    /// The last characters (at most `TAIL_CHARS`), empty when `head` holds it all.
    pub tail: String,
}

impl FileRef {
    /// Describes `text`, stored at `path`, whose SHA-256 (lowercase hex) is
    /// `sha256` (the caller's hash, usually [`crate::digest::sha256_hex`]).
    pub fn describe(path: impl Into<String>, text: &str, sha256: String) -> Self {
        let head: String = text.chars().take(HEAD_CHARS).collect();
        let total = text.chars().count();
        let tail = if total > HEAD_CHARS {
            let skip = total - TAIL_CHARS.min(total - HEAD_CHARS);
            text.chars().skip(skip).collect()
        } else {
            String::new()
        };
        Self { path: path.into(), size_bytes: text.len() as u64, lines: line_count(text), sha256, head, tail }
    }
}

/// Lines as `read_file` numbers them: a final line without `\n` still counts.
pub fn line_count(text: &str) -> u64 {
    let n = text.bytes().filter(|b| *b == b'\n').count() as u64;
    if text.is_empty() || text.ends_with('\n') { n } else { n + 1 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn describes_head_tail_lines_and_digest() {
        let text: String = (0..1000).map(|i| format!("line {i}\n")).collect();
        let r = FileRef::describe("/x", &text, "0".repeat(64));
        assert_eq!(r.lines, 1000);
        assert_eq!(r.size_bytes, text.len() as u64);
        assert!(r.head.starts_with("line 0\n") && r.head.chars().count() == HEAD_CHARS);
        assert!(r.tail.ends_with("line 999\n") && r.tail.chars().count() == TAIL_CHARS);
        assert_eq!(r.sha256.len(), 64);
        let small = FileRef::describe("/y", "abc", String::new());
        assert_eq!((small.lines, small.head.as_str(), small.tail.as_str()), (1, "abc", ""));
    }
}
