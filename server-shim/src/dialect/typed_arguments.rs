//! Arguments whose answer depends on the declared type of the column they name, which SQLite
//! does not keep with a value: a `DECIMAL(10,2)` holding 12.5 and a `DOUBLE` holding 12.5 are
//! the same double, a `JSON` column's document is a string.
//! - `JSON_ARRAY(d)`, `JSON_OBJECT('k', d)` and `JSON_ARRAYAGG(d)` write a `DECIMAL` with its scale (`[12.50]`)
//!   and embed a `JSON` column's document (not a string holding it);
//! - `ROUND(f, 1)` of a `DOUBLE` rounds its binary value half to even, as MariaDB's
//!   `rint` does (1.25 is 1.2), where a `DECIMAL`'s rounds half away from zero (1.3).
//!
//! Each such argument that is a plain column of a table in scope gets the index of its
//! column in [`Translation::typed_columns`](super::Translation): `JSON_ARRAY(d)` becomes
//! `JSON_ARRAY(mysql_json_typed(d, 0))`, `ROUND(f, 1)` becomes `mysql_round_typed(f, 1, 0)`. The
//! engine looks the columns' declared types up each time the statement runs (so a later
//! `ALTER TABLE` is seen) and its functions read them by that index.

use sqlparser::ast::{
    Expr, FunctionArg, FunctionArgExpr, FunctionArguments, Ident, ObjectName, Query, SelectItem,
    SetExpr, TableFactor, Value,
};

use super::expr::call;
use super::result_types::{ResultType, Source, column_of, sources_of};

/// A table column an argument names: the table's schema when the statement qualified it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypedColumn {
    pub schema: Option<String>,
    pub table: String,
    pub column: String,
}

/// The engine's function that gives a `JSON_ARRAY`/`JSON_OBJECT` argument as its column's type
/// writes it in JSON.
pub const JSON_TYPED_FN: &str = "mysql_json_typed";

/// The engine's `ROUND` of a column whose declared type it looks up.
pub const ROUND_TYPED_FN: &str = "mysql_round_typed";

/// Marks the typed arguments of `query`'s select lists (its own, a `UNION`'s branches', a
/// subquery's and a derived table's, each with its own tables in scope before the outer
/// ones'); returns the columns they name.
pub fn mark(query: &mut Query) -> Vec<TypedColumn> {
    let mut columns = Vec::new();
    mark_query(query, &[], &mut columns);
    columns
}

/// The tables in scope, innermost last.
type Scopes<'s> = [&'s [Source]];

fn mark_query(query: &mut Query, scopes: &Scopes<'_>, out: &mut Vec<TypedColumn>) {
    if query.with.is_none() {
        mark_set(&mut query.body, scopes, out);
    }
}

fn mark_set(body: &mut SetExpr, scopes: &Scopes<'_>, out: &mut Vec<TypedColumn>) {
    match body {
        SetExpr::Select(select) => {
            let sources = sources_of(select);
            for from in &mut select.from {
                for factor in std::iter::once(&mut from.relation)
                    .chain(from.joins.iter_mut().map(|j| &mut j.relation))
                {
                    if let TableFactor::Derived { subquery, .. } = factor {
                        mark_query(subquery, scopes, out);
                    }
                }
            }
            let inner: Vec<&[Source]> =
                scopes.iter().copied().chain([sources.as_slice()]).collect();
            for item in &mut select.projection {
                if let SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } = item
                {
                    mark_expr(e, &inner, out);
                }
            }
        }
        SetExpr::Query(q) => mark_query(q, scopes, out),
        SetExpr::SetOperation { left, right, .. } => {
            mark_set(left, scopes, out);
            mark_set(right, scopes, out);
        }
        _ => {}
    }
}

/// The function calls in `e` and in its subqueries.
fn mark_expr(e: &mut Expr, scopes: &Scopes<'_>, out: &mut Vec<TypedColumn>) {
    match e {
        Expr::Nested(inner) => mark_expr(inner, scopes, out),
        Expr::Subquery(q) => mark_query(q, scopes, out),
        Expr::Function(f) => {
            let name = match f.name.0.as_slice() {
                [part] => part
                    .as_ident()
                    .map(|i| i.value.to_ascii_uppercase())
                    .unwrap_or_default(),
                _ => return,
            };
            let FunctionArguments::List(list) = &mut f.args else {
                return;
            };
            let number = |n: usize| {
                FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::Value(
                    Value::Number(n.to_string(), false).into(),
                )))
            };
            if name == "ROUND"
                && list.args.len() <= 2
                && let Some(FunctionArg::Unnamed(FunctionArgExpr::Expr(a))) = list.args.first()
                && let Some(column) = column_named(a, scopes)
            {
                // `mysql_round_typed(x, digits, index)`.
                if list.args.len() == 1 {
                    list.args.push(number(0));
                }
                list.args.push(number(out.len()));
                out.push(column);
                f.name = ObjectName::from(vec![Ident::new(ROUND_TYPED_FN)]);
                return;
            }
            for (i, arg) in list.args.iter_mut().enumerate() {
                let FunctionArg::Unnamed(FunctionArgExpr::Expr(a)) = arg else {
                    continue;
                };
                let typed = match name.as_str() {
                    "JSON_ARRAY" | "JSON_ARRAYAGG" => true,
                    // Its values, not its keys.
                    "JSON_OBJECT" => i % 2 == 1,
                    _ => false,
                };
                match column_named(a, scopes).filter(|_| typed) {
                    Some(column) => {
                        let index = Expr::Value(Value::Number(out.len().to_string(), false).into());
                        out.push(column);
                        let plain = core::mem::replace(a, Expr::Value(Value::Null.into()));
                        *a = Expr::Function(call(JSON_TYPED_FN, vec![plain, index]));
                    }
                    None => mark_expr(a, scopes, out),
                }
            }
        }
        _ => {}
    }
}

/// The table column `e` names: a qualified name's table from the innermost scope that has
/// one called so, an unqualified name's from the innermost scope when it has one table.
fn column_named(e: &Expr, scopes: &Scopes<'_>) -> Option<TypedColumn> {
    let qualified = matches!(e, Expr::CompoundIdentifier(_));
    for sources in scopes.iter().rev() {
        match column_of(e, sources) {
            ResultType::Column {
                schema,
                table,
                column,
            } => {
                return Some(TypedColumn {
                    schema,
                    table,
                    column,
                });
            }
            _ if !qualified => return None,
            _ => {}
        }
    }
    None
}
