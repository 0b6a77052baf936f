//! Scripted planners for tests (format: docs/SCRIPTED.md).

/// A planner script that delegates `tasks` (subagent type, description) in
/// one turn, then answers with one line per result, in call order: `ok
/// <answer>` or `<error kind>: <message>`.
pub fn delegate_all(tasks: &[(&str, &str)]) -> String {
    let mut script = String::from("[[turns]]\n");
    for (ty, description) in tasks {
        let args = serde_json::json!({"subagent_type": ty, "description": description}).to_string();
        script.push_str(&format!("[[turns.calls]]\ntool = \"task\"\nargs = '{args}'\n"));
    }
    script.push_str(
        "[[turns]]\ncontent = \"{% for r in last %}{% if r.ok %}ok {{ r.value }}{% else %}{{ r.error.kind }}: \
         {{ r.error.message }}{% endif %}\\n{% endfor %}\"\n",
    );
    script
}
