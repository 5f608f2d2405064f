//! The text tables that `check` and `status` print: each column as wide as
//! its widest cell (in characters, as a terminal shows them), two spaces
//! between columns, and no blanks at the end of a line, so that a reader
//! diffing two runs sees only what changed.

use std::fmt::Write as _;

/// `header`, then each of `rows` (a cell per column of the header), each
/// line after `indent`.
pub(crate) fn aligned(header: &[&str], rows: &[Vec<String>], indent: &str) -> String {
    let widths: Vec<usize> = (0..header.len())
        .map(|c| {
            rows.iter()
                .map(|r| r[c].chars().count())
                .chain([header[c].chars().count()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let rows = rows.iter().map(|r| r.iter().map(String::as_str).collect());
    let mut out = String::new();
    for cells in std::iter::once(header.to_vec()).chain(rows) {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        let _ = writeln!(out, "{indent}{}", padded.join("  ").trim_end());
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn columns_are_as_wide_as_their_widest_cell_and_lines_end_without_blanks() {
        let rows = vec![
            vec!["1".to_owned(), "ünïcode".to_owned(), String::new()],
            vec!["10".to_owned(), "a".to_owned(), "x".to_owned()],
        ];
        let table = super::aligned(&["#", "name", "s"], &rows, "  ");
        assert_eq!(table, "  #   name     s\n  1   ünïcode\n  10  a        x\n");
    }
}
