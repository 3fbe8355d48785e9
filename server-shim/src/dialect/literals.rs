//! String literals, carried through the rewrite intact. sqlparser prints a string by doubling
//! its quotes, except a quote after a backslash or a quote already doubled, which it prints
//! as is (it cannot know whether the text was escaped). After MySQL's tokenizer has removed
//! the backslash escapes, that guess corrupts values (`'a\'\'b'` would reach SQLite as
//! `'a''b'`, one quote instead of two) and can end a string early (`'\\\' OR 1=1 -- '`
//! would become `'\' OR 1=1 -- '`, a string and then SQL). So every string literal is
//! replaced by a marker before parsing and written back, in SQLite's own quoting (quotes
//! doubled, nothing else escaped), into the printed statements.
//!
//! MySQL's double-quoted strings (no `ANSI_QUOTES` in the default `sql_mode`) become
//! ordinary strings on the way: SQLite would read them as identifiers.

use sqlparser::tokenizer::Token;

use crate::sql_error::SqlError;

/// Marks a literal's index: a private-use character no client text is expected to hold
/// (text that does is refused rather than risk a mix-up).
const MARK: char = '\u{E000}';

/// Replaces each string literal token by a marker; returns the tokens and the values.
///
/// # Errors
/// 1235 if the statement itself contains the marker character.
pub fn protect(tokens: Vec<Token>) -> Result<(Vec<Token>, Vec<String>), SqlError> {
    let mut values = Vec::new();
    let tokens = tokens
        .into_iter()
        .map(|t| match t {
            Token::SingleQuotedString(s) | Token::DoubleQuotedString(s) => {
                if s.contains(MARK) {
                    return Err(SqlError::not_supported("the character U+E000 in a string"));
                }
                let marker = format!("{MARK}{}{MARK}", values.len());
                values.push(s);
                Ok(Token::SingleQuotedString(marker))
            }
            other => Ok(other),
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok((tokens, values))
}

/// The value a marker stands for, when `marker` is one of `values`'.
pub fn value_of<'v>(marker: &str, values: &'v [String]) -> Option<&'v str> {
    let index = marker.strip_prefix(MARK)?.strip_suffix(MARK)?;
    values.get(index.parse::<usize>().ok()?).map(String::as_str)
}

/// Writes the values back into a printed statement, each as a SQLite string literal (a NUL
/// character, which would end SQLite's statement text, goes in as hex). A marker inside a
/// longer literal (one the rewrite composed from a value, e.g. `',a,'` for a SET column's
/// check) gets the value's text with its quotes doubled.
///
/// # Errors
/// 1235 when a value composed into a longer literal holds a quote character of another kind
/// (`` ` `` or `"`): the rewrite put it somewhere only a string literal may safely go.
pub fn restore(printed: &str, values: &[String]) -> Result<String, SqlError> {
    if values.is_empty() {
        return Ok(printed.to_owned());
    }
    let mut out = String::with_capacity(printed.len() + 16);
    let mut rest = printed;
    while let Some(start) = rest.find(MARK) {
        let (before, from_mark) = rest.split_at(start);
        let inner = from_mark.get(MARK.len_utf8()..).unwrap_or_default();
        let Some(end) = inner.find(MARK) else {
            break;
        };
        let Some(value) = inner
            .get(..end)
            .and_then(|n| n.parse::<usize>().ok())
            .and_then(|i| values.get(i))
        else {
            break;
        };
        let after = inner.get(end + MARK.len_utf8()..).unwrap_or_default();
        match (before.strip_suffix('\''), after.strip_prefix('\'')) {
            (Some(before), Some(after)) => {
                out.push_str(before);
                out.push_str(&sqlite_literal(value));
                rest = after;
            }
            _ => {
                if value.contains(['`', '"']) {
                    return Err(SqlError::not_supported(
                        "a backtick or double quote in this string",
                    ));
                }
                out.push_str(before);
                out.push_str(&value.replace('\'', "''"));
                rest = after;
            }
        }
    }
    out.push_str(rest);
    Ok(out)
}

fn sqlite_literal(value: &str) -> String {
    if value.contains('\0') {
        let hex: String = value.bytes().map(|b| format!("{b:02X}")).collect();
        format!("(CAST(X'{hex}' AS TEXT))")
    } else {
        format!("'{}'", value.replace('\'', "''"))
    }
}

#[cfg(test)]
mod tests {
    use sqlparser::dialect::MySqlDialect;
    use sqlparser::tokenizer::Tokenizer;

    use super::*;

    fn round_trip(sql: &str) -> String {
        let tokens = Tokenizer::new(&MySqlDialect {}, sql).tokenize().unwrap();
        let (tokens, values) = protect(tokens).unwrap();
        let printed: String = tokens.iter().map(ToString::to_string).collect();
        restore(&printed, &values).unwrap()
    }

    #[test]
    fn writes_mysql_escapes_as_sqlite_literals() {
        assert_eq!(
            round_trip(r"SELECT '\\\' OR 1=1 -- ', 'a\'\'b', 'O''Brien', 'x\ny', 'back\\slash'"),
            "SELECT '\\'' OR 1=1 -- ', 'a''''b', 'O''Brien', 'x\ny', 'back\\slash'"
        );
        assert_eq!(
            round_trip(r#"SELECT "double", 'it''s'"#),
            "SELECT 'double', 'it''s'"
        );
    }

    #[test]
    fn rejects_the_marker_character_in_a_string() {
        let tokens = Tokenizer::new(&MySqlDialect {}, "SELECT '\u{E000}0\u{E000}'")
            .tokenize()
            .unwrap();
        assert_eq!(protect(tokens).unwrap_err().code(), 1235);
    }
}
