//! Queries and writes, MySQL to SQLite: `SELECT` (via [`super::expr`]),
//! `INSERT [IGNORE]`, `REPLACE`, `... ON DUPLICATE KEY UPDATE`, `UPDATE`, `DELETE`, and
//! `UPDATE`/`DELETE ... [ORDER BY ...] LIMIT n`.
//!
//! - `REPLACE INTO` → `INSERT OR REPLACE INTO` (both delete the conflicting rows, then
//!   insert); `INSERT IGNORE` → `INSERT ... ON CONFLICT DO NOTHING` (keys only).
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
    Assignment, Delete, DoUpdate, Expr, FromTable, FunctionArg, FunctionArgExpr, FunctionArguments,
    Ident, InTarget, LimitClause, OnConflict, OnConflictAction, OnInsert, OrderBy, OrderByExpr,
    OrderByKind, SetExpr, SqliteOnConflict, Statement, TableFactor, TableObject, TableWithJoins,
    Value, visit_expressions_mut,
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
            // Typed as the client wrote it: the translation changes the operators.
            let result_types = super::result_types::of(&q);
            let typed_columns = super::typed_arguments::mark(&mut q);
            let from_tables = super::result_types::from_tables(&q);
            expr::query(&mut q)?;
            Ok(Translation {
                result_types,
                typed_columns,
                from_tables,
                ..one(Statement::Query(q).to_string(), StatementKind::Query)
            })
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
            // `INSERT IGNORE` skips a row whose key is taken. Not `INSERT OR IGNORE`: that
            // also skips, silently, a row a CHECK or NOT NULL refuses, which MySQL stores
            // with its value clipped (and a warning); an upsert's DO NOTHING is for keys
            // only, so such a row is refused with the column's error instead of lost.
            let ignore = insert.ignore && !insert.replace_into;
            insert.ignore = false;
            if insert.replace_into {
                insert.replace_into = false;
                insert.or = Some(SqliteOnConflict::Replace);
            }
            // LOW_PRIORITY / DELAYED / HIGH_PRIORITY: scheduling hints with no meaning here.
            insert.priority = None;
            set_as_values(&mut insert)?;
            // Before the rows are split by their DEFAULTs: the indexes are the whole
            // statement's.
            let mut typed_columns = insert
                .source
                .as_deref_mut()
                .map(super::typed_arguments::mark)
                .unwrap_or_default();
            if let (
                Some(OnInsert::DuplicateKeyUpdate(assignments)),
                TableObject::TableName(table),
            ) = (&mut insert.on, &insert.table)
            {
                super::typed_arguments::mark_upsert(
                    table,
                    assignments.iter_mut().map(|a| &mut a.value),
                    &mut typed_columns,
                );
            }
            let row_alias = insert.insert_alias.take().map(|a| a.row_alias.to_string());
            let mut statements = Vec::new();
            for mut insert in without_default_values(insert)? {
                if let Some(source) = &mut insert.source {
                    expr::query(source)?;
                }
                let action = match insert.on.take() {
                    Some(OnInsert::DuplicateKeyUpdate(assignments)) => {
                        Some(OnConflictAction::DoUpdate(DoUpdate {
                            assignments: assignments
                                .into_iter()
                                .map(|a| excluded_assignment(a, row_alias.as_deref()))
                                .collect::<Result<Vec<_>, _>>()?,
                            selection: None,
                        }))
                    }
                    None if ignore => Some(OnConflictAction::DoNothing),
                    other => {
                        insert.on = other;
                        None
                    }
                };
                if let Some(action) = action {
                    where_true(&mut insert);
                    insert.on = Some(OnInsert::OnConflict(OnConflict {
                        conflict_target: None,
                        action,
                    }));
                }
                statements.push(Statement::Insert(insert).to_string());
            }
            Ok(Translation {
                statements,
                typed_columns,
                ..one(String::new(), kind)
            })
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
            // Typed as the client wrote it, before the rows are chosen by rowid.
            let typed_columns = super::typed_arguments::mark_write(
                &update.table,
                update
                    .assignments
                    .iter_mut()
                    .map(|a| &mut a.value)
                    .chain(update.order_by.iter_mut().map(|o| &mut o.expr)),
                update.selection.as_mut(),
            );
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
            Ok(Translation {
                typed_columns,
                ..one(Statement::Update(update).to_string(), StatementKind::Update)
            })
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
            if delete.returning.is_some() || delete.output.is_some() {
                return Err(SqlError::not_supported("DELETE ... RETURNING"));
            }
            let Some(table) =
                one_table.filter(|_| delete.tables.is_empty() && delete.using.is_none())
            else {
                return multi_table_delete(&delete);
            };
            let typed_columns = super::typed_arguments::mark_write(
                &table,
                delete.order_by.iter_mut().map(|o| &mut o.expr),
                delete.selection.as_mut(),
            );
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
            Ok(Translation {
                typed_columns,
                ..one(Statement::Delete(delete).to_string(), StatementKind::Delete)
            })
        }
        other => Err(SqlError::not_supported(&super::statement_keywords(&other))),
    }
}

/// A multi-table `DELETE` (`DELETE a [, b] FROM <tables> [WHERE ..]`, `DELETE FROM a [, b]
/// USING <tables> [WHERE ..]`) whose targets are all one table, under one or more aliases (a
/// join to another table, WordPress's self-join to drop duplicate options):
/// `DELETE FROM t WHERE rowid IN (SELECT a.rowid FROM <tables> [WHERE ..] UNION ...)`, which
/// SQLite runs. Targets in two different tables stay refused: the second set of rows would be
/// chosen after the first was gone.
fn multi_table_delete(delete: &Delete) -> Result<Translation, SqlError> {
    let refused = |why: &str| {
        Err(SqlError::not_supported(&format!(
            "multi-table DELETE {why}"
        )))
    };
    let from = match &delete.from {
        FromTable::WithFromKeyword(t) | FromTable::WithoutKeyword(t) => t,
    };
    let (targets, refs): (Vec<String>, &[TableWithJoins]) = if !delete.tables.is_empty() {
        (
            delete.tables.iter().map(ToString::to_string).collect(),
            from.as_ref(),
        )
    } else if let Some(using) = &delete.using {
        let mut names = Vec::new();
        for t in from {
            match &t.relation {
                TableFactor::Table { name, .. } if t.joins.is_empty() => {
                    names.push(name.to_string())
                }
                _ => return refused("with this target list"),
            }
        }
        (names, using)
    } else {
        return refused("of this form");
    };
    // Each target is an alias (or the name) of a table in `refs`: all of one table.
    let mut factors = Vec::new();
    for t in refs {
        factors.push(&t.relation);
        factors.extend(t.joins.iter().map(|j| &j.relation));
    }
    let base_of = |target: &str| {
        factors.iter().find_map(|f| match f {
            TableFactor::Table { name, alias, .. } => {
                let called = alias
                    .as_ref()
                    .map_or_else(|| name.to_string(), |a| a.name.to_string());
                called
                    .eq_ignore_ascii_case(target)
                    .then(|| name.to_string())
            }
            _ => None,
        })
    };
    let mut base: Option<String> = None;
    for target in &targets {
        let Some(table) = base_of(target) else {
            return refused(&format!("of {target}, which the FROM clause does not name"));
        };
        match &base {
            Some(b) if !b.eq_ignore_ascii_case(&table) => {
                return refused("from more than one table");
            }
            _ => base = Some(table),
        }
    }
    let Some(base) = base else {
        return refused("without a target");
    };
    let refs: Vec<String> = refs.iter().map(ToString::to_string).collect();
    let filter = delete
        .selection
        .as_ref()
        .map(|s| format!(" WHERE {s}"))
        .unwrap_or_default();
    let chosen: Vec<String> = targets
        .iter()
        .map(|t| format!("SELECT {t}.rowid FROM {}{filter}", refs.join(", ")))
        .collect();
    let single = format!(
        "DELETE FROM {base} WHERE rowid IN ({})",
        chosen.join(" UNION ")
    );
    let tokens = Tokenizer::new(&Mysql, &single)
        .tokenize()
        .map_err(|e| SqlError::syntax(&e.to_string()))?;
    translate(parse_one(tokens)?)
}

/// Whether `e` is the keyword `DEFAULT` (a column's default, in a `VALUES` row).
fn is_default(e: &Expr) -> bool {
    matches!(e, Expr::Identifier(i) if i.quote_style.is_none() && i.value.eq_ignore_ascii_case("DEFAULT"))
}

/// MySQL's `INSERT … SET a = 1, b = DEFAULT` (node-mysql2's `INSERT INTO t SET ?`) as the
/// `INSERT … (a, b) VALUES (1, DEFAULT)` it means; SQLite has no such form.
fn set_as_values(insert: &mut sqlparser::ast::Insert) -> Result<(), SqlError> {
    if insert.assignments.is_empty() {
        return Ok(());
    }
    let mut row = Vec::with_capacity(insert.assignments.len());
    for assignment in core::mem::take(&mut insert.assignments) {
        let sqlparser::ast::AssignmentTarget::ColumnName(column) = assignment.target else {
            return Err(SqlError::not_supported("INSERT ... SET (a, b) = ..."));
        };
        insert.columns.push(column);
        row.push(assignment.value);
    }
    insert.source = Some(Box::new(sqlparser::ast::Query {
        with: None,
        body: Box::new(SetExpr::Values(sqlparser::ast::Values {
            explicit_row: false,
            value_keyword: false,
            rows: vec![sqlparser::ast::Parens::with_empty_span(row)],
        })),
        order_by: None,
        limit_clause: None,
        fetch: None,
        locks: Vec::new(),
        for_clause: None,
        settings: None,
        format_clause: None,
        pipe_operators: Vec::new(),
    }));
    Ok(())
}

/// `INSERT INTO t (a, b, c) VALUES (DEFAULT, 1, DEFAULT)` → `INSERT INTO t (b) VALUES (1)`:
/// SQLite has no `DEFAULT` in a `VALUES` row, and a column left out gets its default, as
/// MySQL's `DEFAULT` does (an `AUTO_INCREMENT` column its next id). TypeORM's `save()` and
/// Drizzle's `insert()` write every row so. Rows with `DEFAULT` in other columns than the rows
/// before them (Drizzle's batch insert where one row sets a column and another leaves it)
/// start another `INSERT`, in order, so the placeholders keep their order across them; the
/// engine runs them as one statement (all or none, one count, the first id). Without a column
/// list: 1235; with `ON DUPLICATE KEY UPDATE`, rows that need several `INSERT`s: 1235 (its
/// assignments would be repeated with their placeholders).
fn without_default_values(
    mut insert: sqlparser::ast::Insert,
) -> Result<Vec<sqlparser::ast::Insert>, SqlError> {
    let Some(SetExpr::Values(values)) = insert.source.as_deref_mut().map(|q| q.body.as_mut())
    else {
        return Ok(vec![insert]);
    };
    if !values.rows.iter().any(|r| r.content.iter().any(is_default)) {
        return Ok(vec![insert]);
    }
    if insert.columns.is_empty() {
        return Err(SqlError::not_supported(
            "DEFAULT in a VALUES row without a column list",
        ));
    }
    if values
        .rows
        .iter()
        .any(|r| r.content.len() != insert.columns.len())
    {
        return Err(SqlError::syntax("Column count doesn't match value count"));
    }
    let pattern = |row: &[Expr]| row.iter().map(is_default).collect::<Vec<bool>>();
    // Consecutive rows with `DEFAULT` in the same columns, in order; every row of nothing but
    // `DEFAULT` alone (SQLite's `DEFAULT VALUES` is one row).
    let mut groups: Vec<Vec<sqlparser::ast::Values>> = Vec::new();
    let mut last: Option<Vec<bool>> = None;
    for row in core::mem::take(&mut values.rows) {
        let p = pattern(&row.content);
        let alone = p.iter().all(|d| *d);
        match groups.last_mut() {
            Some(group) if !alone && last.as_ref() == Some(&p) => {
                if let Some(v) = group.last_mut() {
                    v.rows.push(row);
                }
            }
            _ => groups.push(vec![sqlparser::ast::Values {
                explicit_row: values.explicit_row,
                value_keyword: values.value_keyword,
                rows: vec![row],
            }]),
        }
        last = Some(p);
    }
    if groups.len() > 1 && insert.on.is_some() {
        return Err(SqlError::not_supported(
            "DEFAULT in different columns of the rows of an INSERT ... ON DUPLICATE KEY UPDATE",
        ));
    }
    let mut inserts = Vec::with_capacity(groups.len());
    for group in groups {
        let Some(rows) = group.into_iter().next() else {
            continue;
        };
        let first = rows
            .rows
            .first()
            .map(|r| pattern(&r.content))
            .unwrap_or_default();
        let mut one = insert.clone();
        if first.iter().all(|d| *d) {
            one.columns.clear();
            one.source = None;
            inserts.push(one);
            continue;
        }
        let keep = |i: usize| first.get(i).is_some_and(|d| !d);
        one.columns = core::mem::take(&mut one.columns)
            .into_iter()
            .enumerate()
            .filter_map(|(i, c)| keep(i).then_some(c))
            .collect();
        let mut rows = rows;
        for row in &mut rows.rows {
            row.content = core::mem::take(&mut row.content)
                .into_iter()
                .enumerate()
                .filter_map(|(i, e)| keep(i).then_some(e))
                .collect();
        }
        if let Some(source) = one.source.as_deref_mut() {
            *source.body = SetExpr::Values(rows);
        }
        inserts.push(one);
    }
    Ok(inserts)
}

fn one(statement: String, kind: StatementKind) -> Translation {
    Translation {
        statements: vec![statement],
        kind,
        rebuild: None,
        result_types: Vec::new(),
        found_rows: None,
        column_names: Vec::new(),
        typed_columns: Vec::new(),
        from_tables: Vec::new(),
    }
}

/// Gives an `INSERT ... SELECT` without a `WHERE` one that is always true: SQLite reads the
/// `ON` of an upsert after a bare `SELECT ... FROM t` as a join's.
fn where_true(insert: &mut sqlparser::ast::Insert) {
    if let Some(source) = &mut insert.source
        && let sqlparser::ast::SetExpr::Select(select) = source.body.as_mut()
        && select.selection.is_none()
    {
        select.selection = Some(Expr::Value(Value::Boolean(true).into()));
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
