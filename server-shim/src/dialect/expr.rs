//! Expressions and queries, MySQL to SQLite: literals, operators,
//! casts and the functions that only need a new name or shape.
//!
//! A hand-written walk rather than sqlparser's `VisitorMut`: it is an allow-list. It goes
//! only where it knows the shape (the clauses of a query, the joins it can print, the
//! arguments of the functions it rewrites), rewrites the expression variants MySQL clients
//! use, and refuses (1235) every other variant, naming the outermost construct where it can
//! (`INTERVAL`, `EXTRACT`, `MATCH ... AGAINST`, `FETCH`, table functions, ...). A visitor
//! reaches every expression wherever it sits, children first, so it would rewrite inside
//! clauses this walk refuses and report the innermost construct instead.
//!
//! Functions: renamed where SQLite has the same function under another name or shape
//! (`IF` → `IIF`, `CONCAT` → `||`, `NOW()` → `CURRENT_TIMESTAMP`, ...); every other name
//! is printed unchanged, for SQLite's built-ins or for the functions the engine registers
//! under their MySQL names ([`ENGINE_FUNCTIONS`]).

use sqlparser::ast::{
    BinaryOperator, CastKind, CeilFloorKind, DataType, DateTimeField, Expr, Function, FunctionArg,
    FunctionArgExpr, FunctionArgumentClause, FunctionArguments, GroupByExpr, Ident, InTarget,
    Interval, JoinConstraint, JoinOperator, LimitClause, ObjectName, ObjectNamePart, Offset,
    OffsetRows, OrderByExpr, OrderByKind, Query, Select, SelectItem, SetExpr, TableFactor,
    TableWithJoins, UnaryOperator, Value,
};

use super::text_collation;
use crate::sql_error::SqlError;

/// Functions left under their MySQL names for the engine to register with SQLite
/// (`Connection::create_scalar_function`). SQLite's own built-ins (`ABS`, `COALESCE`,
/// `IFNULL`, `NULLIF`, `LENGTH`, `LOWER`, `UPPER`, `REPLACE`, `TRIM`, `SUBSTR`, `ROUND`,
/// `INSTR`, `HEX`, `COUNT`, `SUM`, `AVG`, `MIN`, `MAX`, `GROUP_CONCAT`, `CONCAT_WS`,
/// `DATE`, `TIME`, `DATETIME`, `STRFTIME`, `JSON_*`) are not listed.
#[cfg(test)]
pub const ENGINE_FUNCTIONS: &[&str] = &[
    "DATE_FORMAT",
    "UNIX_TIMESTAMP",
    "FROM_UNIXTIME",
    "LAST_INSERT_ID",
    "ROW_COUNT",
    "FOUND_ROWS",
    "DATABASE",
    "SCHEMA",
    "USER",
    "CURRENT_USER",
    "SESSION_USER",
    "SYSTEM_USER",
    "VERSION",
    "CONNECTION_ID",
    "CONVERT_TZ",
    "NOW",
    "RAND",
    "UUID",
    "MD5",
    "SHA1",
    "SHA2",
    "LEFT",
    "RIGHT",
    "YEAR",
    "MONTH",
    "DAY",
    "HOUR",
    "MINUTE",
    "SECOND",
    "REGEXP",
];

/// Rewrites a query in place.
pub fn query(q: &mut Query) -> Result<(), SqlError> {
    super::parenthesized::hoisted(q);
    if let Some(with) = &mut q.with {
        for cte in &mut with.cte_tables {
            query(&mut cte.query)?;
        }
    }
    set_expr(&mut q.body)?;
    if let Some(order_by) = &mut q.order_by {
        match &mut order_by.kind {
            OrderByKind::Expressions(list) => order_by_exprs(list)?,
            OrderByKind::All(_) => return Err(SqlError::not_supported("ORDER BY ALL")),
        }
        if order_by.interpolate.is_some() {
            return Err(SqlError::not_supported("ORDER BY ... INTERPOLATE"));
        }
    }
    // MySQL's `LIMIT offset, count` prints as `LIMIT count OFFSET offset`, the order
    // `placeholders` numbers `?` in.
    if let Some(LimitClause::OffsetCommaLimit { offset, limit }) = &q.limit_clause {
        q.limit_clause = Some(LimitClause::LimitOffset {
            limit: Some(limit.clone()),
            offset: Some(Offset {
                value: offset.clone(),
                rows: OffsetRows::None,
            }),
            limit_by: Vec::new(),
        });
    }
    let mut limit_by = false;
    if let Some(LimitClause::LimitOffset {
        limit,
        offset,
        limit_by: by,
    }) = &mut q.limit_clause
    {
        if let Some(limit) = limit {
            expr(limit)?;
        }
        if let Some(offset) = offset {
            expr(&mut offset.value)?;
        }
        limit_by = !by.is_empty();
    }
    if q.fetch.is_some()
        || limit_by
        || q.for_clause.is_some()
        || q.settings.is_some()
        || q.format_clause.is_some()
        || !q.pipe_operators.is_empty()
    {
        return Err(SqlError::not_supported("FETCH/LIMIT BY/FOR clause"));
    }
    // `FOR UPDATE` / `LOCK IN SHARE MODE`: SQLite serializes writers, there is no row lock
    // to take, so the clause is accepted and dropped.
    q.locks.clear();
    Ok(())
}

fn set_expr(body: &mut SetExpr) -> Result<(), SqlError> {
    match body {
        SetExpr::Select(select) => self::select(select),
        SetExpr::Query(q) => {
            query(q)?;
            super::parenthesized::unparenthesized(body);
            Ok(())
        }
        SetExpr::SetOperation { left, right, .. } => {
            set_expr(left)?;
            set_expr(right)?;
            super::parenthesized::grouped(body);
            Ok(())
        }
        SetExpr::Values(values) => {
            for row in &mut values.rows {
                exprs(row)?;
            }
            Ok(())
        }
        SetExpr::Insert(_)
        | SetExpr::Update(_)
        | SetExpr::Delete(_)
        | SetExpr::Merge(_)
        | SetExpr::Table(_) => Err(SqlError::not_supported("this query form")),
    }
}

fn select(s: &mut Select) -> Result<(), SqlError> {
    if s.into.is_some() {
        return Err(SqlError::not_supported("SELECT ... INTO"));
    }
    if s.top.is_some() {
        return Err(SqlError::not_supported("TOP"));
    }
    for item in &mut s.projection {
        match item {
            SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => {
                expr(e)?;
                json_extract_as_written(e);
            }
            SelectItem::QualifiedWildcard(..) | SelectItem::Wildcard(_) => {}
            SelectItem::ExprWithAliases { .. } => {
                return Err(SqlError::not_supported("AS (alias, ...)"));
            }
        }
    }
    // `FROM DUAL` is MySQL's "no table"; SQLite has no DUAL and needs no FROM.
    if let [only] = s.from.as_slice()
        && only.joins.is_empty()
        && matches!(&only.relation, TableFactor::Table { name, alias: None, .. }
            if name.0.len() == 1 && name.0.first().and_then(|p| p.as_ident()).is_some_and(|i| i.quote_style.is_none() && i.value.eq_ignore_ascii_case("DUAL")))
    {
        s.from.clear();
    }
    for table in &mut s.from {
        table_with_joins(table)?;
    }
    if let Some(e) = &mut s.selection {
        expr(e)?;
    }
    match &mut s.group_by {
        GroupByExpr::Expressions(list, modifiers) => {
            if !modifiers.is_empty() {
                return Err(SqlError::not_supported("GROUP BY ... WITH ROLLUP"));
            }
            group_by_exprs(list)?;
        }
        GroupByExpr::All(_) => return Err(SqlError::not_supported("GROUP BY ALL")),
    }
    if let Some(e) = &mut s.having {
        expr(e)?;
    }
    Ok(())
}

/// Rewrites the tables and join conditions of a FROM clause.
pub fn table_with_joins(t: &mut TableWithJoins) -> Result<(), SqlError> {
    table_factor(&mut t.relation)?;
    for join in &mut t.joins {
        table_factor(&mut join.relation)?;
        match join_condition(&mut join.join_operator) {
            Ok(Some(e)) => expr(e)?,
            Ok(None) => {}
            Err(()) => return Err(SqlError::not_supported("this join")),
        }
    }
    Ok(())
}

/// A join's `ON` condition, `None` for one without (`USING`, a plain or cross join); `Err`
/// for a join this dialect does not translate.
pub(super) fn join_condition(op: &mut JoinOperator) -> Result<Option<&mut Expr>, ()> {
    match op {
        JoinOperator::Join(c)
        | JoinOperator::Inner(c)
        | JoinOperator::Left(c)
        | JoinOperator::LeftOuter(c)
        | JoinOperator::Right(c)
        | JoinOperator::RightOuter(c)
        | JoinOperator::FullOuter(c) => Ok(match c {
            JoinConstraint::On(e) => Some(e),
            _ => None,
        }),
        JoinOperator::CrossJoin(JoinConstraint::None) => Ok(None),
        _ => Err(()),
    }
}

fn table_factor(t: &mut TableFactor) -> Result<(), SqlError> {
    match t {
        TableFactor::Table {
            args, with_hints, ..
        } => {
            // MySQL index hints (`USE INDEX (i)`) have no SQLite form worth keeping.
            with_hints.clear();
            if args.is_some() {
                return Err(SqlError::not_supported("table functions"));
            }
            Ok(())
        }
        TableFactor::Derived { subquery, .. } => query(subquery),
        TableFactor::NestedJoin {
            table_with_joins: inner,
            ..
        } => table_with_joins(inner),
        _ => Err(SqlError::not_supported("this table expression")),
    }
}

/// Rewrites each expression of a list.
pub fn exprs(list: &mut [Expr]) -> Result<(), SqlError> {
    list.iter_mut().try_for_each(expr)
}

fn order_by_exprs(list: &mut [OrderByExpr]) -> Result<(), SqlError> {
    list.iter_mut().try_for_each(|o| {
        let text = text_collation::is_text_call(&o.expr);
        expr(&mut o.expr)?;
        json_extract_as_written(&mut o.expr);
        if text {
            text_collation::in_collation(&mut o.expr);
        }
        Ok(())
    })
}

/// Rewrites `GROUP BY`'s terms: a text function's result groups in the connection's
/// collation.
fn group_by_exprs(list: &mut [Expr]) -> Result<(), SqlError> {
    list.iter_mut().try_for_each(|e| {
        let text = text_collation::is_text_call(e);
        expr(e)?;
        if text {
            text_collation::in_collation(e);
        }
        Ok(())
    })
}

/// Rewrites one expression (and everything inside it) for SQLite.
///
/// # Errors
/// 1235 naming the construct when SQLite has no equivalent.
pub fn expr(e: &mut Expr) -> Result<(), SqlError> {
    if let Some(variable) = variable(e) {
        *e = variable;
        return Ok(());
    }
    match e {
        Expr::Identifier(_)
        | Expr::CompoundIdentifier(_)
        | Expr::Wildcard(_)
        | Expr::QualifiedWildcard(..) => {}
        Expr::Value(v) => {
            // An integer SQLite would hold as a float, losing digits (MySQL's BIGINT
            // UNSIGNED holds it exactly).
            if let Value::Number(n, _) = &v.value
                && n.bytes().all(|b| b.is_ascii_digit())
                && n.parse::<i64>().is_err()
            {
                return Err(SqlError::not_supported(
                    "an integer above 9223372036854775807",
                ));
            }
            if let Some(rewritten) = value(&mut v.value) {
                *e = rewritten;
            }
        }
        Expr::Prefixed { value: v, .. } if matches!(v.as_ref(), Expr::Value(_)) => {
            // `_utf8mb4'x'`: everything is UTF-8 here; the introducer says nothing more.
            let mut v = core::mem::replace(v.as_mut(), Expr::Value(Value::Null.into()));
            if let Expr::Value(literal) = &mut v
                && let Some(rewritten) = value(&mut literal.value)
            {
                v = rewritten;
            }
            *e = v;
        }
        Expr::IsNull(inner) | Expr::IsNotNull(inner) => {
            expr(inner)?;
            // JSON's `null` is a value, not SQL's NULL.
            json_extract_as_written(inner);
        }
        Expr::Nested(inner)
        | Expr::IsTrue(inner)
        | Expr::IsNotTrue(inner)
        | Expr::IsFalse(inner)
        | Expr::IsNotFalse(inner) => expr(inner)?,
        Expr::IsDistinctFrom(a, b) | Expr::IsNotDistinctFrom(a, b) => {
            expr(a)?;
            expr(b)?;
        }
        Expr::UnaryOp { op, expr: inner } => {
            expr(inner)?;
            if matches!(op, UnaryOperator::Plus | UnaryOperator::Minus) {
                json_extract_read_as(inner, JSON_NUMBER_FN);
            }
            if !matches!(
                op,
                UnaryOperator::Plus
                    | UnaryOperator::Minus
                    | UnaryOperator::Not
                    | UnaryOperator::BitwiseNot
            ) {
                return Err(SqlError::not_supported("this unary operator"));
            }
        }
        Expr::BinaryOp { left, op, right }
            if matches!(op, BinaryOperator::Plus | BinaryOperator::Minus)
                && (matches!(right.as_ref(), Expr::Interval(_))
                    || (matches!(op, BinaryOperator::Plus)
                        && matches!(left.as_ref(), Expr::Interval(_)))) =>
        {
            // `t + INTERVAL n UNIT`, `INTERVAL n UNIT + t`, `t - INTERVAL n UNIT`.
            let subtract = matches!(op, BinaryOperator::Minus);
            let (time, interval) = match (left.as_mut(), right.as_mut()) {
                (t, Expr::Interval(i)) => (t, i),
                (Expr::Interval(i), t) => (t, i),
                _ => return Err(SqlError::not_supported("INTERVAL")),
            };
            expr(time)?;
            let time = core::mem::replace(time, Expr::Value(Value::Null.into()));
            *e = date_add(time, interval, subtract)?;
        }
        Expr::BinaryOp { left, op, right } => {
            // Read before the rewrite: a text function compared with what is not a column
            // compares in the connection's collation.
            let collated = is_comparison(op).then(|| {
                (
                    text_collation::is_text_call(left) && !text_collation::is_column(right),
                    text_collation::is_text_call(right) && !text_collation::is_column(left),
                )
            });
            expr(left)?;
            expr(right)?;
            if let Some((l, r)) = collated {
                if l {
                    text_collation::in_collation(left);
                }
                if r {
                    text_collation::in_collation(right);
                }
            }
            if is_comparison(op) || matches!(op, BinaryOperator::Spaceship) {
                json_extract_compared(left, right);
                json_extract_compared(right, left);
            }
            if matches!(
                op,
                BinaryOperator::Plus
                    | BinaryOperator::Minus
                    | BinaryOperator::Multiply
                    | BinaryOperator::Divide
                    | BinaryOperator::Modulo
                    | BinaryOperator::MyIntegerDivide
            ) {
                // Arithmetic reads a JSON value as a number, as a comparison with one does.
                json_extract_read_as(left, JSON_NUMBER_FN);
                json_extract_read_as(right, JSON_NUMBER_FN);
            }
            if let Some(rewritten) = binary(left, op, right)? {
                *e = rewritten;
            }
        }
        Expr::Between {
            expr: a, low, high, ..
        } => {
            expr(a)?;
            expr(low)?;
            expr(high)?;
            let with = if is_number(low) && is_number(high) {
                JSON_NUMBER_FN
            } else {
                JSON_VALUE_FN
            };
            json_extract_read_as(a, with);
        }
        Expr::Like {
            expr: a,
            pattern,
            any,
            escape_char,
            ..
        } => {
            if *any {
                return Err(SqlError::not_supported("LIKE ANY"));
            }
            for side in [a.as_mut(), pattern.as_mut()] {
                if let Expr::Collate {
                    expr: inner,
                    collation,
                } = side
                {
                    let kind = if super::is_binary_collation(collation_for(collation)) {
                        "bin"
                    } else {
                        "ci"
                    };
                    let plain = core::mem::replace(inner.as_mut(), Expr::Value(Value::Null.into()));
                    *side = Expr::Function(call(
                        COLLATED_FN,
                        vec![
                            plain,
                            Expr::Value(Value::SingleQuotedString(kind.to_owned()).into()),
                        ],
                    ));
                }
            }
            expr(a)?;
            expr(pattern)?;
            // A string is matched with its quotes, as MariaDB matches it.
            json_extract_as_written(a);
            match escape_char {
                Some(escape) => expr(escape)?,
                // MySQL's LIKE escapes with `\` unless told otherwise (`'\_transient\_%'`, as
                // WordPress writes it, matches a literal `_`); SQLite's has no escape.
                None => {
                    *escape_char = Some(Box::new(Expr::Value(
                        Value::SingleQuotedString("\\".to_owned()).into(),
                    )));
                }
            }
        }
        Expr::RLike {
            expr: a, pattern, ..
        } => {
            // Printed as `a REGEXP b`: SQLite calls the engine's `regexp(b, a)`.
            expr(a)?;
            expr(pattern)?;
        }
        Expr::In {
            expr: a,
            target: InTarget::List(list),
            global: false,
            ..
        } => {
            expr(a)?;
            exprs(list)?;
        }
        Expr::In {
            expr: a,
            target: InTarget::Subquery(subquery),
            global: false,
            ..
        } => {
            expr(a)?;
            query(subquery)?;
        }
        Expr::Subquery(q) | Expr::Exists { subquery: q, .. } => query(q)?,
        Expr::Tuple(list) => exprs(list)?,
        Expr::Case {
            operand,
            conditions,
            else_result,
            ..
        } => {
            if let Some(o) = operand {
                expr(o)?;
            }
            for when in conditions.iter_mut() {
                expr(&mut when.condition)?;
                expr(&mut when.result)?;
            }
            if let Some(x) = else_result {
                expr(x)?;
            }
        }
        Expr::Cast {
            kind,
            expr: inner,
            data_type,
            format,
        } => {
            if format.is_some()
                || !matches!(
                    kind,
                    CastKind::Cast | CastKind::TryCast | CastKind::SafeCast
                )
            {
                return Err(SqlError::not_supported("this CAST"));
            }
            expr(inner)?;
            let inner = core::mem::replace(inner.as_mut(), Expr::Value(Value::Null.into()));
            *e = cast(inner, data_type)?;
        }
        Expr::Convert {
            expr: inner,
            data_type,
            charset,
            ..
        } => {
            expr(inner)?;
            let inner = core::mem::replace(inner.as_mut(), Expr::Value(Value::Null.into()));
            *e = match (data_type, charset) {
                (Some(t), _) => cast(inner, t)?,
                // `CONVERT(x USING utf8mb4)`: text is UTF-8 already.
                (None, _) => inner,
            };
        }
        Expr::Collate {
            expr: inner,
            collation,
        } => {
            expr(inner)?;
            *collation = ObjectName::from(vec![Ident::new(collation_for(collation))]);
        }
        Expr::Function(f) => {
            if let Some(rewritten) = function(f)? {
                *e = rewritten;
            }
        }
        Expr::Substring {
            expr: a,
            substring_from,
            substring_for,
            special,
            ..
        } => {
            expr(a)?;
            if let Some(x) = substring_from {
                expr(x)?;
            }
            if let Some(x) = substring_for {
                expr(x)?;
            }
            // `SUBSTRING(s FROM 2 FOR 3)` prints as `SUBSTRING(s, 2, 3)`, which SQLite has.
            *special = true;
        }
        Expr::Trim {
            expr: a,
            trim_where: None,
            trim_what: None,
            trim_characters: None,
        } => expr(a)?,
        Expr::Ceil {
            expr: inner,
            field: CeilFloorKind::DateTimeField(DateTimeField::NoDateTime),
        } => {
            expr(inner)?;
            let x = core::mem::replace(inner.as_mut(), Expr::Value(Value::Null.into()));
            *e = Expr::Function(call(CEIL_FN, vec![x]));
        }
        Expr::Floor {
            expr: inner,
            field: CeilFloorKind::DateTimeField(DateTimeField::NoDateTime),
        } => {
            expr(inner)?;
            let x = core::mem::replace(inner.as_mut(), Expr::Value(Value::Null.into()));
            *e = Expr::Function(call(FLOOR_FN, vec![x]));
        }
        Expr::Interval(_) => return Err(SqlError::not_supported("INTERVAL")),
        Expr::Extract { .. } => return Err(SqlError::not_supported("EXTRACT")),
        Expr::MatchAgainst { .. } => return Err(SqlError::not_supported("MATCH ... AGAINST")),
        Expr::Position { .. } => return Err(SqlError::not_supported("POSITION")),
        Expr::Trim { .. } => {
            return Err(SqlError::not_supported("TRIM with LEADING/TRAILING/BOTH"));
        }
        _ => return Err(SqlError::not_supported("this expression")),
    }
    negate_json_number(e);
    Ok(())
}

/// `-JSON_EXTRACT(…)` read as a number, negated by the engine's own function
/// ([`JSON_NEGATED_NUMBER_FN`]): SQLite's minus is `0 - x`, which turns MariaDB's negative
/// zero (a JSON string, null or array read as the number 0, then negated: `-0`) positive.
fn negate_json_number(e: &mut Expr) {
    let Expr::UnaryOp {
        op: UnaryOperator::Minus,
        expr: inner,
    } = e
    else {
        return;
    };
    let Expr::Function(f) = inner.as_mut() else {
        return;
    };
    if !matches!(f.name.0.as_slice(), [ObjectNamePart::Identifier(name)] if name.value == JSON_NUMBER_FN)
    {
        return;
    }
    f.name = ObjectName::from(vec![Ident::new(JSON_NEGATED_NUMBER_FN)]);
    let negated = std::mem::replace(inner.as_mut(), Expr::value(Value::Null));
    *e = negated;
}

/// A literal as SQLite must read it, when its printed MySQL form would read differently.
///
/// sqlparser's MySQL tokenizer has already applied MySQL's backslash escapes, and prints
/// single-quoted strings with `'` doubled and everything else raw, which is SQLite's
/// only escape: `'it\'s'`, `'a\\b'` and `'\n'` arrive with the same value. Double-quoted
/// strings are strings in MySQL but identifiers first in SQLite, so they become
/// single-quoted. A NUL would end SQLite's statement text, so it becomes `char(0)`.
fn value(v: &mut Value) -> Option<Expr> {
    let text = match v {
        Value::DoubleQuotedString(s)
        | Value::NationalStringLiteral(s)
        | Value::SingleQuotedString(s) => core::mem::take(s),
        _ => return None,
    };
    if !text.contains('\0') {
        return Some(Expr::Value(Value::SingleQuotedString(text).into()));
    }
    let mut parts = text
        .split('\0')
        .map(|p| Expr::Value(Value::SingleQuotedString(p.to_owned()).into()));
    let first = parts.next()?;
    // Not a number literal: `Value::Number`'s payload type depends on sqlparser features.
    let nul = Expr::Cast {
        kind: CastKind::Cast,
        expr: Box::new(Expr::Value(Value::HexStringLiteral("00".to_owned()).into())),
        data_type: DataType::Text,
        format: None,
    };
    let joined = parts.fold(first, |acc, part| concat(concat(acc, nul.clone()), part));
    Some(Expr::Nested(Box::new(joined)))
}

fn concat(left: Expr, right: Expr) -> Expr {
    Expr::BinaryOp {
        left: Box::new(left),
        op: BinaryOperator::StringConcat,
        right: Box::new(right),
    }
}

fn nested(e: Expr) -> Box<Expr> {
    Box::new(match e {
        simple @ (Expr::Value(_)
        | Expr::Identifier(_)
        | Expr::CompoundIdentifier(_)
        | Expr::Nested(_)
        | Expr::Function(_)) => simple,
        other => Expr::Nested(Box::new(other)),
    })
}

/// MySQL operators whose SQLite spelling or meaning differs.
fn binary(
    left: &mut Box<Expr>,
    op: &mut BinaryOperator,
    right: &mut Box<Expr>,
) -> Result<Option<Expr>, SqlError> {
    Ok(match op {
        // `a DIV b`: integer division, truncating, NULL on zero (SQLite's `/` gives NULL too).
        BinaryOperator::MyIntegerDivide => {
            let l = core::mem::replace(left.as_mut(), Expr::Value(Value::Null.into()));
            let r = core::mem::replace(right.as_mut(), Expr::Value(Value::Null.into()));
            let division = Expr::BinaryOp {
                left: nested(l),
                op: BinaryOperator::Divide,
                right: nested(r),
            };
            Some(Expr::Cast {
                kind: CastKind::Cast,
                expr: Box::new(division),
                data_type: DataType::Integer(None),
                format: None,
            })
        }
        // MySQL's `/` never truncates (`7 / 2` is 3.5000); SQLite's does between integers.
        // Divided as reals: the value MySQL's decimal has, written as a float (3.5).
        BinaryOperator::Divide => {
            let l = core::mem::replace(left.as_mut(), Expr::Value(Value::Null.into()));
            **left = Expr::Cast {
                kind: CastKind::Cast,
                expr: nested(l),
                data_type: DataType::Real,
                format: None,
            };
            None
        }
        // MySQL's `||` is OR (without the PIPES_AS_CONCAT mode, which MariaDB and MySQL
        // leave off by default); SQLite's is concatenation.
        BinaryOperator::StringConcat => {
            *op = BinaryOperator::Or;
            None
        }
        // `<=>` is NULL-safe equality: SQLite's `IS`.
        BinaryOperator::Spaceship => {
            let l = core::mem::replace(left.as_mut(), Expr::Value(Value::Null.into()));
            let r = core::mem::replace(right.as_mut(), Expr::Value(Value::Null.into()));
            Some(Expr::IsNotDistinctFrom(nested(l), nested(r)))
        }
        // Two string literals compare in the connection's collation, which ignores case
        // (`'a' = 'A'` is 1) and trailing spaces; SQLite's default compares bytes. A column
        // has a collation of its own, which SQLite applies.
        op if is_comparison(op) && is_string_literal(left) && is_string_literal(right) => {
            let l = core::mem::replace(left.as_mut(), Expr::Value(Value::Null.into()));
            let r = core::mem::replace(right.as_mut(), Expr::Value(Value::Null.into()));
            **left = Expr::Function(call(COMPARE_CI_FN, vec![l, r]));
            **right = Expr::Value(Value::Number("0".to_owned(), false).into());
            None
        }
        // `%` of numbers with a fraction: SQLite's takes integers first.
        BinaryOperator::Modulo => {
            let l = core::mem::replace(left.as_mut(), Expr::Value(Value::Null.into()));
            let r = core::mem::replace(right.as_mut(), Expr::Value(Value::Null.into()));
            Some(Expr::Function(call(MOD_FN, vec![l, r])))
        }
        BinaryOperator::Xor => return Err(SqlError::not_supported("XOR")),
        BinaryOperator::BitwiseXor => return Err(SqlError::not_supported("^ (bitwise XOR)")),
        _ => None,
    })
}

/// Whether `e` is a string literal (its text is a marker until printed: `literals`).
fn is_string_literal(e: &Expr) -> bool {
    matches!(e, Expr::Value(v) if matches!(v.value, Value::SingleQuotedString(_)))
}

/// The engine's function comparing two string literals as MariaDB's collation does: -1, 0, 1.
pub const COMPARE_CI_FN: &str = "mysql_compare_ci";

/// The engine's `%` and `MOD`.
pub const MOD_FN: &str = "mysql_mod";

/// The engine's `ROUND`.
pub const ROUND_FN: &str = "mysql_round";

/// The engine's `CEIL` and `CEILING` (SQLite's `ceil` gives a double for an integer).
pub const CEIL_FN: &str = "mysql_ceil";

/// The engine's `FLOOR`.
pub const FLOOR_FN: &str = "mysql_floor";

/// The engine's `TIME(x)` and `CAST(x AS TIME)`: MySQL's signed durations, where SQLite's
/// `time()` takes a time of day (NULL for `-12:30`) and drops the fraction.
pub const TIME_FN: &str = "mysql_time";

/// `CAST(x AS <MySQL type>)` as SQLite: the integer and text casts by affinity, the
/// temporal ones through SQLite's date functions (a plain CAST to DATE would give the
/// year as a number).
fn cast(inner: Expr, to: &DataType) -> Result<Expr, SqlError> {
    let name = to.to_string().to_ascii_uppercase();
    if casts_to_text(to) {
        return Ok(cast_char(inner, &name));
    }
    let base = name.split(['(', ' ']).next().unwrap_or_default();
    let sqlite = match base {
        // MySQL rounds a number (`CAST(1.5 AS SIGNED)` is 2) where SQLite truncates, and
        // wraps a negative one to UNSIGNED: the engine's functions.
        "SIGNED" | "INT" | "INTEGER" | "BIGINT" => {
            return Ok(Expr::Function(call(CAST_SIGNED_FN, vec![inner])));
        }
        "UNSIGNED" => return Ok(Expr::Function(call(CAST_UNSIGNED_FN, vec![inner]))),
        "JSON" => DataType::Text,
        "BINARY" | "VARBINARY" | "BLOB" => DataType::Blob(None),
        "DECIMAL" | "NUMERIC" | "DEC" | "FIXED" => {
            DataType::Numeric(sqlparser::ast::ExactNumberInfo::None)
        }
        "DOUBLE" | "FLOAT" | "REAL" => DataType::Real,
        "TIME" => {
            // `TIME(p)`'s decimals, else none.
            let decimals = name
                .split_once('(')
                .and_then(|(_, p)| p.trim_end_matches(')').trim().parse::<u8>().ok())
                .unwrap_or(0);
            let decimals = Expr::Value(Value::Number(decimals.to_string(), false).into());
            return Ok(Expr::Function(call(TIME_FN, vec![inner, decimals])));
        }
        "DATE" | "DATETIME" | "TIMESTAMP" => {
            let f = match base {
                "DATE" => "date",
                _ => "datetime",
            };
            return Ok(Expr::Function(call(f, vec![inner])));
        }
        _ => return Err(SqlError::not_supported(&format!("CAST AS {name}"))),
    };
    Ok(Expr::Cast {
        kind: CastKind::Cast,
        expr: Box::new(inner),
        data_type: sqlite,
        format: None,
    })
}

/// Whether a `CAST` to `to` gives text (`CHAR`, `CHAR(n)`, `VARCHAR(n)`, `NCHAR`, `TEXT`).
pub(super) fn casts_to_text(to: &DataType) -> bool {
    let name = to.to_string().to_ascii_uppercase();
    matches!(
        name.split(['(', ' ']).next(),
        Some("CHAR" | "VARCHAR" | "NCHAR" | "TEXT")
    )
}

/// `CAST(x AS CHAR[(n)])`: [`CAST_CHAR_FN`] with the length (-1 for none). A decimal literal
/// goes as the text MariaDB writes for it (`1.50`, its scale kept), which SQLite's double
/// would lose; a column of a table in scope comes as its type writes it
/// (`typed_arguments::mark`).
fn cast_char(inner: Expr, name: &str) -> Expr {
    let length = name
        .split_once('(')
        .and_then(|(_, n)| n.trim_end_matches(')').trim().parse::<u32>().ok())
        .map_or(-1, i64::from);
    let inner = decimal_literal_text(&inner).map_or(inner, |text| {
        Expr::Value(Value::SingleQuotedString(text).into())
    });
    let length = Expr::Value(Value::Number(length.to_string(), false).into());
    Expr::Function(call(CAST_CHAR_FN, vec![inner, length]))
}

/// The text MariaDB writes for a decimal literal (`1.50`, `-0.5`, `.5` as `0.5`), or `None`
/// for anything else.
pub(super) fn decimal_literal_text(e: &Expr) -> Option<String> {
    let (sign, e) = match e {
        Expr::UnaryOp {
            op: sqlparser::ast::UnaryOperator::Minus,
            expr,
        } => ("-", expr.as_ref()),
        e => ("", e),
    };
    let Expr::Value(v) = e else {
        return None;
    };
    let Value::Number(n, _) = &v.value else {
        return None;
    };
    let (whole, fraction) = n.split_once('.')?;
    if !whole
        .bytes()
        .chain(fraction.bytes())
        .all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let whole = whole.trim_start_matches('0');
    let whole = if whole.is_empty() { "0" } else { whole };
    let zero = whole == "0" && fraction.bytes().all(|b| b == b'0');
    let sign = if zero { "" } else { sign };
    Some(if fraction.is_empty() {
        format!("{sign}{whole}")
    } else {
        format!("{sign}{whole}.{fraction}")
    })
}

/// The engine's function behind `CAST(x AS CHAR[(n)])`: `(x, n)`, `n` -1 for no length.
pub const CAST_CHAR_FN: &str = "mysql_cast_char";

/// The engine's function that marks a side of `LIKE` written with an explicit `COLLATE`:
/// `(x, 'bin')` or `(x, 'ci')`. SQLite gives a function its arguments' values, not their
/// collations; an explicit one decides over a column's (MySQL's coercibility 0).
pub const COLLATED_FN: &str = "mysql_collated";

pub use super::text_collation::{BIN, GENERAL_CI, NOPAD_BIN};

/// SQLite's collation for a MySQL one: `binary` compares bytes; a `_bin` one code points,
/// trailing spaces ignored ([`BIN`]), or counted where it says so (`_nopad_bin`, and MySQL
/// 8's `_0900_bin`: [`NOPAD_BIN`]); the rest [`GENERAL_CI`].
pub fn collation_for(mysql: &ObjectName) -> &'static str {
    let name = mysql.to_string().to_ascii_lowercase();
    let name = name.trim_matches(['`', '"', '\'']);
    if name == "binary" {
        "BINARY"
    } else if name.ends_with("_nopad_bin") || name.ends_with("_0900_bin") {
        NOPAD_BIN
    } else if name.ends_with("_bin") {
        BIN
    } else {
        GENERAL_CI
    }
}

/// `@@x` (`@@session.x`, `@@global.x`) and `@x` inside a statement: a call of the function
/// the engine registers to read the session's variable
/// ([`SYSTEM_VARIABLE_FN`], [`USER_VARIABLE_FN`]).
fn variable(e: &Expr) -> Option<Expr> {
    let (function, name) = match e {
        Expr::Identifier(id) if id.quote_style.is_none() => match id.value.strip_prefix("@@") {
            Some(name) => (SYSTEM_VARIABLE_FN, name),
            None => (USER_VARIABLE_FN, id.value.strip_prefix('@')?),
        },
        Expr::CompoundIdentifier(parts) => match parts.as_slice() {
            [scope, name]
                if scope.quote_style.is_none()
                    && ["@@session", "@@global", "@@local"]
                        .iter()
                        .any(|s| scope.value.eq_ignore_ascii_case(s)) =>
            {
                (SYSTEM_VARIABLE_FN, name.value.as_str())
            }
            _ => return None,
        },
        _ => return None,
    };
    let name = Expr::Value(Value::SingleQuotedString(name.to_ascii_lowercase()).into());
    Some(Expr::Function(call(function, vec![name])))
}

/// A call `name(args)`.
pub fn call(name: &str, args: Vec<Expr>) -> Function {
    Function {
        name: ObjectName::from(vec![Ident::new(name)]),
        uses_odbc_syntax: false,
        parameters: FunctionArguments::None,
        args: FunctionArguments::List(sqlparser::ast::FunctionArgumentList {
            duplicate_treatment: None,
            args: args
                .into_iter()
                .map(|a| FunctionArg::Unnamed(FunctionArgExpr::Expr(a)))
                .collect(),
            clauses: Vec::new(),
        }),
        filter: None,
        null_treatment: None,
        over: None,
        within_group: Vec::new(),
    }
}

/// A keyword SQLite evaluates like a function (`CURRENT_TIMESTAMP`).
fn keyword(name: &str) -> Expr {
    Expr::Function(Function {
        args: FunctionArguments::None,
        ..call(name, Vec::new())
    })
}

/// Rewrites a function call; returns a replacement when the call changes shape.
fn function(f: &mut Function) -> Result<Option<Expr>, SqlError> {
    if f.over.is_some() || f.filter.is_some() || !f.within_group.is_empty() {
        // Window functions print the same in SQLite; only the arguments need rewriting.
    }
    let mut plain_args: Option<Vec<Expr>> = Some(Vec::new());
    match &mut f.args {
        FunctionArguments::None => plain_args = None,
        FunctionArguments::Subquery(q) => {
            query(q)?;
            plain_args = None;
        }
        FunctionArguments::List(list) => {
            for arg in &mut list.args {
                match arg {
                    // `DATE_ADD(t, INTERVAL n UNIT)`: the interval is taken apart below.
                    FunctionArg::Unnamed(FunctionArgExpr::Expr(a @ Expr::Interval(_))) => {
                        if let Some(v) = &mut plain_args {
                            v.push(a.clone());
                        }
                    }
                    FunctionArg::Unnamed(FunctionArgExpr::Expr(a)) => {
                        expr(a)?;
                        if let Some(v) = &mut plain_args {
                            v.push(a.clone());
                        }
                    }
                    FunctionArg::Named {
                        arg: FunctionArgExpr::Expr(a),
                        ..
                    } => {
                        expr(a)?;
                        plain_args = None;
                    }
                    _ => plain_args = None,
                }
            }
            if list.duplicate_treatment.is_some() || !list.clauses.is_empty() {
                plain_args = None;
            }
            for clause in &mut list.clauses {
                if let FunctionArgumentClause::OrderBy(o) = clause {
                    order_by_exprs(o)?;
                }
            }
        }
    }
    let name = match f.name.0.as_slice() {
        [ObjectNamePart::Identifier(one)] if one.quote_style.is_none() => {
            one.value.to_ascii_uppercase()
        }
        _ => return Ok(None),
    };
    if name == "GROUP_CONCAT" {
        group_concat(f)?;
        return Ok(None);
    }
    if name.starts_with("JSON_") {
        json_arguments_as_json(f);
        if matches!(name.as_str(), "JSON_OBJECT" | "JSON_ARRAY") {
            return Ok(Some(Expr::Function(call(
                JSON_TEXT_FN,
                vec![Expr::Function(f.clone())],
            ))));
        }
        if name == "JSON_ARRAYAGG" {
            return json_arrayagg(f).map(Some);
        }
    }
    let Some(mut args) = plain_args else {
        return Ok(None);
    };
    if let ("DATE_ADD" | "ADDDATE" | "DATE_SUB" | "SUBDATE", [_, Expr::Interval(_)]) =
        (name.as_str(), args.as_slice())
    {
        let (Some(Expr::Interval(mut interval)), Some(time)) = (args.pop(), args.pop()) else {
            return Err(SqlError::not_supported("INTERVAL"));
        };
        let subtract = name.ends_with("SUB") || name == "SUBDATE";
        return date_add(time, &mut interval, subtract).map(Some);
    }
    if let ("TIMESTAMPDIFF", [Expr::Identifier(unit), _, _]) = (name.as_str(), args.as_slice()) {
        // The unit is a keyword, not a column: passed as text to the engine's function.
        let unit = unit.value.to_ascii_lowercase();
        if !TIMESTAMPDIFF_UNITS.contains(&unit.as_str()) {
            return Err(SqlError::not_supported(&format!(
                "TIMESTAMPDIFF({unit}, ...)"
            )));
        }
        let mut it = args.into_iter().skip(1);
        let (Some(from), Some(to)) = (it.next(), it.next()) else {
            return Ok(None);
        };
        let unit = Expr::Value(Value::SingleQuotedString(unit).into());
        return Ok(Some(Expr::Function(call(
            TIMESTAMPDIFF_FN,
            vec![unit, from, to],
        ))));
    }
    if args.iter().any(|a| matches!(a, Expr::Interval(_))) {
        return Err(SqlError::not_supported("INTERVAL"));
    }
    let rename = |f: &mut Function, to: &str| {
        f.name = ObjectName::from(vec![Ident::new(to)]);
        Ok(None)
    };
    match (name.as_str(), args.len()) {
        // SQLite's date keywords read the clock once per statement, like MySQL's NOW().
        // They are UTC; the engine's session time zone is UTC to match.
        ("NOW" | "SYSDATE" | "LOCALTIME" | "LOCALTIMESTAMP" | "CURRENT_TIMESTAMP", 0) => {
            Ok(Some(keyword("CURRENT_TIMESTAMP")))
        }
        // With a precision: its fraction of a second, from the engine's clock (TypeORM's
        // `@CreateDateColumn` declares `DEFAULT CURRENT_TIMESTAMP(6)`).
        ("NOW" | "SYSDATE" | "LOCALTIME" | "LOCALTIMESTAMP" | "CURRENT_TIMESTAMP", 1) => {
            let precision = match args.first() {
                Some(Expr::Value(v)) => match &v.value {
                    Value::Number(n, _) => n.parse::<u8>().ok().filter(|p| *p <= 6),
                    _ => None,
                },
                _ => None,
            };
            match precision {
                Some(0) => Ok(Some(keyword("CURRENT_TIMESTAMP"))),
                Some(p) => Ok(Some(Expr::Function(call(
                    NOW_FN,
                    vec![Expr::Value(Value::Number(p.to_string(), false).into())],
                )))),
                None => Err(SqlError::not_supported(
                    "a precision of CURRENT_TIMESTAMP other than 0 to 6",
                )),
            }
        }
        ("CURDATE" | "CURRENT_DATE", 0) => Ok(Some(keyword("CURRENT_DATE"))),
        ("CURTIME" | "CURRENT_TIME", 0) => Ok(Some(keyword("CURRENT_TIME"))),
        // CONCAT is NULL when any argument is NULL, exactly like `||` (SQLite's own
        // concat() skips NULLs instead).
        ("CONCAT", 1..) => {
            let mut it = args.into_iter();
            let first = it
                .next()
                .map(|a| *nested(a))
                .unwrap_or(Expr::Value(Value::Null.into()));
            // Text even of one argument: `CONCAT(n + 1)` is a string.
            let joined = match it.len() {
                0 => concat(
                    first,
                    Expr::Value(Value::SingleQuotedString(String::new()).into()),
                ),
                _ => it.fold(first, |acc, a| concat(acc, *nested(a))),
            };
            Ok(Some(Expr::Nested(Box::new(joined))))
        }
        ("MOD", 2) => rename(f, MOD_FN),
        ("ROUND", 1 | 2) => rename(f, ROUND_FN),
        ("CEIL" | "CEILING", 1) => rename(f, CEIL_FN),
        ("FLOOR", 1) => rename(f, FLOOR_FN),
        ("TIME", 1) => rename(f, TIME_FN),
        // LOCATE(needle, haystack) is INSTR(haystack, needle).
        ("LOCATE" | "POSITION", 2) => {
            let mut it = args.into_iter();
            match (it.next(), it.next()) {
                (Some(needle), Some(hay)) => {
                    Ok(Some(Expr::Function(call("INSTR", vec![hay, needle]))))
                }
                _ => Ok(None),
            }
        }
        ("LOCATE", 3) => rename(f, "mysql_locate"),
        ("STRCMP", 2) => rename(f, COMPARE_CI_FN),
        ("POW" | "POWER", 2) => rename(f, "mysql_pow"),
        ("SQRT", 1) => rename(f, "mysql_sqrt"),
        ("TRUNCATE", 2) => rename(f, "mysql_truncate"),
        ("IF", 3) => rename(f, "IIF"),
        ("LCASE", 1) => rename(f, "LOWER"),
        ("UCASE", 1) => rename(f, "UPPER"),
        // SQLite's LENGTH counts characters: MySQL's CHAR_LENGTH. MySQL's LENGTH counts bytes,
        // and its HEX, QUOTE, FORMAT and JSON_TYPE answer otherwise than SQLite's namesakes:
        // the engine's own (`mysql_text_functions`, `mysql_json`).
        ("CHAR_LENGTH" | "CHARACTER_LENGTH", 1) => rename(f, "LENGTH"),
        ("LENGTH" | "OCTET_LENGTH", 1) => rename(f, "mysql_length"),
        ("HEX", 1) => rename(f, "mysql_hex"),
        ("QUOTE", 1) => rename(f, "mysql_quote"),
        ("FORMAT", 2) => rename(f, "mysql_format"),
        ("FORMAT", _) => Err(SqlError::not_supported("FORMAT with a locale")),
        ("JSON_TYPE", 1) => rename(f, "mysql_json_type"),
        ("JSON_EXTRACT", 2..) => rename(f, JSON_SQL_VALUE_FN),
        ("JSON_TYPE", _) => Err(SqlError::not_supported("JSON_TYPE of a path")),
        ("MID" | "SUBSTRING", 2 | 3) => rename(f, "SUBSTR"),
        // Multi-argument max()/min() are SQLite's scalar GREATEST/LEAST (NULL if any is).
        ("GREATEST", 2..) => rename(f, "MAX"),
        ("LEAST", 2..) => rename(f, "MIN"),
        _ => Ok(None),
    }
}

/// `time ± INTERVAL n UNIT` as a call of the engine's `mysql_date_add(time, n, 'unit')`
/// (MySQL's month arithmetic, a DATE kept a DATE for whole days).
fn date_add(time: Expr, interval: &mut Interval, subtract: bool) -> Result<Expr, SqlError> {
    use sqlparser::ast::DateTimeField as F;
    let unit = match (&interval.leading_field, &interval.last_field) {
        (Some(F::Year | F::Years), None) => "year",
        (Some(F::Quarter), None) => "quarter",
        (Some(F::Month | F::Months), None) => "month",
        (Some(F::Week(None) | F::Weeks), None) => "week",
        (Some(F::Day | F::Days), None) => "day",
        (Some(F::Hour | F::Hours), None) => "hour",
        (Some(F::Minute | F::Minutes), None) => "minute",
        (Some(F::Second | F::Seconds), None) => "second",
        (Some(F::Microsecond | F::Microseconds), None) => "microsecond",
        (Some(other), None) => {
            return Err(SqlError::not_supported(&format!("INTERVAL ... {other}")));
        }
        _ => return Err(SqlError::not_supported("this INTERVAL")),
    };
    expr(&mut interval.value)?;
    let n = core::mem::replace(interval.value.as_mut(), Expr::Value(Value::Null.into()));
    let n = if subtract {
        Expr::UnaryOp {
            op: UnaryOperator::Minus,
            expr: nested(n),
        }
    } else {
        n
    };
    let unit = Expr::Value(Value::SingleQuotedString(unit.to_owned()).into());
    Ok(Expr::Function(call(DATE_ADD_FN, vec![time, n, unit])))
}

/// The engine's function behind `+ INTERVAL` and `DATE_ADD` ([`date_add`]).
pub const DATE_ADD_FN: &str = "mysql_date_add";

/// A `JSON_EXTRACT` compared with `other` (`=`, `<`, `BETWEEN`...): the value as MariaDB
/// compares it, with a number as a number ([`JSON_NUMBER_FN`]: a string's leading number,
/// `true` 1, anything else 0), else as a string ([`JSON_VALUE_FN`]: a string without its
/// quotes, a number still a number, `null` and `true` as written); in arithmetic as with a
/// number. Where it is written ([`json_extract_as_written`]): [`JSON_EXTRACT_FN`]. Anywhere
/// else (an argument, `IN`, a condition of its own): [`JSON_SQL_VALUE_FN`], typed as SQLite's
/// `json_extract` types it (a string without its quotes, `true` 1, `null` NULL), which is
/// what MariaDB's conversions of it give there for numbers, strings and booleans.
fn json_extract_compared(e: &mut Expr, other: &Expr) {
    let with = if is_number(other) {
        JSON_NUMBER_FN
    } else {
        JSON_VALUE_FN
    };
    json_extract_read_as(e, with);
}

/// A `JSON_EXTRACT` that is a result column, an `ORDER BY` term, the operand of `IS [NOT]
/// NULL` or the text of a `LIKE`: [`JSON_EXTRACT_FN`], the value as MariaDB writes it there
/// (a string with its quotes, `null` a value).
fn json_extract_as_written(e: &mut Expr) {
    json_extract_read_as(e, JSON_EXTRACT_FN);
}

/// `e`, if it is a `JSON_EXTRACT` (as [`function`] renamed it: [`JSON_SQL_VALUE_FN`]), calls
/// `engine_function` instead: the same value read another way.
fn json_extract_read_as(e: &mut Expr, engine_function: &str) {
    if let Expr::Function(f) = e
        && let [ObjectNamePart::Identifier(name)] = f.name.0.as_slice()
        && name.value == JSON_SQL_VALUE_FN
    {
        f.name = ObjectName::from(vec![Ident::new(engine_function)]);
    }
}

/// `=`, `<>`, `<`, `<=`, `>`, `>=`.
const fn is_comparison(op: &BinaryOperator) -> bool {
    matches!(
        op,
        BinaryOperator::Eq
            | BinaryOperator::NotEq
            | BinaryOperator::Lt
            | BinaryOperator::LtEq
            | BinaryOperator::Gt
            | BinaryOperator::GtEq
    )
}

/// Whether `e` is a number as written (`5`, `-1.5`).
fn is_number(e: &Expr) -> bool {
    match e {
        Expr::Value(v) => matches!(v.value, Value::Number(..)),
        Expr::UnaryOp {
            op: UnaryOperator::Minus | UnaryOperator::Plus,
            expr,
        }
        | Expr::Nested(expr) => is_number(expr),
        _ => false,
    }
}

/// `JSON_ARRAYAGG(x [ORDER BY ...])` as SQLite's `json_group_array`, written as MariaDB writes
/// it ([`JSON_ARRAYAGG_TEXT_FN`]), and NULL over no rows (SQLite's gives `[]`).
fn json_arrayagg(f: &mut Function) -> Result<Expr, SqlError> {
    let one_argument = matches!(&f.args, FunctionArguments::List(l) if l.args.len() == 1);
    if f.over.is_some() || f.filter.is_some() || !one_argument {
        return Err(SqlError::not_supported("this JSON_ARRAYAGG"));
    }
    f.name = ObjectName::from(vec![Ident::new("json_group_array")]);
    let count = Expr::Function(Function {
        args: FunctionArguments::List(sqlparser::ast::FunctionArgumentList {
            duplicate_treatment: None,
            args: vec![FunctionArg::Unnamed(FunctionArgExpr::Wildcard)],
            clauses: Vec::new(),
        }),
        ..call("COUNT", Vec::new())
    });
    let none = Expr::BinaryOp {
        left: Box::new(count),
        op: BinaryOperator::Eq,
        right: Box::new(Expr::Value(Value::Number("0".to_owned(), false).into())),
    };
    let written = Expr::Function(call(JSON_ARRAYAGG_TEXT_FN, vec![Expr::Function(f.clone())]));
    Ok(Expr::Function(call(
        "IIF",
        vec![none, Expr::Value(Value::Null.into()), written],
    )))
}

/// The engine's function that writes `JSON_ARRAYAGG`'s array as MariaDB does: `,` between its
/// elements, each element written as [`JSON_TEXT_FN`] writes a document.
pub const JSON_ARRAYAGG_TEXT_FN: &str = "mysql_json_arrayagg_text";

/// The engine's `JSON_EXTRACT`, the value as MariaDB writes it ([`json_extract_as_written`]).
pub const JSON_EXTRACT_FN: &str = "mysql_json_extract";

/// The engine's `JSON_EXTRACT` compared as a string ([`json_extract_compared`]).
pub const JSON_VALUE_FN: &str = "mysql_json_value";

/// The engine's `JSON_EXTRACT` compared with a number ([`json_extract_compared`]).
pub const JSON_NUMBER_FN: &str = "mysql_json_number";

/// [`JSON_NUMBER_FN`] negated, keeping a negative zero (`negate_json_number`).
pub const JSON_NEGATED_NUMBER_FN: &str = "mysql_json_number_negated";

/// The engine's `JSON_EXTRACT` anywhere else ([`json_extract_compared`]).
pub const JSON_SQL_VALUE_FN: &str = "mysql_json_sql_value";

/// The engine's function that writes a JSON document as MariaDB does (`", "` between
/// elements, `": "` after a key): around each `JSON_OBJECT` and `JSON_ARRAY`, whose SQLite
/// namesakes write it without spaces, except as an argument of another JSON function
/// ([`json_arguments_as_json`]), which then takes it as JSON rather than as a string.
pub const JSON_TEXT_FN: &str = "mysql_json_text";

/// Takes [`JSON_TEXT_FN`] off the arguments of the JSON function `f`: SQLite's
/// `json_object('a', json_object(...))` nests the inner object only while it is the inner
/// function's own result.
fn json_arguments_as_json(f: &mut Function) {
    let FunctionArguments::List(list) = &mut f.args else {
        return;
    };
    for arg in &mut list.args {
        if let FunctionArg::Unnamed(FunctionArgExpr::Expr(a)) = arg
            && let Expr::Function(text) = a
            && let [ObjectNamePart::Identifier(n)] = text.name.0.as_slice()
            && n.value == JSON_TEXT_FN
            && let FunctionArguments::List(inner) = &mut text.args
            && let [FunctionArg::Unnamed(FunctionArgExpr::Expr(json))] = inner.args.as_mut_slice()
        {
            *a = core::mem::replace(json, Expr::Value(Value::Null.into()));
        }
    }
}

/// The engine's function behind `CAST(x AS SIGNED)`.
pub const CAST_SIGNED_FN: &str = "mysql_cast_signed";

/// The engine's function behind `CAST(x AS UNSIGNED)`.
pub const CAST_UNSIGNED_FN: &str = "mysql_cast_unsigned";

/// The engine's function behind `TIMESTAMPDIFF(unit, a, b)`: `('unit', a, b)`.
pub const TIMESTAMPDIFF_FN: &str = "mysql_timestampdiff";

/// The units `TIMESTAMPDIFF` counts in, as [`TIMESTAMPDIFF_FN`] takes them.
pub const TIMESTAMPDIFF_UNITS: &[&str] = &[
    "microsecond",
    "second",
    "minute",
    "hour",
    "day",
    "week",
    "month",
    "quarter",
    "year",
];

/// The engine's function behind `NOW(p)` and `CURRENT_TIMESTAMP(p)`: the time with `p`
/// decimals of a second.
pub const NOW_FN: &str = "mysql_now";

/// The function the dialect calls for `@@name` inside a statement.
pub const SYSTEM_VARIABLE_FN: &str = "mysql_system_variable";

/// The function the dialect calls for `@name` inside a statement.
pub const USER_VARIABLE_FN: &str = "mysql_user_variable";

/// `GROUP_CONCAT(x SEPARATOR s)` → `GROUP_CONCAT(x, s)`; both default to `,`.
fn group_concat(f: &mut Function) -> Result<(), SqlError> {
    let FunctionArguments::List(list) = &mut f.args else {
        return Ok(());
    };
    let mut separator = None;
    list.clauses.retain(|c| match c {
        FunctionArgumentClause::Separator(v) => {
            separator = Some(v.clone());
            false
        }
        _ => true,
    });
    let Some(mut sep) = separator else {
        return Ok(());
    };
    if list.args.len() != 1 {
        return Err(SqlError::not_supported(
            "GROUP_CONCAT of several expressions",
        ));
    }
    let sep = value(&mut sep).unwrap_or(Expr::Value(sep));
    let is_comma = matches!(&sep, Expr::Value(v) if matches!(&v.value, Value::SingleQuotedString(s) if s == ","));
    if list.duplicate_treatment.is_some() {
        // SQLite's DISTINCT aggregates take exactly one argument.
        return if is_comma {
            Ok(())
        } else {
            Err(SqlError::not_supported(
                "GROUP_CONCAT(DISTINCT ... SEPARATOR)",
            ))
        };
    }
    list.args
        .push(FunctionArg::Unnamed(FunctionArgExpr::Expr(sep)));
    Ok(())
}
