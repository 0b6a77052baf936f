//! `calculate_margin`: the tool adapter over [`finance_tools::gross_margin`]
//! (docs/TOOLS.md, custom tools). The adapter only translates: JSON arguments in, a
//! small result or a business error out.

use async_trait::async_trait;
use flotilla_agent::tool::{Tool, ToolContext, ToolError, ToolSpec};
use serde::Deserialize;
use serde_json::{Value, json};

use finance_tools::gross_margin;

/// Calculates gross margin from revenue and cost.
pub struct CalculateMargin;

#[derive(Deserialize)]
struct Args {
    revenue: f64,
    cost: f64,
}

#[async_trait]
impl Tool for CalculateMargin {
    /// A computation: it changes nothing.
    fn read_only(&self) -> bool {
        true
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "calculate_margin".into(),
            description: "Calculate gross margin from revenue and cost using the business formula.".into(),
            input_schema: json!({
                "type": "object",
                "properties": {"revenue": {"type": "number"}, "cost": {"type": "number"}},
                "required": ["revenue", "cost"],
                "additionalProperties": false
            }),
        }
    }

    async fn call(&self, _ctx: &ToolContext, args: Value) -> Result<Value, ToolError> {
        let Args { revenue, cost } = serde_json::from_value(args).map_err(|e| ToolError::validation(e.to_string()))?;
        let margin = gross_margin(revenue, cost).map_err(|e| ToolError::business(e.to_string()))?;
        Ok(json!({ "margin": margin }))
    }
}
