//! The items of a map: a JSONL job file, one JSON value per line
//! (docs/TOOLS.md, "map_tasks"). Blank lines are skipped, so a trailing
//! newline or an empty last line is not an item; an item's index counts the
//! non-blank lines before it, and errors name the 1-based line number.
//!
//! The reader walks the file's text lazily: validation parses every line once
//! and keeps nothing, dispatch parses only the items it is about to start,
//! and a resumed map skips the finished prefix without parsing it.

use serde_json::Value;

/// One item of the map.
#[derive(Debug, PartialEq)]
pub struct Item {
    /// Position among the non-blank lines, from 0: the item's index in the results file.
    pub index: usize,
    /// 1-based line number in the file, for error messages.
    pub line: usize,
    /// The parsed value.
    pub value: Value,
}

/// The items of a JSONL text, in file order, from a given index.
pub struct Items<'a> {
    lines: std::iter::Enumerate<std::str::Split<'a, char>>,
    next_index: usize,
}

impl<'a> Items<'a> {
    /// Every item of `text`.
    pub fn new(text: &'a str) -> Self {
        Self::from_index(text, 0)
    }

    /// The items of `text` from index `start` on; the lines before it are
    /// skipped without being parsed.
    pub fn from_index(text: &'a str, start: usize) -> Self {
        let mut items = Self { lines: text.split('\n').enumerate(), next_index: 0 };
        while items.next_index < start {
            if items.next_line().is_none() {
                break;
            }
        }
        items
    }

    /// The next non-blank line with its 0-based line number, counted as an item.
    fn next_line(&mut self) -> Option<(usize, &'a str)> {
        for (n, line) in self.lines.by_ref() {
            let line = line.trim();
            if !line.is_empty() {
                self.next_index += 1;
                return Some((n, line));
            }
        }
        None
    }
}

impl Iterator for Items<'_> {
    type Item = Result<Item, String>;

    fn next(&mut self) -> Option<Self::Item> {
        let (n, text) = self.next_line()?;
        let (index, line) = (self.next_index - 1, n + 1);
        Some(match serde_json::from_str(text) {
            Ok(value) => Ok(Item { index, line, value }),
            Err(e) => Err(format!("line {line} is not a JSON value: {e}")),
        })
    }
}

/// The file's bytes as text (without a copy), or why they are not JSONL.
pub fn into_text(bytes: Vec<u8>) -> Result<String, String> {
    String::from_utf8(bytes).map_err(|e| {
        format!("is not UTF-8 text (first bad byte at offset {}): JSONL is UTF-8", e.utf8_error().valid_up_to())
    })
}

/// How many items `text` holds (non-blank lines), without parsing them.
pub fn count(text: &str) -> usize {
    text.split('\n').filter(|l| !l.trim().is_empty()).count()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn items_are_the_non_blank_lines_with_their_index_and_line_number() {
        let text = "{\"region\": \"north\"}\n\n  42 \n\"x\"\n";
        let items: Vec<Item> = Items::new(text).map(Result::unwrap).collect();
        assert_eq!(
            items,
            [
                Item { index: 0, line: 1, value: json!({"region": "north"}) },
                Item { index: 1, line: 3, value: json!(42) },
                Item { index: 2, line: 4, value: json!("x") },
            ]
        );
        assert_eq!(count(text), 3);
    }

    #[test]
    fn a_line_that_is_not_json_is_an_error_naming_its_line() {
        let errors: Vec<String> = Items::new("1\n\n{\"a\": \n3").filter_map(Result::err).collect();
        assert_eq!(errors.len(), 1);
        assert!(errors[0].starts_with("line 3 is not a JSON value"), "{}", errors[0]);
    }

    #[test]
    fn reading_from_an_index_skips_the_items_before_it() {
        let text = "1\n\nnot json\n3\n4";
        let rest: Vec<_> = Items::from_index(text, 2).map(|i| i.map(|i| (i.index, i.line, i.value))).collect();
        assert_eq!(rest, [Ok((2, 4, json!(3))), Ok((3, 5, json!(4)))]);
        assert_eq!(Items::from_index(text, 9).count(), 0);
    }

    #[test]
    fn text_that_is_not_utf8_is_refused() {
        assert_eq!(into_text(b"1\n2".to_vec()).unwrap(), "1\n2");
        assert!(into_text(b"1\n\xff".to_vec()).unwrap_err().contains("offset 2"));
    }
}
