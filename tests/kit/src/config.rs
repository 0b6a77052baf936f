//! Writes a Flotilla config (and its model scripts) into a temp dir.

use std::path::PathBuf;

use crate::TempDir;

/// The demo's scripts, shipped in deploy/local/scripts.
pub fn demo_script(name: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy/local/scripts").join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// A config file under construction: sections are raw TOML.
pub struct TestConfig {
    dir: TempDir,
    sections: Vec<String>,
}

impl TestConfig {
    /// A config for the NATS server at `url` with a unique subject prefix.
    pub fn new(nats_url: &str) -> Self {
        let mut c = Self { dir: TempDir::new("config"), sections: Vec::new() };
        c.sections
            .push(format!("[nats]\nurl = \"{nats_url}\"\nprefix = \"flotilla\"\nack_wait = 5\nmax_deliver = 5\n"));
        c
    }

    /// The demo setup: scripted planner and finance subagent with `concurrency`
    /// slots per worker, each model call taking `latency_ms`.
    pub fn demo(nats_url: &str, concurrency: usize, latency_ms: u64) -> Self {
        let mut c = Self::new(nats_url);
        c.scripted_model("planner", &demo_script("planner.toml"));
        c.scripted_model("finance", &format!("latency_ms = {latency_ms}\n{}", demo_script("finance.toml")));
        c.section("[planner]\nmodel = \"planner\"\ntask_timeout = 60\n");
        c.section(&format!(
            r#"[mcp_servers.finance]
command = "{}"
[subagents.finance]
description = "Computes gross margins."
model = "finance"
tools = ["mcp:finance/gross_margin"]
concurrency = {concurrency}
"#,
            crate::proc::bin("finance-tools").display()
        ));
        c
    }

    /// [`TestConfig::demo`] with the finance type on the native, read-only
    /// `calculate_margin` tool (workers/src/tools) instead of the MCP
    /// server's: the bench's setup.
    pub fn demo_native(nats_url: &str, concurrency: usize, latency_ms: u64) -> Self {
        let mut c = Self::new(nats_url);
        c.scripted_model("planner", &demo_script("planner.toml"));
        c.scripted_model("finance", &crate::scripts::finance_margin(latency_ms));
        c.section("[planner]\nmodel = \"planner\"\ntask_timeout = 60\n");
        c.section(&format!(
            "[subagents.finance]\ndescription = \"Computes gross margins.\"\nmodel = \"finance\"\n\
             tools = [\"calculate_margin\"]\nconcurrency = {concurrency}\n"
        ));
        c
    }

    /// Sets `[nats] ack_wait` and `max_deliver` (seconds, deliveries).
    pub fn nats(&mut self, ack_wait: u64, max_deliver: i64) -> &mut Self {
        let url = self.sections[0].lines().find(|l| l.starts_with("url")).unwrap_or_default().to_string();
        self.sections[0] =
            format!("[nats]\n{url}\nprefix = \"flotilla\"\nack_wait = {ack_wait}\nmax_deliver = {max_deliver}\n");
        self
    }

    /// Replaces `from` with `to` in the sections written so far.
    pub fn section_replace(&mut self, from: &str, to: &str) -> &mut Self {
        for s in &mut self.sections {
            *s = s.replace(from, to);
        }
        self
    }

    /// Adds raw TOML.
    pub fn section(&mut self, toml: &str) -> &mut Self {
        self.sections.push(toml.to_string());
        self
    }

    /// Adds model `name` (provider `scripted`) playing `script`, which is
    /// written next to the config as `<name>.toml`.
    pub fn scripted_model(&mut self, name: &str, script: &str) -> &mut Self {
        self.script(&format!("{name}.toml"), script);
        self.sections.push(format!("[models.{name}]\nprovider = \"scripted\"\nscript = \"{name}.toml\"\n"));
        self
    }

    /// Scripts the planner to delegate one task, then answer `ok: <its
    /// report>` or `<error kind>: <error message>`.
    pub fn one_task_planner(&mut self, subagent_type: &str, description: &str) -> &mut Self {
        let args = serde_json::json!({"subagent_type": subagent_type, "description": description});
        self.script(
            "planner.toml",
            &format!(
                "[[turns]]\n[[turns.calls]]\ntool = \"task\"\nargs = '{args}'\n[[turns]]\ncontent = \"{{% set r = last[0] %}}\
                 {{% if r.ok %}}ok: {{{{ r.value }}}}{{% else %}}{{{{ r.error.kind }}}}: {{{{ r.error.message }}}}{{% endif %}}\"\n"
            ),
        )
    }

    /// Writes a script file next to the config.
    pub fn script(&mut self, name: &str, text: &str) -> &mut Self {
        std::fs::write(self.dir.path().join(name), text).expect("script");
        self
    }

    /// Writes the config; returns its path.
    pub fn write(&self) -> PathBuf {
        let p = self.dir.path().join("flotilla.toml");
        std::fs::write(&p, self.sections.join("\n")).expect("config");
        p
    }

    /// The directory holding the config.
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }
}
