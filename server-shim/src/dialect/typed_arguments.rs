//! Arguments whose answer depends on the declared type of the column they name, which SQLite
//! does not keep with a value: a `DECIMAL(10,2)` holding 12.5 and a `DOUBLE` holding 12.5 are
//! the same double, a `JSON` column's document is a string.
//! - `JSON_ARRAY(d)` and `JSON_OBJECT('k', d)` write a `DECIMAL` with its scale (`[12.50]`)
//!   and embed a `JSON` column's document (not a string holding it);
//! - `ROUND(f, 1)` of a `DOUBLE` rounds its binary value half to even, as MariaDB's
//!   `rint` does (1.25 is 1.2), where a `DECIMAL`'s rounds half away from zero (1.3).
//!
//! Each such argument that is a plain column of a select list's table gets the index of its
//! column in [`Translation::typed_columns`](super::Translation): `JSON_ARRAY(d)` becomes
//! `JSON_ARRAY(mysql_json_typed(d, 0))`, `ROUND(f, 1)` becomes `mysql_round_typed(f, 1, 0)`. The
//! engine looks the columns' declared types up each time the statement runs (so a later
//! `ALTER TABLE` is seen) and its functions read them by that index.

use sqlparser::ast::{
    Expr, FunctionArg, FunctionArgExpr, FunctionArguments, Ident, ObjectName, Query, SelectItem,
    SetExpr, Value,
};

use super::expr::call;
use super::result_types::{ResultType, column_of, sources_of};

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

/// Marks the typed arguments of `query`'s select lists (its own, a `UNION`'s branches'; not
/// a subquery's, whose columns come from other tables); returns the columns they name.
pub fn mark(query: &mut Query) -> Vec<TypedColumn> {
    let mut columns = Vec::new();
    if query.with.is_none() {
        mark_set(&mut query.body, &mut columns);
    }
    columns
}

fn mark_set(body: &mut SetExpr, columns: &mut Vec<TypedColumn>) {
    match body {
        SetExpr::Select(select) => {
            let sources = sources_of(select);
            for item in &mut select.projection {
                if let SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } = item
                {
                    mark_expr(e, &sources, columns);
                }
            }
        }
        SetExpr::Query(q) => columns.extend(mark(q)),
        SetExpr::SetOperation { left, right, .. } => {
            mark_set(left, columns);
            mark_set(right, columns);
        }
        _ => {}
    }
}

/// The function calls in `e`, outside subqueries.
fn mark_expr(e: &mut Expr, sources: &[super::result_types::Source], out: &mut Vec<TypedColumn>) {
    match e {
        Expr::Nested(inner) => mark_expr(inner, sources, out),
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
                && let Some(column) = column_named(a, sources)
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
                    "JSON_ARRAY" => true,
                    // Its values, not its keys.
                    "JSON_OBJECT" => i % 2 == 1,
                    _ => false,
                };
                match column_named(a, sources).filter(|_| typed) {
                    Some(column) => {
                        let index = Expr::Value(Value::Number(out.len().to_string(), false).into());
                        out.push(column);
                        let plain = core::mem::replace(a, Expr::Value(Value::Null.into()));
                        *a = Expr::Function(call(JSON_TYPED_FN, vec![plain, index]));
                    }
                    None => mark_expr(a, sources, out),
                }
            }
        }
        _ => {}
    }
}

/// The table column `e` names, when it is one of a table of `sources`.
fn column_named(e: &Expr, sources: &[super::result_types::Source]) -> Option<TypedColumn> {
    match column_of(e, sources) {
        ResultType::Column {
            schema,
            table,
            column,
        } => Some(TypedColumn {
            schema,
            table,
            column,
        }),
        _ => None,
    }
}
