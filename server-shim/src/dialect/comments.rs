//! MySQL comments, before anything parses.
//!
//! MySQL *executes* the text of a versioned comment (`/*!40101 SET NAMES utf8mb4 */`) whose
//! version is not above its own, and ignores every other comment, MariaDB's `/*M!...*/`
//! included (the shim presents itself as MySQL 8.0). sqlparser drops all of
//! them alike, so this pass runs first: it inlines versioned comments, turns plain
//! `/* */`, `-- ` and `#` comments into whitespace, and strips a trailing `;`. It knows
//! MySQL's quoting (`'..'` and `".."` with backslash escapes and doubled quotes, `` `..` ``
//! with doubled backticks) so a comment marker inside a literal stays literal.

use crate::sql_error::SqlError;

/// The server version as versioned comments compare it (`8.0.36` → 80036): a comment
/// naming a higher version is not executed. Matches `variables::SERVER_VERSION`.
pub const SERVER_VERSION_ID: u64 = 80_036;

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
                if starts_mariadb_versioned(&chars) {
                    skip_block_comment(&mut chars)?;
                    out.push(' ');
                } else if chars.peek() == Some(&'!') {
                    chars.next();
                    // The version number (5 or 6 digits) is not part of the statement.
                    let mut version = 0_u64;
                    while let Some(d) = chars.peek().and_then(|c| c.to_digit(10)) {
                        version = version.saturating_mul(10).saturating_add(u64::from(d));
                        chars.next();
                    }
                    // A server older than the version treats it as a plain comment.
                    if version > SERVER_VERSION_ID {
                        skip_block_comment(&mut chars)?;
                    } else {
                        versioned_depth += 1;
                    }
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
    fn skips_versioned_comments_for_newer_servers() {
        assert_eq!(
            strip("/*M!999999\\- enable the sandbox mode */ \n/*!40101 SET x = 1 */").unwrap(),
            "SET x = 1"
        );
        assert_eq!(strip("SELECT 1 /*!90000 + 1 */").unwrap(), "SELECT 1");
        let version = crate::variables::SERVER_VERSION;
        let mut parts = version
            .split(['.', '-'])
            .map(|p| p.parse::<u64>().unwrap_or(0));
        let id = parts.next().unwrap_or(0) * 10_000
            + parts.next().unwrap_or(0) * 100
            + parts.next().unwrap_or(0);
        assert_eq!(id, super::SERVER_VERSION_ID, "{version}");
    }

    #[test]
    fn inlines_versioned_comment_as_the_statement() {
        assert_eq!(
            strip("/*!40101 SET NAMES utf8mb4 */;").unwrap(),
            "SET NAMES utf8mb4"
        );
        assert_eq!(
            strip("/*M!100101 SET x = 1 */ SELECT 1").unwrap(),
            "SELECT 1"
        );
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
