//! The embedded SQL engine (issue 3, item 3): an [`Engine`] opens one database's storage and
//! gives an [`Executor`] that runs MySQL-flavoured SQL against it. Which databases exist, and
//! the lock around each, is [`crate::catalog`]'s.
//!
//! The implementation is GlueSQL on its redb storage ([`GlueRedbEngine`]): redb commits with
//! an fsync (`Durability::Immediate`), so a statement that returned OK survives `kill -9`, and
//! opening a database only reads its header (databases are opened lazily, on first use, so the
//! shim's start-up does not depend on how much data there is).
//!
//! GlueSQL parses with sqlparser's PostgreSQL dialect. MySQL clients send MySQL text:
//! backslash escapes inside strings (PyMySQL escapes client-side), double-quoted strings,
//! backtick identifiers, `#` comments and `?` placeholders. Parsing that with PostgreSQL rules
//! would misread `'\''` and open an injection hole, so the executor tokenizes and parses with
//! sqlparser's **MySQL** dialect and hands GlueSQL the parsed statement, with `?` placeholders
//! renumbered to GlueSQL's `$n` and bound as typed values (never spliced into the text).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;

use gluesql::core::chrono::{NaiveDate, NaiveDateTime};
use gluesql::core::data::Value;
use gluesql::core::executor::Payload;
use gluesql::core::prelude::Glue;
use gluesql::core::sqlparser::ast::Statement as SqlStatement;
use gluesql::core::sqlparser::dialect::MySqlDialect;
use gluesql::core::sqlparser::parser::Parser;
use gluesql::core::sqlparser::tokenizer::{Token, Tokenizer};
use gluesql::core::store::{Planner as _, Store as _, Transaction as _};
use gluesql::core::translate::{IntoParamLiteral as _, ParamLiteral, translate_with_params};
use gluesql::gluesql_redb_storage::RedbStorage;

use crate::sql_error::{SqlError, from_glue};

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
    /// An exact decimal, as text.
    Decimal(String),
    /// Text.
    Text(String),
    /// Bytes that are not text.
    Bytes(Vec<u8>),
    /// A date.
    Date(NaiveDate),
    /// A date and time.
    DateTime(NaiveDateTime),
}

impl Cell {
    /// The value as MySQL's text protocol shows it (`None` for NULL).
    #[must_use]
    pub fn to_text(&self) -> Option<String> {
        Some(match self {
            Self::Null => return None,
            Self::Int(v) => v.to_string(),
            Self::UInt(v) => v.to_string(),
            Self::Float(v) => v.to_string(),
            Self::Decimal(v) | Self::Text(v) => v.clone(),
            Self::Bytes(v) => String::from_utf8_lossy(v).into_owned(),
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
    },
    /// A statement without a result set, with the number of rows it changed.
    Done {
        /// Rows inserted, updated or deleted (0 for DDL).
        affected_rows: u64,
    },
}

/// Runs SQL against one open database. Calls block (storage I/O, fsync); the caller runs them
/// on a blocking thread and holds the database's lock.
pub trait Executor: Send {
    /// Runs one statement with `params` bound to its `?` placeholders, in order.
    ///
    /// # Errors
    /// [`SqlError`] with the MySQL code that fits the failure.
    fn execute(&mut self, sql: &str, params: &[Cell]) -> Result<Outcome, SqlError>;

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

    /// The names of the tables, sorted.
    ///
    /// # Errors
    /// [`SqlError`] if the catalog cannot be read.
    fn table_names(&mut self) -> Result<Vec<String>, SqlError>;

    /// `(name, type, nullable, key)` for each column of `table`, or `None` if there is no
    /// such table.
    ///
    /// # Errors
    /// [`SqlError`] if the catalog cannot be read.
    fn columns(&mut self, table: &str) -> Result<Option<Vec<ColumnInfo>>, SqlError>;
}

/// A column as `SHOW COLUMNS` describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnInfo {
    /// Column name.
    pub name: String,
    /// Data type, as the engine spells it.
    pub data_type: String,
    /// Whether NULL is allowed.
    pub nullable: bool,
    /// `PRI`, `UNI` or empty.
    pub key: &'static str,
}

/// A storage engine: opens (creating when missing) the database kept in a directory.
pub trait Engine: Send + Sync {
    /// Opens the database stored in `dir`, creating its files if they do not exist yet.
    ///
    /// # Errors
    /// [`SqlError`] if the storage cannot be opened.
    fn open(&self, dir: &Path) -> Result<Box<dyn Executor>, SqlError>;
}

/// GlueSQL over redb, one redb file per database.
#[derive(Debug, Default, Clone, Copy)]
pub struct GlueRedbEngine;

/// The redb file inside a database directory.
pub const REDB_FILE: &str = "data.redb";

impl Engine for GlueRedbEngine {
    fn open(&self, dir: &Path) -> Result<Box<dyn Executor>, SqlError> {
        let storage = RedbStorage::new(dir.join(REDB_FILE))
            .map_err(|e| SqlError::internal(&format!("cannot open storage: {e}")))?;
        Ok(Box::new(GlueExecutor {
            glue: Glue::new(storage),
            db_name: dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            in_transaction: false,
        }))
    }
}

struct GlueExecutor {
    glue: Glue<RedbStorage>,
    /// For error messages (`Table 'db.t' doesn't exist`).
    db_name: String,
    /// Whether an explicit transaction is open (GlueSQL would otherwise start and commit one
    /// per statement).
    in_transaction: bool,
}

impl GlueExecutor {
    fn glue_err(&self, e: &gluesql::core::error::Error) -> SqlError {
        from_glue(e, &self.db_name)
    }

    /// Runs `f` inside the open transaction, or inside a short one of its own.
    fn with_txn<T>(
        &mut self,
        f: impl FnOnce(&mut RedbStorage) -> gluesql::core::error::Result<T>,
    ) -> Result<T, SqlError> {
        let own = !self.in_transaction;
        if own {
            self.glue
                .storage
                .begin(true)
                .map_err(|e| self.glue_err(&e))?;
        }
        let result = f(&mut self.glue.storage);
        if own {
            // Read-only: nothing to keep.
            let _ = self.glue.storage.rollback();
        }
        result.map_err(|e| self.glue_err(&e))
    }
}

impl Executor for GlueExecutor {
    fn execute(&mut self, sql: &str, params: &[Cell]) -> Result<Outcome, SqlError> {
        let statement = parse_one(sql)?;
        let literals: Vec<ParamLiteral> = params.iter().map(param_literal).collect();
        let translated =
            translate_with_params(&statement, &literals).map_err(|e| self.glue_err(&e))?;
        let plan = self
            .glue
            .storage
            .plan(translated.into())
            .map_err(|e| self.glue_err(&e))?;
        let payload = self
            .glue
            .execute_stmt(&plan)
            .map_err(|e| self.glue_err(&e))?;
        Ok(outcome(payload))
    }

    fn begin(&mut self) -> Result<(), SqlError> {
        if self.in_transaction {
            return Ok(());
        }
        self.glue
            .storage
            .begin(false)
            .map_err(|e| self.glue_err(&e))?;
        self.in_transaction = true;
        Ok(())
    }

    fn commit(&mut self) -> Result<(), SqlError> {
        self.in_transaction = false;
        self.glue.storage.commit().map_err(|e| self.glue_err(&e))
    }

    fn rollback(&mut self) -> Result<(), SqlError> {
        self.in_transaction = false;
        self.glue.storage.rollback().map_err(|e| self.glue_err(&e))
    }

    fn table_names(&mut self) -> Result<Vec<String>, SqlError> {
        let mut names: Vec<String> = self
            .with_txn(|s| s.fetch_all_schemas())?
            .into_iter()
            .map(|s| s.table_name)
            .collect();
        names.sort();
        Ok(names)
    }

    fn columns(&mut self, table: &str) -> Result<Option<Vec<ColumnInfo>>, SqlError> {
        let Some(schema) = self.with_txn(|s| s.fetch_schema(table))? else {
            return Ok(None);
        };
        Ok(Some(
            schema
                .column_defs
                .unwrap_or_default()
                .into_iter()
                .map(|c| ColumnInfo {
                    key: match c.unique {
                        Some(u) if u.is_primary => "PRI",
                        Some(_) => "UNI",
                        None => "",
                    },
                    name: c.name,
                    data_type: c.data_type.to_string(),
                    nullable: c.nullable,
                })
                .collect(),
        ))
    }
}

/// Parses exactly one statement of MySQL text (see the module docs for why the MySQL
/// dialect): `?` placeholders become `$1, $2, ...` in order, double-quoted strings become
/// ordinary string literals (MySQL's default `sql_mode` has no `ANSI_QUOTES`).
///
/// # Errors
/// 1065 for an empty query, 1064 for a syntax error or more than one statement.
pub fn parse_one(sql: &str) -> Result<SqlStatement, SqlError> {
    // sqlparser has a few `unwrap`s in its MySQL dialect (`1 DIV` at the end of input); a
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
    let dialect = MySqlDialect {};
    let mut tokens = Tokenizer::new(&dialect, sql)
        .tokenize_with_location()
        .map_err(|e| SqlError::syntax(&e.to_string()))?;
    let mut placeholders = 0usize;
    for t in &mut tokens {
        match &mut t.token {
            Token::Placeholder(p) if p == "?" => {
                placeholders += 1;
                *p = format!("${placeholders}");
            }
            Token::DoubleQuotedString(s) => {
                t.token = Token::SingleQuotedString(std::mem::take(s));
            }
            _ => {}
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
    let tokens = Tokenizer::new(&MySqlDialect {}, sql)
        .tokenize()
        .map_err(|e| SqlError::syntax(&e.to_string()))?;
    Ok(tokens
        .iter()
        .filter(|t| matches!(t, Token::Placeholder(p) if p == "?"))
        .count())
}

fn param_literal(cell: &Cell) -> ParamLiteral {
    match cell {
        Cell::Null => ParamLiteral::null(),
        Cell::Int(v) => v.into_param_literal(),
        Cell::UInt(v) => v.into_param_literal(),
        Cell::Float(v) => v.into_param_literal(),
        Cell::Decimal(v) | Cell::Text(v) => v.clone().into_param_literal(),
        Cell::Bytes(v) => match std::str::from_utf8(v) {
            Ok(s) => s.into_param_literal(),
            Err(_) => v.clone().into_param_literal(),
        },
        Cell::Date(v) => v.into_param_literal(),
        Cell::DateTime(v) => v.into_param_literal(),
    }
}

fn outcome(payload: Payload) -> Outcome {
    match payload {
        Payload::Select { labels, rows } => Outcome::Rows {
            columns: labels,
            rows: rows
                .into_iter()
                .map(|r| r.into_iter().map(cell).collect())
                .collect(),
        },
        Payload::SelectMap(rows) => {
            let mut columns: Vec<String> = Vec::new();
            for row in &rows {
                for k in row.keys() {
                    if !columns.contains(k) {
                        columns.push(k.clone());
                    }
                }
            }
            let rows = rows
                .into_iter()
                .map(|mut r| {
                    columns
                        .iter()
                        .map(|c| r.remove(c).map_or(Cell::Null, cell))
                        .collect()
                })
                .collect();
            Outcome::Rows { columns, rows }
        }
        Payload::ShowColumns(cols) => Outcome::Rows {
            columns: vec!["Field".into(), "Type".into()],
            rows: cols
                .into_iter()
                .map(|(n, t)| vec![Cell::Text(n), Cell::Text(t.to_string())])
                .collect(),
        },
        Payload::Insert(n) | Payload::Delete(n) | Payload::Update(n) | Payload::DropTable(n) => {
            Outcome::Done {
                affected_rows: n as u64,
            }
        }
        Payload::ShowVariable(v) => {
            let (column, values) = match v {
                gluesql::core::executor::PayloadVariable::Tables(t) => ("Tables", t),
                gluesql::core::executor::PayloadVariable::Functions(f) => ("Functions", f),
                gluesql::core::executor::PayloadVariable::Version(v) => ("Version", vec![v]),
            };
            Outcome::Rows {
                columns: vec![column.into()],
                rows: values.into_iter().map(|v| vec![Cell::Text(v)]).collect(),
            }
        }
        Payload::Create
        | Payload::DropFunction
        | Payload::AlterTable
        | Payload::CreateIndex
        | Payload::DropIndex
        | Payload::StartTransaction
        | Payload::Commit
        | Payload::Rollback => Outcome::Done { affected_rows: 0 },
    }
}

fn cell(v: Value) -> Cell {
    match v {
        Value::Null => Cell::Null,
        Value::Bool(b) => Cell::Int(i64::from(b)),
        Value::I8(v) => Cell::Int(v.into()),
        Value::I16(v) => Cell::Int(v.into()),
        Value::I32(v) => Cell::Int(v.into()),
        Value::I64(v) => Cell::Int(v),
        Value::U8(v) => Cell::UInt(v.into()),
        Value::U16(v) => Cell::UInt(v.into()),
        Value::U32(v) => Cell::UInt(v.into()),
        Value::U64(v) => Cell::UInt(v),
        Value::F32(v) => Cell::Float(v.into()),
        Value::F64(v) => Cell::Float(v),
        Value::Decimal(d) => Cell::Decimal(d.to_string()),
        Value::Str(s) => Cell::Text(s),
        Value::Bytea(b) => Cell::Bytes(b),
        Value::Date(d) => Cell::Date(d),
        Value::Timestamp(t) => Cell::DateTime(t),
        other => Cell::Text(String::from(&other)),
    }
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::path::PathBuf;

    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("server-shim-engine-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn exec(e: &mut dyn Executor, sql: &str) -> Result<Outcome, SqlError> {
        e.execute(sql, &[])
    }

    #[test]
    fn round_trips_rows_through_redb_and_reopen() {
        let dir = temp_dir("reopen");
        {
            let mut e = GlueRedbEngine.open(&dir).unwrap();
            exec(e.as_mut(), "CREATE TABLE t (id INT PRIMARY KEY, name TEXT)").unwrap();
            let out = exec(e.as_mut(), "INSERT INTO t VALUES (1, 'a'), (2, \"b\")").unwrap();
            assert_eq!(out, Outcome::Done { affected_rows: 2 });
        }
        let mut e = GlueRedbEngine.open(&dir).unwrap();
        let out = exec(e.as_mut(), "SELECT id, name FROM t ORDER BY id").unwrap();
        assert_eq!(
            out,
            Outcome::Rows {
                columns: vec!["id".into(), "name".into()],
                rows: vec![
                    vec![Cell::Int(1), Cell::Text("a".into())],
                    vec![Cell::Int(2), Cell::Text("b".into())],
                ],
            }
        );
        assert_eq!(e.table_names().unwrap(), vec!["t".to_owned()]);
    }

    #[test]
    fn reads_mysql_backslash_escapes_so_escaped_quotes_stay_inside_strings() {
        let dir = temp_dir("escape");
        let mut e = GlueRedbEngine.open(&dir).unwrap();
        exec(e.as_mut(), "CREATE TABLE t (s TEXT)").unwrap();
        // What PyMySQL sends for the value `\' OR 1=1 -- `: under PostgreSQL rules the
        // string would end early and the rest would run as SQL.
        exec(e.as_mut(), r"INSERT INTO t VALUES ('\\\' OR 1=1 -- ')").unwrap();
        exec(e.as_mut(), r"INSERT INTO t VALUES ('O\'Brien')").unwrap();
        let out = exec(e.as_mut(), "SELECT s FROM t").unwrap();
        let Outcome::Rows { rows, .. } = out else {
            panic!("rows expected")
        };
        assert_eq!(rows[0], vec![Cell::Text(r"\' OR 1=1 -- ".into())]);
        assert_eq!(rows[1], vec![Cell::Text("O'Brien".into())]);
    }

    #[test]
    fn binds_placeholders_as_values_not_text() {
        let dir = temp_dir("params");
        let mut e = GlueRedbEngine.open(&dir).unwrap();
        exec(e.as_mut(), "CREATE TABLE `t` (id INT, s TEXT)").unwrap();
        e.execute(
            "INSERT INTO t (id, s) VALUES (?, ?)",
            &[Cell::Int(7), Cell::Text("x'); DROP TABLE t; --".into())],
        )
        .unwrap();
        let out = e
            .execute("SELECT s FROM t WHERE id = ? AND s <> '?'", &[Cell::Int(7)])
            .unwrap();
        let Outcome::Rows { rows, .. } = out else {
            panic!("rows expected")
        };
        assert_eq!(rows, vec![vec![Cell::Text("x'); DROP TABLE t; --".into())]]);
        assert_eq!(
            count_placeholders("SELECT ? , '?', `?` # ?\n, ?").unwrap(),
            2
        );
    }

    #[test]
    fn rolls_back_explicit_transaction() {
        let dir = temp_dir("txn");
        let mut e = GlueRedbEngine.open(&dir).unwrap();
        exec(e.as_mut(), "CREATE TABLE t (id INT)").unwrap();
        e.begin().unwrap();
        exec(e.as_mut(), "INSERT INTO t VALUES (1)").unwrap();
        e.rollback().unwrap();
        let out = exec(e.as_mut(), "SELECT COUNT(*) FROM t").unwrap();
        let Outcome::Rows { rows, .. } = out else {
            panic!("rows expected")
        };
        assert_eq!(rows, vec![vec![Cell::Int(0)]]);
    }

    #[test]
    fn maps_real_engine_errors_to_mysql_codes() {
        let dir = temp_dir("errors");
        let mut e = GlueRedbEngine.open(&dir).unwrap();
        exec(e.as_mut(), "CREATE TABLE t (id INT PRIMARY KEY, s TEXT)").unwrap();
        exec(e.as_mut(), "INSERT INTO t VALUES (1, 'a')").unwrap();
        let cases = [
            ("SELEKT 1", 1064),
            ("SELECT * FROM missing", 1146),
            ("INSERT INTO missing VALUES (1)", 1146),
            ("CREATE TABLE t (id INT)", 1050),
            ("INSERT INTO t VALUES (1, 'b')", 1062),
            ("SELECT nope FROM t", 1054),
            ("", 1065),
            ("SELECT 1; SELECT 2", 1064),
            ("SELECT 1 DIV", 1064),
        ];
        for (sql, code) in cases {
            let err = exec(e.as_mut(), sql).unwrap_err();
            assert_eq!(err.code(), code, "{sql}: {err}");
        }
    }
}
