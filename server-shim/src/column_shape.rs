//! A result column's shape: what its declared type, or the type MySQL gives its expression
//! ([`ResultType`]), says about its values beyond SQLite's storage class, and each
//! value as a [`Cell`] of that shape.

use rusqlite::Connection;
use rusqlite::types::ValueRef;

use crate::dialect::{ResultAggregate, ResultOperator, ResultType};
use crate::engine::{Cell, IntWidth};

/// What a column's declared type says about its values beyond SQLite's storage class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    /// `DECIMAL(p,s)`/`NUMERIC(p,s)`: values print with `s` decimals as MySQL's do (`1.50`,
    /// not `1.5`).
    Decimal(usize),
    /// `DATE`: stored as text, sent as MySQL's DATE type.
    Date,
    /// `DATETIME`/`TIMESTAMP`: stored as text, sent as MySQL's DATETIME type, so drivers
    /// (PyMySQL, and SQLAlchemy on it) return date-time objects, not strings.
    DateTime,
    /// `FLOAT` (a 4-byte float: up to 24 bits of precision), written with 6 significant
    /// digits, or `FLOAT(m,d)` with `d` decimals.
    Float(Option<u8>),
    /// An integer type: the storage class decides the value, the width its MySQL type.
    Int(IntWidth),
    /// An expression MySQL types `DOUBLE` (`IF(c, f, 0)` of a `FLOAT`): an integer among its
    /// values is sent as a double too.
    Double,
    /// `BINARY`, `VARBINARY` and the `BLOB`s: bytes, whatever SQLite stored (a string
    /// literal is stored as text), sent with the character set `binary` as MariaDB sends them.
    Binary,
    /// `JSON`: its text, sent as MySQL 8's JSON type.
    Json,
    /// `TIME(p)`: stored as the text written, sent as MySQL's TIME with `p` decimals.
    Time(u8),
    /// `BIT(n)`: stored as an integer, sent as MySQL's BIT, `n` bits in whole bytes.
    Bit(u8),
    /// Anything else: the storage class decides.
    Plain,
}

impl Shape {
    pub(crate) fn of(decl: &str) -> Self {
        if let Some(scale) = decimal_scale(decl) {
            return Self::Decimal(scale);
        }
        if let Some(width) = IntWidth::of_declared(decl) {
            return Self::Int(width);
        }
        if let Some(crate::dialect::Rounding::Float(decimals)) = crate::dialect::Rounding::of(decl)
        {
            return Self::Float(decimals.and_then(|d| u8::try_from(d).ok()));
        }
        let lower = decl.trim().to_ascii_lowercase();
        let base = lower.split(['(', ' ']).next().unwrap_or_default();
        match base {
            "date" => Self::Date,
            "datetime" | "timestamp" => Self::DateTime,
            "json" => Self::Json,
            "time" => Self::Time(
                lower
                    .split_once('(')
                    .and_then(|(_, p)| p.split(')').next()?.trim().parse().ok())
                    .unwrap_or(0),
            ),
            "bit" => Self::Bit(
                lower
                    .split_once('(')
                    .and_then(|(_, n)| n.split(')').next()?.trim().parse().ok())
                    .unwrap_or(1),
            ),
            "binary" | "varbinary" | "tinyblob" | "blob" | "mediumblob" | "longblob" => {
                Self::Binary
            }
            _ => Self::Plain,
        }
    }

    /// The integer width a column of this shape has, if it is an integer's.
    pub(crate) const fn int_width(&self) -> Option<IntWidth> {
        match self {
            Self::Int(w) => Some(*w),
            _ => None,
        }
    }
}

/// [`Shape::Time`]'s decimals for a value that keeps those it was written with.
const TIME_AS_WRITTEN: u8 = u8::MAX;

/// MySQL's largest `DECIMAL` scale.
const MAX_DECIMAL_SCALE: usize = 30;

/// The scale of a `DECIMAL(p,s)` declared type (`dialect::decimal_scale`: also `NUMERIC`,
/// `DEC`, `FIXED`, and `DECIMAL` alone, which is `DECIMAL(10,0)`). MySQL's largest scale is
/// 30; a larger one (SQLite takes any) is printed as stored.
fn decimal_scale(decl: &str) -> Option<usize> {
    crate::dialect::decimal_scale(decl)
        .and_then(|s| usize::try_from(s).ok())
        .filter(|s| *s <= MAX_DECIMAL_SCALE)
}

/// A SQLite value as a cell of a column of `shape`. A date or date-time column's text that is
/// not a valid date (MySQL's zero date `0000-00-00`, say) stays text.
pub(crate) fn to_cell(v: ValueRef<'_>, shape: Shape) -> Cell {
    match (v, shape) {
        (ValueRef::Null, _) => Cell::Null,
        (ValueRef::Integer(i), Shape::Decimal(0)) => Cell::Decimal(i.to_string()),
        (ValueRef::Integer(i), Shape::Decimal(scale)) => {
            Cell::Decimal(format!("{i}.{}", "0".repeat(scale)))
        }
        (ValueRef::Real(f), Shape::Decimal(scale)) if f.is_finite() => {
            Cell::Decimal(decimal_text(f, scale))
        }
        (ValueRef::Real(f), Shape::Float(decimals)) => float_cell(f, decimals),
        (ValueRef::Integer(i), Shape::Float(decimals)) => float_cell(i as f64, decimals),
        (ValueRef::Integer(i), Shape::Double) => Cell::Float(i as f64),
        (ValueRef::Text(t), Shape::Date) => {
            let text = String::from_utf8_lossy(t);
            chrono::NaiveDate::parse_from_str(&text, "%Y-%m-%d")
                .map_or_else(|_| Cell::Text(text.into_owned()), Cell::Date)
        }
        (ValueRef::Text(t), Shape::DateTime) => {
            let text = String::from_utf8_lossy(t);
            // A date alone (inserted as '2021-01-01') is its midnight, as MySQL stores it.
            chrono::NaiveDateTime::parse_from_str(&text, "%Y-%m-%d %H:%M:%S%.f")
                .or_else(|_| {
                    chrono::NaiveDate::parse_from_str(&text, "%Y-%m-%d")
                        .map(|d| d.and_time(chrono::NaiveTime::MIN))
                })
                .map_or_else(|_| Cell::Text(text.into_owned()), Cell::DateTime)
        }
        (ValueRef::Text(t) | ValueRef::Blob(t), Shape::Binary) => Cell::Bytes(t.to_vec()),
        (ValueRef::Text(t), Shape::Json) => Cell::Json(String::from_utf8_lossy(t).into_owned()),
        (ValueRef::Text(t), Shape::Time(decimals)) => {
            let text = String::from_utf8_lossy(t);
            crate::mysql_time::MysqlTime::parse(&text).map_or_else(
                || Cell::Text(text.into_owned()),
                |time| {
                    Cell::Time(if decimals == TIME_AS_WRITTEN {
                        time
                    } else {
                        time.with_decimals(decimals)
                    })
                },
            )
        }
        (ValueRef::Integer(i), Shape::Bit(bits)) => {
            let bytes = usize::from(bits).div_ceil(8).clamp(1, 8);
            Cell::Bit(
                i.to_be_bytes()
                    .get(8 - bytes..)
                    .unwrap_or_default()
                    .to_vec(),
            )
        }
        (ValueRef::Integer(i), Shape::Binary) => Cell::Bytes(i.to_string().into_bytes()),
        (ValueRef::Real(f), Shape::Binary) => {
            Cell::Bytes(crate::engine::double_text(f).into_bytes())
        }
        (ValueRef::Real(f), Shape::Int(_)) if f.fract() == 0.0 && f.abs() < I64_BOUND =>
        {
            #[expect(clippy::cast_possible_truncation, reason = "whole and within i64")]
            Cell::Int(f as i64)
        }
        (ValueRef::Integer(i), _) => Cell::Int(i),
        (ValueRef::Real(f), _) => Cell::Float(f),
        (ValueRef::Text(t), _) => Cell::Text(String::from_utf8_lossy(t).into_owned()),
        (ValueRef::Blob(b), _) => Cell::Bytes(b.to_vec()),
    }
}

/// A `FLOAT` column's value as text: with its decimals (`FLOAT(m,d)`) or 6 significant digits.
pub(crate) fn float_column_text(f: f64, decimals: Option<u8>) -> String {
    match decimals {
        Some(d) if f.is_finite() => decimal_text(f, usize::from(d)),
        _ => crate::engine::float_text(f),
    }
}

fn float_cell(f: f64, decimals: Option<u8>) -> Cell {
    Cell::Float32(f, float_column_text(f, decimals))
}

/// 2^63: every whole double below it in magnitude is an `i64`.
const I64_BOUND: f64 = 9_223_372_036_854_775_808.0;

/// `f` written with `scale` decimals as MySQL's `DECIMAL` writes a value: rounded half away
/// from zero, from the shortest text that reads back as `f` (SQLite computed it in doubles:
/// `0.1 + 0.2` is 0.30000000000000004, and `1.125`, exact in binary, rounds up to 1.13 as
/// MySQL's does, not to even). No negative zero (`-0.001` is `0.00`).
///
/// A double that misses a tie between two values of `scale` decimals by the last bits of
/// binary arithmetic (`3.3 + 0.05` is 3.3499999999999996) is written as the tie, which MySQL's
/// exact `DECIMAL` arithmetic computes (3.35, rounded to one decimal 3.4): [`missed_tie`].
pub(crate) fn decimal_text(f: f64, scale: usize) -> String {
    let shortest = format!("{f}");
    let text = missed_tie(f, &shortest, scale).unwrap_or(shortest);
    crate::mysql_text_functions::rounded(&text, scale)
}

/// How many units in the last place a double may miss a tie by and still stand for it: a few
/// additions' rounding errors, far less than any digit a double's shortest text shows.
const TIE_ULPS: f64 = 4.0;

/// The tie between two values of `scale` decimals that `f` (whose shortest text is
/// `shortest`) falls short of by at most [`TIE_ULPS`], as text; `None` where there is no such
/// tie, or where a double cannot tell it from its neighbours (its shortest text is not the
/// tie's: `f` is then as near the tie as its magnitude allows, and read as it is).
fn missed_tie(f: f64, shortest: &str, scale: usize) -> Option<String> {
    let (int, frac) = shortest.split_once('.')?;
    if frac.len() <= scale + 1 {
        return None;
    }
    let tie = format!("{int}.{}5", frac.get(..scale)?);
    let tf: f64 = tie.parse().ok()?;
    let near = (tf - f).abs() <= TIE_ULPS * f64::EPSILON * tf.abs();
    (near && format!("{tf}") == tie).then_some(tie)
}

/// What a result column's [`ResultType`] resolves to, where it has one: the declared types of
/// the table columns it names looked up in SQLite's catalog; `None` where it stays unknown
/// (its values type it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Resolved {
    Integer,
    Decimal(usize),
    Double,
    /// A table column's own shape (a `MIN`/`MAX` keeps it).
    Column(Shape),
}

/// The shape of a result column of type `t`: MySQL's rules for arithmetic (`+ - %` keep the
/// larger scale, `*` adds scales, `/` adds 4, `div_precision_increment`; a double makes a
/// double), `SUM` (a `DECIMAL`), `AVG` (4 more decimals), `ROUND` and `MIN`/`MAX` (the
/// column's).
pub(crate) fn shape_of(conn: &Connection, current_db: &str, t: &ResultType) -> Shape {
    match resolve(conn, current_db, t) {
        Some(Resolved::Decimal(scale)) => Shape::Decimal(scale.min(MAX_DECIMAL_SCALE)),
        Some(Resolved::Column(shape)) => shape,
        // A whole double (`CEIL(1.5)`) is sent as the integer MySQL gives.
        Some(Resolved::Integer) => Shape::Int(IntWidth::LongLong),
        Some(Resolved::Double) => Shape::Double,
        _ if *t == ResultType::Date => Shape::Date,
        _ if *t == ResultType::DateTime => Shape::DateTime,
        // As many decimals as the value has (`TIME('23:12:59.05100')` has 5).
        _ if *t == ResultType::Time => Shape::Time(TIME_AS_WRITTEN),
        _ => Shape::Plain,
    }
}

fn resolve(conn: &Connection, current_db: &str, t: &ResultType) -> Option<Resolved> {
    let numeric = |r: Option<Resolved>| match r? {
        Resolved::Column(Shape::Decimal(s)) => Some(Resolved::Decimal(s)),
        Resolved::Column(Shape::Int(_)) => Some(Resolved::Integer),
        Resolved::Column(Shape::Float(_)) => Some(Resolved::Double),
        Resolved::Column(Shape::Plain) => None,
        Resolved::Column(_) => None,
        other => Some(other),
    };
    Some(match t {
        ResultType::Integer => Resolved::Integer,
        ResultType::Decimal(s) => Resolved::Decimal(usize::try_from(*s).ok()?),
        ResultType::Double => Resolved::Double,
        ResultType::Date
        | ResultType::DateTime
        | ResultType::Time
        | ResultType::StrToDate(_)
        | ResultType::Null
        | ResultType::Unknown => {
            return None;
        }
        ResultType::Common(parts) => {
            let mut resolved = Vec::with_capacity(parts.len());
            for p in parts.iter().filter(|p| **p != ResultType::Null) {
                resolved.push(resolve(conn, current_db, p)?);
            }
            common(&resolved)?
        }
        ResultType::Column {
            schema,
            table,
            column,
        } => {
            let decl = declared_type(
                conn,
                current_db,
                &crate::dialect::TypedColumn {
                    schema: schema.clone(),
                    table: table.clone(),
                    column: column.clone(),
                },
            )?;
            let lower = decl.to_ascii_lowercase();
            let base = lower.split(['(', ' ']).next().unwrap_or_default();
            let shape = Shape::of(&decl);
            if matches!(shape, Shape::Float(_)) {
                // MIN/MAX keep a FLOAT's writing; arithmetic makes it a double.
                Resolved::Column(shape)
            } else if matches!(base, "double" | "float" | "real") {
                Resolved::Double
            } else {
                Resolved::Column(shape)
            }
        }
        ResultType::Arithmetic(op, left, right) => {
            let l = numeric(resolve(conn, current_db, left))?;
            let r = numeric(resolve(conn, current_db, right))?;
            let scale = |x: Resolved| match x {
                Resolved::Decimal(s) => s,
                _ => 0,
            };
            match (l, r) {
                (Resolved::Double, _) | (_, Resolved::Double) => Resolved::Double,
                (Resolved::Integer, Resolved::Integer) => match op {
                    ResultOperator::Divide => Resolved::Decimal(DIV_PRECISION_INCREMENT),
                    _ => Resolved::Integer,
                },
                (l, r) => Resolved::Decimal(match op {
                    ResultOperator::AddOrSubtract | ResultOperator::Modulo => {
                        scale(l).max(scale(r))
                    }
                    ResultOperator::Multiply => scale(l) + scale(r),
                    ResultOperator::Divide => scale(l) + DIV_PRECISION_INCREMENT,
                }),
            }
        }
        ResultType::Aggregate(kind, arg) => {
            let arg = resolve(conn, current_db, arg)?;
            match kind {
                ResultAggregate::MinOrMax => arg,
                ResultAggregate::Sum => match numeric(Some(arg))? {
                    Resolved::Integer => Resolved::Decimal(0),
                    other => other,
                },
                ResultAggregate::Avg => match numeric(Some(arg))? {
                    Resolved::Integer => Resolved::Decimal(DIV_PRECISION_INCREMENT),
                    Resolved::Decimal(s) => Resolved::Decimal(s + DIV_PRECISION_INCREMENT),
                    other => other,
                },
            }
        }
        ResultType::Round(arg, digits) => match numeric(resolve(conn, current_db, arg))? {
            Resolved::Decimal(_) => Resolved::Decimal(usize::try_from(*digits).unwrap_or(0)),
            other => other,
        },
        ResultType::Whole(arg) => match numeric(resolve(conn, current_db, arg))? {
            Resolved::Decimal(_) => Resolved::Integer,
            other => other,
        },
    })
}

/// The type MySQL gives several values one of which is the result: one column shape they all
/// have; else, when all are numbers, a `DOUBLE` if one is (or is a `FLOAT`), integers alone
/// an integer, else a `DECIMAL` with the largest scale; `None` for anything else (text
/// among numbers is text, which their values type).
fn common(parts: &[Resolved]) -> Option<Resolved> {
    let (first, rest) = parts.split_first()?;
    if rest.iter().all(|p| p == first) {
        return Some(*first);
    }
    let mut out = Resolved::Integer;
    for p in parts {
        let number = match p {
            Resolved::Column(Shape::Int(_)) => Resolved::Integer,
            Resolved::Column(Shape::Decimal(s)) => Resolved::Decimal(*s),
            Resolved::Column(Shape::Float(_)) => Resolved::Double,
            Resolved::Column(_) => return None,
            number => *number,
        };
        out = match (out, number) {
            (Resolved::Double, _) | (_, Resolved::Double) => Resolved::Double,
            (Resolved::Decimal(a), Resolved::Decimal(b)) => Resolved::Decimal(a.max(b)),
            (Resolved::Decimal(s), _) | (_, Resolved::Decimal(s)) => Resolved::Decimal(s),
            _ => Resolved::Integer,
        };
    }
    Some(out)
}

/// A declared type that writes values as MySQL writes an expression of type `t` in text
/// (`decimal(65,1)` for `0.1 + 0.2`, `double` for `1e3`); `None` for an integer, or where
/// it is not known.
pub(crate) fn number_declaration(
    conn: &Connection,
    current_db: &str,
    t: &ResultType,
) -> Option<String> {
    match resolve(conn, current_db, t)? {
        Resolved::Decimal(scale) => Some(format!("decimal(65,{})", scale.min(MAX_DECIMAL_SCALE))),
        Resolved::Double => Some("double".to_owned()),
        Resolved::Column(Shape::Decimal(scale)) => Some(format!("decimal(65,{scale})")),
        Resolved::Column(Shape::Float(None)) => Some("float".to_owned()),
        Resolved::Column(Shape::Float(Some(decimals))) => Some(format!("float(24,{decimals})")),
        Resolved::Integer | Resolved::Column(_) => None,
    }
}

/// The declared type of `column` in SQLite's catalog (its schema attached, or the table the
/// statement reads: a temporary one first).
pub(crate) fn declared_type(
    conn: &Connection,
    current_db: &str,
    column: &crate::dialect::TypedColumn,
) -> Option<String> {
    match &column.schema {
        Some(db) if db != current_db => conn.query_row(
            "SELECT type FROM pragma_table_info(?1, ?2) WHERE name = ?3 COLLATE NOCASE",
            [column.table.as_str(), db.as_str(), column.column.as_str()],
            |r| r.get(0),
        ),
        // Without a schema SQLite looks the table up as the statement does: a temporary
        // table first, one of the current database's behind it.
        _ => conn.query_row(
            "SELECT type FROM pragma_table_info(?1) WHERE name = ?2 COLLATE NOCASE",
            [column.table.as_str(), column.column.as_str()],
            |r| r.get(0),
        ),
    }
    .ok()
}

/// The collation of `column` in SQLite's catalog (`mysql_general_ci`, `mysql_bin`), found as
/// [`declared_type`] finds its type; a view's column's is the table column's it shows.
pub(crate) fn declared_collation(
    conn: &Connection,
    current_db: &str,
    column: &crate::dialect::TypedColumn,
) -> Option<String> {
    let schema = column.schema.as_deref().filter(|db| *db != current_db);
    let (_, collation, ..) =
        match conn.column_metadata(schema, column.table.as_str(), column.column.as_str()) {
            Ok(found) => found,
            // SQLite keeps no collation for a view's column: the one of the column it reads.
            Err(_) => {
                let quoted = |name: &str| format!("`{}`", name.replace('`', "``"));
                let view = match schema {
                    Some(db) => format!("{}.{}", quoted(db), quoted(&column.table)),
                    None => quoted(&column.table),
                };
                let stmt = conn
                    .prepare(&format!("SELECT {} FROM {view}", quoted(&column.column)))
                    .ok()?;
                let origin = stmt.columns_with_metadata().next()?;
                let (db, table, name) = (
                    origin.database_name()?.to_owned(),
                    origin.table_name()?.to_owned(),
                    origin.origin_name()?.to_owned(),
                );
                drop(stmt);
                conn.column_metadata(Some(db.as_str()), table.as_str(), name.as_str())
                    .ok()?
            }
        };
    Some(collation?.to_string_lossy().into_owned())
}

/// MySQL's `div_precision_increment`: the decimals a division adds.
const DIV_PRECISION_INCREMENT: usize = 4;

#[cfg(test)]
mod tests {
    use super::decimal_text;

    /// As MariaDB 10.11 writes these `DECIMAL`s (`SELECT CAST(x AS DECIMAL(20, scale))`).
    #[test]
    fn decimals_round_half_away_from_zero_from_the_shortest_text() {
        for (f, scale, mariadb) in [
            (3.5, 4, "3.5000"),
            (0.1 + 0.2, 1, "0.3"),
            (1.125, 2, "1.13"),
            (-1.125, 2, "-1.13"),
            (2.675, 2, "2.68"),
            (9.999, 2, "10.00"),
            (-0.001, 2, "0.00"),
            (2.5, 0, "3"),
            (12.5, 2, "12.50"),
            (1e20, 1, "100000000000000000000.0"),
            (0.000_001_5, 6, "0.000002"),
            // Ties missed by binary arithmetic: MariaDB's exact sums are the ties.
            (3.3 + 0.05, 1, "3.4"),
            (-(3.3 + 0.05), 1, "-3.4"),
            (1.1 + 1.4 - 0.1 + 0.1, 0, "3"),
            (0.145 * 3.0, 3, "0.435"),
            (0.145 * 3.0, 2, "0.44"),
            // Not a tie: the double is as near to it as its magnitude allows.
            (123_456_789_012_345.67, 2, "123456789012345.67"),
            (3.349_999_999_99, 1, "3.3"),
        ] {
            assert_eq!(decimal_text(f, scale), mariadb, "{f} with {scale} decimals");
        }
    }
}
