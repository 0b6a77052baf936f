//! Resource accounting carried by reports and job records.

use serde::{Deserialize, Serialize};

/// Tokens and calls spent by an agent (or summed over many).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Usage {
    /// Prompt tokens, as reported by the model provider.
    pub input_tokens: u64,
    /// Completion tokens.
    pub output_tokens: u64,
    /// Model round trips.
    pub model_calls: u64,
    /// Tool calls executed (including failed ones).
    pub tool_calls: u64,
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, o: Self) {
        self.input_tokens += o.input_tokens;
        self.output_tokens += o.output_tokens;
        self.model_calls += o.model_calls;
        self.tool_calls += o.tool_calls;
    }
}

impl Usage {
    /// Input plus output tokens.
    pub fn total_tokens(&self) -> u64 {
        self.input_tokens + self.output_tokens
    }
}
