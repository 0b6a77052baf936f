//! Model prices (`[models.<name>] price_input_per_mtok` / `price_output_per_mtok`),
//! the unit of every cost figure (docs/OPERATIONS.md).

use flotilla_protocol::Usage;
use serde::{Deserialize, Serialize};

/// Prices of one model in US dollars per million tokens.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Price {
    /// `[models.<name>] price_input_per_mtok`: per million prompt tokens.
    pub input_per_mtok: f64,
    /// `[models.<name>] price_output_per_mtok`: per million completion tokens.
    pub output_per_mtok: f64,
}

impl Price {
    /// Dollar cost of the tokens in `usage`.
    pub fn cost(&self, usage: &Usage) -> f64 {
        (usage.input_tokens as f64 * self.input_per_mtok + usage.output_tokens as f64 * self.output_per_mtok)
            / 1_000_000.0
    }
}
