//! Statement classification for the session layer: which statements the shim answers itself
//! (databases, session variables, transactions, accounts, the `SELECT @@x` / `VERSION()`
//! probes that clients send while connecting) and which go to the SQL engine.
//!
//! Pure: text in, [`Statement`] out. Tokenizing and parsing use the shim's MySQL dialect
//! ([`crate::mysql_dialect`], the translation's too), so strings, comments and quoted
//! identifiers are read the way a MySQL server reads them, and the way the translation will.

use sqlparser::ast::{
    Expr, FunctionArguments, Query, SelectItem, SetExpr, Statement as SqlStatement,
    Value as SqlValue,
};
use sqlparser::tokenizer::{Token, Tokenizer};
use zeroize::Zeroizing;

use crate::engine::{Cell, parse_one};
use crate::mysql_dialect::Mysql;
use crate::sql_error::SqlError;

/// A table a statement names, with the database it was qualified by (`db.t`), if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableRef {
    /// `db` of `db.t`; the session's current database otherwise.
    pub database: Option<String>,
    /// The table.
    pub table: String,
}

/// What a statement is, as far as the session layer cares.
#[derive(Debug, Clone, PartialEq)]
pub enum Statement {
    /// `USE db`.
    Use(String),
    /// `SHOW DATABASES` / `SHOW SCHEMAS` `[LIKE 'pattern']`.
    ShowDatabases { like: Option<String> },
    /// `SHOW [FULL] TABLES [FROM|IN db] [LIKE 'pattern']`.
    ShowTables {
        /// `FULL`: adds the `Table_type` column.
        full: bool,
        /// `FROM db`; the current database without it.
        database: Option<String>,
        like: Option<String>,
    },
    /// `SHOW [FULL] COLUMNS FROM t`, `DESCRIBE t`.
    ShowColumns {
        /// The table.
        table: TableRef,
        /// `FULL`: adds collation, privileges and comment.
        full: bool,
    },
    /// `SHOW TABLE STATUS [LIKE 'pattern']`.
    ShowTableStatus {
        /// The `LIKE` pattern.
        like: Option<String>,
    },
    /// `SHOW CREATE TABLE t`.
    ShowCreateTable {
        /// The table.
        table: TableRef,
    },
    /// `SHOW INDEX|INDEXES|KEYS FROM t`.
    ShowIndex {
        /// The table.
        table: TableRef,
    },
    /// `SHOW [SESSION|GLOBAL] VARIABLES [LIKE 'pattern']`.
    ShowVariables {
        /// The `LIKE` pattern.
        like: Option<String>,
    },
    /// `SHOW [SESSION] STATUS LIKE 'Ssl_version'` (or `'Ssl_version%'`, which matches no other
    /// of MariaDB's status variables): whether the connection is in TLS, and which version.
    /// The shim keeps no other status variable, so any other `SHOW STATUS` is refused.
    ShowSslVersion,
    /// `SHOW WARNINGS` / `SHOW ERRORS`.
    ShowWarnings,
    /// What the shim has none of: `SHOW EVENTS`, `SHOW FUNCTION STATUS`, `SHOW PROCEDURE
    /// STATUS` (`mariadb-dump --routines --events` asks). An empty result with MySQL's columns.
    ShowNone(&'static [&'static str]),
    /// `SHOW PLUGINS`: the authentication plugins and the storage engine the shim has.
    ShowPlugins,
    /// `SHOW [FULL] PROCESSLIST`.
    ShowProcessList { full: bool },
    /// `CREATE DATABASE [IF NOT EXISTS] db`.
    CreateDatabase {
        /// The name.
        name: String,
        /// `IF NOT EXISTS`.
        if_not_exists: bool,
    },
    /// `DROP DATABASE [IF EXISTS] db`.
    DropDatabase {
        /// The name.
        name: String,
        /// `IF EXISTS`.
        if_exists: bool,
    },
    /// `SET ...`: the assignments, as (variable name in lower case, value as text).
    Set(Vec<(String, String)>),
    /// `KILL [HARD | SOFT] [CONNECTION | QUERY] id`.
    Kill {
        /// The connection (`CONNECTION_ID()`).
        id: u64,
        /// `QUERY`: only its running statement.
        query: bool,
    },
    /// `BEGIN`, `START TRANSACTION`.
    Begin,
    /// `COMMIT`.
    Commit,
    /// `ROLLBACK`.
    Rollback,
    /// `SAVEPOINT name`.
    Savepoint(String),
    /// `ROLLBACK [WORK] TO [SAVEPOINT] name`.
    RollbackToSavepoint(String),
    /// `RELEASE SAVEPOINT name`.
    ReleaseSavepoint(String),
    /// `CREATE USER [IF NOT EXISTS] 'u'@'h' IDENTIFIED BY 'p'`.
    CreateUser {
        /// The account name.
        name: String,
        /// The password (wiped when dropped; never logged).
        password: Zeroizing<String>,
        /// `IF NOT EXISTS`.
        if_not_exists: bool,
    },
    /// `ALTER USER [IF EXISTS] 'u'@'h' IDENTIFIED BY 'p'`.
    AlterUser {
        /// The account name.
        name: String,
        /// The new password.
        password: Zeroizing<String>,
        /// `IF EXISTS`.
        if_exists: bool,
    },
    /// `DROP USER [IF EXISTS] 'u'@'h' [, ...]`.
    DropUser {
        /// The account names.
        names: Vec<String>,
        /// `IF EXISTS`.
        if_exists: bool,
    },
    /// A `SELECT` without `FROM` whose items the session evaluates itself.
    SessionSelect(Vec<(String, SessionItem)>),
    /// A statement the shim accepts and ignores (`FLUSH PRIVILEGES`, ...).
    Ignored,
    /// `ANALYZE|CHECK|OPTIMIZE|REPAIR [NO_WRITE_TO_BINLOG|LOCAL] TABLE t [, ...]`: table
    /// maintenance for MySQL's storage engines, which SQLite does not need. Answered, as
    /// MySQL does, with one status row per table (sample data such as the MySQL "world"
    /// database ends with `ANALYZE TABLE`).
    TableMaintenance {
        /// The operation in lower case, MySQL's `Op` column: `analyze`, `check`, ...
        op: String,
        /// The tables, as written: (database if qualified, table).
        tables: Vec<(Option<String>, String)>,
    },
    /// Everything else: run by the engine. `write` says whether it changes data (an
    /// `autocommit=0` session starts its implicit transaction at the first write).
    Engine {
        /// Changes data or schema.
        write: bool,
    },
}

/// An item of a [`Statement::SessionSelect`].
#[derive(Debug, Clone, PartialEq)]
pub enum SessionItem {
    /// `@@[session.|global.]name`.
    Variable(String),
    /// `@name` (lower case, without `@`): what the session set it to, or NULL.
    UserVariable(String),
    /// A function of the session.
    Function(SessionFn),
    /// A literal.
    Literal(Cell),
}

/// Functions answered by the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionFn {
    /// `VERSION()`.
    Version,
    /// `DATABASE()`, `SCHEMA()`.
    Database,
    /// `USER()`, `SESSION_USER()`, `SYSTEM_USER()`.
    User,
    /// `CURRENT_USER()`.
    CurrentUser,
    /// `CONNECTION_ID()`.
    ConnectionId,
    /// `NOW()`, `CURRENT_TIMESTAMP`, `SYSDATE()`, `LOCALTIMESTAMP`.
    Now,
    /// `LAST_INSERT_ID()`.
    LastInsertId,
}

/// The significant tokens of `sql` (comments are whitespace tokens, so they go too), with
/// trailing `;` removed.
fn tokens(sql: &str) -> Result<Vec<Token>, SqlError> {
    let sql = space_account_at(sql);
    let mut toks: Vec<Token> = Tokenizer::new(&Mysql, &sql)
        .tokenize()
        .map_err(|e| SqlError::syntax(&e.to_string()))?
        .into_iter()
        .filter(|t| !matches!(t, Token::Whitespace(_) | Token::EOF))
        .collect();
    while matches!(toks.last(), Some(Token::SemiColon)) {
        toks.pop();
    }
    Ok(toks)
}

/// sqlparser's MySQL tokenizer cannot read an account `'u'@'h'`: `@` followed by a quote
/// starts a broken identifier. Outside string literals, a space after such an `@` makes it a
/// plain `@` token. Nothing inside a string (a password) is touched.
fn space_account_at(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 4);
    let mut quote: Option<char> = None;
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        out.push(c);
        match quote {
            Some(q) => {
                if c == '\\' {
                    if let Some(escaped) = chars.next() {
                        out.push(escaped);
                    }
                } else if c == q {
                    // A doubled quote stays inside the string.
                    if chars.peek() == Some(&q) {
                        if let Some(again) = chars.next() {
                            out.push(again);
                        }
                    } else {
                        quote = None;
                    }
                }
            }
            None => match c {
                '\'' | '"' | '`' => quote = Some(c),
                '@' if matches!(chars.peek(), Some('\'' | '"' | '`')) => out.push(' '),
                _ => {}
            },
        }
    }
    out
}

/// A cursor over significant tokens.
struct Cursor {
    toks: Vec<Token>,
    pos: usize,
}

impl Cursor {
    fn peek(&self) -> Option<&Token> {
        self.toks.get(self.pos)
    }

    fn next(&mut self) -> Option<Token> {
        let t = self.toks.get(self.pos).cloned();
        self.pos += 1;
        t
    }

    /// The next token if it is the unquoted keyword `kw` (case-insensitive).
    fn keyword(&mut self, kw: &str) -> bool {
        match self.peek() {
            Some(Token::Word(w)) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(kw) => {
                self.pos += 1;
                true
            }
            _ => false,
        }
    }

    fn keywords(&mut self, kws: &[&str]) -> bool {
        let start = self.pos;
        if kws.iter().all(|k| self.keyword(k)) {
            return true;
        }
        self.pos = start;
        false
    }

    fn at_end(&self) -> bool {
        self.pos >= self.toks.len()
    }

    /// A name: a word (quoted or not) or a string.
    fn name(&mut self) -> Option<String> {
        match self.next()? {
            Token::Word(w) => Some(w.value),
            Token::SingleQuotedString(s) | Token::DoubleQuotedString(s) => Some(s),
            _ => None,
        }
    }

    /// A table, maybe qualified by its database: `t`, `db.t`, `` `db`.`t` ``.
    fn table_ref(&mut self) -> Option<TableRef> {
        let first = self.name()?;
        if matches!(self.peek(), Some(Token::Period)) {
            self.next();
            let table = self.name()?;
            return Some(TableRef {
                database: Some(first),
                table,
            });
        }
        Some(TableRef {
            database: None,
            table: first,
        })
    }

    /// An account: `'u'`, `u`, `'u'@'h'`, `u@h`; the host is ignored.
    fn account(&mut self) -> Option<String> {
        let name = self.name()?;
        // `'u'@'h'` tokenizes as the user, then `@` (maybe glued to the host as a word).
        let (name, glued) = match name.split_once('@') {
            Some((u, _)) => (u.to_owned(), true),
            None => (name, false),
        };
        if !glued {
            match self.peek().cloned() {
                Some(Token::AtSign) => {
                    self.next();
                    self.name()?;
                }
                Some(Token::Word(w)) if w.value.starts_with('@') => {
                    self.next();
                    if w.value == "@" {
                        self.name()?;
                    }
                }
                _ => {}
            }
        }
        Some(name)
    }

    /// A string literal.
    fn string(&mut self) -> Option<String> {
        match self.next()? {
            Token::SingleQuotedString(s) | Token::DoubleQuotedString(s) => Some(s),
            _ => None,
        }
    }
}

fn bad(what: &str) -> SqlError {
    SqlError::syntax(what)
}

/// Classifies one statement.
///
/// # Errors
/// 1065 for an empty query; 1064 for a statement the session layer recognises but cannot
/// read (a malformed `CREATE USER`, say). Errors never echo a password.
pub fn classify(sql: &str) -> Result<Statement, SqlError> {
    let toks = tokens(sql)?;
    let mut c = Cursor { toks, pos: 0 };
    let Some(Token::Word(first)) = c.next() else {
        return if c.toks.is_empty() {
            Err(SqlError::empty_query())
        } else {
            Ok(Statement::Engine { write: false })
        };
    };
    let first = first.value.to_ascii_lowercase();
    let done = |c: &Cursor, s: Statement| {
        if c.at_end() {
            Ok(s)
        } else {
            Err(bad("unexpected text at the end of the statement"))
        }
    };
    match first.as_str() {
        "use" => {
            let name = c.name().ok_or_else(|| bad("USE needs a database name"))?;
            done(&c, Statement::Use(name))
        }
        "show" => classify_show(&mut c),
        "describe" | "desc" | "explain" => {
            if matches!(c.peek(), Some(Token::Word(w)) if w.value.eq_ignore_ascii_case("select")) {
                return Err(SqlError::not_supported("EXPLAIN"));
            }
            let table = c.table_ref().ok_or_else(|| bad("DESCRIBE needs a table"))?;
            Ok(Statement::ShowColumns { table, full: false })
        }
        "create" => {
            if c.keyword("database") || c.keyword("schema") {
                let if_not_exists = c.keywords(&["if", "not", "exists"]);
                let name = c
                    .name()
                    .ok_or_else(|| bad("CREATE DATABASE needs a name"))?;
                // Options such as CHARACTER SET are accepted and ignored.
                Ok(Statement::CreateDatabase {
                    name,
                    if_not_exists,
                })
            } else if c.keyword("user") {
                let if_not_exists = c.keywords(&["if", "not", "exists"]);
                let (name, password) = user_and_password(&mut c, "CREATE USER")?;
                Ok(Statement::CreateUser {
                    name,
                    password,
                    if_not_exists,
                })
            } else {
                Ok(Statement::Engine { write: true })
            }
        }
        "alter" => {
            if c.keyword("user") {
                let if_exists = c.keywords(&["if", "exists"]);
                let (name, password) = user_and_password(&mut c, "ALTER USER")?;
                Ok(Statement::AlterUser {
                    name,
                    password,
                    if_exists,
                })
            } else {
                Ok(Statement::Engine { write: true })
            }
        }
        "drop" => {
            if c.keyword("database") || c.keyword("schema") {
                let if_exists = c.keywords(&["if", "exists"]);
                let name = c.name().ok_or_else(|| bad("DROP DATABASE needs a name"))?;
                done(&c, Statement::DropDatabase { name, if_exists })
            } else if c.keyword("user") {
                let if_exists = c.keywords(&["if", "exists"]);
                let mut names = vec![c.account().ok_or_else(|| bad("DROP USER needs a user"))?];
                while matches!(c.peek(), Some(Token::Comma)) {
                    c.next();
                    names.push(c.account().ok_or_else(|| bad("DROP USER needs a user"))?);
                }
                done(&c, Statement::DropUser { names, if_exists })
            } else {
                Ok(Statement::Engine { write: true })
            }
        }
        "set" => classify_set(&mut c),
        "begin" => {
            c.keyword("work");
            done(&c, Statement::Begin)
        }
        "start" => {
            if c.keyword("transaction") {
                // READ WRITE / READ ONLY / WITH CONSISTENT SNAPSHOT: accepted.
                Ok(Statement::Begin)
            } else {
                Err(bad("expected START TRANSACTION"))
            }
        }
        "commit" => {
            c.keyword("work");
            done(&c, Statement::Commit)
        }
        "rollback" => {
            c.keyword("work");
            if c.keyword("to") {
                c.keyword("savepoint");
                let name = c
                    .name()
                    .ok_or_else(|| bad("ROLLBACK TO needs a savepoint"))?;
                return done(&c, Statement::RollbackToSavepoint(name));
            }
            done(&c, Statement::Rollback)
        }
        "savepoint" => {
            let name = c.name().ok_or_else(|| bad("SAVEPOINT needs a name"))?;
            done(&c, Statement::Savepoint(name))
        }
        "release" if c.keyword("savepoint") => {
            let name = c
                .name()
                .ok_or_else(|| bad("RELEASE SAVEPOINT needs a name"))?;
            done(&c, Statement::ReleaseSavepoint(name))
        }
        "flush" => Ok(Statement::Ignored),
        "kill" => {
            // MariaDB's HARD and SOFT differ in what a storage engine may finish first.
            let _ = c.keyword("hard") || c.keyword("soft");
            let query = c.keyword("query");
            if query && c.keyword("id") {
                return Err(SqlError::not_supported("KILL QUERY ID"));
            }
            if !query {
                c.keyword("connection");
            }
            let id = match c.next() {
                Some(Token::Number(n, _)) => n.parse().ok(),
                _ => None,
            };
            let id = id.ok_or_else(|| bad("KILL needs a connection id"))?;
            done(&c, Statement::Kill { id, query })
        }
        "analyze" | "check" | "optimize" | "repair" => {
            // Only the TABLE forms; anything else goes to the engine, which refuses it.
            let _ = c.keyword("no_write_to_binlog") || c.keyword("local");
            if !c.keyword("table") {
                return Ok(Statement::Engine { write: false });
            }
            let mut tables = Vec::new();
            loop {
                let name = c.name().ok_or_else(|| bad("expected a table name"))?;
                if matches!(c.peek(), Some(Token::Period)) {
                    c.next();
                    let table = c.name().ok_or_else(|| bad("expected a table name"))?;
                    tables.push((Some(name), table));
                } else {
                    tables.push((None, name));
                }
                if !matches!(c.peek(), Some(Token::Comma)) {
                    break;
                }
                c.next();
            }
            // Options such as CHECK's EXTENDED or REPAIR's QUICK change nothing here.
            Ok(Statement::TableMaintenance { op: first, tables })
        }
        "select" => Ok(session_select(sql).unwrap_or(Statement::Engine { write: false })),
        "insert" | "update" | "delete" | "replace" | "truncate" => {
            Ok(Statement::Engine { write: true })
        }
        _ => Ok(Statement::Engine { write: false }),
    }
}

fn user_and_password(c: &mut Cursor, what: &str) -> Result<(String, Zeroizing<String>), SqlError> {
    let name = c
        .account()
        .ok_or_else(|| bad(&format!("{what} needs a user name")))?;
    if c.at_end() {
        // No IDENTIFIED clause: an empty password.
        return Ok((name, Zeroizing::new(String::new())));
    }
    if !c.keyword("identified") {
        return Err(bad(&format!("{what}: expected IDENTIFIED BY")));
    }
    if c.keyword("with") {
        // IDENTIFIED WITH <plugin> [BY 'pw']: both plugins' hashes are always stored.
        c.name()
            .ok_or_else(|| bad(&format!("{what}: expected a plugin name")))?;
        if c.at_end() {
            return Ok((name, Zeroizing::new(String::new())));
        }
    }
    if !c.keyword("by") {
        return Err(bad(&format!("{what}: expected IDENTIFIED BY")));
    }
    let password = Zeroizing::new(
        c.string()
            .ok_or_else(|| bad(&format!("{what}: the password must be a string")))?,
    );
    if !c.at_end() {
        return Err(bad(&format!("{what}: unexpected text after the password")));
    }
    Ok((name, password))
}

/// The optional `LIKE 'pattern'` that ends a `SHOW` (anything else after it, such as a
/// `WHERE`, is refused rather than ignored).
fn show_like(c: &mut Cursor, what: &str) -> Result<Option<String>, SqlError> {
    let like = if c.keyword("like") {
        Some(c.string().ok_or_else(|| bad("LIKE needs a pattern"))?)
    } else {
        None
    };
    if !c.at_end() {
        return Err(SqlError::not_supported(&format!("{what} other than LIKE")));
    }
    Ok(like)
}

fn classify_show(c: &mut Cursor) -> Result<Statement, SqlError> {
    let full = c.keyword("full");
    let global = c.keyword("global");
    let _ = global || c.keyword("session") || c.keyword("local");
    let Some(Token::Word(w)) = c.next() else {
        return Err(bad("SHOW needs a subject"));
    };
    match w.value.to_ascii_lowercase().as_str() {
        "databases" | "schemas" => Ok(Statement::ShowDatabases {
            like: show_like(c, "SHOW DATABASES")?,
        }),
        "tables" => {
            let database = if c.keyword("from") || c.keyword("in") {
                Some(c.name().ok_or_else(|| bad("FROM needs a database"))?)
            } else {
                None
            };
            Ok(Statement::ShowTables {
                full,
                database,
                like: show_like(c, "SHOW TABLES")?,
            })
        }
        "columns" | "fields" => {
            if !(c.keyword("from") || c.keyword("in")) {
                return Err(bad("SHOW COLUMNS needs FROM <table>"));
            }
            let mut table = c
                .table_ref()
                .ok_or_else(|| bad("SHOW COLUMNS needs a table"))?;
            if c.keyword("from") || c.keyword("in") {
                table.database = Some(c.name().ok_or_else(|| bad("FROM needs a database"))?);
            }
            Ok(Statement::ShowColumns { table, full })
        }
        "table" => {
            if !c.keyword("status") {
                return Err(SqlError::not_supported("SHOW TABLE other than STATUS"));
            }
            let like = if c.keyword("like") {
                Some(c.string().ok_or_else(|| bad("LIKE needs a pattern"))?)
            } else {
                None
            };
            Ok(Statement::ShowTableStatus { like })
        }
        "create" => {
            if !c.keyword("table") {
                return Err(SqlError::not_supported("SHOW CREATE other than TABLE"));
            }
            let table = c
                .table_ref()
                .ok_or_else(|| bad("SHOW CREATE TABLE needs a table"))?;
            Ok(Statement::ShowCreateTable { table })
        }
        "index" | "indexes" | "keys" => {
            if !(c.keyword("from") || c.keyword("in")) {
                return Err(bad("SHOW INDEX needs FROM <table>"));
            }
            let mut table = c
                .table_ref()
                .ok_or_else(|| bad("SHOW INDEX needs a table"))?;
            if c.keyword("from") || c.keyword("in") {
                table.database = Some(c.name().ok_or_else(|| bad("FROM needs a database"))?);
            }
            Ok(Statement::ShowIndex { table })
        }
        "variables" => {
            let like = if c.keyword("like") {
                Some(c.string().ok_or_else(|| bad("LIKE needs a pattern"))?)
            } else {
                None
            };
            if c.keyword("where") {
                return Err(SqlError::not_supported("SHOW VARIABLES WHERE"));
            }
            Ok(Statement::ShowVariables { like })
        }
        "status" => {
            let like = show_like(c, "SHOW STATUS")?;
            let ssl_version = like
                .map(|p| p.replace('\\', "").to_ascii_lowercase())
                .is_some_and(|p| p == "ssl_version" || p == "ssl_version%");
            if global || !ssl_version {
                return Err(SqlError::not_supported(
                    "SHOW STATUS other than SHOW STATUS LIKE 'Ssl_version'",
                ));
            }
            Ok(Statement::ShowSslVersion)
        }
        "warnings" | "errors" => Ok(Statement::ShowWarnings),
        "plugins" => Ok(Statement::ShowPlugins),
        "processlist" => Ok(Statement::ShowProcessList { full }),
        // No events, stored functions or procedures here; the filters (`FROM db`, `LIKE`,
        // `WHERE Db = ...`) can only narrow nothing down further.
        "events" => Ok(Statement::ShowNone(&[
            "Db",
            "Name",
            "Definer",
            "Time zone",
            "Type",
            "Execute at",
            "Interval value",
            "Interval field",
            "Starts",
            "Ends",
            "Status",
            "Originator",
            "character_set_client",
            "collation_connection",
            "Database Collation",
        ])),
        "function" | "procedure" if c.keyword("status") => Ok(Statement::ShowNone(&[
            "Db",
            "Name",
            "Type",
            "Definer",
            "Modified",
            "Created",
            "Security_type",
            "Comment",
            "character_set_client",
            "collation_connection",
            "Database Collation",
        ])),
        other => Err(SqlError::not_supported(&format!(
            "SHOW {}",
            other.to_uppercase()
        ))),
    }
}

/// Whether `sql` uses a table, so that it starts a new list of notes: MySQL keeps the last
/// statement's notes (`SHOW WARNINGS`) across statements that use none (`SELECT 1`, `SET`,
/// `USE`, `DO`), as MariaDB 10.11 does. Read from its words: `FROM`, `INTO`, `TABLE`,
/// `JOIN`, and the verbs that write or change a schema.
#[must_use]
pub fn uses_a_table(sql: &str) -> bool {
    use sqlparser::keywords::Keyword;
    let Ok(tokens) = Tokenizer::new(&Mysql, sql).tokenize() else {
        return true;
    };
    tokens.iter().any(|t| {
        matches!(t, Token::Word(w) if matches!(
            w.keyword,
            Keyword::FROM
                | Keyword::INTO
                | Keyword::TABLE
                | Keyword::JOIN
                | Keyword::UPDATE
                | Keyword::DELETE
                | Keyword::INSERT
                | Keyword::REPLACE
                | Keyword::CREATE
                | Keyword::DROP
                | Keyword::ALTER
                | Keyword::TRUNCATE
                | Keyword::RENAME
        ))
    })
}

/// The milliseconds of a `SELECT /*+ MAX_EXECUTION_TIME(n) */ ...` hint (MySQL 8's optimizer
/// hint, right after the `SELECT` that begins the statement); `None` without one.
#[must_use]
pub fn max_execution_time_hint(sql: &str) -> Option<u64> {
    let rest = sql.trim_start();
    let rest = rest
        .get(..6)
        .filter(|w| w.eq_ignore_ascii_case("select"))
        .and_then(|_| rest.get(6..))?;
    let hints = rest.trim_start().strip_prefix("/*+")?;
    let hints = hints.split("*/").next()?.to_ascii_uppercase();
    let (_, after) = hints.split_once("MAX_EXECUTION_TIME")?;
    let digits = after
        .trim_start()
        .strip_prefix('(')?
        .split(')')
        .next()?
        .trim();
    digits.parse().ok()
}

fn classify_set(c: &mut Cursor) -> Result<Statement, SqlError> {
    if c.keyword("names") || c.keywords(&["character", "set"]) || c.keyword("charset") {
        // The shim always speaks UTF-8: the session refuses another character set
        // ([`crate::variables::refused`]). `COLLATE ...` after it changes nothing here.
        let charset = match c.next() {
            Some(Token::Word(w)) => w.value,
            Some(Token::SingleQuotedString(s) | Token::DoubleQuotedString(s)) => s,
            _ => return Err(bad("SET NAMES: expected a character set")),
        };
        return Ok(Statement::Set(vec![("names".to_owned(), charset)]));
    }
    if c.keyword("password") {
        return Err(SqlError::not_supported("SET PASSWORD (use ALTER USER)"));
    }
    let mut out = Vec::new();
    loop {
        let _ = c.keyword("session") || c.keyword("global") || c.keyword("local");
        if c.keyword("transaction") {
            // SET [SESSION] TRANSACTION ISOLATION LEVEL x: kept as the session's level (the
            // form without SESSION, for the next transaction only, is taken as the session's).
            if c.keyword("isolation") && c.keyword("level") {
                let mut words = Vec::new();
                while let Some(Token::Word(w)) = c.peek() {
                    words.push(w.value.to_ascii_uppercase());
                    c.next();
                }
                if !words.is_empty() {
                    out.push(("transaction_isolation".to_owned(), words.join("-")));
                }
            }
            return Ok(Statement::Set(out));
        }
        // The name: `@@session.x`, `@@x`, `@x`, `x`.
        let mut name = String::new();
        while let Some(t) = c.peek() {
            match t {
                Token::Eq | Token::Assignment => break,
                Token::Word(w) => name.push_str(&w.value),
                Token::Period => name.push('.'),
                Token::AtSign => name.push('@'),
                _ => return Err(bad("SET: expected a variable name")),
            }
            c.next();
        }
        if c.next().is_none() {
            return Err(bad("SET: expected ="));
        }
        let name = name.to_ascii_lowercase();
        let name = name
            .trim_start_matches("@@")
            .trim_start_matches("session.")
            .trim_start_matches("global.")
            .trim_start_matches("local.")
            .to_owned();
        let mut value = String::new();
        let mut depth = 0usize;
        let mut seen = false;
        while let Some(t) = c.peek() {
            match t {
                Token::Comma if depth == 0 => break,
                Token::LParen => depth += 1,
                Token::RParen => depth = depth.saturating_sub(1),
                _ => {}
            }
            match t {
                Token::Word(w) => value.push_str(&w.value),
                Token::SingleQuotedString(s) | Token::DoubleQuotedString(s) => value.push_str(s),
                other => value.push_str(&other.to_string()),
            }
            seen = true;
            c.next();
        }
        if !seen {
            return Err(bad("SET: expected a value"));
        }
        out.push((name, value));
        if c.next().is_none() {
            return Ok(Statement::Set(out));
        }
    }
}

/// `SELECT` items without `FROM` that the session answers, or `None` to leave the statement
/// to the engine.
fn session_select(sql: &str) -> Option<Statement> {
    let SqlStatement::Query(query) = parse_one(sql).ok()? else {
        return None;
    };
    let Query { body, .. } = *query;
    let SetExpr::Select(select) = *body else {
        return None;
    };
    // sqlparser 0.52 did not parse the modifiers (`SQL_CALC_FOUND_ROWS`): such a SELECT goes
    // to the engine, as it did.
    if !select.from.is_empty() || select.selection.is_some() || select.select_modifiers.is_some() {
        return None;
    }
    let mut items = Vec::new();
    for item in select.projection {
        let (expr, label) = match item {
            SelectItem::UnnamedExpr(e) => {
                let label = e.to_string();
                (e, label)
            }
            SelectItem::ExprWithAlias { expr, alias } => (expr, alias.value),
            _ => return None,
        };
        items.push((label, session_item(&expr)?));
    }
    Some(Statement::SessionSelect(items))
}

fn session_item(expr: &Expr) -> Option<SessionItem> {
    match expr {
        Expr::Identifier(id) if id.quote_style.is_none() => {
            if let Some(name) = id.value.strip_prefix("@@") {
                Some(SessionItem::Variable(name.to_ascii_lowercase()))
            } else if let Some(name) = id.value.strip_prefix('@') {
                Some(SessionItem::UserVariable(name.to_ascii_lowercase()))
            } else {
                session_fn(&id.value).map(SessionItem::Function)
            }
        }
        Expr::CompoundIdentifier(parts) => match parts.as_slice() {
            [scope, name]
                if ["@@session", "@@global", "@@local"]
                    .iter()
                    .any(|s| scope.value.eq_ignore_ascii_case(s)) =>
            {
                Some(SessionItem::Variable(name.value.to_ascii_lowercase()))
            }
            _ => None,
        },
        Expr::Function(f) => {
            let no_args = match &f.args {
                FunctionArguments::None => true,
                FunctionArguments::List(l) => l.args.is_empty(),
                FunctionArguments::Subquery(_) => false,
            };
            let name = f.name.to_string();
            no_args
                .then(|| session_fn(&name))
                .flatten()
                .map(SessionItem::Function)
        }
        Expr::Value(v) => Some(SessionItem::Literal(match &v.value {
            SqlValue::Number(n, _) => {
                let n = n.to_string();
                // Up to BIGINT UNSIGNED's range exactly (MySQL's type for it), as a float only
                // what has a point or an exponent; anything longer goes to the engine (1235).
                if n.bytes().all(|b| b.is_ascii_digit()) {
                    n.parse::<i64>()
                        .map(Cell::Int)
                        .or_else(|_| n.parse::<u64>().map(Cell::UInt))
                        .ok()?
                } else {
                    n.parse::<f64>().map(Cell::Float).ok()?
                }
            }
            SqlValue::SingleQuotedString(s) | SqlValue::DoubleQuotedString(s) => {
                Cell::Text(s.clone())
            }
            SqlValue::Boolean(b) => Cell::Int(i64::from(*b)),
            SqlValue::Null => Cell::Null,
            _ => return None,
        })),
        _ => None,
    }
}

fn session_fn(name: &str) -> Option<SessionFn> {
    Some(match name.to_ascii_lowercase().as_str() {
        "version" => SessionFn::Version,
        "database" | "schema" => SessionFn::Database,
        "user" | "session_user" | "system_user" => SessionFn::User,
        "current_user" => SessionFn::CurrentUser,
        "connection_id" => SessionFn::ConnectionId,
        "now" | "current_timestamp" | "sysdate" | "localtimestamp" | "localtime" => SessionFn::Now,
        "last_insert_id" => SessionFn::LastInsertId,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(sql: &str) -> Statement {
        classify(sql).unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    #[test]
    fn classifies_database_statements() {
        assert_eq!(ok("USE `shop`;"), Statement::Use("shop".into()));
        assert_eq!(
            ok("show databases"),
            Statement::ShowDatabases { like: None }
        );
        assert_eq!(
            ok("SHOW DATABASES LIKE 'test\\_site'"),
            Statement::ShowDatabases {
                like: Some("test\\_site".into())
            }
        );
        assert_eq!(
            ok("SHOW FULL TABLES"),
            Statement::ShowTables {
                full: true,
                database: None,
                like: None
            }
        );
        assert_eq!(
            ok("SHOW FULL TABLES FROM `app` LIKE 'b%'"),
            Statement::ShowTables {
                full: true,
                database: Some("app".into()),
                like: Some("b%".into())
            }
        );
        assert_eq!(classify("SHOW TABLES WHERE 1").unwrap_err().code(), 1235);
        assert_eq!(
            ok("CREATE DATABASE IF NOT EXISTS d1 CHARACTER SET utf8mb4"),
            Statement::CreateDatabase {
                name: "d1".into(),
                if_not_exists: true
            }
        );
        assert_eq!(
            ok("drop schema if exists d1"),
            Statement::DropDatabase {
                name: "d1".into(),
                if_exists: true
            }
        );
        let table = |database: Option<&str>, table: &str| TableRef {
            database: database.map(str::to_owned),
            table: table.to_owned(),
        };
        assert_eq!(
            ok("describe t"),
            Statement::ShowColumns {
                table: table(None, "t"),
                full: false
            }
        );
        // Alembic's `DESCRIBE app.alembic_version` was read as table `app`.
        assert_eq!(
            ok("DESCRIBE `app`.`alembic_version`"),
            Statement::ShowColumns {
                table: table(Some("app"), "alembic_version"),
                full: false
            }
        );
        assert_eq!(
            ok("SHOW FULL COLUMNS FROM t FROM app"),
            Statement::ShowColumns {
                table: table(Some("app"), "t"),
                full: true
            }
        );
        assert_eq!(
            ok("SHOW CREATE TABLE world.city"),
            Statement::ShowCreateTable {
                table: table(Some("world"), "city")
            }
        );
        assert_eq!(
            ok("SHOW INDEX FROM city IN world"),
            Statement::ShowIndex {
                table: table(Some("world"), "city")
            }
        );
    }

    #[test]
    fn classifies_driver_connect_statements() {
        // The character set is kept for the session to check (it speaks UTF-8 only).
        assert_eq!(
            ok("SET NAMES utf8mb4 COLLATE utf8mb4_unicode_ci"),
            Statement::Set(vec![("names".into(), "utf8mb4".into())])
        );
        assert_eq!(
            ok("SET autocommit=0"),
            Statement::Set(vec![("autocommit".into(), "0".into())])
        );
        assert_eq!(
            ok("SET @@session.autocommit = ON, sql_mode='STRICT_TRANS_TABLES'"),
            Statement::Set(vec![
                ("autocommit".into(), "ON".into()),
                ("sql_mode".into(), "STRICT_TRANS_TABLES".into())
            ])
        );
        assert_eq!(
            ok("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED"),
            Statement::Set(vec![(
                "transaction_isolation".into(),
                "READ-COMMITTED".into()
            )])
        );
        assert_eq!(
            ok("SHOW VARIABLES LIKE 'sql_mode'"),
            Statement::ShowVariables {
                like: Some("sql_mode".into())
            }
        );
        assert_eq!(ok("SHOW WARNINGS"), Statement::ShowWarnings);
        // aiomysql's own tests check that their session is in TLS this way.
        for sql in [
            "SHOW STATUS LIKE 'Ssl_version%'",
            "show session status like 'ssl\\_version'",
        ] {
            assert_eq!(ok(sql), Statement::ShowSslVersion, "{sql}");
        }
        for sql in [
            "SHOW STATUS",
            "SHOW STATUS LIKE 'Ssl%'",
            "SHOW GLOBAL STATUS LIKE 'Ssl_version'",
            "SHOW STATUS LIKE 'Ssl_version' WHERE 1",
        ] {
            assert!(classify(sql).is_err(), "{sql}");
        }
        assert_eq!(
            max_execution_time_hint("SELECT /*+ MAX_EXECUTION_TIME(2000) */ data FROM t"),
            Some(2000)
        );
        assert_eq!(
            max_execution_time_hint("select /*+ BKA(t) max_execution_time ( 1 ) */ 1"),
            Some(1)
        );
        assert_eq!(
            max_execution_time_hint("SELECT 1 /*+ MAX_EXECUTION_TIME(1) */"),
            None
        );
        assert_eq!(
            max_execution_time_hint("UPDATE /*+ MAX_EXECUTION_TIME(1) */ t SET a = 1"),
            None
        );
        // Notes outlive statements that use no table, as in MariaDB.
        for keeps in [
            "SELECT 1",
            "SET @a = 1",
            "SELECT @@version",
            "DO 1",
            "USE w",
            "SHOW WARNINGS",
        ] {
            assert!(!uses_a_table(keeps), "{keeps}");
        }
        for clears in [
            "SELECT * FROM t",
            "CREATE TABLE t (a INT)",
            "INSERT INTO t VALUES (1)",
        ] {
            assert!(uses_a_table(clears), "{clears}");
        }
        // PyMySQL's own tests list the authentication plugins.
        assert_eq!(ok("SHOW PLUGINS"), Statement::ShowPlugins);
        assert_eq!(
            ok("select @@version_comment limit 1"),
            Statement::SessionSelect(vec![(
                "@@version_comment".into(),
                SessionItem::Variable("version_comment".into())
            )])
        );
        assert_eq!(
            ok("SELECT @@session.transaction_isolation, @@tx_isolation AS iso"),
            Statement::SessionSelect(vec![
                (
                    "@@session.transaction_isolation".into(),
                    SessionItem::Variable("transaction_isolation".into())
                ),
                ("iso".into(), SessionItem::Variable("tx_isolation".into())),
            ])
        );
    }

    #[test]
    fn classifies_session_functions() {
        let Statement::SessionSelect(items) =
            ok("SELECT VERSION(), DATABASE(), USER(), CONNECTION_ID(), NOW()")
        else {
            panic!("session select expected")
        };
        let fns: Vec<_> = items.into_iter().map(|(_, i)| i).collect();
        assert_eq!(
            fns,
            vec![
                SessionItem::Function(SessionFn::Version),
                SessionItem::Function(SessionFn::Database),
                SessionItem::Function(SessionFn::User),
                SessionItem::Function(SessionFn::ConnectionId),
                SessionItem::Function(SessionFn::Now),
            ]
        );
        // Anything with FROM, or an expression the session cannot evaluate, is the engine's.
        assert_eq!(ok("SELECT * FROM t"), Statement::Engine { write: false });
        assert_eq!(ok("SELECT 1 + 1"), Statement::Engine { write: false });
        // sqlparser 0.52 could not parse the modifiers, so these went to the engine.
        assert_eq!(
            ok("SELECT SQL_CALC_FOUND_ROWS 'foo'"),
            Statement::Engine { write: false }
        );
        assert_eq!(
            ok("SELECT 1"),
            Statement::SessionSelect(vec![("1".into(), SessionItem::Literal(Cell::Int(1)))])
        );
    }

    #[test]
    fn classifies_transactions_and_writes() {
        assert_eq!(ok("BEGIN"), Statement::Begin);
        assert_eq!(ok("START TRANSACTION READ WRITE"), Statement::Begin);
        assert_eq!(ok("commit work"), Statement::Commit);
        assert_eq!(ok("ROLLBACK"), Statement::Rollback);
        assert_eq!(ok("SAVEPOINT sp"), Statement::Savepoint("sp".into()));
        assert_eq!(
            ok("ROLLBACK TO SAVEPOINT sp"),
            Statement::RollbackToSavepoint("sp".into())
        );
        assert_eq!(
            ok("rollback work to `sp`"),
            Statement::RollbackToSavepoint("sp".into())
        );
        assert_eq!(
            ok("RELEASE SAVEPOINT sp"),
            Statement::ReleaseSavepoint("sp".into())
        );
        assert_eq!(
            ok("INSERT INTO t VALUES (1)"),
            Statement::Engine { write: true }
        );
        assert_eq!(
            ok("/* hi */ update t set a = 1"),
            Statement::Engine { write: true }
        );
        assert_eq!(
            ok("CREATE TABLE t (a INT)"),
            Statement::Engine { write: true }
        );
        assert_eq!(ok("FLUSH PRIVILEGES"), Statement::Ignored);
        assert_eq!(
            ok("KILL 12"),
            Statement::Kill {
                id: 12,
                query: false
            }
        );
        assert_eq!(
            ok("kill connection 12"),
            Statement::Kill {
                id: 12,
                query: false
            }
        );
        assert_eq!(
            ok("KILL HARD QUERY 4294967295"),
            Statement::Kill {
                id: 4_294_967_295,
                query: true
            }
        );
        for bad in [
            "KILL",
            "KILL QUERY",
            "KILL 'x'",
            "KILL 1 2",
            "KILL QUERY ID 3",
        ] {
            assert!(classify(bad).is_err(), "{bad}");
        }
        assert_eq!(
            ok("ANALYZE TABLE Country, City, `CountryLanguage`;"),
            Statement::TableMaintenance {
                op: "analyze".into(),
                tables: vec![
                    (None, "Country".into()),
                    (None, "City".into()),
                    (None, "CountryLanguage".into())
                ],
            }
        );
        assert_eq!(
            ok("optimize no_write_to_binlog table shop.t"),
            Statement::TableMaintenance {
                op: "optimize".into(),
                tables: vec![(Some("shop".into()), "t".into())],
            }
        );
    }

    #[test]
    fn classifies_account_statements_without_echoing_passwords() {
        assert_eq!(
            ok("CREATE USER 'bob'@'%' IDENTIFIED BY 's3\\'cret'"),
            Statement::CreateUser {
                name: "bob".into(),
                password: Zeroizing::new("s3'cret".into()),
                if_not_exists: false
            }
        );
        assert_eq!(
            ok("ALTER USER bob IDENTIFIED WITH mysql_native_password BY 'x'"),
            Statement::AlterUser {
                name: "bob".into(),
                password: Zeroizing::new("x".into()),
                if_exists: false
            }
        );
        assert_eq!(
            ok("DROP USER IF EXISTS 'a'@'localhost', b"),
            Statement::DropUser {
                names: vec!["a".into(), "b".into()],
                if_exists: true
            }
        );
        let err = classify("CREATE USER bob IDENTIFIED BY 'hunter2' garbage").unwrap_err();
        assert_eq!(err.code(), 1064);
        assert!(!err.message.contains("hunter2"));
    }

    #[test]
    fn spaces_account_at_sign_but_not_inside_strings() {
        assert_eq!(space_account_at("'u'@'%'"), "'u'@ '%'");
        assert_eq!(space_account_at("'p@''x' 'a\\'@'"), "'p@''x' 'a\\'@'");
        assert_eq!(space_account_at("`u`@\"h\""), "`u`@ \"h\"");
    }

    #[test]
    fn rejects_empty_and_unreadable_statements() {
        assert_eq!(classify("  ; ").unwrap_err().code(), 1065);
        assert_eq!(classify("-- only a comment").unwrap_err().code(), 1065);
        assert_eq!(classify("SHOW ENGINES").unwrap_err().code(), 1235);
        assert_eq!(classify("USE").unwrap_err().code(), 1064);
        assert_eq!(classify("SELECT 'unterminated").unwrap_err().code(), 1064);
    }
}
