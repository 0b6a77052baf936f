//! [`ToolRef`]: one entry of a `tools` list (`[planner] tools`,
//! `[subagents.<type>] tools`), parsed once when the file is read.
//!
//! The file keeps plain strings (`"read_file"`, `"calculate_margin"`,
//! `"execute"`, `"mcp:finance/add"`); serde turns each into a `ToolRef`, so a
//! typo fails `Settings::load` with the key and the valid choices, and the
//! worker and planner match on the enum instead of re-parsing strings
//! (docs/CONFIG.md, docs/TOOLS.md). Whether an MCP server exists is not known
//! here: `--mcp-config` may add servers after load, so the worker's MCP hub
//! checks that.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Prefix of MCP entries: `mcp:<server>` or `mcp:<server>/<tool>`.
pub const MCP_PREFIX: &str = "mcp:";

/// The name of the sandboxed shell tool (docs/SANDBOX.md).
pub const EXECUTE: &str = "execute";

/// Native tools the `flotilla-worker` build implements (workers/src/tools).
pub const NATIVE: &[&str] = &["calculate_margin"];

/// What one `tools` entry names.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, Serialize)]
#[serde(try_from = "String", into = "String")]
pub enum ToolRef {
    /// A built-in file tool, one of [`crate::builtin_tools::ALL`].
    Builtin(String),
    /// A tool compiled into the worker, one of [`NATIVE`].
    Native(String),
    /// `mcp:<server>` (every tool of the server) or `mcp:<server>/<tool>`
    /// (one tool, by its name on the server).
    Mcp {
        /// The `[mcp_servers.<name>]` key.
        server: String,
        /// The tool's name on the server; `None` for all of them.
        tool: Option<String>,
    },
    /// `execute`: runs commands in the type's sandbox.
    Execute,
}

impl ToolRef {
    /// The MCP server this entry names, if it is an MCP entry.
    pub fn mcp_server(&self) -> Option<&str> {
        match self {
            ToolRef::Mcp { server, .. } => Some(server),
            _ => None,
        }
    }
}

/// Why a `tools` entry was refused; the message lists what is valid.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ToolRefError(String);

fn parse_mcp(entry: &str, rest: &str) -> Result<ToolRef, ToolRefError> {
    let (server, tool) = match rest.split_once('/') {
        Some((s, t)) => (s, Some(t)),
        None => (rest, None),
    };
    if !flotilla_protocol::ids::is_valid_token(server) || tool.is_some_and(str::is_empty) {
        return Err(ToolRefError(format!(
            "invalid MCP tool entry {entry:?}: use \"mcp:<server>\" or \"mcp:<server>/<tool>\", where <server> is \
             a [mcp_servers.<name>] key (1-64 of a-z, A-Z, 0-9, '-', '_')"
        )));
    }
    Ok(ToolRef::Mcp { server: server.to_string(), tool: tool.map(str::to_string) })
}

impl FromStr for ToolRef {
    type Err = ToolRefError;

    fn from_str(entry: &str) -> Result<Self, Self::Err> {
        if let Some(rest) = entry.strip_prefix(MCP_PREFIX) {
            return parse_mcp(entry, rest);
        }
        if entry == EXECUTE {
            Ok(ToolRef::Execute)
        } else if crate::builtin_tools::ALL.contains(&entry) {
            Ok(ToolRef::Builtin(entry.to_string()))
        } else if NATIVE.contains(&entry) {
            Ok(ToolRef::Native(entry.to_string()))
        } else {
            Err(ToolRefError(format!(
                "unknown tool {entry:?}: use a built-in ({}), a native tool ({}), \"{EXECUTE}\" (with a sandbox), \
                 \"mcp:<server>\" or \"mcp:<server>/<tool>\"",
                crate::builtin_tools::ALL.join(", "),
                NATIVE.join(", "),
            )))
        }
    }
}

impl TryFrom<String> for ToolRef {
    type Error = ToolRefError;

    fn try_from(entry: String) -> Result<Self, Self::Error> {
        entry.parse()
    }
}

/// The entry as written in the file.
impl fmt::Display for ToolRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ToolRef::Builtin(name) | ToolRef::Native(name) => f.write_str(name),
            ToolRef::Mcp { server, tool: None } => write!(f, "{MCP_PREFIX}{server}"),
            ToolRef::Mcp { server, tool: Some(tool) } => write!(f, "{MCP_PREFIX}{server}/{tool}"),
            ToolRef::Execute => f.write_str(EXECUTE),
        }
    }
}

impl From<ToolRef> for String {
    fn from(r: ToolRef) -> Self {
        r.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<ToolRef, String> {
        s.parse::<ToolRef>().map_err(|e| e.to_string())
    }

    #[test]
    fn parses_every_kind_and_prints_it_back() {
        let cases = [
            ("read_file", ToolRef::Builtin("read_file".into())),
            ("calculate_margin", ToolRef::Native("calculate_margin".into())),
            ("execute", ToolRef::Execute),
            ("mcp:finance", ToolRef::Mcp { server: "finance".into(), tool: None }),
            ("mcp:finance/get-sum", ToolRef::Mcp { server: "finance".into(), tool: Some("get-sum".into()) }),
        ];
        for (text, want) in cases {
            let got = parse(text).unwrap();
            assert_eq!(got, want, "{text}");
            assert_eq!(got.to_string(), text);
        }
        assert_eq!(parse("mcp:finance/add").unwrap().mcp_server(), Some("finance"));
        assert_eq!(parse("grep").unwrap().mcp_server(), None);
    }

    #[test]
    fn every_builtin_and_native_name_parses_to_its_kind() {
        for name in crate::builtin_tools::ALL {
            assert_eq!(parse(name).unwrap(), ToolRef::Builtin(name.to_string()));
        }
        for name in NATIVE {
            assert_eq!(parse(name).unwrap(), ToolRef::Native(name.to_string()));
        }
    }

    #[test]
    fn unknown_names_list_the_valid_choices() {
        let err = parse("read_fle").unwrap_err();
        assert!(err.starts_with("unknown tool \"read_fle\""), "{err}");
        for choice in ["ls", "read_file", "grep", "calculate_margin", "\"execute\"", "mcp:<server>/<tool>"] {
            assert!(err.contains(choice), "{choice} missing: {err}");
        }
        // Case matters: tool names reach the model verbatim.
        assert!(parse("Execute").is_err());
    }

    #[test]
    fn malformed_mcp_entries_are_refused() {
        for bad in ["mcp:", "mcp:/add", "mcp:finance/", "mcp:fin ance", "mcp:a.b/add"] {
            let err = parse(bad).unwrap_err();
            assert!(err.contains(&format!("invalid MCP tool entry {bad:?}")) && err.contains("mcp:<server>"), "{err}");
        }
    }

    #[test]
    fn serde_reads_and_writes_the_string_form() {
        let refs: Vec<ToolRef> = serde_json::from_str(r#"["ls", "mcp:finance/add"]"#).unwrap();
        assert_eq!(refs[1], ToolRef::Mcp { server: "finance".into(), tool: Some("add".into()) });
        assert_eq!(serde_json::to_string(&refs).unwrap(), r#"["ls","mcp:finance/add"]"#);
        let err = serde_json::from_str::<Vec<ToolRef>>(r#"["nope"]"#).unwrap_err().to_string();
        assert!(err.contains("unknown tool \"nope\""), "{err}");
    }
}
