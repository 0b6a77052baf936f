//! Scripted models (format: docs/SCRIPTED.md) and their inputs shared by the
//! e2e tests and `flotilla bench`: a finance subagent that calls the native
//! `calculate_margin` tool (or the demo MCP server's `gross_margin`), a
//! planner that maps it over an uploaded JSONL file, and that file's items.

/// One `map_tasks` call over `/inputs/regions.jsonl`; the answer is its
/// aggregate result, or the error the planner got.
pub const MAP_PLANNER: &str = r#"
[[turns]]
[[turns.calls]]
tool = "map_tasks"
args = '''{"subagent_type": "finance", "items": "/inputs/regions.jsonl", "description": "{% raw %}Compute the gross margin of region {{ item.region }}: revenue {{ item.revenue }}, cost {{ item.cost }}{% endraw %}"}'''
[[turns]]
content = "{% if last[0].ok %}{{ last[0].value | tojson }}{% else %}map failed: {{ last[0].error.message }}{% endif %}"
"#;

/// The finance subagent of [`finance_margin`] and [`finance_gross_margin`],
/// `{latency}` standing for its latency, `{tool}` for the tool it calls and
/// `{margin}` for where the margin is in that tool's result.
const FINANCE_MARGIN: &str = r#"
latency_ms = {latency}
[vars]
nums = "captures(input, 'revenue (-?[0-9]+(?:[.][0-9]+)?), cost (-?[0-9]+(?:[.][0-9]+)?)')"
[[turns]]
[[turns.calls]]
tool = "{tool}"
args = '{"revenue": {{ nums[0][1] }}, "cost": {{ nums[0][2] }}}'
[[turns]]
content = "{{ {margin} }}"
"#;

fn finance(latency_ms: u64, tool: &str, margin: &str) -> String {
    FINANCE_MARGIN.replace("{latency}", &latency_ms.to_string()).replace("{tool}", tool).replace("{margin}", margin)
}

/// A finance subagent whose every model call takes `latency_ms`: one
/// `calculate_margin` call on the task's revenue and cost, then the margin.
pub fn finance_margin(latency_ms: u64) -> String {
    finance(latency_ms, "calculate_margin", "last[0].value.margin")
}

/// [`finance_margin`] calling the demo MCP server's `gross_margin` instead
/// (as `finance_gross_margin`, the server's prefix), whose result is the
/// margin itself.
pub fn finance_gross_margin(latency_ms: u64) -> String {
    finance(latency_ms, "finance_gross_margin", "last[0].value")
}

/// `n` JSONL items for [`MAP_PLANNER`]: region `r<i>` with revenue
/// `100 + i % 1000` and cost `50 + i % 1000`.
pub fn region_items(n: usize) -> String {
    (0..n)
        .map(|i| format!("{{\"region\":\"r{i}\",\"revenue\":{},\"cost\":{}}}\n", 100 + i % 1000, 50 + i % 1000))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_finance_script_keeps_its_template_braces() {
        let s = finance_margin(200);
        assert!(s.contains("latency_ms = 200\n"), "{s}");
        assert!(s.contains(r#"args = '{"revenue": {{ nums[0][1] }}, "cost": {{ nums[0][2] }}}'"#), "{s}");
        assert!(s.contains(r#"content = "{{ last[0].value.margin }}""#), "{s}");
    }

    #[test]
    fn items_are_one_json_object_a_line() {
        let text = region_items(1001);
        let lines: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(lines.len(), 1001);
        assert_eq!(lines[1000], serde_json::json!({"region": "r1000", "revenue": 100, "cost": 50}));
    }
}
