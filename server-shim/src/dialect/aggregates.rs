//! The result columns of a `SELECT` that aggregate one table column (`MIN`, `MAX`, `SUM`,
//! `AVG` of `price`): SQLite declares no type for an expression, so its value alone would type
//! the column (`SUM` of a `DECIMAL(10,2)` sent as the double 13.5, `MAX` of a `DATETIME` as a
//! string, which Go's driver cannot scan into a time). MySQL types them after the column; the
//! engine looks the column's declared type up from what this finds.

use sqlparser::ast::{
    Expr, FunctionArg, FunctionArgExpr, FunctionArguments, Query, SelectItem, SetExpr, TableFactor,
};

/// The aggregate functions whose type follows their argument's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Function {
    Min,
    Max,
    Sum,
    Avg,
}

/// A result column that is [`Function`] of `table`.`column`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AggregateOf {
    pub function: Function,
    /// The table's database when the query qualified it.
    pub schema: Option<String>,
    pub table: String,
    pub column: String,
}

/// For each result column of `query` (in order), the aggregate it is; empty when none is, or
/// when the columns cannot be lined up with the select list (`*`, a `UNION`).
#[must_use]
pub fn of(query: &Query) -> Vec<Option<AggregateOf>> {
    let SetExpr::Select(select) = query.body.as_ref() else {
        return Vec::new();
    };
    // The tables in FROM, by the name a column may be qualified with.
    let mut tables: Vec<(String, Option<String>, String)> = Vec::new();
    for from in &select.from {
        for factor in std::iter::once(&from.relation).chain(from.joins.iter().map(|j| &j.relation))
        {
            if let TableFactor::Table { name, alias, .. } = factor {
                let parts: Vec<String> = name
                    .0
                    .iter()
                    .filter_map(|p| p.as_ident().map(|i| i.value.clone()))
                    .collect();
                let (schema, table) = match parts.as_slice() {
                    [table] => (None, table.clone()),
                    [schema, table] => (Some(schema.clone()), table.clone()),
                    _ => continue,
                };
                let called = alias
                    .as_ref()
                    .map_or_else(|| table.clone(), |a| a.name.value.clone());
                tables.push((called, schema, table));
            } else {
                // A derived table or a function: its columns have no declared types.
                tables.push((String::new(), None, String::new()));
            }
        }
    }
    let mut found = Vec::with_capacity(select.projection.len());
    for item in &select.projection {
        let expr = match item {
            SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => e,
            // `*`, and a multi-alias item, cover several columns.
            _ => return Vec::new(),
        };
        found.push(aggregate(expr, &tables));
    }
    if found.iter().all(Option::is_none) {
        return Vec::new();
    }
    found
}

/// `expr` as an aggregate of a column of one of `tables` (called, schema, table).
fn aggregate(expr: &Expr, tables: &[(String, Option<String>, String)]) -> Option<AggregateOf> {
    let Expr::Function(f) = expr else {
        return None;
    };
    let [name] = f.name.0.as_slice() else {
        return None;
    };
    let function = match name.as_ident()?.value.to_ascii_uppercase().as_str() {
        "MIN" => Function::Min,
        "MAX" => Function::Max,
        "SUM" => Function::Sum,
        "AVG" => Function::Avg,
        _ => return None,
    };
    if f.filter.is_some() || f.over.is_some() {
        return None;
    }
    let FunctionArguments::List(list) = &f.args else {
        return None;
    };
    let [FunctionArg::Unnamed(FunctionArgExpr::Expr(arg))] = list.args.as_slice() else {
        return None;
    };
    let (qualifier, column) = match arg {
        Expr::Identifier(c) => (None, c.value.clone()),
        Expr::CompoundIdentifier(parts) => match parts.as_slice() {
            [q, c] => (Some(q.value.as_str()), c.value.clone()),
            _ => return None,
        },
        _ => return None,
    };
    let (_, schema, table) = match qualifier {
        Some(q) => tables
            .iter()
            .find(|(called, ..)| called.eq_ignore_ascii_case(q))?,
        None => match tables {
            [only] => only,
            _ => return None,
        },
    };
    if table.is_empty() {
        return None;
    }
    Some(AggregateOf {
        function,
        schema: schema.clone(),
        table: table.clone(),
        column,
    })
}
