//! Model prices (`[models.<name>] price_input_per_mtok`,
//! `price_output_per_mtok`, and for prompt caching
//! `price_cache_write_per_mtok` / `price_cache_read_per_mtok`), the unit of
//! every cost figure (docs/OPERATIONS.md).

use flotilla_protocol::Usage;
use serde::{Deserialize, Serialize};

/// Prices of one model in US dollars per million tokens.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Price {
    /// `[models.<name>] price_input_per_mtok`: per million prompt tokens
    /// that neither wrote nor read the provider's prompt cache.
    pub input_per_mtok: f64,
    /// `[models.<name>] price_output_per_mtok`: per million completion tokens.
    pub output_per_mtok: f64,
    /// `[models.<name>] price_cache_write_per_mtok` (default: the input
    /// price): per million prompt tokens written to the cache.
    pub cache_write_per_mtok: f64,
    /// `[models.<name>] price_cache_read_per_mtok` (default: the input
    /// price): per million prompt tokens read from the cache.
    pub cache_read_per_mtok: f64,
}

impl Price {
    /// Dollar cost of the tokens in `usage`. Its `input_tokens` counts every
    /// prompt token, cached or not (docs/MODELS.md, "Usage"), so the cached
    /// ones are taken out of it and priced at their own rates.
    pub fn cost(&self, usage: &Usage) -> f64 {
        let written = usage.cache_creation_input_tokens;
        let read = usage.cache_read_input_tokens;
        let uncached = usage.input_tokens.saturating_sub(written.saturating_add(read));
        (uncached as f64 * self.input_per_mtok
            + written as f64 * self.cache_write_per_mtok
            + read as f64 * self.cache_read_per_mtok
            + usage.output_tokens as f64 * self.output_per_mtok)
            / 1_000_000.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cached_prompt_tokens_are_priced_at_their_own_rates() {
        // Anthropic-like rates: writes 1.25x, reads 0.1x the input price.
        let price =
            Price { input_per_mtok: 3.0, output_per_mtok: 15.0, cache_write_per_mtok: 3.75, cache_read_per_mtok: 0.3 };
        let usage = Usage {
            input_tokens: 1_000_000 + 200_000 + 2_000_000,
            cache_creation_input_tokens: 200_000,
            cache_read_input_tokens: 2_000_000,
            output_tokens: 100_000,
            ..Usage::default()
        };
        // 1M uncached x 3 + 0.2M x 3.75 + 2M x 0.3 + 0.1M x 15
        let expected = 3.0 + 0.75 + 0.6 + 1.5;
        assert!((price.cost(&usage) - expected).abs() < 1e-9, "{}", price.cost(&usage));
        // Without cache counts every prompt token is an input token.
        let plain = Usage { input_tokens: 1_000_000, output_tokens: 0, ..Usage::default() };
        assert!((price.cost(&plain) - 3.0).abs() < 1e-9);
    }
}
