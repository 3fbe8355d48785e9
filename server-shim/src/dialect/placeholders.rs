//! `?` placeholders through the translation.
//!
//! SQLite binds a bare `?` by its position in the text, like MySQL. A rewrite can move
//! expressions (sqlparser prints MySQL's `LIMIT a, b` as `LIMIT b OFFSET a`; `LOCATE(x,
//! s)` becomes `INSTR(s, x)`), which would bind the wrong values. So every `?` is
//! numbered in source order before parsing (`?1`, `?2`, ...: SQLite binds `?NNN` by its
//! number, which is the index the engine binds anyway), and after printing, if the
//! numbers still appear in order, they go back to bare `?`: the output then has the
//! same placeholders as the input, unchanged. Only a reordering rewrite keeps the
//! numbers, and those bind correctly positionally too.

use sqlparser::tokenizer::Token;

use super::Translation;

/// `tokens` with each `?` numbered by its position (1-based).
pub fn number(tokens: Vec<Token>) -> Vec<Token> {
    let mut n = 0_usize;
    tokens
        .into_iter()
        .map(|t| match t {
            Token::Placeholder(p) if p == "?" => {
                n += 1;
                Token::Placeholder(format!("?{n}"))
            }
            other => other,
        })
        .collect()
}

/// The translation with `?N` turned back into `?` when, over all its statements, the
/// numbers run 1, 2, 3... in text order.
pub fn restore(mut translation: Translation) -> Translation {
    let mut expected = 1_usize;
    let mut in_order = true;
    for statement in &translation.statements {
        for (_, number) in find(statement) {
            in_order &= number == expected;
            expected += 1;
        }
    }
    if in_order {
        for statement in &mut translation.statements {
            *statement = strip_numbers(statement);
        }
        // Its placeholders are the first statement's, less those of the `LIMIT`.
        if let Some(count) = &mut translation.found_rows {
            *count = strip_numbers(count);
        }
    }
    translation
}

/// The `?N` placeholders of printed SQLite text: (byte offset of the digits, number).
/// Skips SQLite's quoted literals and identifiers (`'..'`, `".."`, `` `..` ``, `[..]`,
/// quotes doubled inside, no backslash escapes).
fn find(sql: &str) -> Vec<(usize, usize)> {
    let mut found = Vec::new();
    let mut iter = sql.char_indices().peekable();
    while let Some((i, c)) = iter.next() {
        match c {
            '\'' | '"' | '`' | '[' => {
                let close = if c == '[' { ']' } else { c };
                while let Some((_, d)) = iter.next() {
                    if d == close {
                        if close != ']' && iter.peek().is_some_and(|&(_, e)| e == close) {
                            iter.next();
                        } else {
                            break;
                        }
                    }
                }
            }
            '?' => {
                let start = i + 1;
                let mut digits = String::new();
                while let Some(&(_, d)) = iter.peek() {
                    if !d.is_ascii_digit() {
                        break;
                    }
                    digits.push(d);
                    iter.next();
                }
                if let Ok(number) = digits.parse::<usize>() {
                    found.push((start, number));
                }
            }
            _ => {}
        }
    }
    found
}

fn strip_numbers(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut from = 0_usize;
    for (start, number) in find(sql) {
        let end = start + number.to_string().len();
        out.push_str(sql.get(from..start).unwrap_or_default());
        from = end;
    }
    out.push_str(sql.get(from..).unwrap_or_default());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dialect::StatementKind;

    fn restored(statements: &[&str]) -> Vec<String> {
        restore(Translation {
            statements: statements.iter().map(|s| (*s).to_owned()).collect(),
            kind: StatementKind::Query,
            rebuild: None,
            result_types: Vec::new(),
            found_rows: None,
            column_names: Vec::new(),
            typed_columns: Vec::new(),
            from_tables: Vec::new(),
        })
        .statements
    }

    #[test]
    fn restores_bare_placeholders_when_in_order() {
        assert_eq!(
            restored(&["SELECT ?1, '?2', `?3` FROM t WHERE a = ?2"]),
            ["SELECT ?, '?2', `?3` FROM t WHERE a = ?"]
        );
    }

    #[test]
    fn keeps_numbers_when_reordered() {
        assert_eq!(
            restored(&["SELECT a FROM t LIMIT ?2 OFFSET ?1"]),
            ["SELECT a FROM t LIMIT ?2 OFFSET ?1"]
        );
    }
}
