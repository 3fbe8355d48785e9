//! The MySQL type of each result column of a `SELECT` that SQLite cannot type: SQLite declares
//! no type for an expression, so its value alone would type the column. MySQL types it by
//! its operands: `7 / 2` is a `DECIMAL` with 4 decimals (`3.5000`, not the double 3.5),
//! `2.5 * 2` one with 1 (`5.0`), `SUM` of integers a `DECIMAL` (a Python client reads a
//! `Decimal`), `MAX` of a `DATETIME` a `DATETIME`, `DATE(x)` a `DATE`.
//!
//! Read from the query as the client wrote it, before it is translated. A table column is
//! named here and its declared type looked up by the engine, which resolves the rest
//! ([`ResultType`]); a column nothing here types is typed by its values, as SQLite's are.

use sqlparser::ast::{
    BinaryOperator, DataType, Expr, FunctionArg, FunctionArgExpr, FunctionArguments,
    JoinConstraint, JoinOperator, ObjectName, Query, Select, SelectItem, SetExpr, TableFactor,
    TableWithJoins, UnaryOperator, Value,
};

/// What decides a result column's type, for the engine to resolve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResultType {
    /// An integer (`BIGINT`).
    Integer,
    /// A `DECIMAL` with this many decimals.
    Decimal(u32),
    /// A `DOUBLE`.
    Double,
    /// A `DATE`.
    Date,
    /// A `DATETIME`.
    DateTime,
    /// A `TIME`.
    Time,
    /// A table column: its declared type. `schema` when the query qualified the table.
    Column {
        schema: Option<String>,
        table: String,
        column: String,
    },
    /// `left <op> right`, an arithmetic operator.
    Arithmetic(Operator, Box<Self>, Box<Self>),
    /// An aggregate of a value of this type.
    Aggregate(Aggregate, Box<Self>),
    /// `ROUND(x, digits)`.
    Round(Box<Self>, i64),
    /// `CEIL(x)` or `FLOOR(x)`: an integer of an exact number, a double of a double.
    Whole(Box<Self>),
    /// The type several values share, where one of them is the result (`IF`'s and `CASE`'s
    /// branches, `COALESCE`'s, `IFNULL`'s, `GREATEST`'s and `LEAST`'s arguments): MySQL's
    /// common type of numbers (a `DOUBLE` among them makes a `DOUBLE`, else a `DECIMAL` with
    /// the largest scale, integers alone an integer), or one column type they all have.
    Common(Vec<Self>),
    /// `NULL`, which takes the type of the values it is among.
    Null,
    /// `STR_TO_DATE(x, format)` with a literal format, as the marker the statement was parsed
    /// with ([`super::literals`]); [`with_literals`] makes it a date, a time or both.
    StrToDate(String),
    /// Not known here: its values type the column.
    Unknown,
}

impl ResultType {
    /// Whether nothing in it is [`ResultType::Unknown`].
    fn is_known(&self) -> bool {
        match self {
            Self::Unknown => false,
            Self::Arithmetic(_, l, r) => l.is_known() && r.is_known(),
            Self::Aggregate(_, a) | Self::Round(a, _) | Self::Whole(a) => a.is_known(),
            Self::Common(parts) => parts.iter().all(Self::is_known),
            _ => true,
        }
    }

    /// Whether it is a number whose every part is known (a column counts: its declared type
    /// decides).
    pub(super) fn is_number(&self) -> bool {
        match self {
            Self::Integer | Self::Decimal(_) | Self::Double | Self::Column { .. } => true,
            Self::Arithmetic(_, l, r) => l.is_number() && r.is_number(),
            Self::Aggregate(_, a) | Self::Round(a, _) | Self::Whole(a) => a.is_number(),
            // `NULL` is among numbers, but not a number alone.
            Self::Common(parts) => {
                parts.iter().all(|p| *p == Self::Null || p.is_number())
                    && parts.iter().any(|p| *p != Self::Null)
            }
            Self::Null
            | Self::Date
            | Self::DateTime
            | Self::Time
            | Self::StrToDate(_)
            | Self::Unknown => false,
        }
    }
}

/// MySQL's arithmetic operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operator {
    AddOrSubtract,
    Multiply,
    Divide,
    Modulo,
}

/// The aggregates whose type follows their argument's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Aggregate {
    MinOrMax,
    Sum,
    Avg,
}

/// A table of FROM, by the name its columns are qualified with.
pub(super) enum Source {
    Table {
        called: String,
        schema: Option<String>,
        table: String,
    },
    /// A derived table: each of its columns' names and types.
    Derived {
        called: String,
        columns: Vec<(String, ResultType)>,
    },
    /// A derived table of every column of one table and some more (`SELECT *, row_number()
    /// OVER (...) FROM posts`, as Drizzle's relational queries write): a column not among
    /// `others` (the names of the more) is `inner`'s.
    AllOf {
        called: String,
        inner: Box<Source>,
        others: Vec<String>,
    },
    /// A table function or anything else whose columns are not known.
    Opaque,
}

impl Source {
    /// The name its columns are qualified with.
    pub(super) fn called(&self) -> Option<&str> {
        match self {
            Self::Table { called, .. }
            | Self::Derived { called, .. }
            | Self::AllOf { called, .. } => Some(called),
            Self::Opaque => None,
        }
    }

    /// Whether it is a table of database `db` (one without a database named: any).
    pub(super) fn schema_is(&self, db: &str) -> bool {
        match self {
            Self::Table { schema, .. } => {
                schema.as_deref().is_none_or(|s| s.eq_ignore_ascii_case(db))
            }
            Self::AllOf { inner, .. } => inner.schema_is(db),
            _ => false,
        }
    }

    /// Its column `name` where it may have one: a table's (which the engine looks up), a
    /// derived table's by its type; `Ok(None)` when it has none; `Err` when its columns are
    /// not known.
    pub(super) fn column_named(&self, name: &str) -> Result<Option<ResultType>, ()> {
        match self {
            Self::Table { schema, table, .. } => Ok(Some(ResultType::Column {
                schema: schema.clone(),
                table: table.clone(),
                column: name.to_owned(),
            })),
            Self::Derived { columns, .. } => Ok(columns
                .iter()
                .find(|(c, _)| c.eq_ignore_ascii_case(name))
                .map(|(_, t)| t.clone())),
            Self::AllOf { others, .. } if others.iter().any(|o| o.eq_ignore_ascii_case(name)) => {
                Ok(Some(ResultType::Unknown))
            }
            Self::AllOf { inner, .. } => inner.column_named(name),
            Self::Opaque => Err(()),
        }
    }
}

/// A common table expression in scope (`WITH w AS (...)`): the name a query's table may
/// call it by, and its columns' names and types (`None` when they are not known: a
/// recursive one, one of `*`).
#[derive(Debug, Clone)]
pub(super) struct Cte {
    name: String,
    columns: Option<Vec<(String, ResultType)>>,
}

/// The common table expressions `query`'s body sees: `outer`'s, then its own `WITH`'s, each
/// typed with those before it in scope.
pub(super) fn ctes_of(query: &Query, outer: &[Cte]) -> Vec<Cte> {
    let mut ctes = outer.to_vec();
    let Some(with) = &query.with else {
        return ctes;
    };
    for cte in &with.cte_tables {
        let name = &cte.alias.name.value;
        // A recursive one's columns are typed by its first part, the rows it starts from.
        let names_itself = with.recursive && names_table(&cte.query, name);
        let typed = match cte.query.body.as_ref() {
            SetExpr::SetOperation { left, .. } if names_itself => set_columns(left, &ctes),
            _ if names_itself => None,
            _ => columns(&cte.query, &ctes),
        };
        let columns = typed.and_then(|cols| {
            let named = &cte.alias.columns;
            if named.is_empty() {
                return Some(cols.into_iter().map(|(n, t, _)| (n, t)).collect());
            }
            (named.len() == cols.len()).then(|| {
                named
                    .iter()
                    .zip(cols)
                    .map(|(n, (_, t, _))| (n.name.value.clone(), t))
                    .collect()
            })
        });
        ctes.push(Cte {
            name: name.clone(),
            columns,
        });
    }
    ctes
}

/// Whether `query` reads a table called `name` (a recursive common table expression itself).
fn names_table(query: &Query, name: &str) -> bool {
    let found = sqlparser::ast::visit_relations(query, |relation| {
        if matches!(relation.0.as_slice(), [only] if only
            .as_ident()
            .is_some_and(|i| i.value.eq_ignore_ascii_case(name)))
        {
            core::ops::ControlFlow::Break(())
        } else {
            core::ops::ControlFlow::Continue(())
        }
    });
    found.is_break()
}

/// For each result column of `query` (in order), its type where SQLite would not know it;
/// empty when none needs one, or when the columns cannot be lined up with the select list
/// (`*`, a `UNION` whose branches type a column differently).
#[must_use]
pub fn of(query: &Query) -> Vec<Option<ResultType>> {
    let types: Vec<Option<ResultType>> = columns(query, &[])
        .map(|cols| {
            cols.into_iter()
                .map(|(_, t, plain)| (!plain && t.is_known()).then_some(t))
                .collect()
        })
        .unwrap_or_default();
    if types.iter().all(Option::is_none) {
        return Vec::new();
    }
    types
}

/// Each result column of `query`: its name (an alias or a column's), its type, and whether it
/// is a plain table column (which SQLite types itself).
fn columns(query: &Query, outer: &[Cte]) -> Option<Vec<(String, ResultType, bool)>> {
    set_columns(&query.body, &ctes_of(query, outer))
}

fn set_columns(body: &SetExpr, ctes: &[Cte]) -> Option<Vec<(String, ResultType, bool)>> {
    match body {
        SetExpr::Select(select) => {
            // `*` covers several columns (checked first: the sources of a derived table of
            // derived tables are worked out once, by `all_of`, not twice per level).
            if select.projection.iter().any(|item| {
                !matches!(
                    item,
                    SelectItem::UnnamedExpr(_) | SelectItem::ExprWithAlias { .. }
                )
            }) {
                return None;
            }
            let sources = sources_of(select, ctes);
            let mut out = Vec::with_capacity(select.projection.len());
            for item in &select.projection {
                let (e, alias) = match item {
                    SelectItem::UnnamedExpr(e) => (e, None),
                    SelectItem::ExprWithAlias { expr, alias } => (expr, Some(alias.value.clone())),
                    // `*` covers several columns.
                    _ => return None,
                };
                let name = alias.unwrap_or_else(|| match e {
                    Expr::Identifier(i) => i.value.clone(),
                    Expr::CompoundIdentifier(parts) => {
                        parts.last().map(|i| i.value.clone()).unwrap_or_default()
                    }
                    _ => String::new(),
                });
                // A table's column, which SQLite types by its declared type; a derived table's
                // computed one it does not type.
                let t = type_of(e, &sources);
                let plain = matches!(e, Expr::Identifier(_) | Expr::CompoundIdentifier(_))
                    && matches!(t, ResultType::Column { .. });
                out.push((name, t, plain));
            }
            Some(out)
        }
        SetExpr::Query(q) => columns(q, ctes),
        SetExpr::SetOperation { left, right, .. } => {
            let (l, r) = (set_columns(left, ctes)?, set_columns(right, ctes)?);
            if l.len() != r.len() {
                return None;
            }
            // The first branch names the columns; a column is typed where the branches' types
            // have a common one (a plain column is typed by SQLite in neither).
            Some(
                l.into_iter()
                    .zip(r)
                    .map(|((name, a, pa), (_, b, pb))| {
                        let t = if pa || pb {
                            ResultType::Unknown
                        } else {
                            union_type(a, b)
                        };
                        (name, t, false)
                    })
                    .collect(),
            )
        }
        _ => None,
    }
}

/// For `query`'s own select: each table of its FROM and joins with the name the statement
/// calls it by (its alias, or its name); empty when they are not all plain tables (a derived
/// table or a table function hides which table a column comes from).
pub(super) fn from_tables(query: &Query) -> Vec<(String, String)> {
    let SetExpr::Select(select) = query.body.as_ref() else {
        return Vec::new();
    };
    let mut tables = Vec::new();
    // A common table expression hides which table its columns come from, as a derived
    // table does (SQLite names a column's table through it).
    for source in sources_of(select, &ctes_of(query, &[])) {
        match source {
            Source::Table { called, table, .. } => tables.push((table, called)),
            _ => return Vec::new(),
        }
    }
    tables
}

/// The tables of `select`'s FROM and joins, `ctes` in scope.
pub(super) fn sources_of(select: &Select, ctes: &[Cte]) -> Vec<Source> {
    select
        .from
        .iter()
        .flat_map(|from| sources_of_table(from, ctes))
        .collect()
}

/// The table of `from` and those it joins, in order; first an opaque one when a right or
/// full join merges columns (`USING`, `NATURAL`: a name without a table is then the right
/// table's, or either's, where the left one's is first otherwise).
pub(super) fn sources_of_table(from: &TableWithJoins, ctes: &[Cte]) -> Vec<Source> {
    let merges = from.joins.iter().any(|j| {
        matches!(
            &j.join_operator,
            JoinOperator::Right(c) | JoinOperator::RightOuter(c) | JoinOperator::FullOuter(c)
                if matches!(c, JoinConstraint::Using(_) | JoinConstraint::Natural)
        )
    });
    // First: a name without a table is looked for in none of them.
    merges
        .then_some(Source::Opaque)
        .into_iter()
        .chain(
            std::iter::once(&from.relation)
                .chain(from.joins.iter().map(|j| &j.relation))
                .map(|factor| source(factor, ctes)),
        )
        .collect()
}

/// The column `e` names, when it is a column reference: its table's where `sources` tell.
pub(super) fn column_of(e: &Expr, sources: &[Source]) -> ResultType {
    match e {
        Expr::Identifier(c) => column_type(None, &c.value, sources),
        Expr::CompoundIdentifier(parts) => match parts.as_slice() {
            [q, c] => column_type(Some(&q.value), &c.value, sources),
            _ => ResultType::Unknown,
        },
        _ => ResultType::Unknown,
    }
}

fn source(factor: &TableFactor, ctes: &[Cte]) -> Source {
    match factor {
        TableFactor::Table { name, alias, .. } => {
            let Source::Table { schema, table, .. } = table_named(name) else {
                return Source::Opaque;
            };
            let called = alias
                .as_ref()
                .map_or_else(|| table.clone(), |a| a.name.value.clone());
            // A name alone is the innermost common table expression called so, if any (in
            // any case, as SQLite finds it).
            if schema.is_none()
                && let Some(cte) = ctes
                    .iter()
                    .rev()
                    .find(|c| c.name.eq_ignore_ascii_case(&table))
            {
                return cte
                    .columns
                    .as_ref()
                    .map_or(Source::Opaque, |columns| Source::Derived {
                        called,
                        columns: columns.clone(),
                    });
            }
            Source::Table {
                called,
                schema,
                table,
            }
        }
        TableFactor::Derived {
            subquery,
            alias: Some(alias),
            ..
        } if alias.columns.is_empty() => match columns(subquery, ctes) {
            Some(cols) => Source::Derived {
                called: alias.name.value.clone(),
                columns: cols.into_iter().map(|(n, t, _)| (n, t)).collect(),
            },
            None => {
                all_of(subquery, ctes).map_or(Source::Opaque, |(inner, others)| Source::AllOf {
                    called: alias.name.value.clone(),
                    inner: Box::new(inner),
                    others,
                })
            }
        },
        _ => Source::Opaque,
    }
}

/// For `SELECT *[, more] FROM one_table ...`: that table, and the names the more may have
/// (an alias, a column's name; a name unknown here is every name, so nothing passes).
fn all_of(query: &Query, ctes: &[Cte]) -> Option<(Source, Vec<String>)> {
    let SetExpr::Select(select) = query.body.as_ref() else {
        return None;
    };
    let [from] = select.from.as_slice() else {
        return None;
    };
    if !from.joins.is_empty() {
        return None;
    }
    let mut wildcard = false;
    let mut others = Vec::new();
    for item in &select.projection {
        match item {
            SelectItem::Wildcard(_) => wildcard = true,
            SelectItem::ExprWithAlias { alias, .. } => others.push(alias.value.clone()),
            SelectItem::UnnamedExpr(Expr::Identifier(c)) => others.push(c.value.clone()),
            SelectItem::UnnamedExpr(Expr::CompoundIdentifier(parts)) => {
                others.push(parts.last()?.value.clone());
            }
            // Named by its text (`row_number() over (...)`): no column is called that.
            SelectItem::UnnamedExpr(Expr::Function(_)) => {}
            _ => return None,
        }
    }
    let inner = source(&from.relation, &ctes_of(query, ctes));
    (wildcard && matches!(inner, Source::Table { .. })).then_some((inner, others))
}

/// The table `name` names (`t`, `shop.t`), called by its name.
pub(super) fn table_named(name: &ObjectName) -> Source {
    let parts = idents(name);
    let (schema, table) = match parts.as_slice() {
        [table] => (None, table.clone()),
        [schema, table] => (Some(schema.clone()), table.clone()),
        _ => return Source::Opaque,
    };
    Source::Table {
        called: table.clone(),
        schema,
        table,
    }
}

fn idents(name: &ObjectName) -> Vec<String> {
    name.0
        .iter()
        .filter_map(|p| p.as_ident().map(|i| i.value.clone()))
        .collect()
}

/// The type of the column `column` of the source called `qualifier`, or of the only source.
fn column_type(qualifier: Option<&str>, column: &str, sources: &[Source]) -> ResultType {
    let found = match qualifier {
        Some(q) => sources
            .iter()
            .find(|s| s.called().is_some_and(|c| c.eq_ignore_ascii_case(q))),
        None => match sources {
            [only] => Some(only),
            _ => None,
        },
    };
    match found {
        Some(Source::Table { schema, table, .. }) => ResultType::Column {
            schema: schema.clone(),
            table: table.clone(),
            column: column.to_owned(),
        },
        Some(Source::Derived { columns, .. }) => columns
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(column))
            .map_or(ResultType::Unknown, |(_, t)| t.clone()),
        Some(Source::AllOf { inner, others, .. })
            if !others.iter().any(|o| o.eq_ignore_ascii_case(column)) =>
        {
            column_type(None, column, std::slice::from_ref(inner))
        }
        _ => ResultType::Unknown,
    }
}

/// The type of expression `e`, read from the MySQL text.
pub(super) fn type_of(e: &Expr, sources: &[Source]) -> ResultType {
    match e {
        Expr::Identifier(_) | Expr::CompoundIdentifier(_) => column_of(e, sources),
        Expr::Value(v) => match &v.value {
            Value::Number(n, _) => number_type(n),
            Value::Null => ResultType::Null,
            _ => ResultType::Unknown,
        },
        Expr::Nested(inner) => type_of(inner, sources),
        Expr::Case {
            conditions,
            else_result,
            ..
        } => ResultType::Common(
            conditions
                .iter()
                .map(|w| &w.result)
                .chain(else_result.as_deref())
                .map(|e| type_of(e, sources))
                // No ELSE: NULL where no branch is taken.
                .chain(else_result.is_none().then_some(ResultType::Null))
                .collect(),
        ),
        // A sign makes a FLOAT a DOUBLE, as arithmetic does; `+` changes nothing.
        Expr::UnaryOp {
            op: UnaryOperator::Minus,
            expr,
        } => as_operand(operand_type(expr, sources)),
        Expr::UnaryOp {
            op: UnaryOperator::Plus,
            expr,
        } => operand_type(expr, sources),
        Expr::BinaryOp { left, op, right } => {
            let operator = match op {
                BinaryOperator::Plus | BinaryOperator::Minus => Operator::AddOrSubtract,
                BinaryOperator::Multiply => Operator::Multiply,
                BinaryOperator::Divide => Operator::Divide,
                BinaryOperator::Modulo => Operator::Modulo,
                BinaryOperator::MyIntegerDivide
                | BinaryOperator::Eq
                | BinaryOperator::NotEq
                | BinaryOperator::Lt
                | BinaryOperator::LtEq
                | BinaryOperator::Gt
                | BinaryOperator::GtEq => return ResultType::Integer,
                _ => return ResultType::Unknown,
            };
            ResultType::Arithmetic(
                operator,
                Box::new(operand_type(left, sources)),
                Box::new(operand_type(right, sources)),
            )
        }
        Expr::Cast { data_type, .. } => cast_type(data_type),
        Expr::Ceil { expr, .. } | Expr::Floor { expr, .. } => {
            ResultType::Whole(Box::new(type_of(expr, sources)))
        }
        Expr::Function(f) => {
            let [name] = f.name.0.as_slice() else {
                return ResultType::Unknown;
            };
            let Some(name) = name.as_ident() else {
                return ResultType::Unknown;
            };
            // A window aggregate (`SUM(price) OVER (...)`) is typed as the aggregate is.
            let aggregate = ["SUM", "AVG", "MIN", "MAX", "COUNT"]
                .iter()
                .any(|a| name.value.eq_ignore_ascii_case(a));
            if f.filter.is_some() || (f.over.is_some() && !aggregate) {
                return ResultType::Unknown;
            }
            let args: Vec<&Expr> = match &f.args {
                FunctionArguments::List(list) if list.duplicate_treatment.is_none() => list
                    .args
                    .iter()
                    .filter_map(|a| match a {
                        FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Some(e),
                        _ => None,
                    })
                    .collect(),
                FunctionArguments::None => Vec::new(),
                _ => return ResultType::Unknown,
            };
            function_type(&name.value.to_ascii_uppercase(), &args, sources)
        }
        _ => ResultType::Unknown,
    }
}

/// The type of the value `t` made by a sign or `ABS`: as arithmetic makes it (`0 + t`: a
/// `FLOAT` column's becomes a `DOUBLE`, a `DECIMAL`'s keeps its scale).
fn as_operand(t: ResultType) -> ResultType {
    ResultType::Arithmetic(
        Operator::AddOrSubtract,
        Box::new(ResultType::Integer),
        Box::new(t),
    )
}

/// The type of `e` as an arithmetic operand: a `JSON_EXTRACT` is read as a `DOUBLE` there.
fn operand_type(e: &Expr, sources: &[Source]) -> ResultType {
    match e {
        Expr::Function(f)
            if matches!(f.name.0.as_slice(), [name] if name
                .as_ident()
                .is_some_and(|i| i.value.eq_ignore_ascii_case("JSON_EXTRACT"))) =>
        {
            ResultType::Double
        }
        _ => type_of(e, sources),
    }
}

fn function_type(name: &str, args: &[&Expr], sources: &[Source]) -> ResultType {
    let arg = |i: usize| {
        args.get(i)
            .map_or(ResultType::Unknown, |a| type_of(a, sources))
    };
    let aggregate = |kind| ResultType::Aggregate(kind, Box::new(arg(0)));
    match (name, args.len()) {
        ("MIN" | "MAX", 1) => aggregate(Aggregate::MinOrMax),
        ("SUM", 1) => aggregate(Aggregate::Sum),
        ("AVG", 1) => aggregate(Aggregate::Avg),
        ("COUNT" | "DAYOFWEEK" | "WEEKDAY" | "ASCII" | "STRCMP" | "LOCATE", _) => {
            ResultType::Integer
        }
        ("POW" | "POWER" | "SQRT", _) => ResultType::Double,
        ("ABS", 1) => as_operand(arg(0)),
        ("NULLIF", 2) => arg(0),
        ("IF", 3) => ResultType::Common(vec![arg(1), arg(2)]),
        ("COALESCE" | "IFNULL" | "GREATEST" | "LEAST", 1..) => {
            ResultType::Common((0..args.len()).map(arg).collect())
        }
        ("ROUND", 1) => ResultType::Round(Box::new(arg(0)), 0),
        ("STR_TO_DATE", 2) => match args.get(1) {
            Some(Expr::Value(v)) => match &v.value {
                Value::SingleQuotedString(format) => ResultType::StrToDate(format.clone()),
                _ => ResultType::Unknown,
            },
            _ => ResultType::Unknown,
        },
        ("CEIL" | "CEILING" | "FLOOR", 1) => ResultType::Whole(Box::new(arg(0))),
        ("ROUND" | "TRUNCATE", 2) => args
            .get(1)
            .and_then(|d| integer_literal(d))
            .map_or(ResultType::Unknown, |digits| {
                ResultType::Round(Box::new(arg(0)), digits)
            }),
        ("MOD", 2) => ResultType::Arithmetic(Operator::Modulo, Box::new(arg(0)), Box::new(arg(1))),
        ("DATE" | "LAST_DAY", 1) | ("CURDATE" | "CURRENT_DATE" | "UTC_DATE", 0) => ResultType::Date,
        // An integer number of seconds: whole seconds (a fraction gives its digits too).
        ("FROM_UNIXTIME", 1) if arg(0) == ResultType::Integer => ResultType::DateTime,
        ("NOW" | "CURRENT_TIMESTAMP" | "LOCALTIME" | "LOCALTIMESTAMP" | "UTC_TIMESTAMP", 0) => {
            ResultType::DateTime
        }
        ("TIME", 1) | ("CURTIME" | "CURRENT_TIME" | "UTC_TIME", 0) => ResultType::Time,
        _ => ResultType::Unknown,
    }
}

/// `t` with each [`ResultType::StrToDate`] typed by its format, the literal `value` gives
/// for its marker.
pub fn with_literals<'v>(t: &mut ResultType, value: &impl Fn(&str) -> Option<&'v str>) {
    use crate::mysql_date_parsing::Kind;
    match t {
        ResultType::StrToDate(marker) => {
            *t = match value(marker).and_then(Kind::of_format) {
                Some(Kind::Date) => ResultType::Date,
                Some(Kind::Time { .. }) => ResultType::Time,
                Some(Kind::DateTime { .. }) => ResultType::DateTime,
                None => ResultType::Unknown,
            };
        }
        ResultType::Arithmetic(_, l, r) => {
            with_literals(l, value);
            with_literals(r, value);
        }
        ResultType::Aggregate(_, a) | ResultType::Round(a, _) | ResultType::Whole(a) => {
            with_literals(a, value);
        }
        ResultType::Common(parts) => {
            for p in parts {
                with_literals(p, value);
            }
        }
        _ => {}
    }
}

/// The value of an integer literal, signed or not.
fn integer_literal(e: &Expr) -> Option<i64> {
    match e {
        Expr::Value(v) => match &v.value {
            Value::Number(n, _) => n.parse().ok(),
            _ => None,
        },
        Expr::UnaryOp {
            op: UnaryOperator::Minus,
            expr,
        } => integer_literal(expr).and_then(i64::checked_neg),
        Expr::Nested(inner) => integer_literal(inner),
        _ => None,
    }
}

/// The type of a column that two branches of a `UNION` type `a` and `b`: MySQL's common type
/// of two numbers (an integer and a `DECIMAL` make a `DECIMAL`, with the larger scale), or
/// their type where both are alike.
fn union_type(a: ResultType, b: ResultType) -> ResultType {
    match (a, b) {
        (ResultType::Decimal(x), ResultType::Decimal(y)) => ResultType::Decimal(x.max(y)),
        (ResultType::Decimal(x), ResultType::Integer)
        | (ResultType::Integer, ResultType::Decimal(x)) => ResultType::Decimal(x),
        (a, b) if a == b => a,
        _ => ResultType::Unknown,
    }
}

/// A number literal's type: `12` an integer, `1.50` a `DECIMAL` with 2 decimals, `1e3` a double.
fn number_type(n: &str) -> ResultType {
    if n.contains(['e', 'E']) {
        return ResultType::Double;
    }
    match n.split_once('.') {
        Some((_, decimals)) => {
            ResultType::Decimal(u32::try_from(decimals.len()).unwrap_or(u32::MAX))
        }
        None => ResultType::Integer,
    }
}

fn cast_type(to: &DataType) -> ResultType {
    let name = to.to_string().to_ascii_uppercase();
    match name.split(['(', ' ']).next().unwrap_or_default() {
        "SIGNED" | "UNSIGNED" | "INT" | "INTEGER" | "BIGINT" => ResultType::Integer,
        "DATE" => ResultType::Date,
        "TIME" => ResultType::Time,
        "DATETIME" if !name.contains('(') => ResultType::DateTime,
        "DECIMAL" | "NUMERIC" | "DEC" | "FIXED" => {
            let scale = name
                .split_once(',')
                .and_then(|(_, s)| s.trim_end_matches(')').trim().parse().ok())
                .unwrap_or(0);
            ResultType::Decimal(scale)
        }
        "DOUBLE" | "FLOAT" | "REAL" => ResultType::Double,
        _ => ResultType::Unknown,
    }
}
