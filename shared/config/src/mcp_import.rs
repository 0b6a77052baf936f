//! `--mcp-config FILE`: imports the `mcpServers` JSON used by Claude Desktop
//! and Cursor into `[mcp_servers.<name>]`, so one file serves those hosts and
//! Flotilla.
//!
//! ```json
//! {"mcpServers": {
//!   "finance": {"command": "finance-tools", "args": [], "env": {"LOG": "1"}},
//!   "remote":  {"type": "streamable_http", "url": "https://mcp.example.com/mcp",
//!               "headers": {"Authorization": "Bearer ${REMOTE_TOKEN}"}}
//! }}
//! ```
//!
//! Header values must reference environment variables (`${VAR}`,
//! `${env:VAR}`, or `Bearer ${VAR}` for `Authorization`): a literal secret in
//! the file is refused, never copied. Keys other hosts use (`disabled`,
//! `autoApprove`, ...) are ignored; `"disabled": true` skips the server.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use crate::mcp::{self as config, RawMcpServer};
use crate::{ConfigError, Settings};

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct File {
    mcp_servers: BTreeMap<String, Entry>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Entry {
    #[serde(rename = "type")]
    kind: Option<String>,
    transport: Option<String>,
    command: Option<String>,
    args: Vec<String>,
    env: BTreeMap<String, String>,
    cwd: Option<std::path::PathBuf>,
    url: Option<String>,
    headers: BTreeMap<String, String>,
    disabled: bool,
}

fn env_ref(value: &str) -> Option<&str> {
    let inner = value.trim().strip_prefix("${")?.strip_suffix('}')?;
    Some(inner.strip_prefix("env:").unwrap_or(inner))
}

fn bad(path: &Path, key: String, message: String) -> ConfigError {
    ConfigError::Invalid { key: format!("{key} (in {})", path.display()), message }
}

/// Reads `path` into raw server configs.
pub fn read(path: &Path) -> Result<BTreeMap<String, RawMcpServer>, ConfigError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| bad(path, "--mcp-config".into(), format!("cannot read {}: {e}", path.display())))?;
    let file: File = serde_json::from_str(&text)
        .map_err(|e| bad(path, "mcpServers".into(), format!("not an mcpServers JSON file: {e}")))?;
    let mut out = BTreeMap::new();
    for (name, e) in file.mcp_servers {
        if e.disabled {
            continue;
        }
        let key = |k: &str| format!("mcpServers.{name}.{k}");
        let kind = e.kind.or(e.transport);
        let transport = match kind.as_deref() {
            None => None,
            Some("stdio") => Some("stdio".to_string()),
            Some("http" | "streamable_http" | "streamable-http" | "streamableHttp") => Some("http".into()),
            Some("sse") => {
                return Err(bad(path, key("type"), "SSE is deprecated and not supported: use Streamable HTTP".into()));
            }
            Some(other) => return Err(bad(path, key("type"), format!("unknown type {other:?}"))),
        };
        let mut headers_from_env = BTreeMap::new();
        let mut bearer_token_env = None;
        for (h, v) in &e.headers {
            let bearer = v.trim().strip_prefix("Bearer ").and_then(env_ref);
            match (h.eq_ignore_ascii_case("authorization"), bearer, env_ref(v)) {
                (true, Some(var), _) => bearer_token_env = Some(var.to_string()),
                (_, _, Some(var)) => {
                    headers_from_env.insert(h.clone(), var.to_string());
                }
                _ => {
                    return Err(bad(
                        path,
                        key(&format!("headers.{h}")),
                        "literal header values are refused: put the value in an environment variable and write \"${VAR}\" (or \"Bearer ${VAR}\")".into(),
                    ));
                }
            }
        }
        let raw = RawMcpServer {
            transport,
            command: e.command,
            args: e.args,
            env: e.env,
            cwd: e.cwd,
            url: e.url,
            headers_from_env,
            bearer_token_env,
            ..Default::default()
        };
        out.insert(name, raw);
    }
    Ok(out)
}

impl Settings {
    /// Adds the servers of an `mcpServers` JSON file; a name also defined in
    /// the TOML config is an error naming both files.
    pub fn import_mcp_config(&mut self, path: &Path) -> Result<(), ConfigError> {
        let base = path.parent().unwrap_or(Path::new("."));
        for (name, raw) in read(path)? {
            if self.mcp_servers.contains_key(&name) {
                let toml =
                    self.source.as_ref().map(|p| p.display().to_string()).unwrap_or_else(|| "the environment".into());
                return Err(ConfigError::Invalid {
                    key: format!("mcp_servers.{name}"),
                    message: format!("defined in both {toml} and {}: rename one", path.display()),
                });
            }
            let s = config::validate(&name, raw, base)
                .map_err(|p| bad(path, p.key.replacen("mcp_servers.", "mcpServers.", 1), p.message))?;
            self.mcp_servers.insert(name, s);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::McpTransport;

    fn file(text: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("flotilla-mcp-import-{}", uuid::Uuid::now_v7()));
        std::fs::create_dir_all(&d).unwrap();
        let p = d.join("mcp.json");
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn imports_claude_and_cursor_shapes() {
        let p = file(
            r#"{"mcpServers": {
                "finance": {"command": "finance-tools", "args": ["--x"], "env": {"LOG": "1"}},
                "remote": {"type": "streamable_http", "url": "https://mcp.example.com/abc/mcp",
                           "headers": {"Authorization": "Bearer ${REMOTE_TOKEN}", "X-Team": "${env:TEAM}"}},
                "cursor": {"url": "http://127.0.0.1:9/mcp"},
                "off": {"command": "x", "disabled": true, "autoApprove": ["a"]}
            }}"#,
        );
        let mut s = Settings::load_with_env(None, vec![]).unwrap();
        s.import_mcp_config(&p).unwrap();
        assert_eq!(s.mcp_servers.keys().collect::<Vec<_>>(), ["cursor", "finance", "remote"]);
        match &s.mcp_servers["remote"].transport {
            McpTransport::Http { bearer_token_env, headers_from_env, .. } => {
                assert_eq!(bearer_token_env.as_deref(), Some("REMOTE_TOKEN"));
                assert_eq!(headers_from_env["X-Team"], "TEAM");
            }
            other => panic!("{other:?}"),
        }
        match &s.mcp_servers["finance"].transport {
            McpTransport::Stdio { args, env, .. } => assert_eq!((args[0].as_str(), env["LOG"].as_str()), ("--x", "1")),
            other => panic!("{other:?}"),
        }
        // Importing the same names again collides with what is there.
        let err = s.import_mcp_config(&p).unwrap_err().to_string();
        assert!(err.contains("mcp_servers.cursor") && err.contains("defined in both"), "{err}");
    }

    #[test]
    fn refuses_literal_secrets_and_bad_urls() {
        let p = file(
            r#"{"mcpServers": {"r": {"url": "https://x.example/mcp", "headers": {"Authorization": "Bearer sk-live"}}}}"#,
        );
        let err = Settings::load_with_env(None, vec![]).unwrap().import_mcp_config(&p).unwrap_err().to_string();
        assert!(err.contains("mcpServers.r.headers.Authorization") && err.contains("literal"), "{err}");
        assert!(!err.contains("sk-live"), "{err}");
        let p = file(r#"{"mcpServers": {"r": {"url": "http://169.254.169.254/mcp"}}}"#);
        let err = Settings::load_with_env(None, vec![]).unwrap().import_mcp_config(&p).unwrap_err().to_string();
        assert!(err.contains("mcpServers.r.url") && err.contains("metadata"), "{err}");
        let p = file(r#"{"servers": {}}"#);
        let err = Settings::load_with_env(None, vec![]).unwrap().import_mcp_config(&p).unwrap_err().to_string();
        assert!(err.contains("mcpServers"), "{err}");
    }
}
