//! MySQL's numeric functions whose SQLite namesakes answer differently, under names of their
//! own that the dialect calls (as [`crate::mysql_text_functions`]'s):
//! - `ROUND(X, D)` (`mysql_round`): a number SQLite holds as a double rounded as MySQL rounds
//!   the `DECIMAL` it was written as, half away from zero from its shortest text
//!   (`ROUND(1.005, 2)` is 1.01, `ROUND(2.675, 2)` 2.68; SQLite's rounds the binary value,
//!   1.00 and 2.67), and to tens, hundreds, ... for a negative `D` (`ROUND(15, -1)` is 20;
//!   SQLite's ignores the sign);
//! - `%` and `MOD` (`mysql_mod`): the remainder of numbers with a fraction (`1.5 % 1` is 0.5;
//!   SQLite's takes integers first, 0);
//! - `mysql_float(X)`: what a `FLOAT` column stores, the nearest 4-byte float (a column's
//!   rounding trigger calls it, `dialect::Rounding`);
//! - `CEIL`/`CEILING` and `FLOOR` (`mysql_ceil`, `mysql_floor`): an integer stays one, a
//!   number with a fraction gives a whole double (its column is typed as MySQL types it,
//!   [`crate::dialect::result_types`]), text is read as a double first.

use rusqlite::Connection;
use rusqlite::functions::{Context, FunctionFlags};
use rusqlite::types::{Value, ValueRef};

use crate::column_shape::decimal_text;

/// Most decimals `ROUND` keeps (MySQL's `DECIMAL` scale limit).
const MAX_DECIMALS: i64 = 30;

/// A number argument: an integer, a double, NULL (`None`); text is read as MySQL reads it in
/// a numeric context, as a double (an integer's text too, as here its digits are kept).
enum Number {
    Integer(i64),
    Double(f64),
}

fn number(ctx: &Context<'_>, i: usize) -> Option<Number> {
    number_of(ctx.get_raw(i))
}

fn number_of(value: ValueRef<'_>) -> Option<Number> {
    match value {
        ValueRef::Null => None,
        ValueRef::Integer(n) => Some(Number::Integer(n)),
        ValueRef::Real(f) => Some(Number::Double(f)),
        ValueRef::Text(t) | ValueRef::Blob(t) => {
            let text = String::from_utf8_lossy(t);
            let text = text.trim();
            Some(
                text.parse::<i64>()
                    .map(Number::Integer)
                    .unwrap_or_else(|_| Number::Double(text.parse().unwrap_or(0.0))),
            )
        }
    }
}

/// Registers the functions on `conn`.
///
/// # Errors
/// SQLite's, if a function cannot be registered.
pub fn register(conn: &Connection) -> rusqlite::Result<()> {
    let pure = FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC;
    for n_args in [1, 2] {
        conn.create_scalar_function("mysql_round", n_args, pure, |ctx| {
            Ok(round_value(
                ctx.get_raw(0),
                (ctx.len() > 1).then(|| ctx.get_raw(1)),
            ))
        })?;
    }
    conn.create_scalar_function("mysql_pow", 2, pure, |ctx| {
        Ok(match (number(ctx, 0), number(ctx, 1)) {
            (Some(a), Some(b)) => Some(as_double(&a).powf(as_double(&b))).filter(|v| v.is_finite()),
            _ => None,
        })
    })?;
    conn.create_scalar_function("mysql_sqrt", 1, pure, |ctx| {
        // NULL for a negative number, as MySQL answers.
        Ok(number(ctx, 0)
            .map(|x| as_double(&x))
            .filter(|x| *x >= 0.0)
            .map(f64::sqrt))
    })?;
    conn.create_scalar_function("mysql_truncate", 2, pure, |ctx| {
        let (Some(x), Some(Number::Integer(digits))) = (number(ctx, 0), number(ctx, 1)) else {
            return Ok(None);
        };
        Ok(Some(truncate(x, digits.clamp(-MAX_DECIMALS, MAX_DECIMALS))))
    })?;
    for (name, whole) in [
        (crate::dialect::CEIL_FN, f64::ceil as fn(f64) -> f64),
        (crate::dialect::FLOOR_FN, f64::floor as fn(f64) -> f64),
    ] {
        conn.create_scalar_function(name, 1, pure, move |ctx| {
            use rusqlite::types::Value;
            Ok(number(ctx, 0).map(|x| match x {
                Number::Integer(i) => Value::Integer(i),
                Number::Double(f) => Value::Real(whole(f)),
            }))
        })?;
    }
    conn.create_scalar_function("mysql_float", 1, pure, |ctx| {
        Ok(number(ctx, 0).map(|x| float(as_double(&x))))
    })?;
    conn.create_scalar_function("mysql_mod", 2, pure, |ctx| {
        Ok(match (number(ctx, 0), number(ctx, 1)) {
            (Some(Number::Integer(a)), Some(Number::Integer(b))) => {
                // MySQL's sign is the dividend's, as Rust's; NULL for a zero divisor.
                a.checked_rem(b).map(rusqlite::types::Value::Integer)
            }
            (Some(a), Some(b)) => {
                let (a, b) = (as_double(&a), as_double(&b));
                (b != 0.0).then(|| rusqlite::types::Value::Real(a % b))
            }
            _ => None,
        })
    })?;
    Ok(())
}

/// What a `FLOAT` column stores of `x`: the nearest 4-byte float (as a double), which is
/// what MySQL computes with afterwards (`14.96` is 14.960000038146973). A value beyond the
/// float's range stays as it is (the column's check refuses it).
fn float(x: f64) -> f64 {
    #[expect(
        clippy::cast_possible_truncation,
        reason = "the nearest float is the conversion meant"
    )]
    let narrow = x as f32;
    if narrow.is_finite() {
        f64::from(narrow)
    } else {
        x
    }
}

/// MySQL's `ROUND(x, digits)` of a number written as a `DECIMAL` ([`round`]); `digits`
/// `None` is 0. NULL when either is.
pub(crate) fn round_value(x: ValueRef<'_>, digits: Option<ValueRef<'_>>) -> Option<Value> {
    let x = number_of(x)?;
    let digits = match digits.map(number_of) {
        None => 0,
        Some(None) => return None,
        Some(Some(Number::Integer(d))) => d,
        // MySQL takes the digits as an integer, rounded.
        #[expect(clippy::cast_possible_truncation, reason = "clamped below")]
        Some(Some(Number::Double(d))) => d.round() as i64,
    };
    Some(round(x, digits.clamp(-MAX_DECIMALS, MAX_DECIMALS)))
}

/// MariaDB's `ROUND(x, digits)` of a `DOUBLE` (`my_double_round`): `x · 10^digits` rounded
/// to the nearest integer, a tie to even (`rint`), divided back (tens, hundreds, ... for
/// negative `digits`): 1.25 to one decimal is 1.2, 2.675 to two 2.68 (its product is 267.5).
pub(crate) fn round_double(x: f64, digits: i64) -> f64 {
    let digits = digits.clamp(-MAX_DECIMALS, MAX_DECIMALS);
    let unit = 10_f64.powi(i32::try_from(digits.unsigned_abs()).unwrap_or(i32::MAX));
    if digits < 0 {
        (x / unit).round_ties_even() * unit
    } else {
        let scaled = x * unit;
        if scaled.is_infinite() {
            return x;
        }
        scaled.round_ties_even() / unit
    }
}

#[expect(
    clippy::cast_precision_loss,
    reason = "MySQL computes it as a double too"
)]
const fn as_double(n: &Number) -> f64 {
    match n {
        Number::Integer(i) => *i as f64,
        Number::Double(f) => *f,
    }
}

/// `x` cut to `digits` decimals (tens, hundreds, ... when negative), toward zero, from a
/// double's shortest digits as [`round`] reads them.
fn truncate(x: Number, digits: i64) -> rusqlite::types::Value {
    use rusqlite::types::Value;
    match x {
        Number::Integer(i) if digits >= 0 => Value::Integer(i),
        Number::Integer(i) => {
            let unit = 10_i64.checked_pow(u32::try_from(-digits).unwrap_or(u32::MAX));
            Value::Integer(unit.map_or(0, |u| i / u * u))
        }
        Number::Double(f) if !f.is_finite() => Value::Real(f),
        Number::Double(f) => {
            let shortest = format!("{}", f.abs());
            let (whole, fraction) = shortest.split_once('.').unwrap_or((&shortest, ""));
            let kept = usize::try_from(digits.max(0))
                .unwrap_or(0)
                .min(fraction.len());
            let text = format!("{whole}.{}", fraction.get(..kept).unwrap_or_default());
            let mut value: f64 = text.parse().unwrap_or(0.0);
            if digits < 0 {
                let unit = 10_f64.powi(i32::try_from(-digits).unwrap_or(i32::MAX));
                value = (value / unit).trunc() * unit;
            }
            Value::Real(if f.is_sign_negative() { -value } else { value })
        }
    }
}

/// `x` rounded to `digits` decimals (tens, hundreds, ... when negative), half away from zero.
fn round(x: Number, digits: i64) -> rusqlite::types::Value {
    use rusqlite::types::Value;
    match x {
        Number::Integer(i) if digits >= 0 => Value::Integer(i),
        Number::Integer(i) => {
            let unit = 10_i64.checked_pow(u32::try_from(-digits).unwrap_or(u32::MAX));
            match unit {
                Some(unit) => {
                    let half = unit / 2;
                    let rounded = if i >= 0 {
                        i.checked_add(half).map(|v| v - v % unit)
                    } else {
                        i.checked_sub(half).map(|v| v - v % unit)
                    };
                    rounded.map_or(Value::Null, Value::Integer)
                }
                None => Value::Integer(0),
            }
        }
        Number::Double(f) if !f.is_finite() => Value::Real(f),
        Number::Double(f) => {
            let scale = usize::try_from(digits.max(0)).unwrap_or(0);
            let text = decimal_text(f, scale);
            let mut value: f64 = text.parse().unwrap_or(f);
            if digits < 0 {
                let unit = 10_f64.powi(i32::try_from(-digits).unwrap_or(i32::MAX));
                let whole: f64 = decimal_text(f / unit, 0).parse().unwrap_or(0.0);
                value = whole * unit;
            }
            Value::Real(value)
        }
    }
}

#[cfg(test)]
mod tests {
    use rusqlite::types::Value;

    use super::{Number, round, truncate};

    /// As MariaDB 10.11 answers `TRUNCATE` of these.
    #[test]
    fn truncates_toward_zero_from_the_shortest_digits() {
        for (x, digits, mariadb) in [
            (1.999, 2, 1.99),
            (-1.999, 2, -1.99),
            (1234.5, -2, 1200.0),
            (0.29, 1, 0.2),
        ] {
            assert_eq!(
                truncate(Number::Double(x), digits),
                Value::Real(mariadb),
                "TRUNCATE({x}, {digits})"
            );
        }
        assert_eq!(truncate(Number::Integer(-1234), -2), Value::Integer(-1200));
    }

    /// As MariaDB 10.11 answers `ROUND` of these (DECIMAL literals and integers).
    #[test]
    fn rounds_as_mysql_rounds_a_decimal() {
        for (x, digits, mariadb) in [
            (1.005, 2, 1.01),
            (2.675, 2, 2.68),
            (2.5, 0, 3.0),
            (-2.5, 0, -3.0),
            (1.2345, 2, 1.23),
            (15.5, -1, 20.0),
            (-0.001, 2, 0.0),
        ] {
            assert_eq!(
                round(Number::Double(x), digits),
                Value::Real(mariadb),
                "ROUND({x}, {digits})"
            );
        }
        for (x, digits, mariadb) in [(15, -1, 20), (-15, -1, -20), (14, -1, 10), (7, 2, 7)] {
            assert_eq!(round(Number::Integer(x), digits), Value::Integer(mariadb));
        }
    }
}
