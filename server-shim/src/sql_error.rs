//! SQL errors as the client sees them: one MySQL error code, its SQLSTATE and a message.
//!
//! Every failure of a statement becomes an ERR packet with a fitting MySQL code (never a
//! dropped connection). This module is the one place that decides which code: the session
//! layer's own errors are built with the constructors below, and engine (SQLite) errors go
//! through `sqlite::from_sqlite`. The SQLSTATE is MySQL's pairing for the code, as
//! `opensrv_mysql::ErrorKind::sqlstate` writes it.

use core::fmt;

use opensrv_mysql::ErrorKind;

/// An error for the client: the ERR packet's code (and so SQLSTATE) and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqlError {
    /// The MySQL error code; its SQLSTATE comes with it.
    pub kind: ErrorKind,
    /// The human-readable message (client-visible; never holds a secret).
    pub message: String,
    /// A code opensrv's `ErrorKind` does not have, with its SQLSTATE: the ERR opensrv writes
    /// with `kind` is given this code on its way out (`stream::ConnShared::err_code_next`).
    pub code_beyond_opensrv: Option<(u16, [u8; 5])>,
}

impl fmt::Display for SqlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}): {}", self.code(), self.sqlstate(), self.message)
    }
}

impl std::error::Error for SqlError {}

impl SqlError {
    /// An error with `kind` and `message`.
    #[must_use]
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            code_beyond_opensrv: None,
        }
    }

    /// 3024 `ER_QUERY_TIMEOUT` (HY000): `max_execution_time` or the `MAX_EXECUTION_TIME`
    /// hint stopped the statement.
    #[must_use]
    pub fn query_timeout() -> Self {
        Self {
            code_beyond_opensrv: Some((3024, *b"HY000")),
            ..Self::new(
                ErrorKind::ER_QUERY_INTERRUPTED,
                "Query execution was interrupted, maximum statement execution time exceeded",
            )
        }
    }

    /// ERR 1305: a savepoint the transaction does not have.
    #[must_use]
    pub fn no_savepoint(name: &str) -> Self {
        Self::new(
            ErrorKind::ER_SP_DOES_NOT_EXIST,
            format!("SAVEPOINT {name} does not exist"),
        )
    }

    /// ERR 1305: a function that does not exist.
    #[must_use]
    pub fn no_such_function(name: &str) -> Self {
        Self::new(
            ErrorKind::ER_SP_DOES_NOT_EXIST,
            format!("FUNCTION {} does not exist", clip(name)),
        )
    }

    /// The numeric MySQL error code.
    #[must_use]
    pub fn code(&self) -> u16 {
        self.code_beyond_opensrv
            .map_or(self.kind as u16, |(code, _)| code)
    }

    /// The five-character SQLSTATE.
    #[must_use]
    pub fn sqlstate(&self) -> &str {
        let state = match &self.code_beyond_opensrv {
            Some((_, state)) => state.as_slice(),
            None => self.kind.sqlstate(),
        };
        core::str::from_utf8(state).unwrap_or("HY000")
    }

    /// 1064 `ER_PARSE_ERROR` (42000).
    #[must_use]
    pub fn syntax(detail: &str) -> Self {
        Self::new(
            ErrorKind::ER_PARSE_ERROR,
            format!(
                "You have an error in your SQL syntax; check the manual that corresponds to \
                 your MySQL server version for the right syntax to use: {}",
                clip(detail)
            ),
        )
    }

    /// 1065 `ER_EMPTY_QUERY` (42000).
    #[must_use]
    pub fn empty_query() -> Self {
        Self::new(ErrorKind::ER_EMPTY_QUERY, "Query was empty")
    }

    /// 1046 `ER_NO_DB_ERROR` (3D000).
    #[must_use]
    pub fn no_database() -> Self {
        Self::new(ErrorKind::ER_NO_DB_ERROR, "No database selected")
    }

    /// 1049 `ER_BAD_DB_ERROR` (42000).
    #[must_use]
    pub fn unknown_database(name: &str) -> Self {
        Self::new(
            ErrorKind::ER_BAD_DB_ERROR,
            format!("Unknown database '{}'", clip(name)),
        )
    }

    /// 1007 `ER_DB_CREATE_EXISTS` (HY000).
    #[must_use]
    pub fn database_exists(name: &str) -> Self {
        Self::new(
            ErrorKind::ER_DB_CREATE_EXISTS,
            format!("Can't create database '{}'; database exists", clip(name)),
        )
    }

    /// 1008 `ER_DB_DROP_EXISTS` (HY000).
    #[must_use]
    pub fn drop_missing_database(name: &str) -> Self {
        Self::new(
            ErrorKind::ER_DB_DROP_EXISTS,
            format!(
                "Can't drop database '{}'; database doesn't exist",
                clip(name)
            ),
        )
    }

    /// 1102 `ER_WRONG_DB_NAME` (42000).
    #[must_use]
    pub fn bad_database_name(name: &str) -> Self {
        Self::new(
            ErrorKind::ER_WRONG_DB_NAME,
            format!("Incorrect database name '{}'", clip(name)),
        )
    }

    /// 1146 `ER_NO_SUCH_TABLE` (42S02).
    #[must_use]
    pub fn unknown_table(db: &str, table: &str) -> Self {
        Self::new(
            ErrorKind::ER_NO_SUCH_TABLE,
            format!("Table '{}.{}' doesn't exist", clip(db), clip(table)),
        )
    }

    /// 1050 `ER_TABLE_EXISTS_ERROR` (42S01).
    #[must_use]
    pub fn table_exists(table: &str) -> Self {
        Self::new(
            ErrorKind::ER_TABLE_EXISTS_ERROR,
            format!("Table '{}' already exists", clip(table)),
        )
    }

    /// 1054 `ER_BAD_FIELD_ERROR` (42S22).
    #[must_use]
    pub fn unknown_column(column: &str) -> Self {
        Self::new(
            ErrorKind::ER_BAD_FIELD_ERROR,
            format!("Unknown column '{}' in 'field list'", clip(column)),
        )
    }

    /// 1091 `ER_CANT_DROP_FIELD_OR_KEY` (42000): a key to drop that the table does not have.
    #[must_use]
    pub fn cant_drop_key(key: &str) -> Self {
        Self::new(
            ErrorKind::ER_CANT_DROP_FIELD_OR_KEY,
            format!(
                "Can't DROP FOREIGN KEY `{}`; check that it exists",
                clip(key)
            ),
        )
    }

    /// 1062 `ER_DUP_ENTRY` (23000).
    #[must_use]
    pub fn duplicate_entry(detail: &str) -> Self {
        Self::new(
            ErrorKind::ER_DUP_ENTRY,
            format!("Duplicate entry: {}", clip(detail)),
        )
    }

    /// 1048 `ER_BAD_NULL_ERROR` (23000).
    #[must_use]
    pub fn null_in_not_null(detail: &str) -> Self {
        Self::new(ErrorKind::ER_BAD_NULL_ERROR, clip(detail))
    }

    /// 1452 `ER_NO_REFERENCED_ROW_2` (23000): a foreign key check failed.
    #[must_use]
    pub fn foreign_key(detail: &str) -> Self {
        Self::new(
            ErrorKind::ER_NO_REFERENCED_ROW_2,
            format!(
                "Cannot add or update a child row: a foreign key constraint fails ({})",
                clip(detail)
            ),
        )
    }

    /// 1451 `ER_ROW_IS_REFERENCED_2` (23000): a row other rows still refer to (a `DELETE`;
    /// SQLite's error does not say which side failed, the statement does).
    #[must_use]
    pub fn parent_row(detail: &str) -> Self {
        Self::new(
            ErrorKind::ER_ROW_IS_REFERENCED_2,
            format!(
                "Cannot delete or update a parent row: a foreign key constraint fails ({})",
                clip(detail)
            ),
        )
    }

    /// 1265 `WARN_DATA_TRUNCATED` (01000), as strict mode reports a value a column's type
    /// refuses (an `ENUM` outside its list, which becomes a CHECK constraint here).
    #[must_use]
    pub fn check_failed(detail: &str) -> Self {
        Self::new(
            ErrorKind::WARN_DATA_TRUNCATED,
            format!("Data truncated: {}", clip(detail)),
        )
    }

    /// 1366 `ER_TRUNCATED_WRONG_VALUE_FOR_FIELD` (MySQL's HY000; MariaDB says 22007): a value a column of this type
    /// (`integer`, `decimal`, ...) cannot hold, refused as strict mode does.
    #[must_use]
    pub fn incorrect_value(type_name: &str, column: &str) -> Self {
        Self::new(
            ErrorKind::ER_TRUNCATED_WRONG_VALUE_FOR_FIELD,
            format!("Incorrect {type_name} value for column '{}'", clip(column)),
        )
    }

    /// 1264 `ER_WARN_DATA_OUT_OF_RANGE` (22003): a number outside its column's range.
    #[must_use]
    pub fn out_of_range(column: &str) -> Self {
        Self::new(
            ErrorKind::ER_WARN_DATA_OUT_OF_RANGE,
            format!("Out of range value for column '{}'", clip(column)),
        )
    }

    /// 1406 `ER_DATA_TOO_LONG` (22001): a string longer than its column allows.
    #[must_use]
    pub fn data_too_long(column: &str) -> Self {
        Self::new(
            ErrorKind::ER_DATA_TOO_LONG,
            format!("Data too long for column '{}'", clip(column)),
        )
    }

    /// 1235 `ER_NOT_SUPPORTED_YET` (42000).
    #[must_use]
    pub fn not_supported(what: &str) -> Self {
        Self::new(
            ErrorKind::ER_NOT_SUPPORTED_YET,
            format!("This version of MySQL doesn't yet support '{}'", clip(what)),
        )
    }

    /// 1193 `ER_UNKNOWN_SYSTEM_VARIABLE` (HY000).
    #[must_use]
    pub fn unknown_variable(name: &str) -> Self {
        Self::new(
            ErrorKind::ER_UNKNOWN_SYSTEM_VARIABLE,
            format!("Unknown system variable '{}'", clip(name)),
        )
    }

    /// 1227 `ER_SPECIFIC_ACCESS_DENIED_ERROR` (42000).
    #[must_use]
    pub fn needs_privilege(privilege: &str) -> Self {
        Self::new(
            ErrorKind::ER_SPECIFIC_ACCESS_DENIED_ERROR,
            format!(
                "Access denied; you need (at least one of) the {privilege} privilege(s) for \
                 this operation"
            ),
        )
    }

    /// 1396 `ER_CANNOT_USER` (HY000).
    #[must_use]
    pub fn user_operation_failed(operation: &str, user: &str) -> Self {
        Self::new(
            ErrorKind::ER_CANNOT_USER,
            format!("Operation {operation} failed for '{}'@'%'", clip(user)),
        )
    }

    /// 1317 `ER_QUERY_INTERRUPTED` (70100): the statement was interrupted by `KILL`.
    #[must_use]
    pub fn query_interrupted() -> Self {
        Self::new(
            ErrorKind::ER_QUERY_INTERRUPTED,
            "Query execution was interrupted",
        )
    }

    /// 1094 `ER_NO_SUCH_THREAD` (HY000).
    #[must_use]
    pub fn no_such_thread(id: u64) -> Self {
        Self::new(
            ErrorKind::ER_NO_SUCH_THREAD,
            format!("Unknown thread id: {id}"),
        )
    }

    /// 1095 `ER_KILL_DENIED_ERROR` (HY000): another user's connection, without admin rights.
    #[must_use]
    pub fn kill_denied(id: u64) -> Self {
        Self::new(
            ErrorKind::ER_KILL_DENIED_ERROR,
            format!("You are not owner of thread {id}"),
        )
    }

    /// 1205 `ER_LOCK_WAIT_TIMEOUT` (HY000).
    #[must_use]
    pub fn lock_wait_timeout() -> Self {
        Self::new(
            ErrorKind::ER_LOCK_WAIT_TIMEOUT,
            "Lock wait timeout exceeded; try restarting transaction",
        )
    }

    /// 1213 `ER_LOCK_DEADLOCK` (40001): the engine rolled the statement's whole transaction
    /// back (an interrupted write); as after InnoDB's deadlock, the client runs it again.
    #[must_use]
    pub fn transaction_rolled_back() -> Self {
        Self::new(
            ErrorKind::ER_LOCK_DEADLOCK,
            "The statement was interrupted and its transaction rolled back; try restarting \
             transaction",
        )
    }

    /// Whether this is [`Self::transaction_rolled_back`]: the transaction is over.
    #[must_use]
    pub fn rolled_back_the_transaction(&self) -> bool {
        self.kind == ErrorKind::ER_LOCK_DEADLOCK
    }

    /// 1179 `ER_CANT_DO_THIS_DURING_AN_TRANSACTION` (25000).
    #[must_use]
    pub fn not_in_transaction(what: &str) -> Self {
        Self::new(
            ErrorKind::ER_CANT_DO_THIS_DURING_AN_TRANSACTION,
            format!(
                "You are not allowed to execute this command in a transaction: {}",
                clip(what)
            ),
        )
    }

    /// 1105 `ER_UNKNOWN_ERROR` (HY000): the engine failed in a way no other code describes.
    #[must_use]
    pub fn internal(detail: &str) -> Self {
        Self::new(ErrorKind::ER_UNKNOWN_ERROR, clip(detail))
    }
}

/// Messages are cut so an error can never echo an unbounded amount of client input.
const MAX_MESSAGE_CHARS: usize = 400;

fn clip(s: &str) -> String {
    if s.chars().count() <= MAX_MESSAGE_CHARS {
        return s.to_owned();
    }
    let mut out: String = s.chars().take(MAX_MESSAGE_CHARS).collect();
    out.push_str("...");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_session_errors_to_mysql_codes_and_sqlstates() {
        let cases = [
            (SqlError::syntax("x"), 1064, "42000"),
            (SqlError::unknown_table("d", "t"), 1146, "42S02"),
            (SqlError::unknown_database("d"), 1049, "42000"),
            (SqlError::duplicate_entry("1"), 1062, "23000"),
            (SqlError::no_database(), 1046, "3D000"),
            (SqlError::database_exists("d"), 1007, "HY000"),
            (SqlError::table_exists("t"), 1050, "42S01"),
            (SqlError::unknown_column("c"), 1054, "42S22"),
            (SqlError::needs_privilege("CREATE USER"), 1227, "42000"),
            (SqlError::not_supported("x"), 1235, "42000"),
            (SqlError::lock_wait_timeout(), 1205, "HY000"),
            (SqlError::foreign_key("x"), 1452, "23000"),
            (SqlError::check_failed("x"), 1265, "01000"),
            (SqlError::incorrect_value("integer", "x"), 1366, "HY000"),
            (SqlError::out_of_range("x"), 1264, "22003"),
            (SqlError::data_too_long("x"), 1406, "22001"),
            (SqlError::parent_row("x"), 1451, "23000"),
        ];
        for (err, code, state) in cases {
            assert_eq!((err.code(), err.sqlstate()), (code, state), "{err}");
        }
    }

    #[test]
    fn clips_long_messages() {
        let long = "x".repeat(10_000);
        assert!(SqlError::unknown_table("d", &long).message.len() < 1_000);
    }
}
