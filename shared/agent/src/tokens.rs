//! Token counts with a real tokenizer (`o200k_base`, the encoding of OpenAI's
//! current models, whose tables ship inside `tiktoken-rs`; no download), not a
//! characters/4 estimate: the planner's context bound (`[planner]
//! context_tokens`, docs/CONFIG.md) and the cap on a report summary (`[planner]
//! report_tokens`) are both measured in these tokens.
//!
//! A leaf: it knows text, not messages. A whole request is counted by
//! [`crate::model::count_request`], which serialises it as the provider's
//! wire body and counts that text here (so the models use this module and
//! never the other way round).

use tiktoken_rs::CoreBPE;

/// The tokenizer, built once per process (parsing its tables takes about a
/// hundred milliseconds, and holds some 50 MiB after). Built on first use
/// from inside a multi-threaded runtime, the build runs under
/// `block_in_place`, so the runtime moves its other tasks (in-progress acks,
/// lease renewals) to another thread meanwhile.
fn bpe() -> &'static CoreBPE {
    static BUILT: std::sync::OnceLock<&'static CoreBPE> = std::sync::OnceLock::new();
    if let Some(bpe) = BUILT.get() {
        return bpe;
    }
    let build = || *BUILT.get_or_init(tiktoken_rs::o200k_base_singleton);
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => tokio::task::block_in_place(build),
        _ => build(),
    }
}

/// Builds the tokenizer now, for a process that counts every request (a
/// scripted model): the first build parses the tables for about a hundred
/// milliseconds and holds some 50 MiB after. Processes that only check
/// budgets leave it to [`within`], which rarely needs it.
pub fn warm_up() {
    let _ = bpe();
}

/// Tokens of `text` (special-token markers count as ordinary text).
pub fn count(text: &str) -> usize {
    bpe().encode_ordinary(text).len()
}

/// Whether `text` is at most `max_tokens` tokens. A token covers at least
/// one byte, so a text of no more bytes than that fits without being
/// tokenized: a budget check builds the tables only for a text near its
/// limit, and a worker or orchestrator whose model reports its own usage
/// may never build them.
pub fn within(text: &str, max_tokens: usize) -> bool {
    text.len() <= max_tokens || count(text) <= max_tokens
}

/// `text` cut to at most `max_tokens` tokens, on a character boundary, and
/// whether it was cut.
pub fn truncate(text: &str, max_tokens: usize) -> (String, bool) {
    if text.len() <= max_tokens {
        return (text.to_string(), false);
    }
    let tokens = bpe().encode_ordinary(text);
    if tokens.len() <= max_tokens {
        return (text.to_string(), false);
    }
    let bytes = bpe().decode_bytes(&tokens[..max_tokens]).unwrap_or_default();
    // A token may end inside a multi-byte character: keep the whole ones.
    let kept = match std::str::from_utf8(&bytes) {
        Ok(s) => s.to_string(),
        Err(e) => String::from_utf8_lossy(&bytes[..e.valid_up_to()]).into_owned(),
    };
    (kept, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_the_tokenizers_not_a_character_estimate() {
        assert_eq!(count(""), 0);
        assert_eq!(count("hello world"), 2);
        // 400 characters of one repeated word are far fewer than 100 tokens.
        let repeated = "margin ".repeat(57);
        assert!(count(&repeated) < 100, "{}", count(&repeated));
        // Digits split into groups of at most three in o200k_base.
        assert_eq!(count("123456789"), 3);
    }

    #[test]
    fn a_text_within_its_budget_by_bytes_is_within_it_by_tokens() {
        for text in ["", "hello world", "日本語🚢", &"0.375 ".repeat(300)] {
            for max in [0, 1, 2, 5, 50, 500, 5_000] {
                assert_eq!(within(text, max), count(text) <= max, "{text:?} {max}");
            }
        }
    }

    #[test]
    fn truncation_keeps_a_prefix_within_the_budget() {
        let text = "The north region's margin is 0.375; the south region had no revenue. ".repeat(20);
        let (cut, was_cut) = truncate(&text, 50);
        assert!(was_cut);
        assert_eq!(count(&cut), 50);
        assert!(text.starts_with(&cut));
        let (same, was_cut) = truncate("short", 50);
        assert_eq!((same.as_str(), was_cut), ("short", false));
        assert_eq!(truncate(&text, 0), (String::new(), true));
    }

    #[test]
    fn truncation_never_splits_a_character() {
        let text = "日本語のテキストと絵文字🚢🚢🚢".repeat(10);
        for max in 1..40 {
            let (cut, _) = truncate(&text, max);
            assert!(text.starts_with(&cut));
            assert!(count(&cut) <= max, "{max}: {}", count(&cut));
        }
    }
}
