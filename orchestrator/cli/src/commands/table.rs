//! Column tables for the human output of `workers`, `jobs`, `approvals`,
//! `audit`, `status`, `files ls` and `bench`, built with comfy-table.
//!
//! Each column is as wide as its widest cell, measured in display width, so a
//! worker id, tool name or outcome longer than usual (or text with wide
//! characters) never shifts the columns after it, as fixed `{:<24}` paddings
//! did. No borders and no terminal detection (comfy-table is built without
//! its `tty` feature): the output is the same on a terminal and in a pipe,
//! two spaces between columns, so `grep` and `awk` keep working on it.

use comfy_table::{CellAlignment, Table, presets};

/// A borderless table with these column titles (none when `header` is empty).
pub fn new(header: &[&str]) -> Table {
    let mut t = Table::new();
    t.load_style(presets::NOTHING);
    if !header.is_empty() {
        t.set_header(header.iter().copied());
    }
    t
}

/// Right-aligns the columns at `indexes` (numbers). Columns exist once the
/// header or a row names them, so call it after either.
pub fn align_right(t: &mut Table, indexes: &[usize]) {
    for &i in indexes {
        if let Some(c) = t.column_mut(i) {
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
}

/// The table as text: two spaces between columns, each line prefixed with
/// `indent`, no trailing blanks, ending in a newline.
pub fn render(mut t: Table, indent: &str) -> String {
    let last = t.column_count().saturating_sub(1);
    for (i, c) in t.column_iter_mut().enumerate() {
        c.set_padding((0, if i == last { 0 } else { 2 }));
    }
    t.lines().map(|l| format!("{indent}{}\n", l.trim_end())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_follow_the_widest_cell_and_numbers_align_right() {
        let mut t = new(&["NAME", "N", "NOTE"]);
        align_right(&mut t, &[1]);
        t.add_row(["a-rather-long-name-beyond-any-fixed-width", "7", "x"]);
        t.add_row(["ümlaut", "1234", "y"]);
        let text = render(t, "  ");
        let lines: Vec<&str> = text.lines().collect();
        let note = lines[0].find("NOTE").unwrap();
        assert_eq!(lines[1].find("  x").map(|i| i + 2), Some(note), "{text}");
        // Display width, not bytes: `ü` is one column wide but two bytes long.
        let y = lines[2].char_indices().position(|(_, c)| c == 'y');
        assert_eq!(y, Some(note), "{text}");
        assert!(text.lines().all(|l| l.starts_with("  ") && !l.ends_with(' ')), "{text}");
        assert!(text.contains("   7  x"), "right-aligned number: {text}");
        assert!(text.ends_with("y\n"), "{text}");
    }
}
