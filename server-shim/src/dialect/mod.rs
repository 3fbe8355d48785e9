//! MySQL in, SQLite out: the pure translation layer between the session and the SQLite
//! engine.
//!
//! One MySQL statement becomes the SQLite statements that do the same thing. The text is
//! cleaned of comments first ([`comments`]: versioned comments are executed, as MySQL
//! does), tokenized and parsed with sqlparser's MySQL dialect (wrapped in [`Mysql`], which
//! adds `MOD`), rewritten as a tree ([`ddl`] for schema statements, [`dml`] for queries and
//! writes, [`expr`] for expressions and functions) and printed. What sqlparser cannot parse
//! (`ALTER TABLE .. DISABLE KEYS`, `DROP INDEX .. ON t ALGORITHM=..`, `REAL(M,D)`) or would
//! keep in the tree to print back (`SQL_NO_CACHE`, `ZEROFILL`, key prefix lengths) is
//! handled on the tokens first; those passes all read the tokens through [`cursor`].
//!
//! No I/O and no engine state: the same text always gives the same translation.
//! `?` placeholders keep their order (see [`placeholders`]).

mod column_names;
mod comments;
mod cursor;
mod ddl;
mod dml;
mod expr;
mod literals;
mod parenthesized;
mod placeholders;
mod result_types;
mod schemas;
#[cfg(test)]
mod tests;
mod text_collation;
pub use text_collation::{is_binary_collation, mysql_collation};
mod typed_arguments;

use sqlparser::ast::Statement;
use sqlparser::keywords::Keyword;
use sqlparser::parser::{Parser, ParserError};
use sqlparser::tokenizer::{Token, Tokenizer};

pub use ddl::violated as value_violated;
#[cfg(test)]
pub use expr::ENGINE_FUNCTIONS;
pub use expr::{
    BIN, CAST_CHAR_FN, CAST_SIGNED_FN, CAST_UNSIGNED_FN, CEIL_FN, COLLATED_FN, DATE_ADD_FN,
    FLOOR_FN, GENERAL_CI, JSON_ARRAYAGG_TEXT_FN, JSON_NEGATED_NUMBER_FN, JSON_NUMBER_FN,
    JSON_SQL_VALUE_FN, JSON_VALUE_FN, NOPAD_BIN, NOW_FN, SYSTEM_VARIABLE_FN, TIME_FN,
    TIMESTAMPDIFF_FN, USER_VARIABLE_FN,
};

use self::cursor::Significant;
use crate::mysql_dialect::Mysql;
use crate::sql_error::SqlError;

/// One MySQL statement, translated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Translation {
    /// SQLite statements to run in order (usually one; e.g. CREATE TABLE + CREATE INDEX for
    /// inline KEYs). Empty for statements MySQL accepts that need nothing here
    /// (`LOCK TABLES`, `UNLOCK TABLES`).
    pub statements: Vec<String>,
    /// What it is, for the OK packet and implicit commits.
    pub kind: StatementKind,
    /// An `ALTER TABLE` SQLite cannot do in place (`MODIFY`, `CHANGE`, `ALTER COLUMN ..
    /// DEFAULT`, `ADD FOREIGN KEY|CHECK`): the table rebuilt with the changes, before
    /// `statements` run. Boxed: almost no statement has one.
    pub rebuild: Option<Box<Rebuild>>,
    /// For a `SELECT`, the MySQL type of each result column SQLite cannot type
    /// ([`result_types`]); empty when there is none, and for every other statement.
    pub result_types: Vec<Option<ResultType>>,
    /// For `SELECT SQL_CALC_FOUND_ROWS … LIMIT`: a query counting its rows without the
    /// `LIMIT`, for `FOUND_ROWS()` to answer afterwards (MySQL's pagination idiom, which
    /// WordPress's post lists use).
    pub found_rows: Option<String>,
    /// For a `SELECT`: MySQL's name for each result column whose SQLite name differs (an
    /// unaliased expression: the text the client wrote), `None` for the others; empty when
    /// every name is SQLite's ([`column_names`]).
    pub column_names: Vec<Option<String>>,
    /// For a `SELECT`: the columns whose declared type the engine looks up before it runs,
    /// for the arguments that name them, and the number types of the expressions a text
    /// function reads ([`typed_arguments`]); empty for most statements.
    pub typed_columns: Vec<TypedArgument>,
    /// For a `SELECT` whose `FROM` is plain tables: each one with the name the statement
    /// calls it by (`users u`: `("users", "u")`), for the table its result columns are sent
    /// with; empty otherwise.
    pub from_tables: Vec<(String, String)>,
}

pub use ddl::{
    Change, Rebuild, Rounding, decimal_scale, on_update_trigger, round_stored, rounded_column,
    rounding_triggers,
};
pub use result_types::{Aggregate as ResultAggregate, Operator as ResultOperator, ResultType};
pub use typed_arguments::{
    DOUBLE_INDEX, JSON_TYPED_FN, ROUND_TYPED_FN, TEXT_TYPED_FN, TypedArgument, TypedColumn,
};

/// What a statement is: decides the OK packet (affected rows, last insert id) and whether
/// it commits the open transaction first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatementKind {
    /// Returns rows: `SELECT`, `UNION`, `VALUES`.
    Query,
    /// `INSERT` (also `INSERT IGNORE`, `... ON DUPLICATE KEY UPDATE`).
    Insert,
    /// `REPLACE`.
    Replace,
    /// `UPDATE`.
    Update,
    /// `DELETE`.
    Delete,
    /// `CREATE`/`ALTER`/`DROP`/`RENAME TABLE`, indexes, views, `TRUNCATE`.
    Ddl,
    /// Accepted with nothing to run (`LOCK TABLES`, `UNLOCK TABLES`).
    Other,
}

impl StatementKind {
    /// Whether MySQL commits the open transaction before (and after) this statement.
    #[must_use]
    pub fn commits_implicitly(self) -> bool {
        matches!(self, Self::Ddl)
    }
}

/// Translates one MySQL statement (no trailing `;` needed; versioned comments allowed).
///
/// # Errors
/// 1064 (`SqlError::syntax`) when the text does not parse as MySQL; 1065 when it is empty
/// (only comments); 1235 (`SqlError::not_supported`, naming the construct) when it parses
/// but has no SQLite equivalent here, and for the statements the session answers itself
/// (`SET`, `SHOW`, `USE`, transactions, databases, users).
#[cfg(test)]
pub fn translate(mysql: &str) -> Result<Translation, SqlError> {
    translate_in(mysql, None).map(|(translation, _)| translation)
}

/// Whether `mysql` names the database `schema` as a qualifier (`information_schema.TABLES`),
/// outside strings and comments.
#[must_use]
pub fn names_schema(mysql: &str, schema: &str) -> bool {
    let Ok(text) = comments::strip(mysql) else {
        return false;
    };
    Tokenizer::new(&Mysql, &text)
        .tokenize()
        .is_ok_and(|tokens| schemas::names_schema(&tokens, schema))
}

/// The longest chain of binary operators one expression may have. sqlparser builds such a
/// chain as a tree as deep as the chain is long and every pass over it recurses, so a chain
/// of tens of thousands (a few hundred KiB of `1+1+...`) would overflow the stack, which no
/// `catch_unwind` can turn into an error.
const MAX_OPERATOR_CHAIN: usize = 1000;

/// The stack the threads that translate statements get: a chain of [`MAX_OPERATOR_CHAIN`]
/// operators takes a few MiB in a debug build (about 10 KiB per level), far less in release.
pub const THREAD_STACK_BYTES: usize = 32 << 20;

/// Refuses a statement with an operator chain longer than [`MAX_OPERATOR_CHAIN`] between
/// two commas or parentheses.
fn check_operator_chains(tokens: &[Token]) -> Result<(), SqlError> {
    let mut chain = 0_usize;
    for token in tokens {
        match token {
            Token::Comma | Token::LParen | Token::RParen | Token::SemiColon => chain = 0,
            Token::Plus
            | Token::Minus
            | Token::Mul
            | Token::Div
            | Token::Mod
            | Token::Eq
            | Token::DoubleEq
            | Token::Neq
            | Token::Lt
            | Token::Gt
            | Token::LtEq
            | Token::GtEq
            | Token::Spaceship
            | Token::StringConcat
            | Token::Ampersand
            | Token::Pipe
            | Token::Caret
            | Token::ShiftLeft
            | Token::ShiftRight => chain += 1,
            Token::Word(w)
                if w.quote_style.is_none()
                    && ["AND", "OR", "XOR", "DIV", "MOD", "LIKE", "REGEXP"]
                        .iter()
                        .any(|k| w.value.eq_ignore_ascii_case(k)) =>
            {
                chain += 1;
            }
            _ => {}
        }
        if chain > MAX_OPERATOR_CHAIN {
            return Err(SqlError::not_supported(
                "an expression with more than 1000 operators in a row",
            ));
        }
    }
    Ok(())
}

/// [`translate`] for a session whose current database is `current_db`: `current_db.t`
/// becomes SQLite's `main.t`, and the other qualifiers the statement uses are returned with
/// the translation (they may name databases the engine must attach first; see [`schemas`]).
///
/// # Errors
/// As [`translate`].
pub fn translate_in(
    mysql: &str,
    current_db: Option<&str>,
) -> Result<(Translation, Vec<String>), SqlError> {
    // sqlparser has `unwrap`s reachable from odd input (see `Mysql`); whatever is left of
    // them must cost the statement (ERR 1064), never the connection.
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        translate_unguarded(mysql, current_db)
    }))
    .unwrap_or_else(|_| Err(SqlError::syntax("statement could not be parsed")))
}

pub(crate) fn translate_unguarded(
    mysql: &str,
    current_db: Option<&str>,
) -> Result<(Translation, Vec<String>), SqlError> {
    let text = comments::strip(mysql)?;
    if text.is_empty() {
        return Err(SqlError::empty_query());
    }
    let dialect = Mysql;
    let tokens = Tokenizer::new(&dialect, &text)
        .tokenize()
        .map_err(|e| SqlError::syntax(&e.to_string()))?;
    check_operator_chains(&tokens)?;
    typed_arguments::refuse_internal_names(&tokens)?;
    let items = column_names::select_list(&tokens);
    let (tokens, qualifiers) = schemas::qualify(tokens, current_db);
    let (tokens, values) = literals::protect(tokens)?;
    let mut translation = translate_tokens(tokens, items)?;
    for statement in translation
        .statements
        .iter_mut()
        .chain(translation.found_rows.as_mut())
    {
        *statement = literals::restore(statement, &values)?;
    }
    for t in translation.result_types.iter_mut().flatten() {
        result_types::with_literals(t, &|marker| literals::value_of(marker, &values));
    }
    if let Some(rebuild) = &mut translation.rebuild {
        for change in &mut rebuild.changes {
            let text = match change {
                Change::Column { definition, .. } => definition,
                Change::Default {
                    default: Some(text),
                    ..
                }
                | Change::Constraint(text) => text,
                Change::Default { default: None, .. } | Change::DropForeignKey { .. } => continue,
            };
            *text = literals::restore(text, &values)?;
        }
    }
    Ok((translation, qualifiers))
}

fn translate_tokens(
    tokens: Vec<Token>,
    items: Option<Vec<String>>,
) -> Result<Translation, SqlError> {
    if toggles_keys(&tokens) {
        return Ok(Translation {
            statements: Vec::new(),
            kind: StatementKind::Other,
            rebuild: None,
            result_types: Vec::new(),
            found_rows: None,
            column_names: Vec::new(),
            typed_columns: Vec::new(),
            from_tables: Vec::new(),
        });
    }
    let (tokens, calc_found_rows) = drop_select_modifiers(tokens);
    let tokens = without_lock_in_share_mode(tokens);
    let tokens = placeholders::number(tokens);
    if let Some(translation) = ddl::from_tokens(&tokens)? {
        return Ok(translation);
    }
    let tokens = ddl::strip_mysql_only_tokens(tokens);
    let statement = parse_one(tokens)?;
    refuse_limited_in_subqueries(&statement)?;
    let found_rows = if calc_found_rows {
        count_without_limit(&statement)?
    } else {
        None
    };
    let column_names = column_names::of(&statement, items);
    let mut translation = translate_statement(statement)?;
    translation.found_rows = found_rows;
    if translation.kind == StatementKind::Query {
        translation.column_names = column_names;
    }
    Ok(placeholders::restore(translation))
}

/// For a query with a `LIMIT`: the SQLite query counting its rows without it (nor its
/// `ORDER BY`, which changes no count).
fn count_without_limit(statement: &Statement) -> Result<Option<String>, SqlError> {
    let Statement::Query(query) = statement else {
        return Ok(None);
    };
    if query.limit_clause.is_none() {
        // `(SELECT SQL_CALC_FOUND_ROWS ... LIMIT 10)`: the LIMIT is the query's in parentheses.
        if let sqlparser::ast::SetExpr::Query(inner) = query.body.as_ref() {
            return count_without_limit(&Statement::Query(inner.clone()));
        }
        return Ok(None);
    }
    let mut all = query.clone();
    all.limit_clause = None;
    all.order_by = None;
    let inner = dml::translate(Statement::Query(all))?;
    Ok(inner
        .statements
        .first()
        .map(|rows| format!("SELECT COUNT(*) FROM ({rows})")))
}

/// Refuses an `IN` subquery with a `LIMIT` (in parentheses too), as MariaDB does (SQLite
/// would take it): the client's, before the translation adds its own (`UPDATE ... LIMIT`
/// chooses its rows by an `IN` of one).
///
/// # Errors
/// 1235, as MariaDB's.
fn refuse_limited_in_subqueries(statement: &Statement) -> Result<(), SqlError> {
    let limited = sqlparser::ast::visit_expressions(statement, |e| match e {
        sqlparser::ast::Expr::In {
            target: sqlparser::ast::InTarget::Subquery(q),
            ..
        } if has_limit(q) => core::ops::ControlFlow::Break(()),
        _ => core::ops::ControlFlow::Continue(()),
    });
    if limited.is_break() {
        return Err(SqlError::not_supported("LIMIT & IN/ALL/ANY/SOME subquery"));
    }
    Ok(())
}

/// Whether `q`, or the query in its parentheses, has a `LIMIT`.
fn has_limit(q: &sqlparser::ast::Query) -> bool {
    q.limit_clause.is_some()
        || matches!(q.body.as_ref(), sqlparser::ast::SetExpr::Query(inner) if has_limit(inner))
}

/// The statement MySQL would execute for `mysql`: versioned comments inlined, other
/// comments dropped, no trailing `;`. For the session, which answers `SET`, `SHOW`, `USE`
/// itself, to classify a dump's `/*!40101 SET NAMES utf8mb4 */` before it reaches
/// [`translate`] (which refuses `SET` with 1235).
///
/// # Errors
/// 1064 for a comment that is never closed.
pub fn strip_comments(mysql: &str) -> Result<String, SqlError> {
    comments::strip(mysql)
}

/// `ALTER TABLE t DISABLE KEYS` / `ENABLE KEYS` (around every table's rows in a dump): MyISAM
/// index maintenance, nothing to do here (and nothing sqlparser parses).
fn toggles_keys(tokens: &[Token]) -> bool {
    let s = Significant::new(tokens);
    let toggle =
        |i: usize| (s.is_word(i, "DISABLE") || s.is_word(i, "ENABLE")) && s.is_word(i + 1, "KEYS");
    s.is_word(0, "ALTER")
        && s.is_word(1, "TABLE")
        && match s.len() {
            5 => toggle(3),
            7 => matches!(s.get(3), Some(Token::Period)) && toggle(5),
            _ => false,
        }
}

/// Cuts MariaDB's `LOCK IN SHARE MODE` (sqlparser reads only `FOR SHARE`): a query's
/// locking clause is dropped after parsing anyway (SQLite has no row locks), and the session
/// runs such a read under the database's lock, as a `FOR UPDATE`.
fn without_lock_in_share_mode(tokens: Vec<Token>) -> Vec<Token> {
    let mut cut = vec![false; tokens.len()];
    let s = Significant::new(&tokens);
    for i in 0..s.len() {
        if !["LOCK", "IN", "SHARE", "MODE"]
            .iter()
            .enumerate()
            .all(|(k, w)| s.is_word(i + k, w))
        {
            continue;
        }
        // With how long to wait for a row lock, which there is none to wait for here.
        let two_words = (s.is_word(i + 4, "SKIP") && s.is_word(i + 5, "LOCKED"))
            || (s.is_word(i + 4, "WAIT") && matches!(s.get(i + 5), Some(Token::Number(..))));
        let last = if two_words {
            i + 5
        } else if s.is_word(i + 4, "NOWAIT") {
            i + 4
        } else {
            i + 3
        };
        if let (Some(from), Some(to)) = (s.position(i), s.position(last)) {
            cursor::mark(&mut cut, from, to);
        }
    }
    cursor::without(tokens, &cut)
}

/// MySQL's `SELECT` modifiers that change only how MySQL executes or caches the query, not
/// what it returns (`mariadb-dump` sends `SELECT /*!40001 SQL_NO_CACHE */ ...`). Cut from
/// the tokens: sqlparser keeps most of them in the tree to print back, and reads
/// `SELECT SQL_CACHE a` as the column `SQL_CACHE` named `a`.
const SELECT_MODIFIERS: &[&str] = &[
    "SQL_NO_CACHE",
    "SQL_CACHE",
    "SQL_BUFFER_RESULT",
    "SQL_SMALL_RESULT",
    "SQL_BIG_RESULT",
    "HIGH_PRIORITY",
    "STRAIGHT_JOIN",
];

/// Drops [`SELECT_MODIFIERS`] and `SQL_CALC_FOUND_ROWS` right after each `SELECT`; says
/// whether the first `SELECT` (the only one where MySQL allows it) had `SQL_CALC_FOUND_ROWS`.
fn drop_select_modifiers(tokens: Vec<Token>) -> (Vec<Token>, bool) {
    let mut cut = vec![false; tokens.len()];
    let mut calc_found_rows = false;
    let s = Significant::new(&tokens);
    let selects = (0..s.len()).filter(|&i| s.is_keyword(i, Keyword::SELECT));
    for (nth, select) in selects.enumerate() {
        let modifiers = (select + 1..s.len()).take_while(|&i| {
            SELECT_MODIFIERS.iter().any(|m| s.is_word(i, m)) || s.is_word(i, "SQL_CALC_FOUND_ROWS")
        });
        for i in modifiers {
            calc_found_rows |= nth == 0 && s.is_word(i, "SQL_CALC_FOUND_ROWS");
            if let Some(at) = s.position(i) {
                cursor::mark(&mut cut, at, at);
            }
        }
    }
    (cursor::without(tokens, &cut), calc_found_rows)
}

/// Parses exactly one statement from `tokens`.
fn parse_one(tokens: Vec<Token>) -> Result<Statement, SqlError> {
    let dialect = Mysql;
    let mut statements = Parser::new(&dialect)
        .with_tokens(tokens)
        .parse_statements()
        .map_err(|e| SqlError::syntax(&parser_message(&e)))?;
    match (statements.pop(), statements.is_empty()) {
        (Some(statement), true) => Ok(statement),
        (None, _) => Err(SqlError::empty_query()),
        (Some(_), false) => Err(SqlError::syntax(
            "multiple statements in one query are not supported",
        )),
    }
}

fn parser_message(e: &ParserError) -> String {
    match e {
        ParserError::TokenizerError(m) | ParserError::ParserError(m) => m.clone(),
        ParserError::RecursionLimitExceeded => "statement nested too deeply".to_owned(),
    }
}

fn translate_statement(statement: Statement) -> Result<Translation, SqlError> {
    match statement {
        Statement::Query(_)
        | Statement::Insert(_)
        | Statement::Update { .. }
        | Statement::Delete(_) => dml::translate(statement),
        Statement::CreateTable(_)
        | Statement::CreateIndex(_)
        | Statement::CreateView { .. }
        | Statement::AlterTable { .. }
        | Statement::Drop { .. }
        | Statement::Truncate { .. }
        | Statement::RenameTable(_) => ddl::translate(statement),
        Statement::LockTables { .. } | Statement::UnlockTables => Ok(Translation {
            statements: Vec::new(),
            kind: StatementKind::Other,
            rebuild: None,
            result_types: Vec::new(),
            found_rows: None,
            column_names: Vec::new(),
            typed_columns: Vec::new(),
            from_tables: Vec::new(),
        }),
        other => Err(SqlError::not_supported(&statement_name(&other))),
    }
}

/// The construct named in the 1235 for statements that are not ours.
fn statement_name(statement: &Statement) -> String {
    let named = match statement {
        Statement::Set(_) => "SET",
        Statement::ShowVariable { .. }
        | Statement::ShowVariables { .. }
        | Statement::ShowStatus { .. }
        | Statement::ShowCreate { .. }
        | Statement::ShowColumns { .. }
        | Statement::ShowDatabases { .. }
        | Statement::ShowSchemas { .. }
        | Statement::ShowTables { .. }
        | Statement::ShowViews { .. }
        | Statement::ShowCollation { .. }
        | Statement::ShowFunctions { .. } => "SHOW",
        Statement::Use(_) => "USE",
        Statement::StartTransaction { .. }
        | Statement::Commit { .. }
        | Statement::Rollback { .. }
        | Statement::Savepoint { .. }
        | Statement::ReleaseSavepoint { .. } => "transaction control",
        Statement::CreateDatabase { .. } | Statement::CreateSchema { .. } => "CREATE DATABASE",
        Statement::CreateRole { .. } | Statement::Grant { .. } | Statement::Revoke { .. } => {
            "user management"
        }
        Statement::CreateTrigger { .. } | Statement::DropTrigger { .. } => "triggers",
        Statement::CreateProcedure { .. } | Statement::CreateFunction { .. } => "stored routines",
        Statement::Explain { .. } | Statement::ExplainTable { .. } => "EXPLAIN",
        other => return statement_keywords(other),
    };
    named.to_owned()
}

/// The keywords a statement starts with (`DROP PROCEDURE`, `CALL`, `LOCK TABLES`), at most
/// three, to name it in a refusal: the text sqlparser writes of it, up to the first word that
/// is not a keyword in capitals (a name, a value) or is `IF` (`DROP PROCEDURE IF EXISTS`).
pub(crate) fn statement_keywords(statement: &Statement) -> String {
    let text = statement.to_string();
    let words: Vec<&str> = text
        .split_whitespace()
        .take_while(|w| {
            *w != "IF" && !w.is_empty() && w.chars().all(|c| c.is_ascii_uppercase() || c == '_')
        })
        .take(3)
        .collect();
    if words.is_empty() {
        "this statement".to_owned()
    } else {
        words.join(" ")
    }
}

/// A MySQL identifier quoted for SQLite (backticks, which SQLite accepts; inner backticks
/// doubled), so names that are keywords in SQLite but not in MySQL still work.
fn quote(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}
