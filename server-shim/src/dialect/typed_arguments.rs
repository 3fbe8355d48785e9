//! Arguments whose answer depends on the declared type of the column they name, which SQLite
//! does not keep with a value: a `DECIMAL(10,2)` holding 12.5 and a `DOUBLE` holding 12.5 are
//! the same double, a `JSON` column's document is a string.
//! - `JSON_ARRAY(d)`, `JSON_OBJECT('k', d)` and `JSON_ARRAYAGG(d)` write a `DECIMAL` with its scale (`[12.50]`)
//!   and embed a `JSON` column's document (not a string holding it);
//! - `ROUND(f, 1)` of a `DOUBLE` rounds its binary value half to even, as MariaDB's
//!   `rint` does (1.25 is 1.2), where a `DECIMAL`'s rounds half away from zero (1.3);
//! - a text function's string argument (`CONCAT(d, '')`, `LENGTH(d)`, `LPAD(d, 8, '0')`,
//!   `CAST(d AS CHAR)`) is a `DECIMAL` written with its scale (`12.50`; a decimal literal
//!   too), a `FLOAT` with 6 significant digits and a
//!   `DOUBLE` with its shortest digits, as MariaDB converts them to text (SQLite's own text
//!   of a double is `12.5`, `14.960000038147`, `1.0e+20`).
//!
//! Each such argument that is a plain column of a table in scope gets the index of its
//! column in [`Translation::typed_columns`](super::Translation): `JSON_ARRAY(d)` becomes
//! `JSON_ARRAY(mysql_json_typed(d, 0))`, `ROUND(f, 1)` becomes `mysql_round_typed(f, 1, 0)`. The
//! engine looks the columns' declared types up each time the statement runs (so a later
//! `ALTER TABLE` is seen) and its functions read them by that index.

use sqlparser::ast::{
    Expr, FunctionArg, FunctionArgExpr, FunctionArguments, GroupByExpr, Ident, InTarget,
    ObjectName, OrderByKind, Query, SelectItem, SetExpr, TableFactor, TableWithJoins, Value,
};

use sqlparser::tokenizer::Token;

use super::expr::call;
use super::result_types::{
    Cte, ResultType, Source, column_of, ctes_of, sources_of, sources_of_table, table_named, type_of,
};
use crate::sql_error::SqlError;

/// A table column an argument names: the table's schema when the statement qualified it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypedColumn {
    pub schema: Option<String>,
    pub table: String,
    pub column: String,
}

/// What the engine looks up for a typed argument: the declared type of the column it names,
/// or the type MySQL gives an expression of numbers that a text function reads (`0.1 + 0.2`
/// a `DECIMAL` of one decimal, `1e3` a `DOUBLE`, `d * 2` by `d`'s declared scale).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TypedArgument {
    /// A column's declared type.
    Column(TypedColumn),
    /// A name without a table, with several tables in scope (a join, a correlated
    /// subquery): the first of these columns that exists, as SQL resolves the name.
    AnyOf(Vec<TypedColumn>),
    /// An expression's number type.
    Number(ResultType),
}

/// The engine's function that gives a `JSON_ARRAY`/`JSON_OBJECT` argument as its column's type
/// writes it in JSON.
pub const JSON_TYPED_FN: &str = "mysql_json_typed";

/// The index `mysql_round_typed` gets for an argument that is a double as written.
pub const DOUBLE_INDEX: i64 = -1;

/// The engine's `ROUND` of a column whose declared type it looks up.
pub const ROUND_TYPED_FN: &str = "mysql_round_typed";

/// The engine's function that gives a text function's argument as MySQL writes its column's
/// type as text.
pub const TEXT_TYPED_FN: &str = "mysql_text_typed";

/// Which of a function's arguments are read as text, for the text functions whose answer
/// depends on it: all of `CONCAT`'s, `CONCAT_WS`'s, `GROUP_CONCAT`'s, `REPLACE`'s, `INSTR`'s
/// and `LOCATE`'s, the first of the others (`MD5(d)` hashes `12.50`). `SUBSTRING ... FROM`,
/// `TRIM` and `POSITION` have nodes of their own ([`mark_expr`]).
fn reads_as_text(function: &str, argument: usize) -> bool {
    match function {
        "CONCAT" | "CONCAT_WS" | "GROUP_CONCAT" | "REPLACE" | "INSTR" | "LOCATE" => true,
        "LENGTH" | "CHAR_LENGTH" | "CHARACTER_LENGTH" | "OCTET_LENGTH" | "UPPER" | "LOWER"
        | "UCASE" | "LCASE" | "LEFT" | "RIGHT" | "SUBSTRING" | "SUBSTR" | "MID" | "LPAD"
        | "RPAD" | "REVERSE" | "LTRIM" | "RTRIM" | "REPEAT" | "QUOTE" | "MD5" | "SHA" | "SHA1"
        | "SHA2" | "CRC32" | "TO_BASE64" => argument == 0,
        _ => false,
    }
}

/// Refuses a statement that names [`JSON_TYPED_FN`], [`ROUND_TYPED_FN`] or [`TEXT_TYPED_FN`]
/// itself: their indexes are the translation's own, and what they read is the running
/// statement's.
///
/// # Errors
/// 1305, as for a function that does not exist.
pub fn refuse_internal_names(tokens: &[Token]) -> Result<(), SqlError> {
    for token in tokens {
        if let Token::Word(w) = token
            && [JSON_TYPED_FN, ROUND_TYPED_FN, TEXT_TYPED_FN]
                .iter()
                .any(|f| w.value.eq_ignore_ascii_case(f))
        {
            return Err(SqlError::no_such_function(&w.value));
        }
    }
    Ok(())
}

/// Marks the typed arguments of `query`'s select lists (its own, a `UNION`'s branches', a
/// subquery's and a derived table's, each with its own tables in scope before the outer
/// ones'); returns the columns they name.
pub fn mark(query: &mut Query) -> Vec<TypedArgument> {
    let mut columns = Vec::new();
    mark_query(query, Scopes::NONE, &mut columns);
    columns
}

/// Marks the typed arguments of a write's expressions (`stored`: an `UPDATE`'s assigned
/// values and an `UPDATE`'s or `DELETE`'s `ORDER BY`, where a value is what it shows;
/// `others`: their `WHERE`), with `table`'s columns in scope; returns the columns they name.
pub fn mark_write<'e>(
    table: &TableWithJoins,
    stored: impl IntoIterator<Item = &'e mut Expr>,
    others: impl IntoIterator<Item = &'e mut Expr>,
) -> Vec<TypedArgument> {
    let sources = sources_of_table(table, &[]);
    let tables = [sources.as_slice()];
    let scopes = Scopes::NONE.within(&tables);
    let mut columns = Vec::new();
    for e in stored {
        mark_shown(e, scopes, &mut columns);
    }
    for e in others {
        mark_expr(e, scopes, &mut columns);
    }
    columns
}

/// Marks the typed arguments of an `INSERT`'s `ON DUPLICATE KEY UPDATE` assignments, with
/// the table `table` in scope (`VALUES(d)` is its column `d`), after those `out` holds.
pub fn mark_upsert<'e>(
    table: &ObjectName,
    exprs: impl IntoIterator<Item = &'e mut Expr>,
    out: &mut Vec<TypedArgument>,
) {
    let sources = [table_named(table)];
    for e in exprs {
        mark_shown(e, Scopes::NONE.within(&[sources.as_slice()]), out);
    }
}

/// What a name may refer to: the tables in scope, innermost last, and the common table
/// expressions a `FROM` may name.
#[derive(Clone, Copy)]
struct Scopes<'s> {
    tables: &'s [&'s [Source]],
    ctes: &'s [Cte],
}

impl<'s> Scopes<'s> {
    const NONE: Self = Self {
        tables: &[],
        ctes: &[],
    };

    /// These, with the tables `tables` holds (those of these, then one scope more).
    fn within(self, tables: &'s [&'s [Source]]) -> Self {
        Self {
            tables,
            ctes: self.ctes,
        }
    }

    /// The tables of these scopes and then `inner`'s, for [`Scopes::within`].
    fn and<'i>(self, inner: &'i [Source]) -> Vec<&'i [Source]>
    where
        's: 'i,
    {
        self.tables.iter().copied().chain([inner]).collect()
    }
}

fn mark_query(query: &mut Query, scopes: Scopes<'_>, out: &mut Vec<TypedArgument>) {
    let ctes = ctes_of(query, scopes.ctes);
    // Each common table expression's body, with those before it in scope (a recursive one's
    // with all of them, whose columns are not known).
    if let Some(with) = &mut query.with {
        let recursive = with.recursive;
        let outer = scopes.ctes.len();
        for (i, cte) in with.cte_tables.iter_mut().enumerate() {
            let seen = if recursive {
                &ctes[..]
            } else {
                ctes.get(..outer + i).unwrap_or_default()
            };
            mark_query(
                &mut cte.query,
                Scopes {
                    tables: scopes.tables,
                    ctes: seen,
                },
                out,
            );
        }
    }
    let scopes = Scopes {
        tables: scopes.tables,
        ctes: &ctes,
    };
    mark_set(&mut query.body, scopes, out);
    // ORDER BY ROUND(f, 1) sorts by what the select list shows of it.
    if let (SetExpr::Select(select), Some(order_by)) = (query.body.as_ref(), &mut query.order_by)
        && let OrderByKind::Expressions(list) = &mut order_by.kind
    {
        let sources = sources_of(select, scopes.ctes);
        let tables = scopes.and(&sources);
        for item in list {
            mark_shown(&mut item.expr, scopes.within(&tables), out);
        }
    }
}

fn mark_set(body: &mut SetExpr, scopes: Scopes<'_>, out: &mut Vec<TypedArgument>) {
    match body {
        SetExpr::Select(select) => {
            let sources = sources_of(select, scopes.ctes);
            for from in &mut select.from {
                for factor in std::iter::once(&mut from.relation)
                    .chain(from.joins.iter_mut().map(|j| &mut j.relation))
                {
                    if let TableFactor::Derived { subquery, .. } = factor {
                        mark_query(subquery, scopes, out);
                    }
                }
            }
            let tables = scopes.and(&sources);
            let inner = scopes.within(&tables);
            for join in select
                .from
                .iter_mut()
                .flat_map(|from| from.joins.iter_mut())
            {
                if let Ok(Some(on)) = super::expr::join_condition(&mut join.join_operator) {
                    mark_expr(on, inner, out);
                }
            }
            for item in &mut select.projection {
                if let SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } = item
                {
                    mark_shown(e, inner, out);
                }
            }
            // The same expression computes the same value in every clause: a GROUP BY
            // ROUND(f, 1) groups by what the select list shows.
            if let GroupByExpr::Expressions(list, _) = &mut select.group_by {
                for e in list {
                    mark_shown(e, inner, out);
                }
            }
            for e in select.selection.iter_mut().chain(select.having.as_mut()) {
                mark_expr(e, inner, out);
            }
        }
        SetExpr::Query(q) => mark_query(q, scopes, out),
        // An `INSERT`'s rows: no table of their own (`CONCAT(0.1 + 0.2)` is still `0.3`).
        SetExpr::Values(values) => {
            let tables = scopes.and(&[]);
            let inner = scopes.within(&tables);
            for e in values
                .rows
                .iter_mut()
                .flat_map(|row| row.content.iter_mut())
            {
                mark_shown(e, inner, out);
            }
        }
        SetExpr::SetOperation { left, right, .. } => {
            mark_set(left, scopes, out);
            mark_set(right, scopes, out);
        }
        _ => {}
    }
}

/// The function calls in `e` and in its subqueries.
fn mark_expr(e: &mut Expr, scopes: Scopes<'_>, out: &mut Vec<TypedArgument>) {
    match e {
        Expr::Nested(inner)
        | Expr::UnaryOp { expr: inner, .. }
        | Expr::IsNull(inner)
        | Expr::IsNotNull(inner) => mark_expr(inner, scopes, out),
        Expr::BinaryOp { left, right, .. } => {
            mark_expr(left, scopes, out);
            mark_expr(right, scopes, out);
        }
        Expr::Between {
            expr, low, high, ..
        } => {
            for e in [expr, low, high] {
                mark_expr(e, scopes, out);
            }
        }
        Expr::Subquery(q) | Expr::Exists { subquery: q, .. } => mark_query(q, scopes, out),
        Expr::In { expr, target, .. } => {
            mark_expr(expr, scopes, out);
            match target {
                InTarget::List(list) => {
                    for e in list {
                        mark_expr(e, scopes, out);
                    }
                }
                InTarget::Subquery(q) => mark_query(q, scopes, out),
                _ => {}
            }
        }
        Expr::Case { .. } => mark_case(e, false, scopes, out),
        // `CAST(d AS CHAR)` and `CONVERT(d, CHAR)` write a number as its type does, as
        // `CONCAT(d)` does; `LIKE` reads both sides as text.
        Expr::Cast {
            expr: inner,
            data_type,
            ..
        }
        | Expr::Convert {
            expr: inner,
            data_type: Some(data_type),
            ..
        } if super::expr::casts_to_text(data_type) => read_as_text(inner, scopes, out),
        Expr::Like { expr, pattern, .. } => {
            read_as_text(expr, scopes, out);
            read_as_text(pattern, scopes, out);
        }
        Expr::Substring {
            expr,
            substring_from,
            substring_for,
            ..
        } => {
            read_as_text(expr, scopes, out);
            for e in substring_from.iter_mut().chain(substring_for) {
                mark_expr(e, scopes, out);
            }
        }
        Expr::Trim {
            expr, trim_what, ..
        } => {
            read_as_text(expr, scopes, out);
            if let Some(what) = trim_what {
                read_as_text(what, scopes, out);
            }
        }
        Expr::Position { expr, r#in } => {
            read_as_text(expr, scopes, out);
            read_as_text(r#in, scopes, out);
        }
        Expr::Function(f) => {
            let Some(name) = function_name(f) else {
                return;
            };
            let FunctionArguments::List(list) = &mut f.args else {
                return;
            };
            let number = |n: usize| {
                FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::Value(
                    Value::Number(n.to_string(), false).into(),
                )))
            };
            // `mysql_round_typed(x, digits, index)`: a column's index, or [`DOUBLE_INDEX`] for
            // what is a double as written (`1.005e0`, `SQRT(2)`).
            let round_index = match list.args.first() {
                Some(FunctionArg::Unnamed(FunctionArgExpr::Expr(a)))
                    if name == "ROUND" && list.args.len() <= 2 =>
                {
                    match column_named(a, scopes) {
                        Some(column) => {
                            out.push(column);
                            Some(Some(out.len() - 1))
                        }
                        None if scopes
                            .tables
                            .last()
                            .is_some_and(|sources| is_double(&type_of(a, sources))) =>
                        {
                            Some(None)
                        }
                        None => None,
                    }
                }
                _ => None,
            };
            if let Some(index) = round_index {
                if list.args.len() == 1 {
                    list.args.push(number(0));
                }
                list.args.push(match index {
                    Some(i) => number(i),
                    None => FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::UnaryOp {
                        op: sqlparser::ast::UnaryOperator::Minus,
                        expr: Box::new(Expr::Value(Value::Number("1".to_owned(), false).into())),
                    })),
                });
                f.name = ObjectName::from(vec![Ident::new(ROUND_TYPED_FN)]);
                return;
            }
            for (i, arg) in list.args.iter_mut().enumerate() {
                let FunctionArg::Unnamed(FunctionArgExpr::Expr(a)) = arg else {
                    continue;
                };
                let typed = match name.as_str() {
                    "JSON_ARRAY" | "JSON_ARRAYAGG" => Some(JSON_TYPED_FN),
                    // Its values, not its keys.
                    "JSON_OBJECT" if i % 2 == 1 => Some(JSON_TYPED_FN),
                    other if reads_as_text(other, i) => Some(TEXT_TYPED_FN),
                    _ => None,
                };
                match typed {
                    Some(TEXT_TYPED_FN) => read_as_text(a, scopes, out),
                    Some(function) => match column_named(a, scopes) {
                        Some(column) => wrap(a, function, column, out),
                        // `JSON_ARRAY(2.50, 1e20)` is `[2.50, 1e20]`.
                        None => match number_type(a, scopes) {
                            Some(number) => {
                                mark_expr(a, scopes, out);
                                wrap(a, function, TypedArgument::Number(number), out);
                            }
                            // A JSON value shows what it is (`["12.50"]` of a string IF).
                            None => mark_shown(a, scopes, out),
                        },
                    },
                    None => mark_expr(a, scopes, out),
                }
            }
        }
        _ => {}
    }
}

/// Marks `e`, a value shown or stored as it is (a select list's column, an `ORDER BY` or
/// `GROUP BY` term, an assignment, an inserted value, a text function's argument): the
/// branches of an `IF`, `CASE`, `COALESCE` or `IFNULL` that one string branch makes a
/// string are read as text, as MySQL converts them (`IF(c, d, 'none')` is `12.50` or
/// `none`). Elsewhere (a comparison) they keep their types, as MySQL compares such a
/// string with a number as numbers.
fn mark_shown(e: &mut Expr, scopes: Scopes<'_>, out: &mut Vec<TypedArgument>) {
    match e {
        Expr::Nested(inner) => mark_shown(inner, scopes, out),
        Expr::Case { .. } => mark_case(e, true, scopes, out),
        Expr::Function(f) => {
            let name = function_name(f).unwrap_or_default();
            let text = match &f.args {
                FunctionArguments::List(list) => text_results(&name, &list.args),
                _ => Vec::new(),
            };
            // What is shown of a result is shown of these arguments too: the branches of
            // IF, COALESCE and IFNULL, the value MIN, MAX and ANY_VALUE pick (`MAX(IF(c, d,
            // 'none'))` compares strings).
            let passes_on = matches!(
                name.as_str(),
                "IF" | "COALESCE" | "IFNULL" | "MIN" | "MAX" | "ANY_VALUE"
            );
            if text.is_empty() && !passes_on {
                return mark_expr(e, scopes, out);
            }
            let FunctionArguments::List(list) = &mut f.args else {
                return;
            };
            for (i, arg) in list.args.iter_mut().enumerate() {
                if let FunctionArg::Unnamed(FunctionArgExpr::Expr(a)) = arg {
                    if text.contains(&i) {
                        read_as_text(a, scopes, out);
                    } else if passes_on && !(name == "IF" && i == 0) {
                        mark_shown(a, scopes, out);
                    } else {
                        mark_expr(a, scopes, out);
                    }
                }
            }
        }
        _ => mark_expr(e, scopes, out),
    }
}

/// A function's name in capitals; `None` for a qualified one (`db.f`).
fn function_name(f: &sqlparser::ast::Function) -> Option<String> {
    match f.name.0.as_slice() {
        [part] => Some(
            part.as_ident()
                .map(|i| i.value.to_ascii_uppercase())
                .unwrap_or_default(),
        ),
        _ => None,
    }
}

/// Marks a `CASE`: its results read as text where `shown` and one of them is a string (see
/// [`mark_shown`]).
fn mark_case(e: &mut Expr, shown: bool, scopes: Scopes<'_>, out: &mut Vec<TypedArgument>) {
    let Expr::Case {
        operand,
        conditions,
        else_result,
        ..
    } = e
    else {
        return;
    };
    let text = shown
        && conditions
            .iter()
            .map(|w| &w.result)
            .chain(else_result.as_deref())
            .any(is_string_literal);
    for e in operand
        .iter_mut()
        .map(AsMut::as_mut)
        .chain(conditions.iter_mut().map(|w| &mut w.condition))
    {
        mark_expr(e, scopes, out);
    }
    for e in conditions
        .iter_mut()
        .map(|w| &mut w.result)
        .chain(else_result.as_deref_mut())
    {
        if text {
            read_as_text(e, scopes, out);
        } else if shown {
            mark_shown(e, scopes, out);
        } else {
            mark_expr(e, scopes, out);
        }
    }
}

/// Which of function `name`'s arguments are its result read as text: the branches of an `IF`,
/// the arguments of a `COALESCE` or `IFNULL`, when one of them is a string, which makes
/// the result a string; none otherwise.
fn text_results(name: &str, args: &[FunctionArg]) -> Vec<usize> {
    let results: Vec<usize> = match (name, args.len()) {
        ("IF", 3) => vec![1, 2],
        ("COALESCE" | "IFNULL", n) => (0..n).collect(),
        _ => return Vec::new(),
    };
    let string = results.iter().any(|&i| {
        matches!(args.get(i), Some(FunctionArg::Unnamed(FunctionArgExpr::Expr(e))) if is_string_literal(e))
    });
    if string { results } else { Vec::new() }
}

/// Whether `e` is a string literal (`'none'`).
fn is_string_literal(e: &Expr) -> bool {
    match e {
        Expr::Value(v) => matches!(
            v.value,
            Value::SingleQuotedString(_) | Value::DoubleQuotedString(_)
        ),
        Expr::Nested(inner) => is_string_literal(inner),
        _ => false,
    }
}

/// `a`, read as text: a column as its declared type writes it, a decimal literal with its
/// scale (`CONCAT(1.50)`), an expression of numbers as its type (`CONCAT(0.1 + 0.2)` is
/// `0.3`, `CONCAT(1e3)` is `1000`); anything else as it is, its calls marked.
fn read_as_text(a: &mut Expr, scopes: Scopes<'_>, out: &mut Vec<TypedArgument>) {
    if let Some(column) = column_named(a, scopes) {
        wrap(a, TEXT_TYPED_FN, column, out);
    } else if let Some(text) = super::expr::decimal_literal_text(a) {
        *a = Expr::Value(Value::SingleQuotedString(text).into());
    } else if let Some(number) = number_type(a, scopes) {
        mark_expr(a, scopes, out);
        wrap(a, TEXT_TYPED_FN, TypedArgument::Number(number), out);
    } else {
        mark_shown(a, scopes, out);
    }
}

/// `a` becomes `function(a, i)`, `i` the index of `typed` in `out`.
fn wrap(a: &mut Expr, function: &str, typed: TypedArgument, out: &mut Vec<TypedArgument>) {
    let index = Expr::Value(Value::Number(out.len().to_string(), false).into());
    out.push(typed);
    let plain = core::mem::replace(a, Expr::Value(Value::Null.into()));
    *a = Expr::Function(call(function, vec![plain, index]));
}

/// The type of `a` when it is an expression of numbers whose text depends on it (a decimal
/// or a double, a column's type through `-d` or `IFNULL(d, 0)`, a derived table's computed
/// column: not an integer, not a table's column alone, which [`column_named`] resolves;
/// nothing unknown in it).
fn number_type(a: &Expr, scopes: Scopes<'_>) -> Option<ResultType> {
    let t = type_of(a, scopes.tables.last()?);
    let column_alone = matches!(a, Expr::Identifier(_) | Expr::CompoundIdentifier(_))
        && matches!(t, ResultType::Column { .. });
    (t != ResultType::Integer && !column_alone && t.is_number()).then_some(t)
}

/// Whether a value of type `t` is a double whatever the columns it names (a double makes the
/// arithmetic it is in a double; `ROUND` and `MIN`/`MAX` keep their argument's type).
fn is_double(t: &ResultType) -> bool {
    match t {
        ResultType::Double => true,
        ResultType::Round(a, _) | ResultType::Whole(a) => is_double(a),
        ResultType::Arithmetic(_, l, r) => is_double(l) || is_double(r),
        _ => false,
    }
}

/// The table column `e` names: a qualified name's table from the innermost scope that has
/// The table column `e` names, as SQL resolves a name from the innermost scope outwards:
/// - a qualified name (`n.d`, `shop.n.d`), in the innermost scope that has a table called so:
///   that table's column, or a derived table's column that is one (any other there: none);
/// - a name alone, in the innermost scope that can have it: a derived table's column of that
///   name, or else the column of one of the scopes' tables, which the engine finds by
///   looking them up in order ([`TypedArgument::AnyOf`]); none when a scope has a table
///   whose columns are not known.
fn column_named(e: &Expr, scopes: Scopes<'_>) -> Option<TypedArgument> {
    let as_argument = |t: ResultType| match t {
        ResultType::Column {
            schema,
            table,
            column,
        } => Some(TypedArgument::Column(TypedColumn {
            schema,
            table,
            column,
        })),
        _ => None,
    };
    match e {
        Expr::CompoundIdentifier(parts) => {
            let (schema, qualifier, column) = match parts.as_slice() {
                [q, c] => (None, q, c),
                [s, q, c] => (Some(s), q, c),
                _ => return None,
            };
            for sources in scopes.tables.iter().rev() {
                let Some(source) = sources.iter().find(|s| {
                    s.called()
                        .is_some_and(|c| c.eq_ignore_ascii_case(&qualifier.value))
                        && schema.is_none_or(|db| s.schema_is(&db.value))
                }) else {
                    continue;
                };
                let named = Expr::CompoundIdentifier(vec![qualifier.clone(), column.clone()]);
                return as_argument(column_of(&named, core::slice::from_ref(source)));
            }
            None
        }
        // An upsert's `VALUES(d)`: the row's `d`, of the table's type.
        Expr::Function(f)
            if f.name.0.len() == 1 && f.name.to_string().eq_ignore_ascii_case("VALUES") =>
        {
            match &f.args {
                FunctionArguments::List(list) => match list.args.as_slice() {
                    [FunctionArg::Unnamed(FunctionArgExpr::Expr(e @ Expr::Identifier(_)))] => {
                        column_named(e, scopes)
                    }
                    _ => None,
                },
                _ => None,
            }
        }
        Expr::Nested(inner) => column_named(inner, scopes),
        Expr::Identifier(name) => {
            let mut tables = Vec::new();
            // A table whose columns are not known ends the search: the tables before it (of
            // inner scopes) are looked up, and none found means untyped.
            'scopes: for sources in scopes.tables.iter().rev() {
                for source in *sources {
                    match source.column_named(&name.value) {
                        Ok(Some(ResultType::Column {
                            schema,
                            table,
                            column,
                        })) => tables.push(TypedColumn {
                            schema,
                            table,
                            column,
                        }),
                        // A derived table's column that is not a table's: not typed here.
                        Ok(Some(_)) => return None,
                        Ok(None) => {}
                        Err(()) => break 'scopes,
                    }
                }
            }
            match tables.len() {
                0 => None,
                1 => tables.pop().map(TypedArgument::Column),
                _ => Some(TypedArgument::AnyOf(tables)),
            }
        }
        _ => None,
    }
}
