//! File permission rules for the built-in file tools (docs/TOOLS.md).
//!
//! An agent's rules are an ordered list of `{operations, paths, mode}`; the
//! first rule whose operation and path glob match decides, and the agent's
//! default (allow unless configured otherwise) decides when none does. The
//! rules are checked inside the built-in tool code, in the process that runs
//! the tool, never in a prompt.
//!
//! Their boundary is deliberate and documented (docs/TOOLS.md): they guard
//! only `ls`, `read_file`, `write_file`, `edit_file`, `glob` and `grep`. An MCP
//! server or a custom tool that touches the same data must authorize on its
//! own side.
//!
//! Globs use `globset` with `*` stopping at `/` and `**` crossing it, matched
//! against the normalized absolute path (`/secrets/**`, `/**/*.env`).

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};
use serde::{Deserialize, Serialize};

use flotilla_protocol::path::FilePath;

/// What a file tool does to a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Operation {
    /// `ls`, `read_file`, `glob`, `grep`.
    Read,
    /// `write_file`, `edit_file`.
    Write,
}

impl Operation {
    /// The config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Read => "read",
            Operation::Write => "write",
        }
    }
}

/// What happens when a rule matches.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// The call runs.
    #[default]
    Allow,
    /// The call fails with a `permission` error.
    Deny,
    /// A person approves (or edits, or rejects) the call first.
    Interrupt,
}

/// One rule as written in config.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PermissionRule {
    /// Operations the rule applies to (`read`, `write`).
    pub operations: Vec<Operation>,
    /// Absolute path globs.
    pub paths: Vec<String>,
    /// What to do on a match.
    pub mode: Mode,
}

/// A rule that cannot work; `rule` is its index in the list.
#[derive(Debug, thiserror::Error)]
#[error("rule {rule}: {message}")]
pub struct PermissionError {
    /// Index of the rule.
    pub rule: usize,
    /// What is wrong.
    pub message: String,
}

struct Compiled {
    read: bool,
    write: bool,
    paths: GlobSet,
    mode: Mode,
}

/// An agent's compiled rules.
pub struct Permissions {
    rules: Vec<Compiled>,
    default: Mode,
}

impl std::fmt::Debug for Permissions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Permissions").field("rules", &self.rules.len()).field("default", &self.default).finish()
    }
}

impl Permissions {
    /// Everything allowed (no rules, default allow).
    pub fn allow_all() -> Self {
        Self { rules: Vec::new(), default: Mode::Allow }
    }

    /// Compiles `rules` in order, with `default` for paths no rule matches.
    pub fn compile(rules: &[PermissionRule], default: Mode) -> Result<Self, PermissionError> {
        let mut compiled = Vec::with_capacity(rules.len());
        for (i, r) in rules.iter().enumerate() {
            let err = |message: String| PermissionError { rule: i, message };
            if r.operations.is_empty() {
                return Err(err("`operations` is empty: list \"read\" and/or \"write\"".into()));
            }
            if r.paths.is_empty() {
                return Err(err("`paths` is empty: list absolute globs such as \"/secrets/**\"".into()));
            }
            let mut set = GlobSetBuilder::new();
            for p in &r.paths {
                if !p.starts_with('/') {
                    return Err(err(format!("path glob {p:?} must be absolute (start with /)")));
                }
                let glob = GlobBuilder::new(p)
                    .literal_separator(true)
                    .build()
                    .map_err(|e| err(format!("bad path glob {p:?}: {}", e.kind())))?;
                set.add(glob);
            }
            let paths = set.build().map_err(|e| err(e.to_string()))?;
            compiled.push(Compiled {
                read: r.operations.contains(&Operation::Read),
                write: r.operations.contains(&Operation::Write),
                paths,
                mode: r.mode,
            });
        }
        Ok(Self { rules: compiled, default })
    }

    /// The mode for doing `op` on `path`: the first matching rule's, else the default.
    pub fn check(&self, op: Operation, path: &FilePath) -> Mode {
        self.rules
            .iter()
            .find(|r| {
                (match op {
                    Operation::Read => r.read,
                    Operation::Write => r.write,
                }) && r.paths.is_match(path.as_str())
            })
            .map(|r| r.mode)
            .unwrap_or(self.default)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(ops: &[Operation], paths: &[&str], mode: Mode) -> PermissionRule {
        PermissionRule { operations: ops.to_vec(), paths: paths.iter().map(|s| s.to_string()).collect(), mode }
    }
    fn p(s: &str) -> FilePath {
        FilePath::parse(s).unwrap()
    }
    use Operation::{Read, Write};

    #[test]
    fn first_match_wins_then_default() {
        let perms = Permissions::compile(
            &[
                rule(&[Read, Write], &["/secrets/public/**"], Mode::Allow),
                rule(&[Read, Write], &["/secrets/**"], Mode::Deny),
                rule(&[Write], &["/reports/*.md"], Mode::Interrupt),
                rule(&[Write], &["/**"], Mode::Deny),
            ],
            Mode::Allow,
        )
        .unwrap();
        assert_eq!(perms.check(Read, &p("/secrets/public/a")), Mode::Allow);
        assert_eq!(perms.check(Read, &p("/secrets/key")), Mode::Deny);
        assert_eq!(perms.check(Write, &p("/secrets/a/b/c")), Mode::Deny);
        assert_eq!(perms.check(Write, &p("/reports/q2.md")), Mode::Interrupt);
        assert_eq!(perms.check(Write, &p("/reports/sub/q2.md")), Mode::Deny, "* does not cross /");
        assert_eq!(perms.check(Read, &p("/reports/q2.md")), Mode::Allow, "default for reads");
        assert_eq!(perms.check(Write, &p("/notes")), Mode::Deny);
    }

    #[test]
    fn default_deny() {
        let perms = Permissions::compile(&[rule(&[Read], &["/public/**"], Mode::Allow)], Mode::Deny).unwrap();
        assert_eq!(perms.check(Read, &p("/public/x")), Mode::Allow);
        assert_eq!(perms.check(Read, &p("/private/x")), Mode::Deny);
        assert_eq!(perms.check(Write, &p("/public/x")), Mode::Deny);
    }

    #[test]
    fn bad_rules_are_named() {
        for (r, needle) in [
            (rule(&[], &["/a"], Mode::Deny), "operations"),
            (rule(&[Read], &[], Mode::Deny), "paths"),
            (rule(&[Read], &["secrets/**"], Mode::Deny), "absolute"),
            (rule(&[Read], &["/a/[b"], Mode::Deny), "bad path glob"),
        ] {
            let e = Permissions::compile(&[rule(&[Read], &["/ok"], Mode::Allow), r], Mode::Allow).unwrap_err();
            assert_eq!(e.rule, 1);
            assert!(e.to_string().contains(needle), "{e}");
        }
        let cfg: PermissionRule =
            toml::from_str("operations = [\"read\"]\npaths = [\"/a\"]\nmode = \"interrupt\"").unwrap();
        assert_eq!(cfg.mode, Mode::Interrupt);
        assert!(toml::from_str::<PermissionRule>("operations = [\"exec\"]\npaths = []\nmode = \"deny\"").is_err());
    }
}
