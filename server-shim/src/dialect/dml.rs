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

use core::ops::ControlFlow;

use sqlparser::ast::{
    Assignment, DoUpdate, Expr, FromTable, FunctionArg, FunctionArgExpr, FunctionArguments, Ident,
    InTarget, LimitClause, OnConflict, OnConflictAction, OnInsert, OrderBy, OrderByExpr,
    OrderByKind, SetExpr, SqliteOnConflict, Statement, TableWithJoins, Value,
    visit_expressions_mut,
};
use sqlparser::tokenizer::Tokenizer;

use super::{StatementKind, Translation, expr, parse_one};
use crate::mysql_dialect::Mysql;
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
            let limited = !update.order_by.is_empty() || update.limit.is_some();
            if limited && !update.table.joins.is_empty() {
                return Err(SqlError::not_supported(MULTI_TABLE_LIMIT));
            }
            if update.from.is_some()
                || !update.table.joins.is_empty()
                || update.returning.is_some()
                || update.output.is_some()
            {
                return Err(SqlError::not_supported("multi-table UPDATE"));
            }
            if limited {
                update.selection = Some(by_rowid(
                    &update.table,
                    update.selection.take(),
                    core::mem::take(&mut update.order_by),
                    update.limit.take(),
                )?);
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
            let tables = match &delete.from {
                FromTable::WithFromKeyword(t) | FromTable::WithoutKeyword(t) => t,
            };
            let limited = !delete.order_by.is_empty() || delete.limit.is_some();
            let one_table = match tables.as_slice() {
                [only] if only.joins.is_empty() => Some(only.clone()),
                _ => None,
            };
            if limited && one_table.is_none() {
                return Err(SqlError::not_supported(MULTI_TABLE_LIMIT));
            }
            let Some(table) = one_table.filter(|_| {
                delete.tables.is_empty()
                    && delete.using.is_none()
                    && delete.returning.is_none()
                    && delete.output.is_none()
            }) else {
                return Err(SqlError::not_supported("multi-table DELETE"));
            };
            if limited {
                delete.selection = Some(by_rowid(
                    &table,
                    delete.selection.take(),
                    core::mem::take(&mut delete.order_by),
                    delete.limit.take(),
                )?);
            }
            let tables = match &mut delete.from {
                FromTable::WithFromKeyword(t) | FromTable::WithoutKeyword(t) => t,
            };
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
    let _ = visit_expressions_mut(e, |e| {
        match e {
            Expr::Function(f)
                if f.name.0.len() == 1 && f.name.to_string().eq_ignore_ascii_case("VALUES") =>
            {
                if let FunctionArguments::List(list) = &f.args
                    && let [FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::Identifier(col)))] =
                        list.args.as_slice()
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
            _ => {}
        }
        ControlFlow::<()>::Continue(())
    });
}

const MULTI_TABLE_LIMIT: &str = "multi-table UPDATE/DELETE with ORDER BY/LIMIT";

/// `rowid IN (SELECT rowid FROM <table> [WHERE ..] [ORDER BY ..] [LIMIT ..])`: the rows an
/// `UPDATE`/`DELETE .. ORDER BY .. LIMIT` changes, for a SQLite without that syntax.
fn by_rowid(
    table: &TableWithJoins,
    selection: Option<Expr>,
    order_by: Vec<OrderByExpr>,
    limit: Option<Expr>,
) -> Result<Expr, SqlError> {
    let text = format!("SELECT rowid FROM {table}");
    let tokens = Tokenizer::new(&Mysql, &text)
        .tokenize()
        .map_err(|e| SqlError::syntax(&e.to_string()))?;
    let Statement::Query(mut subquery) = parse_one(tokens)? else {
        return Err(SqlError::syntax("bad table in UPDATE/DELETE"));
    };
    if let SetExpr::Select(select) = subquery.body.as_mut() {
        select.selection = selection;
    }
    if !order_by.is_empty() {
        subquery.order_by = Some(OrderBy {
            kind: OrderByKind::Expressions(order_by),
            interpolate: None,
        });
    }
    subquery.limit_clause = limit.map(|limit| LimitClause::LimitOffset {
        limit: Some(limit),
        offset: None,
        limit_by: Vec::new(),
    });
    Ok(Expr::In {
        expr: Box::new(Expr::Identifier(Ident::new("rowid"))),
        target: InTarget::Subquery(subquery),
        negated: false,
        global: false,
    })
}
