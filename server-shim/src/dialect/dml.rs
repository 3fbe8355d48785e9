//! Queries and writes, MySQL to SQLite: `SELECT` (via [`super::expr`]),
//! `INSERT [IGNORE]`, `REPLACE`, `... ON DUPLICATE KEY UPDATE`, `UPDATE`, `DELETE`, and
//! `UPDATE`/`DELETE ... [ORDER BY ...] LIMIT n`.
//!
//! - `REPLACE INTO` → `INSERT OR REPLACE INTO` (both delete the conflicting rows, then
//!   insert); `INSERT IGNORE` → `INSERT OR IGNORE`.
//! - `ON DUPLICATE KEY UPDATE c = VALUES(c)` → `ON CONFLICT DO UPDATE SET c = excluded.c`.
//!   A target-less `ON CONFLICT` (SQLite ≥ 3.35) fires on any unique constraint, as
//!   MySQL's does. `INSERT ... SELECT` gets `WHERE true` so SQLite does not read the `ON`
//!   as a join condition (SQLite's documented parsing ambiguity).
//! - `UPDATE`/`DELETE` with `ORDER BY`/`LIMIT`: SQLite's bundled build has no
//!   `SQLITE_ENABLE_UPDATE_DELETE_LIMIT`, so the rows are chosen by rowid in a subquery:
//!   `... WHERE rowid IN (SELECT rowid FROM t WHERE .. ORDER BY .. LIMIT n)`. Every table
//!   this dialect creates has a rowid.

use sqlparser::ast::{
    Assignment, DoUpdate, Expr, FromTable, Ident, OnConflict, OnConflictAction, OnInsert,
    SqliteOnConflict, Statement, Value,
};
use sqlparser::keywords::Keyword;
use sqlparser::tokenizer::{Token, Whitespace, Word};

use super::cursor::Significant;
use super::{StatementKind, Translation, expr, parse_one};
use crate::sql_error::SqlError;

/// Translates a parsed `SELECT`, `INSERT`, `REPLACE`, `UPDATE` or `DELETE`.
///
/// # Errors
/// 1235 for multi-table `UPDATE`/`DELETE`, partitions and what [`expr`] refuses.
pub fn translate(statement: Statement) -> Result<Translation, SqlError> {
    match statement {
        Statement::Query(mut q) => {
            expr::query(&mut q)?;
            Ok(one(Statement::Query(q).to_string(), StatementKind::Query))
        }
        Statement::Insert(mut insert) => {
            if insert.partitioned.is_some()
                || !insert.after_columns.is_empty()
                || insert.returning.is_some()
            {
                return Err(SqlError::not_supported("INSERT ... PARTITION"));
            }
            let kind = if insert.replace_into {
                StatementKind::Replace
            } else {
                StatementKind::Insert
            };
            if insert.replace_into {
                insert.replace_into = false;
                insert.or = Some(SqliteOnConflict::Replace);
            } else if insert.ignore {
                insert.ignore = false;
                insert.or = Some(SqliteOnConflict::Ignore);
            }
            // LOW_PRIORITY / DELAYED / HIGH_PRIORITY: scheduling hints with no meaning here.
            insert.priority = None;
            let row_alias = insert.insert_alias.take().map(|a| a.row_alias.to_string());
            if let Some(source) = &mut insert.source {
                expr::query(source)?;
            }
            if let Some(OnInsert::DuplicateKeyUpdate(assignments)) = insert.on.take() {
                let assignments = assignments
                    .into_iter()
                    .map(|a| excluded_assignment(a, row_alias.as_deref()))
                    .collect::<Result<Vec<_>, _>>()?;
                if let Some(source) = &mut insert.source
                    && let sqlparser::ast::SetExpr::Select(select) = source.body.as_mut()
                    && select.selection.is_none()
                {
                    select.selection = Some(Expr::Value(Value::Boolean(true).into()));
                }
                insert.on = Some(OnInsert::OnConflict(OnConflict {
                    conflict_target: None,
                    action: OnConflictAction::DoUpdate(DoUpdate {
                        assignments,
                        selection: None,
                    }),
                }));
            }
            Ok(one(Statement::Insert(insert).to_string(), kind))
        }
        Statement::Update(mut update) => {
            if update.from.is_some()
                || !update.table.joins.is_empty()
                || update.returning.is_some()
                || update.output.is_some()
            {
                return Err(SqlError::not_supported("multi-table UPDATE"));
            }
            if !update.order_by.is_empty() || update.limit.is_some() {
                // Reached only through `from_tokens`, which handles these first.
                return Err(SqlError::not_supported("UPDATE ... ORDER BY/LIMIT"));
            }
            expr::table_with_joins(&mut update.table)?;
            for a in &mut update.assignments {
                expr::expr(&mut a.value)?;
            }
            if let Some(e) = &mut update.selection {
                expr::expr(e)?;
            }
            Ok(one(
                Statement::Update(update).to_string(),
                StatementKind::Update,
            ))
        }
        Statement::Delete(mut delete) => {
            let tables = match &mut delete.from {
                FromTable::WithFromKeyword(t) | FromTable::WithoutKeyword(t) => t,
            };
            if !delete.tables.is_empty()
                || delete.using.is_some()
                || tables.len() != 1
                || tables.iter().any(|t| !t.joins.is_empty())
                || delete.returning.is_some()
            {
                return Err(SqlError::not_supported("multi-table DELETE"));
            }
            if !delete.order_by.is_empty() || delete.limit.is_some() {
                // Reached only through `from_tokens`, which handles these first.
                return Err(SqlError::not_supported("DELETE ... ORDER BY/LIMIT"));
            }
            for t in tables.iter_mut() {
                expr::table_with_joins(t)?;
            }
            if let Some(e) = &mut delete.selection {
                expr::expr(e)?;
            }
            Ok(one(
                Statement::Delete(delete).to_string(),
                StatementKind::Delete,
            ))
        }
        _ => Err(SqlError::not_supported("this statement")),
    }
}

fn one(statement: String, kind: StatementKind) -> Translation {
    Translation {
        statements: vec![statement],
        kind,
    }
}

/// `c = VALUES(c)` (and `c = new.c` with `AS new`) → `c = excluded.c`.
fn excluded_assignment(mut a: Assignment, row_alias: Option<&str>) -> Result<Assignment, SqlError> {
    excluded(&mut a.value, row_alias);
    expr::expr(&mut a.value)?;
    Ok(a)
}

fn excluded(e: &mut Expr, row_alias: Option<&str>) {
    match e {
        Expr::Function(f)
            if f.name.0.len() == 1 && f.name.to_string().eq_ignore_ascii_case("VALUES") =>
        {
            if let sqlparser::ast::FunctionArguments::List(list) = &f.args
                && let [
                    sqlparser::ast::FunctionArg::Unnamed(sqlparser::ast::FunctionArgExpr::Expr(
                        Expr::Identifier(col),
                    )),
                ] = list.args.as_slice()
            {
                *e = Expr::CompoundIdentifier(vec![Ident::new("excluded"), col.clone()]);
            }
        }
        Expr::CompoundIdentifier(parts) => {
            if let (Some(alias), [first, col]) = (row_alias, parts.as_slice())
                && first.value == alias
            {
                *e = Expr::CompoundIdentifier(vec![Ident::new("excluded"), col.clone()]);
            }
        }
        Expr::BinaryOp { left, right, .. } => {
            excluded(left, row_alias);
            excluded(right, row_alias);
        }
        Expr::Nested(inner) | Expr::UnaryOp { expr: inner, .. } => excluded(inner, row_alias),
        Expr::Function(f) => {
            if let sqlparser::ast::FunctionArguments::List(list) = &mut f.args {
                for arg in &mut list.args {
                    if let sqlparser::ast::FunctionArg::Unnamed(
                        sqlparser::ast::FunctionArgExpr::Expr(a),
                    ) = arg
                    {
                        excluded(a, row_alias);
                    }
                }
            }
        }
        Expr::Case {
            operand,
            conditions,
            else_result,
            ..
        } => {
            if let Some(o) = operand {
                excluded(o, row_alias);
            }
            for c in conditions.iter_mut() {
                excluded(&mut c.condition, row_alias);
                excluded(&mut c.result, row_alias);
            }
            if let Some(x) = else_result {
                excluded(x, row_alias);
            }
        }
        _ => {}
    }
}

/// `UPDATE`/`DELETE` with a top-level `ORDER BY` or `LIMIT`, which SQLite's default build
/// lacks: rewritten to choose the rows by rowid, splicing the statement's own tokens into
/// the subquery. `None` for anything else.
///
/// # Errors
/// 1064 when the parts do not parse; 1235 for a multi-table statement.
pub fn from_tokens(tokens: &[Token]) -> Result<Option<Translation>, SqlError> {
    let words = TopLevel::new(tokens);
    let (kind, table_start, table_end) = match words.first() {
        Some(Keyword::UPDATE) => {
            let Some(set) = words.find(Keyword::SET) else {
                return Ok(None);
            };
            (StatementKind::Update, words.after(0), set)
        }
        Some(Keyword::DELETE) => {
            let Some(from) = words.find(Keyword::FROM) else {
                return Ok(None);
            };
            let end = [Keyword::WHERE, Keyword::ORDER, Keyword::LIMIT]
                .iter()
                .filter_map(|k| words.find(*k))
                .min()
                .unwrap_or(tokens.len());
            (StatementKind::Delete, from + 1, end)
        }
        _ => return Ok(None),
    };
    let tail_start = [Keyword::ORDER, Keyword::LIMIT]
        .iter()
        .filter_map(|k| words.find(*k))
        .filter(|&i| i >= table_end)
        .min();
    let Some(tail_start) = tail_start else {
        return Ok(None);
    };
    let table = tokens.get(table_start..table_end).unwrap_or_default();
    if table.iter().any(|t| {
        matches!(t, Token::Comma) || matches!(t, Token::Word(w) if w.keyword == Keyword::JOIN)
    }) {
        return Err(SqlError::not_supported(
            "multi-table UPDATE/DELETE with ORDER BY/LIMIT",
        ));
    }
    let where_at = words
        .find(Keyword::WHERE)
        .filter(|&i| i > table_end && i < tail_start);
    let head_end = where_at.unwrap_or(tail_start);
    // SELECT rowid FROM <table> [WHERE ...] ORDER BY ... LIMIT ...
    let mut subquery = vec![
        word("SELECT"),
        space(),
        word("rowid"),
        space(),
        word("FROM"),
        space(),
    ];
    subquery.extend_from_slice(table);
    subquery.push(space());
    subquery.extend_from_slice(
        tokens
            .get(where_at.unwrap_or(tail_start)..)
            .unwrap_or_default(),
    );
    // <head> WHERE rowid IN (<subquery>)
    let mut rewritten = tokens.get(..head_end).unwrap_or_default().to_vec();
    rewritten.extend([
        space(),
        word("WHERE"),
        space(),
        word("rowid"),
        space(),
        word("IN"),
        space(),
        Token::LParen,
    ]);
    rewritten.extend(subquery);
    rewritten.push(Token::RParen);
    let statement = parse_one(rewritten)?;
    let translation = translate(statement)?;
    Ok(Some(Translation {
        kind,
        ..translation
    }))
}

fn word(w: &str) -> Token {
    Token::make_word(w, None)
}

fn space() -> Token {
    Token::Whitespace(Whitespace::Space)
}

/// Positions (in the whole token list) of the unquoted keywords outside parentheses.
struct TopLevel {
    keywords: Vec<(usize, Keyword)>,
}

impl TopLevel {
    fn new(tokens: &[Token]) -> Self {
        let s = Significant::new(tokens);
        let mut depth = 0_i32;
        let mut keywords = Vec::new();
        for (i, t) in s.as_slice().iter().enumerate() {
            match t {
                Token::LParen => depth += 1,
                Token::RParen => depth -= 1,
                Token::Word(Word {
                    keyword,
                    quote_style: None,
                    ..
                }) if depth == 0 && *keyword != Keyword::NoKeyword => {
                    keywords.extend(s.position(i).map(|at| (at, *keyword)));
                }
                _ => {}
            }
        }
        Self { keywords }
    }
    fn first(&self) -> Option<Keyword> {
        self.keywords.first().map(|&(_, k)| k)
    }
    fn after(&self, n: usize) -> usize {
        self.keywords.get(n).map_or(0, |&(i, _)| i + 1)
    }
    fn find(&self, keyword: Keyword) -> Option<usize> {
        self.keywords
            .iter()
            .find(|&&(_, k)| k == keyword)
            .map(|&(i, _)| i)
    }
}
