//! Resource accounting carried by reports and job records.

use serde::{Deserialize, Serialize};

/// Tokens and calls spent by an agent (or summed over many).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Usage {
    /// Prompt tokens, as reported by the model provider: all of them,
    /// including the cached ones counted below (OpenAI's `prompt_tokens`;
    /// for Anthropic `input_tokens` + `cache_creation_input_tokens` +
    /// `cache_read_input_tokens`, docs/MODELS.md).
    pub input_tokens: u64,
    /// Completion tokens.
    pub output_tokens: u64,
    /// Model round trips.
    pub model_calls: u64,
    /// Tool calls executed (including failed ones); omitted when 0, as in
    /// the usage of every single model call.
    #[serde(skip_serializing_if = "is_zero_u64")]
    pub tool_calls: u64,
    /// Cost in US dollars of the model calls, from the model's configured
    /// prices (`[models.<name>] price_*_per_mtok`, docs/CONFIG.md);
    /// 0 (and omitted) when no price is configured.
    #[serde(skip_serializing_if = "is_zero")]
    pub cost_usd: f64,
    /// Of `input_tokens`, those written to the provider's prompt cache
    /// (Anthropic `cache_creation_input_tokens`); 0 and omitted otherwise.
    #[serde(skip_serializing_if = "is_zero_u64")]
    pub cache_creation_input_tokens: u64,
    /// Of `input_tokens`, those read from the provider's prompt cache
    /// (Anthropic `cache_read_input_tokens`, OpenAI
    /// `prompt_tokens_details.cached_tokens`); 0 and omitted otherwise.
    #[serde(skip_serializing_if = "is_zero_u64")]
    pub cache_read_input_tokens: u64,
}

fn is_zero_u64(x: &u64) -> bool {
    *x == 0
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, o: Self) {
        self.input_tokens += o.input_tokens;
        self.output_tokens += o.output_tokens;
        self.model_calls += o.model_calls;
        self.tool_calls += o.tool_calls;
        self.cost_usd += o.cost_usd;
        self.cache_creation_input_tokens += o.cache_creation_input_tokens;
        self.cache_read_input_tokens += o.cache_read_input_tokens;
    }
}

impl Usage {
    /// Input plus output tokens.
    pub fn total_tokens(&self) -> u64 {
        self.input_tokens + self.output_tokens
    }
}
