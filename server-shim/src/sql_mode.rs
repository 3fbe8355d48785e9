//! The `sql_mode` flags that change what a statement's text means, and how the shim keeps
//! its answers right under them without a second parser: a session may set them (PyMySQL's
//! and MySQLdb's own tests connect with `ANSI,STRICT_TRANS_TABLES,TRADITIONAL`), and a
//! statement whose meaning they would change is refused (1235) instead of answered as
//! without them.
//!
//! - `ANSI_QUOTES` (also in `ANSI`, `DB2`, `MAXDB`, `MSSQL`, `POSTGRESQL`): `"x"` is a name;
//!   a statement with a double-quoted token is refused.
//! - `PIPES_AS_CONCAT` (in the same combinations): `||` concatenates; a statement with `||`
//!   is refused.
//! - `NO_BACKSLASH_ESCAPES`: a backslash in a string is itself; a statement with a backslash
//!   is refused, and the session's OK packets say the mode is on
//!   (`SERVER_STATUS_NO_BACKSLASH_ESCAPES`), so clients quote by doubling quotes instead.
//!
//! The flags that change answers in ways no statement shows (`HIGH_NOT_PRECEDENCE`,
//! `NO_UNSIGNED_SUBTRACTION`, `PAD_CHAR_TO_FULL_LENGTH`, `EMPTY_STRING_IS_NULL`,
//! `SIMULTANEOUS_ASSIGNMENT`, `TIME_ROUND_FRACTIONAL`, and MariaDB's `ORACLE` with its own
//! parser) cannot be set ([`not_followed`]). `REAL_AS_FLOAT` and `IGNORE_SPACE` change
//! nothing here (every real is a double; function names parse either way).
//!
//! Pure: text in, a verdict out.

use sqlparser::tokenizer::{Token, Tokenizer};

use crate::mysql_dialect::Mysql;
use crate::sql_error::SqlError;

/// Flags a session cannot set: they change answers in ways a statement's text does not show.
const NOT_FOLLOWED: &[&str] = &[
    "HIGH_NOT_PRECEDENCE",
    "NO_UNSIGNED_SUBTRACTION",
    "PAD_CHAR_TO_FULL_LENGTH",
    "EMPTY_STRING_IS_NULL",
    "SIMULTANEOUS_ASSIGNMENT",
    "TIME_ROUND_FRACTIONAL",
    "ORACLE",
];

/// The combination modes that include `ANSI_QUOTES` and `PIPES_AS_CONCAT`.
const ANSI_LIKE: &[&str] = &["ANSI", "DB2", "MAXDB", "MSSQL", "POSTGRESQL"];

/// The flags of one `sql_mode` value that change how the shim must read a statement.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SqlMode {
    pub ansi_quotes: bool,
    pub pipes_as_concat: bool,
    pub no_backslash_escapes: bool,
}

fn flags(value: &str) -> impl Iterator<Item = String> + '_ {
    value
        .split(',')
        .map(|m| m.trim().to_ascii_uppercase())
        .filter(|m| !m.is_empty())
}

/// The first flag of `value` a session cannot set, if any.
#[must_use]
pub fn not_followed(value: &str) -> Option<String> {
    flags(value).find(|m| NOT_FOLLOWED.contains(&m.as_str()))
}

impl SqlMode {
    /// The flags `value` (a `sql_mode`, `A,B,...`) sets.
    #[must_use]
    pub fn of(value: &str) -> Self {
        let mut mode = Self::default();
        for flag in flags(value) {
            let ansi = ANSI_LIKE.contains(&flag.as_str());
            mode.ansi_quotes |= ansi || flag == "ANSI_QUOTES";
            mode.pipes_as_concat |= ansi || flag == "PIPES_AS_CONCAT";
            mode.no_backslash_escapes |= flag == "NO_BACKSLASH_ESCAPES";
        }
        mode
    }

    /// Refuses `sql` when this mode would make it mean something else than the shim reads.
    ///
    /// # Errors
    /// 1235 naming the mode and what in the statement depends on it.
    pub fn check(self, sql: &str) -> Result<(), SqlError> {
        if self == Self::default() {
            return Ok(());
        }
        if self.no_backslash_escapes && sql.contains('\\') {
            return Err(SqlError::not_supported(
                "a backslash under sql_mode NO_BACKSLASH_ESCAPES",
            ));
        }
        if !(self.ansi_quotes || self.pipes_as_concat) {
            return Ok(());
        }
        // A text that does not tokenize fails on its own later.
        let Ok(tokens) = Tokenizer::new(&Mysql, sql).tokenize() else {
            return Ok(());
        };
        for token in tokens {
            match token {
                Token::DoubleQuotedString(_) if self.ansi_quotes => {
                    return Err(SqlError::not_supported(
                        "a double-quoted name under sql_mode ANSI_QUOTES",
                    ));
                }
                Token::StringConcat if self.pipes_as_concat => {
                    return Err(SqlError::not_supported("|| under sql_mode PIPES_AS_CONCAT"));
                }
                _ => {}
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{SqlMode, not_followed};

    #[test]
    fn refuses_only_what_the_mode_would_change() {
        let ansi = SqlMode::of("ANSI,STRICT_TRANS_TABLES,TRADITIONAL");
        assert!(ansi.ansi_quotes && ansi.pipes_as_concat && !ansi.no_backslash_escapes);
        assert!(
            ansi.check("SELECT 'a', `b` FROM t WHERE x = 1 OR y = 2")
                .is_ok()
        );
        assert_eq!(ansi.check("SELECT \"b\" FROM t").unwrap_err().code(), 1235);
        assert_eq!(ansi.check("SELECT 'a' || 'b'").unwrap_err().code(), 1235);
        let quotes = SqlMode::of("ansi_quotes");
        assert!(quotes.check("SELECT 'a' || 'b'").is_ok());
        let backslash = SqlMode::of("NO_BACKSLASH_ESCAPES");
        assert!(backslash.check("SELECT 'it''s', \"x\"").is_ok());
        assert_eq!(backslash.check("SELECT 'a\\b'").unwrap_err().code(), 1235);
        assert!(SqlMode::of("").check("SELECT \"x\" || 'y' , '\\n'").is_ok());
    }

    #[test]
    fn names_the_flags_it_cannot_follow() {
        assert_eq!(
            not_followed("STRICT_TRANS_TABLES,high_not_precedence"),
            Some("HIGH_NOT_PRECEDENCE".into())
        );
        assert_eq!(not_followed("ANSI,NO_BACKSLASH_ESCAPES,TRADITIONAL"), None);
    }
}
