use super::*;

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn tmpdir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("flotilla-config-{}", uuid::Uuid::now_v7()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

const GOOD: &str = r#"
[nats]
url = "nats://127.0.0.1:4999"
[models.script]
provider = "scripted"
script = "s.toml"
[models.gpt]
provider = "openai"
model = "gpt-4o-mini"
api_key_env = "OPENAI_API_KEY"
[planner]
model = "gpt"
[subagents.finance]
description = "finance"
model = "script"
tools = ["calculate_margin"]
"#;

#[test]
fn loads_resolves_paths_and_applies_env_overrides() {
    let d = tmpdir();
    write(&d, "s.toml", "");
    let p = write(&d, "f.toml", GOOD);
    let env = vec![
        ("FLOTILLA_NATS__URL".to_string(), "nats://10.0.0.1:4222".to_string()),
        ("FLOTILLA_SUBAGENTS__FINANCE__CONCURRENCY".to_string(), "7".to_string()),
    ];
    let s = Settings::load_with_env(Some(&p), env).unwrap();
    assert_eq!(s.nats.url, "nats://10.0.0.1:4222");
    assert_eq!(s.nats.prefix, "flotilla");
    let fin = &s.subagents[&SubagentType::new("finance").unwrap()];
    assert_eq!(fin.concurrency, 7);
    match s.model("script").unwrap() {
        ModelSettings::Scripted { script } => assert_eq!(script, &d.join("s.toml")),
        other => panic!("{other:?}"),
    }
}

#[test]
fn errors_name_the_key() {
    let d = tmpdir();
    write(&d, "s.toml", "");
    let cases = [
        (GOOD.replace("model = \"gpt\"", "model = \"nope\""), "planner.model"),
        (GOOD.replace("[subagents.finance]", "[subagents.\"fin.ance\"]"), "subagents.fin.ance"),
        (GOOD.replace("provider = \"openai\"", "provider = \"magic\""), "models.gpt.provider"),
        (GOOD.replace("s.toml", "missing.toml"), "models.script.script"),
        (GOOD.replace("tools = [", "concurrency = 0\ntools = ["), "subagents.finance.concurrency"),
    ];
    for (text, key) in cases {
        let p = write(&d, "f.toml", &text);
        let err = Settings::load_with_env(Some(&p), vec![]).unwrap_err().to_string();
        assert!(err.contains(&format!("`{key}`")), "{key}: {err}");
    }
    let p = write(&d, "f.toml", &format!("{GOOD}\n[nats2]\nx=1\n"));
    let err = Settings::load_with_env(Some(&p), vec![]).unwrap_err().to_string();
    assert!(err.contains("nats2"), "{err}");
    let err = Settings::load_with_env(Some(&d.join("absent.toml")), vec![]).unwrap_err().to_string();
    assert!(err.contains("does not exist"), "{err}");
}

#[test]
fn cache_prices_default_to_the_input_price_and_refuse_negatives() {
    let d = tmpdir();
    write(&d, "s.toml", "");
    let priced =
        GOOD.replace("api_key_env = ", "price_input_per_mtok = 3.0\nprice_cache_read_per_mtok = 0.3\napi_key_env = ");
    let s = Settings::load_with_env(Some(&write(&d, "f.toml", &priced)), vec![]).unwrap();
    let price = s.price("gpt").unwrap();
    assert_eq!((price.cache_read_per_mtok, price.cache_write_per_mtok, price.output_per_mtok), (0.3, 3.0, 0.0));
    assert!(s.price("script").is_none());
    let negative = priced.replace("price_cache_read_per_mtok = 0.3", "price_cache_read_per_mtok = -1");
    let err = Settings::load_with_env(Some(&write(&d, "f.toml", &negative)), vec![]).unwrap_err().to_string();
    assert!(err.contains("`models.gpt.price_cache_read_per_mtok`"), "{err}");
}

#[test]
fn defaults_work_without_a_file() {
    let s = Settings::load_with_env(None, vec![]).unwrap();
    assert_eq!(s.nats.url, "nats://127.0.0.1:4222");
    assert!(s.planner().unwrap_err().to_string().contains("[planner]"));
}

#[test]
fn tools_are_parsed_once_at_load() {
    let d = tmpdir();
    write(&d, "s.toml", "");
    let text = GOOD.replace(
        "tools = [\"calculate_margin\"]",
        "tools = [\"calculate_margin\", \"grep\", \"mcp:finance/add\", \"mcp:docs\"]",
    );
    let s = Settings::load_with_env(Some(&write(&d, "f.toml", &text)), vec![]).unwrap();
    let fin = &s.subagents[&SubagentType::new("finance").unwrap()];
    assert_eq!(
        fin.tools,
        vec![
            ToolRef::Native("calculate_margin".into()),
            ToolRef::Builtin("grep".into()),
            ToolRef::Mcp { server: "finance".into(), tool: Some("add".into()) },
            ToolRef::Mcp { server: "docs".into(), tool: None },
        ]
    );
    // The planner's default: the read-only built-ins.
    let planner: Vec<String> = s.planner().unwrap().tools.iter().map(ToString::to_string).collect();
    assert_eq!(planner, crate::builtin_tools::READ_ONLY);
}

#[test]
fn bad_tool_entries_name_the_key_and_the_choices() {
    let d = tmpdir();
    write(&d, "s.toml", "");
    let sub = |tools: &str| GOOD.replace("tools = [\"calculate_margin\"]", &format!("tools = [{tools}]"));
    let planner = |tools: &str| GOOD.replace("model = \"gpt\"", &format!("model = \"gpt\"\ntools = [{tools}]"));
    let cases = [
        (
            sub("\"ls\", \"calc_margin\""),
            "subagents.finance.tools",
            "unknown tool \"calc_margin\": use a built-in (ls,",
        ),
        (sub("\"mcp:\""), "subagents.finance.tools", "invalid MCP tool entry \"mcp:\""),
        (sub("\"execute\""), "subagents.finance.tools", "\"execute\" needs a [subagents.finance.sandbox] section"),
        (planner("\"write_file\", \"calculate_margin\""), "planner.tools", "\"calculate_margin\" is not a built-in"),
        (planner("\"mcp:finance\""), "planner.tools", "\"mcp:finance\" is not a built-in tool"),
        (planner("\"nope\""), "planner.tools", "unknown tool \"nope\""),
    ];
    for (text, key, message) in cases {
        let err = Settings::load_with_env(Some(&write(&d, "f.toml", &text)), vec![]).unwrap_err().to_string();
        assert!(err.contains(&format!("`{key}")) && err.contains(message), "{key}: {err}");
    }
    // With a sandbox, `execute` is accepted.
    let text = format!("{}\n[subagents.finance.sandbox]\n", sub("\"execute\""));
    let s = Settings::load_with_env(Some(&write(&d, "f.toml", &text)), vec![]).unwrap();
    assert_eq!(s.subagents[&SubagentType::new("finance").unwrap()].tools, vec![ToolRef::Execute]);
}

#[test]
fn context_keys_have_defaults_and_refuse_nonsense_naming_the_key() {
    let d = tmpdir();
    write(&d, "s.toml", "");
    let s = Settings::load_with_env(Some(&write(&d, "f.toml", GOOD)), vec![]).unwrap();
    let p = s.planner().unwrap();
    assert_eq!((p.context_tokens, p.report_tokens), (32_000, 2_000));
    assert!(p.compaction_prompt.contains("task id"));
    assert_eq!(s.subagents[&SubagentType::new("finance").unwrap()].context_tokens, 32_000);
    let planner = |keys: &str| GOOD.replace("model = \"gpt\"", &format!("model = \"gpt\"\n{keys}"));
    let cases = [
        (planner("context_tokens = 0"), "planner.context_tokens", "must be at least 1"),
        (planner("report_tokens = 0"), "planner.report_tokens", "must be at least 1"),
        (
            planner("context_tokens = 1000\nreport_tokens = 1000"),
            "planner.report_tokens",
            "below planner.context_tokens",
        ),
        (planner("compaction_prompt = \" \""), "planner.compaction_prompt", "must not be empty"),
        (
            GOOD.replace("tools = [", "context_tokens = 0\ntools = ["),
            "subagents.finance.context_tokens",
            "must be at least 1",
        ),
    ];
    for (text, key, message) in cases {
        let err = Settings::load_with_env(Some(&write(&d, "f.toml", &text)), vec![]).unwrap_err().to_string();
        assert!(err.contains(&format!("`{key}`")) && err.contains(message), "{key}: {err}");
    }
    let text = planner("context_tokens = 3000\nreport_tokens = 200\ncompaction_prompt = \"Summarise.\"");
    let s = Settings::load_with_env(Some(&write(&d, "f.toml", &text)), vec![]).unwrap();
    let p = s.planner().unwrap();
    assert_eq!((p.context_tokens, p.report_tokens, p.compaction_prompt.as_str()), (3000, 200, "Summarise."));
}

#[test]
fn a_remote_type_names_its_agent_instead_of_a_model_and_refuses_model_loop_keys() {
    let d = tmpdir();
    write(&d, "s.toml", "");
    let remote = |body: &str| format!("{GOOD}\n[subagents.coder]\ndescription = \"codes\"\n{body}\n");
    let p = write(&d, "f.toml", &remote("agent = { name = \"claude-code\", owner = \"alice\" }"));
    let s = Settings::load_with_env(Some(&p), vec![]).unwrap();
    let coder = &s.subagents[&SubagentType::new("coder").unwrap()];
    assert_eq!(coder.agent.as_ref().map(|a| a.name.as_str()), Some("claude-code"));
    assert!(coder.model.is_empty());
    let p =
        write(&d, "f.toml", &remote("a2a = { url = \"https://agents.example/a2a\", auth = { bearer_env = \"T\" } }"));
    let s = Settings::load_with_env(Some(&p), vec![]).unwrap();
    assert!(s.subagents[&SubagentType::new("coder").unwrap()].a2a.is_some());

    let cases = [
        ("", "subagents.coder.model", "`agent` or `a2a`"),
        ("model = \"script\"\nagent = { name = \"a\", owner = \"b\" }", "subagents.coder", "exactly one"),
        ("agent = { name = \"a\", owner = \"b\" }\na2a = { url = \"https://x\" }", "subagents.coder", "exactly one"),
        ("agent = { name = \"a\", owner = \"b\" }\ntools = [\"read_file\"]", "subagents.coder.tools", "remote agent"),
        ("agent = { name = \"a.b\", owner = \"b\" }", "subagents.coder.agent.name", "one NATS subject token"),
        ("agent = { name = \"a\", owner = \"*\" }", "subagents.coder.agent.owner", "one NATS subject token"),
        ("a2a = { url = \"ftp://x\" }", "subagents.coder.a2a.url", "http(s) URL"),
        ("a2a = { url = \"https://x\" }\nsystem_prompt = \"be nice\"", "subagents.coder.system_prompt", "own tools"),
    ];
    for (body, key, why) in cases {
        let p = write(&d, "f.toml", &remote(body));
        let err = Settings::load_with_env(Some(&p), vec![]).unwrap_err().to_string();
        assert!(err.contains(&format!("`{key}`")) && err.contains(why), "{body:?}: {err}");
    }
}

#[test]
fn agent_protocol_subagents_must_be_configured_types_distinct_from_the_planners_agent() {
    let d = tmpdir();
    write(&d, "s.toml", "");
    let with = |list: &str| format!("{GOOD}\n[agent_protocol]\nenabled = true\nsubagents = {list}\n");
    let s = Settings::load_with_env(Some(&write(&d, "f.toml", &with("[\"finance\"]"))), vec![]).unwrap();
    assert_eq!(s.agent_protocol.subagents, ["finance"]);
    let cases = [
        ("[\"coder\"]", "not a configured subagent type (the types: finance)"),
        ("[\"flotilla\"]", "also agent_protocol.agent"),
        ("[\"Fin\"]", "not a protocol subject token"),
    ];
    for (list, why) in cases {
        let err = Settings::load_with_env(Some(&write(&d, "f.toml", &with(list))), vec![]).unwrap_err().to_string();
        assert!(err.contains("`agent_protocol.subagents`") && err.contains(why), "{list}: {err}");
    }
}
