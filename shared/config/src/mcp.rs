//! `[mcp_servers.<name>]`: the MCP servers a process may connect to, in two
//! steps like the rest of the configuration: [`RawMcpServer`] is the serde
//! shape (TOML, or an imported `mcpServers` JSON file), [`McpServerSettings`]
//! the validated form whose errors name the key.
//!
//! A stdio server is a trusted command from config: the
//! model can never name a command, and the child gets only the variables
//! declared here plus `PATH`. An HTTP server's secrets never sit in the file:
//! header values and the bearer token are read from named environment
//! variables when the session opens.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::url_policy;

/// Default bound on `initialize` + `tools/list` and on every call.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// `[mcp_servers.<name>]` before validation.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct RawMcpServer {
    /// `stdio` or `http`; inferred from `command` / `url` when absent.
    pub transport: Option<String>,
    /// stdio: the program (looked up on `PATH` unless it contains a `/`;
    /// relative paths resolve against the config file's directory).
    pub command: Option<String>,
    /// stdio: its arguments.
    pub args: Vec<String>,
    /// stdio: variables set in the child, which inherits nothing else but `PATH`.
    pub env: BTreeMap<String, String>,
    /// stdio: names of this process's variables passed through unchanged.
    pub env_passthrough: Vec<String>,
    /// stdio: working directory (relative to the config file).
    pub cwd: Option<PathBuf>,
    /// http: the Streamable HTTP endpoint.
    pub url: Option<String>,
    /// http: header name -> name of the environment variable holding its value.
    pub headers_from_env: BTreeMap<String, String>,
    /// http: name of the environment variable holding a bearer token.
    pub bearer_token_env: Option<String>,
    /// http: allow plain `http://` to a non-loopback host (never for metadata
    /// or link-local addresses).
    pub allow_insecure_http: bool,
    /// Seconds for starting the server, `initialize` and `tools/list`.
    pub init_timeout: Option<f64>,
    /// Seconds for each `tools/call`.
    pub call_timeout: Option<f64>,
    /// `persistent` (default: one session per process, shared by concurrent
    /// tasks) or `per_call` (a fresh session for every call).
    pub session: Option<String>,
    /// Expose tools as `<server>_<tool>` (default true).
    pub prefix: Option<bool>,
    /// Refuse to start the process when the server cannot be reached at start
    /// (default false: its tools are left out and discovery retries).
    pub required: bool,
}

/// How to reach a server.
#[derive(Clone, Debug, PartialEq)]
pub enum McpTransport {
    /// A child process speaking JSON-RPC on stdin/stdout.
    Stdio {
        /// Program.
        command: PathBuf,
        /// Arguments.
        args: Vec<String>,
        /// The child's whole environment, besides `PATH`.
        env: BTreeMap<String, String>,
        /// Variables copied from this process when the child starts.
        env_passthrough: Vec<String>,
        /// Working directory.
        cwd: Option<PathBuf>,
    },
    /// Streamable HTTP.
    Http {
        /// The endpoint, checked against the URL rules.
        url: String,
        /// Header name -> environment variable name.
        headers_from_env: BTreeMap<String, String>,
        /// Environment variable with a bearer token.
        bearer_token_env: Option<String>,
        /// Plain http allowed beyond loopback.
        allow_insecure_http: bool,
    },
}

/// Session lifetime.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionMode {
    /// One session per (process, server), shared, reconnected once when dead.
    Persistent,
    /// A fresh session (and for stdio a fresh process) per call.
    PerCall,
}

/// A validated `[mcp_servers.<name>]`.
#[derive(Clone, Debug, PartialEq)]
pub struct McpServerSettings {
    /// The server's name: the key, the tool prefix and the `mcp:<name>` entry.
    pub name: String,
    /// How to reach it.
    pub transport: McpTransport,
    /// Bound on start + `initialize` + `tools/list`.
    pub init_timeout: Duration,
    /// Bound on each call.
    pub call_timeout: Duration,
    /// Session lifetime.
    pub session: SessionMode,
    /// Prefix tool names with `<name>_`.
    pub prefix: bool,
    /// Fail the process start when unreachable.
    pub required: bool,
}

/// What is wrong with one server's config: the dotted key and why.
#[derive(Debug, Clone, PartialEq)]
pub struct McpConfigProblem {
    /// e.g. `mcp_servers.finance.url`.
    pub key: String,
    /// What to do.
    pub message: String,
}

fn seconds(key: &str, v: Option<f64>) -> Result<Duration, McpConfigProblem> {
    match v {
        None => Ok(DEFAULT_TIMEOUT),
        Some(s) if s.is_finite() && s > 0.0 && s <= 86_400.0 => Ok(Duration::from_secs_f64(s)),
        Some(_) => {
            Err(McpConfigProblem { key: key.into(), message: "must be a number of seconds in (0, 86400]".into() })
        }
    }
}

fn is_env_name(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with(|c: char| c.is_ascii_digit())
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Validates one server; `base` resolves relative paths (the config file's directory).
pub fn validate(name: &str, raw: RawMcpServer, base: &Path) -> Result<McpServerSettings, McpConfigProblem> {
    let key = |k: &str| format!("mcp_servers.{name}.{k}");
    let problem = |k: &str, m: String| McpConfigProblem { key: key(k), message: m };
    if !flotilla_protocol::ids::is_valid_token(name) {
        return Err(McpConfigProblem {
            key: format!("mcp_servers.{name}"),
            message: "server names use 1-64 characters from a-z, A-Z, 0-9, '-' and '_'".into(),
        });
    }
    let transport = match raw.transport.as_deref() {
        Some(t) => t.to_string(),
        None if raw.command.is_some() => "stdio".into(),
        None if raw.url.is_some() => "http".into(),
        None => return Err(problem("transport", "set `command` (stdio) or `url` (Streamable HTTP)".into())),
    };
    let transport = match transport.as_str() {
        "stdio" => {
            if raw.url.is_some() || !raw.headers_from_env.is_empty() || raw.bearer_token_env.is_some() {
                return Err(problem("url", "url and headers belong to transport \"http\", not \"stdio\"".into()));
            }
            let command = raw.command.filter(|c| !c.trim().is_empty());
            let command = command.ok_or_else(|| problem("command", "required for transport \"stdio\"".into()))?;
            let command = if command.contains('/') { base.join(&command) } else { PathBuf::from(command) };
            for k in raw.env.keys().chain(raw.env_passthrough.iter()) {
                if !is_env_name(k) {
                    return Err(problem("env", format!("{k:?} is not a valid environment variable name")));
                }
            }
            McpTransport::Stdio {
                command,
                args: raw.args,
                env: raw.env,
                env_passthrough: raw.env_passthrough,
                cwd: raw.cwd.map(|c| base.join(c)),
            }
        }
        "http" | "streamable_http" | "streamable-http" | "streamableHttp" => {
            if raw.command.is_some() || !raw.args.is_empty() || !raw.env.is_empty() {
                return Err(problem("command", "command, args and env belong to transport \"stdio\"".into()));
            }
            let url = raw.url.ok_or_else(|| problem("url", "required for transport \"http\"".into()))?;
            url_policy::check(&url, raw.allow_insecure_http).map_err(|e| problem("url", e.to_string()))?;
            for (h, var) in &raw.headers_from_env {
                if !is_header_name(h) {
                    return Err(problem("headers_from_env", format!("{h:?} is not a valid HTTP header name")));
                }
                if !is_env_name(var) {
                    return Err(problem(
                        "headers_from_env",
                        format!("{h}: the value must name an environment variable, got {var:?}"),
                    ));
                }
            }
            if let Some(v) = &raw.bearer_token_env
                && !is_env_name(v)
            {
                return Err(problem("bearer_token_env", format!("{v:?} is not an environment variable name")));
            }
            McpTransport::Http {
                url,
                headers_from_env: raw.headers_from_env,
                bearer_token_env: raw.bearer_token_env,
                allow_insecure_http: raw.allow_insecure_http,
            }
        }
        "sse" => {
            return Err(problem(
                "transport",
                "the SSE transport is deprecated and not supported: use \"http\" (Streamable HTTP)".into(),
            ));
        }
        other => return Err(problem("transport", format!("unknown transport {other:?}: use \"stdio\" or \"http\""))),
    };
    let session = match raw.session.as_deref() {
        None | Some("persistent") => SessionMode::Persistent,
        Some("per_call") => SessionMode::PerCall,
        Some(other) => {
            return Err(problem("session", format!("unknown mode {other:?}: use \"persistent\" or \"per_call\"")));
        }
    };
    Ok(McpServerSettings {
        name: name.to_string(),
        transport,
        init_timeout: seconds(&key("init_timeout"), raw.init_timeout)?,
        call_timeout: seconds(&key("call_timeout"), raw.call_timeout)?,
        session,
        prefix: raw.prefix.unwrap_or(true),
        required: raw.required,
    })
}

impl McpServerSettings {
    /// `stdio` or `http`.
    pub fn transport_name(&self) -> &'static str {
        match self.transport {
            McpTransport::Stdio { .. } => "stdio",
            McpTransport::Http { .. } => "http",
        }
    }

    /// Where the server is, safe to log: the command's file name, or the URL
    /// with its path redacted.
    pub fn endpoint(&self) -> String {
        match &self.transport {
            McpTransport::Stdio { command, .. } => {
                command.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default()
            }
            McpTransport::Http { url, .. } => url_policy::redact(url),
        }
    }
}

/// An HTTP header name: an RFC 9110 token.
fn is_header_name(h: &str) -> bool {
    !h.is_empty() && h.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// `[subagents.<type>] mcp_prompt`: the MCP prompt that becomes the system prompt.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct McpPromptConfig {
    /// Server name under `[mcp_servers]`.
    pub server: String,
    /// The prompt's name on the server.
    pub name: String,
    /// Argument values: minijinja templates over `task` and `subagent_type`.
    #[serde(default)]
    pub arguments: BTreeMap<String, String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stdio() -> RawMcpServer {
        RawMcpServer { command: Some("bin/server".into()), ..Default::default() }
    }

    #[test]
    fn infers_transport_and_resolves_paths() {
        let s = validate("finance", stdio(), Path::new("/etc/flotilla")).unwrap();
        match &s.transport {
            McpTransport::Stdio { command, .. } => assert_eq!(command, Path::new("/etc/flotilla/bin/server")),
            other => panic!("{other:?}"),
        }
        assert_eq!((s.session, s.prefix, s.call_timeout), (SessionMode::Persistent, true, DEFAULT_TIMEOUT));
        let npx = RawMcpServer { command: Some("npx".into()), ..Default::default() };
        match validate("x", npx, Path::new("/etc")).unwrap().transport {
            McpTransport::Stdio { command, .. } => assert_eq!(command, Path::new("npx")),
            other => panic!("{other:?}"),
        }
        let http = RawMcpServer { url: Some("https://mcp.example.com/secret/mcp".into()), ..Default::default() };
        let s = validate("remote", http, Path::new(".")).unwrap();
        assert_eq!(s.transport_name(), "http");
        assert_eq!(s.endpoint(), "https://mcp.example.com/<redacted>/mcp");
    }

    #[test]
    fn errors_name_the_key() {
        let cases = [
            (RawMcpServer::default(), "mcp_servers.a.transport"),
            (RawMcpServer { transport: Some("sse".into()), ..stdio() }, "mcp_servers.a.transport"),
            (RawMcpServer { session: Some("sometimes".into()), ..stdio() }, "mcp_servers.a.session"),
            (RawMcpServer { call_timeout: Some(0.0), ..stdio() }, "mcp_servers.a.call_timeout"),
            (RawMcpServer { url: Some("http://example.com/mcp".into()), ..Default::default() }, "mcp_servers.a.url"),
            (
                RawMcpServer {
                    url: Some("http://169.254.169.254/latest".into()),
                    allow_insecure_http: true,
                    ..Default::default()
                },
                "mcp_servers.a.url",
            ),
            (
                RawMcpServer {
                    url: Some("https://x.example/mcp".into()),
                    headers_from_env: [("Authorization".to_string(), "Bearer abc".to_string())].into(),
                    ..Default::default()
                },
                "mcp_servers.a.headers_from_env",
            ),
            (RawMcpServer { env: [("A=B".to_string(), "1".to_string())].into(), ..stdio() }, "mcp_servers.a.env"),
            (RawMcpServer { transport: Some("stdio".into()), ..Default::default() }, "mcp_servers.a.command"),
        ];
        for (raw, key) in cases {
            let p = validate("a", raw.clone(), Path::new(".")).unwrap_err();
            assert_eq!(p.key, key, "{raw:?}: {}", p.message);
        }
        assert_eq!(validate("a.b", stdio(), Path::new(".")).unwrap_err().key, "mcp_servers.a.b");
    }

    #[test]
    fn toml_keeps_the_case_of_variable_and_header_names() {
        let d = std::env::temp_dir().join(format!("flotilla-mcp-config-{}", uuid::Uuid::now_v7()));
        std::fs::create_dir_all(&d).unwrap();
        let p = d.join("f.toml");
        std::fs::write(
            &p,
            r#"
[mcp_servers.finance]
command = "finance-tools"
env = { API_KEY = "x", Mixed_Case = "y" }
session = "per_call"
call_timeout = 0.5
[mcp_servers.remote]
url = "https://mcp.example.com/mcp"
headers_from_env = { "X-Api-Key" = "REMOTE_KEY" }
"#,
        )
        .unwrap();
        let s = crate::Settings::load_with_env(Some(&p), vec![]).unwrap();
        let f = &s.mcp_servers["finance"];
        assert_eq!((f.session, f.call_timeout), (SessionMode::PerCall, Duration::from_millis(500)));
        match &f.transport {
            McpTransport::Stdio { env, .. } => assert_eq!(env.keys().collect::<Vec<_>>(), ["API_KEY", "Mixed_Case"]),
            other => panic!("{other:?}"),
        }
        match &s.mcp_servers["remote"].transport {
            McpTransport::Http { headers_from_env, .. } => assert_eq!(headers_from_env["X-Api-Key"], "REMOTE_KEY"),
            other => panic!("{other:?}"),
        }
        std::fs::write(&p, "[mcp_servers.bad]\nurl = \"http://example.com/mcp\"\n").unwrap();
        let err = crate::Settings::load_with_env(Some(&p), vec![]).unwrap_err().to_string();
        assert!(err.contains("`mcp_servers.bad.url`") && err.contains("https"), "{err}");
    }
}
