//! MySQL comments, before anything parses (issue 11, item 2).
//!
//! MySQL *executes* the text of a versioned comment (`/*!40101 SET NAMES utf8mb4 */`,
//! MariaDB's `/*M!100101 ... */`) and ignores every other comment. sqlparser drops all of
//! them alike, so this pass runs first: it inlines versioned comments, turns plain
//! `/* */`, `-- ` and `#` comments into whitespace, and strips a trailing `;`. It knows
//! MySQL's quoting (`'..'` and `".."` with backslash escapes and doubled quotes, `` `..` ``
//! with doubled backticks) so a comment marker inside a literal stays literal.

use crate::sql_error::SqlError;

/// `sql` with versioned comments inlined and other comments blanked, trimmed, without a
/// trailing `;`.
///
/// # Errors
/// 1064 for a comment that is never closed.
pub fn strip(sql: &str) -> Result<String, SqlError> {
    let mut out = String::with_capacity(sql.len());
    let mut chars = sql.chars().peekable();
    // Open versioned comments: their `*/` closes them and is dropped.
    let mut versioned_depth = 0_usize;
    while let Some(c) = chars.next() {
        match c {
            '\'' | '"' | '`' => {
                out.push(c);
                copy_quoted(c, &mut chars, &mut out);
            }
            '/' if chars.peek() == Some(&'*') => {
                chars.next();
                if chars.peek() == Some(&'!') || starts_mariadb_versioned(&chars) {
                    if chars.peek() == Some(&'M') {
                        chars.next();
                    }
                    chars.next();
                    // The version number (5 or 6 digits) is not part of the statement.
                    while chars.peek().is_some_and(char::is_ascii_digit) {
                        chars.next();
                    }
                    versioned_depth += 1;
                    out.push(' ');
                } else {
                    skip_block_comment(&mut chars)?;
                    out.push(' ');
                }
            }
            '*' if versioned_depth > 0 && chars.peek() == Some(&'/') => {
                chars.next();
                versioned_depth -= 1;
                out.push(' ');
            }
            '#' => {
                skip_line(&mut chars);
                out.push('\n');
            }
            '-' if chars.peek() == Some(&'-') && dash_comment_follows(&chars) => {
                skip_line(&mut chars);
                out.push('\n');
            }
            _ => out.push(c),
        }
    }
    if versioned_depth > 0 {
        return Err(SqlError::syntax("unterminated /*! comment"));
    }
    let trimmed = out.trim().trim_end_matches(';').trim_end();
    Ok(trimmed.to_owned())
}

/// After `/*`: is this MariaDB's `/*M!`?
fn starts_mariadb_versioned(chars: &core::iter::Peekable<core::str::Chars<'_>>) -> bool {
    let mut ahead = chars.clone();
    ahead.next() == Some('M') && ahead.next() == Some('!')
}

/// After one `-`, with the second `-` next: MySQL needs whitespace (or the end) after `--`,
/// so `1--1` stays arithmetic.
fn dash_comment_follows(chars: &core::iter::Peekable<core::str::Chars<'_>>) -> bool {
    let mut ahead = chars.clone();
    ahead.next();
    ahead.next().is_none_or(char::is_whitespace)
}

fn copy_quoted(
    quote: char,
    chars: &mut core::iter::Peekable<core::str::Chars<'_>>,
    out: &mut String,
) {
    while let Some(c) = chars.next() {
        out.push(c);
        if c == '\\' && quote != '`' {
            if let Some(escaped) = chars.next() {
                out.push(escaped);
            }
        } else if c == quote {
            if chars.peek() == Some(&quote) {
                chars.next();
                out.push(quote);
            } else {
                return;
            }
        }
    }
}

fn skip_block_comment(
    chars: &mut core::iter::Peekable<core::str::Chars<'_>>,
) -> Result<(), SqlError> {
    while let Some(c) = chars.next() {
        if c == '*' && chars.peek() == Some(&'/') {
            chars.next();
            return Ok(());
        }
    }
    Err(SqlError::syntax("unterminated /* comment"))
}

fn skip_line(chars: &mut core::iter::Peekable<core::str::Chars<'_>>) {
    for c in chars.by_ref() {
        if c == '\n' {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::strip;

    #[test]
    fn inlines_versioned_comment_as_the_statement() {
        assert_eq!(
            strip("/*!40101 SET NAMES utf8mb4 */;").unwrap(),
            "SET NAMES utf8mb4"
        );
        assert_eq!(strip("/*M!100101 SET x = 1 */").unwrap(), "SET x = 1");
    }

    #[test]
    fn inlines_versioned_comment_inside_a_statement() {
        assert_eq!(
            strip("CREATE /*!50003 TEMPORARY */ TABLE t (a INT)").unwrap(),
            "CREATE   TEMPORARY   TABLE t (a INT)"
        );
    }

    #[test]
    fn drops_plain_comments() {
        assert_eq!(
            strip("SELECT /* x */ 1 -- y\n + 2 # z\n").unwrap(),
            "SELECT   1 \n + 2"
        );
        assert_eq!(strip("SELECT 1--1").unwrap(), "SELECT 1--1");
    }

    #[test]
    fn keeps_comment_markers_inside_literals() {
        let sql = r#"SELECT '/* a */', "-- b", `#c`, 'it\'s /*', 'x''#'"#;
        assert_eq!(strip(sql).unwrap(), sql);
    }

    #[test]
    fn rejects_unterminated_comments() {
        assert_eq!(strip("SELECT /* 1").unwrap_err().code(), 1064);
        assert_eq!(strip("/*!40101 SET x = 1").unwrap_err().code(), 1064);
    }
}
