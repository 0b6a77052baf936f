//! Job file paths, and the one place that decides which strings are paths.
//!
//! Job files live in a virtual filesystem keyed by job, so a path can never
//! reach the host. The policy is still strict, because paths come from a model
//! and end up in object names, permission globs and other agents' prompts:
//!
//! - absolute (`/...`), at most [`MAX_PATH_BYTES`] bytes, each segment at most
//!   [`MAX_SEGMENT_BYTES`];
//! - `//` and `.` segments collapse, a trailing `/` is dropped;
//! - `..` is refused outright (never resolved), so no spelling climbs out;
//! - `%` is refused, so no percent-encoded form (`%2e%2e%2f`) can be decoded
//!   into something else by any later layer;
//! - control characters (NUL included), `\` and look-alike slashes and dots
//!   (`／`, `∕`, `⁄`, `．`, `․`) are refused.
//!
//! Refusing beats repairing: the model gets an error naming the rule and tries
//! a plain path.

use std::fmt;

/// Longest accepted path, in bytes.
pub const MAX_PATH_BYTES: usize = 1024;
/// Longest accepted path segment (file or directory name), in bytes.
pub const MAX_SEGMENT_BYTES: usize = 255;

/// Characters that render like `/` or `.` and could fool a reader or a
/// downstream normalizer.
const LOOKALIKES: &[char] = &['\u{2215}', '\u{FF0F}', '\u{2044}', '\u{29F8}', '\u{FF0E}', '\u{2024}', '\u{FE52}'];

/// Why a string is not a job file path.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PathError {
    /// Empty string.
    #[error("path is empty: use an absolute path such as /notes.md")]
    Empty,
    /// Does not start with `/`.
    #[error("path must be absolute (start with /)")]
    Relative,
    /// Too long overall.
    #[error("path is {len} bytes; the limit is {MAX_PATH_BYTES}")]
    TooLong {
        /// Its length in bytes.
        len: usize,
    },
    /// One name too long.
    #[error("a path segment is {len} bytes; the limit is {MAX_SEGMENT_BYTES}")]
    SegmentTooLong {
        /// The segment's length in bytes.
        len: usize,
    },
    /// A `..` segment.
    #[error("`..` is not allowed in paths: use an absolute path from /")]
    ParentSegment,
    /// A character the policy refuses.
    #[error("path contains {what}, which is not allowed")]
    BadChar {
        /// Which kind of character.
        what: &'static str,
    },
}

/// A normalized absolute path in a job's files: starts with `/`, no empty,
/// `.` or `..` segment, no trailing `/` (except the root itself).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FilePath(String);

impl FilePath {
    /// The root directory `/`.
    pub fn root() -> Self {
        Self("/".into())
    }

    /// Checks and normalizes `raw` (see the module docs for the policy).
    pub fn parse(raw: &str) -> Result<Self, PathError> {
        if raw.is_empty() {
            return Err(PathError::Empty);
        }
        if raw.len() > MAX_PATH_BYTES {
            return Err(PathError::TooLong { len: raw.len() });
        }
        for c in raw.chars() {
            let what = match c {
                '\0' => "a NUL byte",
                c if c.is_control() => "a control character",
                '\\' => "a backslash",
                '%' => "'%' (percent-encoding is not decoded)",
                c if LOOKALIKES.contains(&c) => "a look-alike of '/' or '.'",
                _ => continue,
            };
            return Err(PathError::BadChar { what });
        }
        if !raw.starts_with('/') {
            return Err(PathError::Relative);
        }
        let mut out = String::with_capacity(raw.len());
        for seg in raw.split('/') {
            match seg {
                "" | "." => {}
                ".." => return Err(PathError::ParentSegment),
                s if s.len() > MAX_SEGMENT_BYTES => return Err(PathError::SegmentTooLong { len: s.len() }),
                s => {
                    out.push('/');
                    out.push_str(s);
                }
            }
        }
        if out.is_empty() {
            out.push('/');
        }
        Ok(Self(out))
    }

    /// The normalized text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether this is `/`.
    pub fn is_root(&self) -> bool {
        self.0 == "/"
    }

    /// `self/name`, where `name` is one segment made safe: characters outside
    /// `[A-Za-z0-9._-]` become `_`, and it is cut to [`MAX_SEGMENT_BYTES`].
    /// Used for names that come from ids (task ids, tool call ids).
    pub fn child(&self, name: &str) -> Result<Self, PathError> {
        let mut seg: String = name
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') { c } else { '_' })
            .take(MAX_SEGMENT_BYTES)
            .collect();
        if seg.is_empty() || seg.chars().all(|c| c == '.') {
            seg = format!("_{seg}");
        }
        let base = if self.is_root() { "" } else { self.as_str() };
        Self::parse(&format!("{base}/{seg}"))
    }

    /// Whether `self` is `dir` or lies below it.
    pub fn is_within(&self, dir: &FilePath) -> bool {
        dir.is_root() || self.0 == dir.0 || (self.0.starts_with(&dir.0) && self.0.as_bytes()[dir.0.len()] == b'/')
    }

    /// The last segment (empty for the root).
    pub fn name(&self) -> &str {
        self.0.rsplit('/').next().unwrap_or_default()
    }
}

impl fmt::Display for FilePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_plain_paths() {
        for (raw, want) in [
            ("/", "/"),
            ("//", "/"),
            ("/a", "/a"),
            ("/a/", "/a"),
            ("/a//b/./c", "/a/b/c"),
            ("/./.", "/"),
            ("/données/été.md", "/données/été.md"),
            ("/a/.../b", "/a/.../b"),
            ("/.hidden", "/.hidden"),
        ] {
            assert_eq!(FilePath::parse(raw).unwrap().as_str(), want, "{raw}");
        }
    }

    /// Hostile spellings are refused, never repaired into something else.
    #[test]
    fn traversal_corpus_is_refused() {
        let long_name = format!("/{}", "a".repeat(10_000));
        let long_segment = format!("/{}", "b".repeat(256));
        let corpus: Vec<&str> = vec![
            "",
            "a",
            "../etc/passwd",
            "/../etc/passwd",
            "/a/../../etc/passwd",
            "/a/..",
            "/..",
            "..",
            "./a",
            "~/a",
            "/a/%2e%2e/b",
            "/%2e%2e/%2e%2e/etc/passwd",
            "/%252e%252e/x",
            "/a%2fb",
            "/a%00b",
            "/a\0b",
            "/a\0",
            "\0/a",
            "/a\\..\\b",
            "\\a",
            "C:\\windows",
            "/a\nb",
            "/a\rb",
            "/a\u{7f}",
            "/\u{FF0E}\u{FF0E}/x",
            "/a\u{2215}..\u{2215}b",
            "/a\u{FF0F}b",
            "/a\u{2044}b",
            "/\u{2024}\u{2024}/x",
            &long_name,
            &long_segment,
        ];
        for raw in corpus {
            assert!(FilePath::parse(raw).is_err(), "accepted {raw:?}");
        }
    }

    /// Property: whatever the input, an accepted path is absolute, normalized
    /// and free of every refused form.
    #[test]
    fn random_inputs_never_yield_an_escape() {
        let long = "x".repeat(300);
        let pieces = [
            "/",
            "//",
            ".",
            "..",
            "...",
            "a",
            "b.txt",
            "%2e",
            "%2f",
            "%",
            "\0",
            "\\",
            "~",
            " ",
            "\u{FF0E}",
            "é",
            "\u{2215}",
            "\n",
            long.as_str(),
        ];
        let mut rng = fastrand::Rng::with_seed(0xF10A);
        let mut accepted = 0;
        for _ in 0..50_000 {
            let n = rng.usize(1..12);
            let raw: String = (0..n).map(|_| pieces[rng.usize(..pieces.len())]).collect();
            let Ok(p) = FilePath::parse(&raw) else { continue };
            accepted += 1;
            let s = p.as_str();
            assert!(s.starts_with('/'), "{raw:?} -> {s:?}");
            assert!(s.len() <= MAX_PATH_BYTES);
            assert!(!s.contains("//") && !s.contains('\0') && !s.contains('%') && !s.contains('\\'), "{s:?}");
            assert!(s.split('/').skip(1).all(|seg| seg != ".." && seg != "." && seg.len() <= MAX_SEGMENT_BYTES));
            assert!(s == "/" || !s.ends_with('/'));
            assert_eq!(FilePath::parse(s).unwrap(), p, "normalization is idempotent");
        }
        assert!(accepted > 500, "the generator should also produce valid paths ({accepted})");
    }

    #[test]
    fn children_are_single_safe_segments() {
        let dir = FilePath::parse("/large_tool_results/t1").unwrap();
        assert_eq!(dir.child("call_1").unwrap().as_str(), "/large_tool_results/t1/call_1");
        assert_eq!(dir.child("../../x").unwrap().as_str(), "/large_tool_results/t1/.._.._x");
        assert_eq!(dir.child("..").unwrap().as_str(), "/large_tool_results/t1/_..");
        assert_eq!(dir.child("a/b%2f\0").unwrap().as_str(), "/large_tool_results/t1/a_b_2f_");
        assert_eq!(FilePath::root().child("x").unwrap().as_str(), "/x");
    }

    #[test]
    fn within_respects_segment_boundaries() {
        let p = |s| FilePath::parse(s).unwrap();
        assert!(p("/a/b").is_within(&p("/a")));
        assert!(p("/a").is_within(&p("/a")));
        assert!(!p("/ab").is_within(&p("/a")));
        assert!(p("/ab").is_within(&FilePath::root()));
        assert_eq!(p("/a/b.txt").name(), "b.txt");
    }
}
