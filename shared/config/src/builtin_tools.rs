//! The names of the built-in file tools: config validates `tools` lists
//! against them (`crate::ToolRef::Builtin`); `flotilla_tools` implements them
//! (docs/TOOLS.md).

/// Every built-in tool name.
pub const ALL: &[&str] = &["ls", "read_file", "write_file", "edit_file", "glob", "grep"];
/// The tools that never write (the planner's default set, and the tools whose
/// bounded output is never evicted).
pub const READ_ONLY: &[&str] = &["ls", "read_file", "glob", "grep"];
