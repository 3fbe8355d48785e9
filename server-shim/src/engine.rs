//! The embedded SQL engine's seam: an [`Engine`] opens one
//! database's storage and gives an [`Executor`] that runs MySQL text against it. Which
//! databases exist, and the lock around each, is [`crate::catalog`]'s; the implementation is
//! SQLite ([`crate::sqlite`]), behind [`crate::dialect`]'s MySQL-to-SQLite translation.
//!
//! MySQL clients send MySQL text: backslash escapes inside strings (PyMySQL escapes
//! client-side), double-quoted strings, backtick identifiers, `#` comments and `?`
//! placeholders. It is always tokenized with the shim's **MySQL** dialect
//! ([`crate::mysql_dialect`]), and parameters are bound as typed values, never spliced into
//! the text.

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::sync::atomic::AtomicI64;

use chrono::{NaiveDate, NaiveDateTime};
use sqlparser::ast::Statement as SqlStatement;
use sqlparser::parser::Parser;
use sqlparser::tokenizer::{Token, Tokenizer};

use crate::mysql_dialect::Mysql;
use crate::sql_error::SqlError;

/// One value of a result row or of a statement parameter.
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    /// SQL NULL.
    Null,
    /// A signed integer (also booleans, as 0 and 1).
    Int(i64),
    /// An unsigned integer.
    UInt(u64),
    /// A floating-point number.
    Float(f64),
    /// A `FLOAT` column's value (a 4-byte float, held as the double it converts to) and its
    /// text as MySQL writes it: 6 significant digits ([`float_text`]), or the column's
    /// decimals (`FLOAT(m,d)`).
    Float32(f64, String),
    /// An exact decimal, as text.
    Decimal(String),
    /// Text.
    Text(String),
    /// Bytes that are not text.
    Bytes(Vec<u8>),
    /// A JSON column's document, as its text: sent as MySQL 8 sends JSON (type 245), which
    /// clients such as mysql2 read as a document.
    Json(String),
    /// A `TIME`: a signed duration (PyMySQL reads a `timedelta`).
    Time(crate::mysql_time::MysqlTime),
    /// A `BIT(n)` value: its bits in big-endian bytes, as MySQL sends them.
    Bit(Vec<u8>),
    /// A date.
    Date(NaiveDate),
    /// A date and time.
    DateTime(NaiveDateTime),
}

/// A `DOUBLE` as MariaDB writes it in text: the shortest digits that read back as the same
/// number, positional while it has at most 15 digits before the point (or its digits reach
/// past the point) and more than 14 zeros after it, else `1.5e15`, `1e-20`. (Rust's own text
/// never uses an exponent: `1e300` came out as 301 digits.)
#[must_use]
pub fn double_text(v: f64) -> String {
    if !v.is_finite() {
        return v.to_string();
    }
    if v == 0.0 {
        // Negative zero too, as MariaDB 10.11.19 (Debian 12's current package) writes it;
        // 10.11.14 wrote `-0`.
        return "0".to_owned();
    }
    let scientific = format!("{:e}", v.abs());
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i64 = exponent.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let len = i64::try_from(digits.len()).unwrap_or(i64::MAX);
    // Where the point goes, counted in digits from the first.
    let point = exponent + 1;
    let sign = if v < 0.0 { "-" } else { "" };
    let zeros = |n: i64| "0".repeat(usize::try_from(n).unwrap_or(0));
    if point <= 0 && point > -15 {
        format!("{sign}0.{}{digits}", zeros(-point))
    } else if point > 0 && point < len {
        let (whole, fraction) = digits.split_at(usize::try_from(point).unwrap_or(0));
        format!("{sign}{whole}.{fraction}")
    } else if point >= len && point <= 15 {
        format!("{sign}{digits}{}", zeros(point - len))
    } else {
        format!("{sign}{mantissa}e{exponent}")
    }
}

/// A `FLOAT` as MariaDB writes it in text: 6 significant digits, laid out as
/// [`double_text`] lays a double out (`14.96`, `1234570`, `1e20`, `0.000123457`).
#[must_use]
pub fn float_text(v: f64) -> String {
    if !v.is_finite() {
        return v.to_string();
    }
    let six = format!("{v:.5e}");
    double_text(six.parse().unwrap_or(v))
}

impl Cell {
    /// The value as MySQL's text protocol shows it (`None` for NULL).
    #[must_use]
    pub fn to_text(&self) -> Option<String> {
        Some(match self {
            Self::Null => return None,
            Self::Int(v) => v.to_string(),
            Self::UInt(v) => v.to_string(),
            Self::Float(v) => double_text(*v),
            Self::Float32(_, text) => text.clone(),
            Self::Decimal(v) | Self::Text(v) | Self::Json(v) => v.clone(),
            Self::Bytes(v) | Self::Bit(v) => String::from_utf8_lossy(v).into_owned(),
            Self::Time(v) => v.to_string(),
            Self::Date(v) => v.format("%Y-%m-%d").to_string(),
            Self::DateTime(v) => v.format("%Y-%m-%d %H:%M:%S%.f").to_string(),
        })
    }
}

/// What one statement produced.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// A result set.
    Rows {
        /// Column names.
        columns: Vec<String>,
        /// Rows, each as long as `columns`.
        rows: Vec<Vec<Cell>>,
        /// Each column's integer width, where its declared type says (empty: none known).
        int_widths: Vec<Option<IntWidth>>,
        /// Each column's table as the statement calls it (its alias), empty for an
        /// expression's (empty: none known).
        tables: Vec<String>,
    },
    /// A statement without a result set, with the number of rows it changed.
    Done {
        /// Rows inserted, updated or deleted (0 for DDL).
        affected_rows: u64,
        /// The id an `AUTO_INCREMENT` column got from an INSERT (0 otherwise), for the OK
        /// packet.
        last_insert_id: u64,
    },
}

/// The width MySQL gives an integer column, from its declared type: a `TINYINT` is sent as
/// `TINY`, an `INT` as `LONG`, a `BIGINT` as `LONGLONG` (drivers such as mysql2 with
/// `bigNumberStrings`, TypeORM's default, read a `LONGLONG` as a string: a `TINYINT`
/// boolean sent as one reads back as `"0"`, which is true).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntWidth {
    /// `TINYINT`, `BOOL`.
    Tiny,
    /// `SMALLINT`.
    Short,
    /// `MEDIUMINT`.
    Medium,
    /// `INT`, `INTEGER`.
    Long,
    /// `BIGINT`.
    LongLong,
}

impl IntWidth {
    /// The width of declared type `decl` (`int(11)`, `TINYINT UNSIGNED`), if an integer's.
    #[must_use]
    pub fn of_declared(decl: &str) -> Option<Self> {
        let lower = decl.trim().to_ascii_lowercase();
        Some(match lower.split(['(', ' ']).next().unwrap_or_default() {
            "tinyint" | "bool" | "boolean" => Self::Tiny,
            "smallint" => Self::Short,
            "mediumint" => Self::Medium,
            "int" | "integer" => Self::Long,
            "bigint" => Self::LongLong,
            _ => return None,
        })
    }

    /// Whether `v` fits (SQLite's typing lets a column hold a larger one).
    #[must_use]
    pub fn holds(self, v: i64) -> bool {
        match self {
            Self::Tiny => i8::try_from(v).is_ok(),
            Self::Short => i16::try_from(v).is_ok(),
            Self::Medium => (-(1 << 23)..(1 << 23)).contains(&v),
            Self::Long => i32::try_from(v).is_ok(),
            Self::LongLong => true,
        }
    }
}

/// What a savepoint statement does ([`Executor::savepoint`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SavepointAction {
    /// `SAVEPOINT name`.
    Set,
    /// `ROLLBACK TO SAVEPOINT name`.
    RollbackTo,
    /// `RELEASE SAVEPOINT name`.
    Release,
}

/// Runs SQL against one open database. Calls block (storage I/O, fsync); the caller runs them
/// on a blocking thread and holds the database's lock.
pub trait Executor: Send {
    /// Runs one statement with `params` bound to its `?` placeholders, in order.
    ///
    /// # Errors
    /// [`SqlError`] with the MySQL code that fits the failure.
    fn execute(&mut self, sql: &str, params: &[Cell]) -> Result<Outcome, SqlError>;

    /// Sets what `LAST_INSERT_ID()` reads in the next statement: the session's own last id
    /// (an executor serves every session of its database, one statement at a time).
    fn set_last_insert_id(&mut self, id: u64);

    /// Sets what `ROW_COUNT()` and `FOUND_ROWS()` read in the next statement: the session's
    /// own ([`StatementCounts`]).
    fn set_counts(&mut self, row_count: i64, found_rows: i64);

    /// `ROW_COUNT()` and `FOUND_ROWS()` after the last statement, for its session.
    fn counts(&self) -> (i64, i64);

    /// The notes the last statement left (`SHOW WARNINGS`), taken.
    fn take_warnings(&mut self) -> Vec<Warning> {
        Vec::new()
    }

    /// Starts an explicit transaction.
    ///
    /// # Errors
    /// [`SqlError`] if the storage cannot start one.
    fn begin(&mut self) -> Result<(), SqlError>;

    /// Commits the open transaction (durably), if any.
    ///
    /// # Errors
    /// [`SqlError`] if the commit fails.
    fn commit(&mut self) -> Result<(), SqlError>;

    /// Rolls the open transaction back, if any.
    ///
    /// # Errors
    /// [`SqlError`] if the rollback fails.
    fn rollback(&mut self) -> Result<(), SqlError>;

    /// What the functions of the next statements read about their session (`CONNECTION_ID()`,
    /// `USER()`, `@@x`, `@x`).
    fn set_session(&mut self, session: std::sync::Arc<SessionFacts>);

    /// Limits the work of the statements run next to about `steps` VM instructions (`None`:
    /// no limit). A statement over the limit stops with an error, as if interrupted, and
    /// [`Executor::over_budget`] says so. Under a limit only a single query runs: anything
    /// else is refused the same way before it starts, so a stopped statement changed nothing.
    fn set_step_budget(&mut self, steps: Option<u32>);

    /// Whether the limit of [`Executor::set_step_budget`] stopped a statement since it was set.
    fn over_budget(&self) -> bool;

    /// How another task interrupts the statement this executor runs (`KILL QUERY`).
    fn interrupter(&self) -> crate::processes::Interrupt;

    /// Turns foreign key checks on or off for what runs next outside a transaction
    /// (`@@foreign_key_checks`).
    ///
    /// # Errors
    /// [`SqlError`] if the storage refuses.
    fn set_foreign_key_checks(&mut self, on: bool) -> Result<(), SqlError>;

    /// Sets, rolls back to, or releases the savepoint `name` of the open transaction.
    ///
    /// # Errors
    /// [`SqlError`] if there is no transaction, or no such savepoint
    /// ([`crate::sql_error::SqlError::no_savepoint`]).
    fn savepoint(&mut self, action: SavepointAction, name: &str) -> Result<(), SqlError>;

    /// The names of the tables, sorted.
    ///
    /// # Errors
    /// [`SqlError`] if the catalog cannot be read.
    fn table_names(&mut self) -> Result<Vec<String>, SqlError>;

    /// `table`'s definition as MySQL's `SHOW CREATE TABLE` prints it, or `None` if there is
    /// no such table.
    ///
    /// # Errors
    /// [`SqlError`] if the catalog cannot be read.
    fn show_create_table(&mut self, table: &str) -> Result<Option<String>, SqlError>;

    /// The columns of `table`'s indexes, in `SHOW INDEX` order, or `None` if there is no
    /// such table.
    ///
    /// # Errors
    /// [`SqlError`] if the catalog cannot be read.
    fn indexes(&mut self, table: &str) -> Result<Option<Vec<IndexColumn>>, SqlError>;

    /// The names of the columns `sql` returns (empty for a statement without a result set),
    /// without running it: what a prepared statement announces to the client.
    ///
    /// # Errors
    /// [`SqlError`] for a statement that does not translate or prepare.
    fn result_columns(&mut self, sql: &str) -> Result<Vec<String>, SqlError>;

    /// Every table and view with its columns and indexes, for `information_schema`.
    ///
    /// # Errors
    /// [`SqlError`] if the catalog cannot be read.
    fn describe(&mut self) -> Result<Vec<TableMeta>, SqlError>;
}

/// A column, as `information_schema.COLUMNS` describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnMeta {
    /// The name.
    pub name: String,
    /// The declared type, lower case (`varchar(40)`; `int(11)` for an `AUTO_INCREMENT` key).
    pub column_type: String,
    /// Whether NULL is refused.
    pub not_null: bool,
    /// Its collation if it holds text (`utf8mb4_general_ci`, `utf8mb4_bin`).
    pub collation: &'static str,
    /// The default's SQL text, if any.
    pub default: Option<String>,
    /// `PRI`, `UNI`, `MUL` or empty.
    pub key: &'static str,
    /// `auto_increment`, `on update current_timestamp(p)`, or empty.
    pub extra: String,
}

/// An index, as `information_schema.STATISTICS` describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexMeta {
    /// `PRIMARY` or the MySQL name.
    pub name: String,
    /// Whether values are unique.
    pub unique: bool,
    /// The columns, in order.
    pub columns: Vec<String>,
}

/// One foreign key of a table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForeignKeyMeta {
    /// Its constraint name (`CONSTRAINT name`, or MySQL's `<table>_ibfk_<n>`).
    pub name: String,
    /// The referencing columns, in order.
    pub columns: Vec<String>,
    /// The referenced table (of the same database).
    pub referenced_table: String,
    /// The referenced columns, in order.
    pub referenced_columns: Vec<String>,
    /// `ON UPDATE`, in MySQL's words (`RESTRICT`, `CASCADE`, `SET NULL`, ...).
    pub update_rule: String,
    /// `ON DELETE`, in MySQL's words.
    pub delete_rule: String,
}

/// A table or view and what tools ask about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableMeta {
    /// The name.
    pub name: String,
    /// Whether it is a view.
    pub view: bool,
    /// Its columns, in order.
    pub columns: Vec<ColumnMeta>,
    /// Its indexes, the primary key first.
    pub indexes: Vec<IndexMeta>,
    /// Its foreign keys.
    pub foreign_keys: Vec<ForeignKeyMeta>,
}

/// One column of one index, as `SHOW INDEX` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexColumn {
    /// `PRIMARY` or the index's name.
    pub key_name: String,
    /// Whether the index allows duplicates.
    pub non_unique: bool,
    /// 1-based position of the column in the index.
    pub seq_in_index: u32,
    /// The column.
    pub column: String,
}

/// A storage engine: opens (creating when missing) the database kept in a directory.
pub trait Engine: Send + Sync {
    /// Opens the database stored in `dir`, creating its files if they do not exist yet.
    ///
    /// # Errors
    /// [`SqlError`] if the storage cannot be opened.
    fn open(&self, dir: &Path) -> Result<Box<dyn Executor>, SqlError>;
}

/// Parses exactly one statement of MySQL text (see the module docs for why the MySQL
/// dialect); double-quoted strings become ordinary string literals (MySQL's default
/// `sql_mode` has no `ANSI_QUOTES`).
///
/// # Errors
/// 1065 for an empty query, 1064 for a syntax error or more than one statement.
pub fn parse_one(sql: &str) -> Result<SqlStatement, SqlError> {
    // sqlparser has `unwrap`s reachable from odd input (see `crate::mysql_dialect`); a
    // panic in parsing must become a syntax error, not a dropped connection.
    let parsed = catch_unwind(AssertUnwindSafe(|| parse_statements(sql)))
        .unwrap_or_else(|_| Err(SqlError::syntax("statement could not be parsed")))?;
    let mut statements = parsed.into_iter();
    match (statements.next(), statements.next()) {
        (None, _) => Err(SqlError::empty_query()),
        (Some(statement), None) => Ok(statement),
        (Some(_), Some(_)) => Err(SqlError::syntax(
            "multiple statements in one query are not supported",
        )),
    }
}

fn parse_statements(sql: &str) -> Result<Vec<SqlStatement>, SqlError> {
    let dialect = Mysql;
    let mut tokens = Tokenizer::new(&dialect, sql)
        .tokenize_with_location()
        .map_err(|e| SqlError::syntax(&e.to_string()))?;
    for t in &mut tokens {
        if let Token::DoubleQuotedString(s) = &mut t.token {
            t.token = Token::SingleQuotedString(std::mem::take(s));
        }
    }
    Parser::new(&dialect)
        .with_tokens_with_locations(tokens)
        .parse_statements()
        .map_err(|e| SqlError::syntax(&e.to_string()))
}

/// How many `?` placeholders `sql` holds (outside strings, identifiers and comments).
///
/// # Errors
/// 1064 if the text does not tokenize.
pub fn count_placeholders(sql: &str) -> Result<usize, SqlError> {
    let tokens = Tokenizer::new(&Mysql, sql)
        .tokenize()
        .map_err(|e| SqlError::syntax(&e.to_string()))?;
    Ok(tokens
        .iter()
        .filter(|t| matches!(t, Token::Placeholder(p) if p == "?"))
        .count())
}

/// What the session running the next statement tells its executor's functions.
#[derive(Debug, Clone, Default)]
pub struct SessionFacts {
    /// `CONNECTION_ID()`.
    pub connection_id: u32,
    /// `user@host` (`USER()`), none before the login.
    pub user: Option<(String, String)>,
    /// `@@autocommit`.
    pub autocommit: bool,
    /// The system variables the session set ([`crate::variables::SessionVars::set`]).
    pub variables: BTreeMap<String, Cell>,
    /// Its user variables.
    pub user_variables: BTreeMap<String, Cell>,
}

impl SessionFacts {
    /// `@@foreign_key_checks`: off while a dump is restored (it creates tables in name order,
    /// children before parents).
    #[must_use]
    pub fn foreign_key_checks(&self) -> bool {
        !matches!(self.variables.get("foreign_key_checks"), Some(Cell::Int(0)))
    }
}

/// A session's `ROW_COUNT()` and `FOUND_ROWS()`: the last statement's, per session as in
/// MySQL, though its statements run on an executor every session of the database shares (set
/// into the executor before each statement and read back after it).
#[derive(Debug)]
pub struct StatementCounts {
    pub row_count: AtomicI64,
    pub found_rows: AtomicI64,
    /// The last statement's notes (or an earlier one's, kept by statements that use no
    /// table and leave none).
    pub warnings: std::sync::Mutex<Vec<Warning>>,
    /// How many of [`Self::warnings`] the statement running, or last run, left itself.
    pub own_warnings: std::sync::atomic::AtomicUsize,
}

/// The warnings the engine's functions raise while a statement runs (`CAST('abc' AS
/// SIGNED)`: 1292), for the executor to add to the statement's; the first
/// [`FunctionWarnings::KEPT`], as MySQL keeps `max_error_count` of them.
#[derive(Debug, Default)]
pub struct FunctionWarnings(std::sync::Mutex<Vec<Warning>>);

impl FunctionWarnings {
    /// MySQL's default `max_error_count`.
    pub const KEPT: usize = 64;

    /// A `Note` or a `Warning` (`level`) with `code` and `message`.
    pub fn push(&self, level: &'static str, code: u16, message: String) {
        let mut kept = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if kept.len() < Self::KEPT {
            kept.push(Warning {
                level,
                code,
                message,
            });
        }
    }

    /// `warnings` (a [`Self::take`]'s) as the list again.
    pub fn put_back(&self, warnings: Vec<Warning>) {
        *self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = warnings;
    }

    /// Those raised since the last take.
    pub fn take(&self) -> Vec<Warning> {
        std::mem::take(
            &mut *self
                .0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }
}

/// A note a statement leaves for `SHOW WARNINGS` (its count is in the OK packet).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    /// `Note`, `Warning` or `Error`.
    pub level: &'static str,
    /// The MySQL error code.
    pub code: u16,
    /// The message.
    pub message: String,
}

impl Default for StatementCounts {
    fn default() -> Self {
        // MySQL's values before any statement: -1 and 0.
        Self {
            row_count: AtomicI64::new(-1),
            found_rows: AtomicI64::new(0),
            warnings: std::sync::Mutex::default(),
            own_warnings: std::sync::atomic::AtomicUsize::new(0),
        }
    }
}

#[cfg(test)]
mod double_tests {
    /// MariaDB 10.11's text for each (`SELECT <literal>e0` and a `DOUBLE` column).
    #[test]
    fn doubles_are_written_as_mariadb_writes_them() {
        for (v, text) in [
            (1e300, "1e300"),
            (-1e300, "-1e300"),
            (1e15, "1e15"),
            (1e14, "100000000000000"),
            (2.5e15, "2.5e15"),
            (999e12, "999000000000000"),
            (1_234_567_890_123_456.8, "1234567890123456.8"),
            (1_234_567_890_123_456.0, "1.234567890123456e15"),
            (123_456_789_012_345_678.0, "1.2345678901234568e17"),
            (1.797_693_134_862_315_7e308, "1.7976931348623157e308"),
            (0.0001, "0.0001"),
            (1e-5, "0.00001"),
            (-1e-7, "-0.0000001"),
            (1e-15, "0.000000000000001"),
            (1.2345e-15, "0.0000000000000012345"),
            (1.2345e-16, "1.2345e-16"),
            (1e-19, "1e-19"),
            (1.5e-20, "1.5e-20"),
            (0.1 + 0.2, "0.30000000000000004"),
            (1.25, "1.25"),
            (100.0, "100"),
            (0.0, "0"),
            (-0.0, "0"),
        ] {
            assert_eq!(super::double_text(v), text, "{v:e}");
        }
    }
}
