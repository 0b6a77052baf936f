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
///
/// Exactly the tokenizer's count of the whole text, but a long text is
/// counted in parts whose counts are remembered (`segments`, `Counted`):
/// the requests of one conversation repeat their system prompt, tool schemas
/// and every earlier message, so most of a request is counted once per
/// process, not once per model call.
pub fn count(text: &str) -> usize {
    if text.len() < 2 * MIN_SEGMENT {
        return bpe().encode_ordinary(text).len();
    }
    segments(text).map(|part| COUNTED.count(part)).sum()
}

/// The shortest part [`count`] remembers; shorter texts are counted directly.
const MIN_SEGMENT: usize = 96;

/// `text` cut into parts whose token counts add up to the count of the
/// whole: each cut is just after `{"` and before an ASCII letter or digit.
///
/// Why that is exact: `o200k_base` tokenizes the pieces its pre-tokenizing
/// pattern splits a text into, each on its own, and a piece never starts
/// or ends inside a run of punctuation of two or more characters followed
/// by a letter or digit: such a run is one piece (a single punctuation
/// character may lead a word, two may not), which ends where the letter or
/// digit begins. The pattern looks behind nothing, so the pieces after the
/// cut are those of the text after it; the part before the cut ends with
/// the same whole run. JSON bodies have such a cut at every object key.
/// Cuts closer than [`MIN_SEGMENT`] bytes are skipped.
fn segments(text: &str) -> impl Iterator<Item = &str> {
    let bytes = text.as_bytes();
    let mut cuts =
        text.match_indices("{\"").map(|(i, _)| i + 2).filter(|&i| bytes.get(i).is_some_and(u8::is_ascii_alphanumeric));
    let mut start = 0;
    std::iter::from_fn(move || {
        if start == text.len() {
            return None;
        }
        let from = start;
        let end = cuts
            .by_ref()
            .find(|&cut| cut - from >= MIN_SEGMENT && text.len() - cut >= MIN_SEGMENT)
            .unwrap_or(text.len());
        start = end;
        Some(&text[from..end])
    })
}

/// The remembered counts of parts of texts, at most [`Counted::MAX_BYTES`]
/// of them (all forgotten at once when full: a worker's requests repeat
/// the same few prompts and schemas, which come back at once).
struct Counted {
    parts: std::sync::Mutex<(std::collections::HashMap<Box<str>, u32>, usize)>,
}

static COUNTED: std::sync::LazyLock<Counted> =
    std::sync::LazyLock::new(|| Counted { parts: std::sync::Mutex::new(Default::default()) });

impl Counted {
    /// Text bytes remembered before all is forgotten.
    const MAX_BYTES: usize = 2 << 20;

    fn count(&self, part: &str) -> usize {
        if let Some(&n) = self.parts.lock().expect("token counts").0.get(part) {
            return n as usize;
        }
        let n = bpe().encode_ordinary(part).len();
        let mut parts = self.parts.lock().expect("token counts");
        let (map, bytes) = &mut *parts;
        if *bytes + part.len() > Self::MAX_BYTES {
            map.clear();
            *bytes = 0;
        }
        if part.len() <= Self::MAX_BYTES && map.insert(part.into(), n as u32).is_none() {
            *bytes += part.len();
        }
        n
    }
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

    /// The tokenizer's own count of the whole text.
    fn whole(text: &str) -> usize {
        bpe().encode_ordinary(text).len()
    }

    #[test]
    fn a_request_body_counted_in_remembered_parts_is_counted_exactly() {
        let tools = (0..6)
            .map(|i| format!(r#"{{"type":"function","function":{{"name":"tool_{i}","description":"Does thing {i} of the job's work, carefully.","parameters":{{"type":"object","properties":{{"a":{{"type":"number"}},"b":{{"type":"string","description":"What b is"}}}},"required":["a"]}}}}}}"#))
            .collect::<Vec<_>>()
            .join(",");
        for task in ["Compute the gross margin: revenue 120, cost 75", "日本語 {\"x\": 'quoted'}  \n\n  trailing ", ""]
        {
            let body = format!(
                r#"{{"model":"","messages":[{{"role":"system","content":"You are the finance subagent. Work only on your task."}},{{"role":"user","content":"{task}"}}],"tools":[{tools}]}}"#
            );
            assert!(segments(&body).count() > 3, "the body is counted in parts");
            assert_eq!(segments(&body).collect::<String>(), body);
            // Twice: counted, then remembered.
            assert_eq!(count(&body), whole(&body), "{body}");
            assert_eq!(count(&body), whole(&body), "{body}");
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2_000))]
        /// Any text, cut wherever `segments` cuts it, counts as the whole:
        /// punctuation, quotes, braces, contractions, digits, whitespace and
        /// non-Latin letters on either side of every cut.
        #[test]
        fn parts_count_as_the_whole_text(
            chunks in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::string::string_regex("[{\"'a-zA-Z0-9 \n\t,:\\.\\-é日🚢\u{300}]{0,12}").unwrap(),
                    proptest::prelude::Just("{\"".to_string()),
                    proptest::prelude::Just("\"},{\"role".to_string()),
                    proptest::prelude::Just("'s".to_string()),
                    proptest::prelude::Just("   ".to_string()),
                ],
                0..80,
            )
        ) {
            let text: String = chunks.concat();
            let parts: Vec<&str> = segments(&text).collect();
            proptest::prop_assert_eq!(parts.concat(), text.clone());
            let summed: usize = parts.iter().map(|p| whole(p)).sum();
            proptest::prop_assert_eq!(summed, whole(&text), "{:?}", parts);
            proptest::prop_assert_eq!(count(&text), whole(&text));
        }
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
