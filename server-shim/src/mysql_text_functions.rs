//! MySQL's string functions whose SQLite namesakes answer differently, registered under names
//! of their own (`mysql_length`, ...) that the dialect calls for the MySQL ones, so that a
//! statement gets MySQL's answer, never SQLite's under MySQL's name
//! (`tests/tests/shim_differential.rs` compares both with MariaDB). SQLite's own are left as
//! they are: SQL stored before (a `CHECK`, a view) keeps its meaning.
//! - `LENGTH` (`mysql_length`): bytes (SQLite counts characters, which `CHAR_LENGTH` is);
//! - `HEX` (`mysql_hex`): a number's value in hexadecimal (SQLite writes its text's bytes);
//! - `QUOTE` (`mysql_quote`): backslash escapes (SQLite doubles quotes);
//! - two string literals compared (`mysql_compare_ci`), and text columns
//!   (`dialect::GENERAL_CI`): MariaDB's default collation, [`crate::general_ci`] (SQLite
//!   compares bytes);
//! - `LIKE` (SQLite's `like`, replaced): the same collation's weights (SQLite folds ASCII case
//!   only);
//! - `CAST(x AS CHAR[(n)])` (`mysql_cast_char`): text and integers as they are, cut to `n`
//!   characters; a non-integer number refused (its text depends on a type SQLite lost);
//! - `FORMAT(X, D)` (`mysql_format`): thousands separators and `D` decimals, half away from
//!   zero (SQLite's is `printf`).
//!
//! And those SQLite lacks: `REPEAT`, `LPAD`, `RPAD`, `FIND_IN_SET`, `REVERSE`, `ASCII`,
//! `SPACE`, `STRCMP` (the literal comparison's, below), `LOCATE` from a position
//! (`mysql_locate`). The JSON functions are
//! [`crate::mysql_json`]'s.

use std::sync::Arc;

use rusqlite::Connection;
use rusqlite::functions::{Context, FunctionFlags};
use rusqlite::types::ValueRef;

/// Argument `i` as bytes (a number as its text); `None` for NULL.
fn bytes_of(ctx: &Context<'_>, i: usize) -> Option<Vec<u8>> {
    match ctx.get_raw(i) {
        ValueRef::Null => None,
        ValueRef::Integer(n) => Some(n.to_string().into_bytes()),
        ValueRef::Real(r) => Some(r.to_string().into_bytes()),
        ValueRef::Text(b) | ValueRef::Blob(b) => Some(b.to_vec()),
    }
}

/// Argument `i` as text ([`bytes_of`], read as UTF-8); `None` for NULL.
fn text_of(ctx: &Context<'_>, i: usize) -> Option<String> {
    bytes_of(ctx, i).map(|b| String::from_utf8_lossy(&b).into_owned())
}

/// `LIKE`'s `ESCAPE` (the third argument): one character; empty or NULL is `\`, as in
/// MariaDB; longer is refused (1210).
fn escape_of(ctx: &Context<'_>) -> rusqlite::Result<Option<char>> {
    let Some(escape) = text_of(ctx, 2) else {
        return Ok(Some('\\'));
    };
    let mut chars = escape.chars();
    match (chars.next(), chars.next()) {
        (None, _) => Ok(Some('\\')),
        (Some(c), None) => Ok(Some(c)),
        _ => Err(rusqlite::Error::UserFunctionError(
            "Incorrect arguments to ESCAPE".into(),
        )),
    }
}

/// Two strings compared in MariaDB's default collation ([`crate::general_ci`]): -1, 0 or 1.
fn compare_ci(a: &str, b: &str) -> i64 {
    match crate::general_ci::compare(a, b) {
        core::cmp::Ordering::Less => -1,
        core::cmp::Ordering::Equal => 0,
        core::cmp::Ordering::Greater => 1,
    }
}

/// Most decimals `FORMAT` writes (MySQL's limit).
const FORMAT_MAX_DECIMALS: i64 = 30;
/// The longest string `REPEAT`, `LPAD` and `RPAD` make; longer is NULL, as MySQL's past
/// `max_allowed_packet`.
const MAX_MADE_BYTES: usize = 16 << 20;

/// Registers the functions on `conn`.
///
/// # Errors
/// SQLite's, if a function cannot be registered.
pub fn register(
    conn: &Connection,
    warnings: &Arc<crate::engine::FunctionWarnings>,
) -> rusqlite::Result<()> {
    conn.create_collation(crate::dialect::GENERAL_CI, crate::general_ci::compare)?;
    conn.create_collation(crate::dialect::BIN, crate::utf8mb4_bin::compare)?;
    conn.create_collation(crate::dialect::NOPAD_BIN, crate::utf8mb4_bin::compare_nopad)?;
    let pure = FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC;
    conn.create_scalar_function("mysql_length", 1, pure, |ctx| {
        Ok(match ctx.get_raw(0) {
            ValueRef::Null => None,
            ValueRef::Text(b) | ValueRef::Blob(b) => i64::try_from(b.len()).ok(),
            ValueRef::Integer(i) => i64::try_from(i.to_string().len()).ok(),
            ValueRef::Real(r) => i64::try_from(r.to_string().len()).ok(),
        })
    })?;
    conn.create_scalar_function("reverse", 1, pure, |ctx| {
        Ok(ctx
            .get::<Option<String>>(0)?
            .map(|s| s.chars().rev().collect::<String>()))
    })?;
    conn.create_scalar_function("ascii", 1, pure, |ctx| {
        Ok(match ctx.get_raw(0) {
            ValueRef::Null => None,
            ValueRef::Text(b) | ValueRef::Blob(b) => {
                Some(i64::from(b.first().copied().unwrap_or(0)))
            }
            ValueRef::Integer(i) => i.to_string().bytes().next().map(i64::from),
            ValueRef::Real(r) => r.to_string().bytes().next().map(i64::from),
        })
    })?;
    conn.create_scalar_function("space", 1, pure, |ctx| {
        Ok(ctx
            .get::<Option<i64>>(0)?
            .and_then(|n| usize::try_from(n.max(0)).ok())
            .filter(|n| *n <= MAX_MADE_BYTES)
            .map(|n| " ".repeat(n)))
    })?;
    // `LOCATE(needle, haystack, from)`: characters, 1-based; 0 when not found.
    conn.create_scalar_function("mysql_locate", 3, pure, |ctx| {
        let (Some(needle), Some(hay), Some(from)) = (
            ctx.get::<Option<String>>(0)?,
            ctx.get::<Option<String>>(1)?,
            ctx.get::<Option<i64>>(2)?,
        ) else {
            return Ok(None);
        };
        let Some(skip) = usize::try_from(from).ok().and_then(|f| f.checked_sub(1)) else {
            return Ok(Some(0));
        };
        let chars: Vec<char> = hay.chars().collect();
        let wanted: Vec<char> = needle.chars().collect();
        if skip > chars.len() {
            return Ok(Some(0));
        }
        let found = (skip..=chars.len().saturating_sub(wanted.len()))
            .find(|&i| chars.get(i..i + wanted.len()) == Some(wanted.as_slice()));
        Ok(Some(found.map_or(0, |i| i64::try_from(i + 1).unwrap_or(0))))
    })?;
    conn.create_scalar_function("mysql_compare_ci", 2, pure, |ctx| {
        let (Some(a), Some(b)) = (ctx.get::<Option<String>>(0)?, ctx.get::<Option<String>>(1)?)
        else {
            return Ok(None);
        };
        Ok(Some(compare_ci(&a, &b)))
    })?;
    // `CAST(x AS CHAR[(n)])`: exact for text and integers; a non-integer number's text
    // (its DECIMAL scale, its DOUBLE's digits) is not known from SQLite's double: refused.
    let cast_warnings = Arc::clone(warnings);
    conn.create_scalar_function(crate::dialect::CAST_CHAR_FN, 2, pure, move |ctx| {
        let text = match ctx.get_raw(0) {
            ValueRef::Null => return Ok(None),
            ValueRef::Integer(n) => n.to_string(),
            ValueRef::Text(b) | ValueRef::Blob(b) => String::from_utf8_lossy(b).into_owned(),
            ValueRef::Real(_) => {
                return Err(rusqlite::Error::UserFunctionError(
                    "CAST of a non-integer number AS CHAR (its text as MariaDB writes it is not \
                     known here): CAST a column, or use FORMAT or ROUND"
                        .into(),
                ));
            }
        };
        let length: i64 = ctx.get(1)?;
        Ok(Some(match usize::try_from(length) {
            Ok(n) if text.chars().nth(n).is_some() => {
                cast_warnings.push(
                    "Warning",
                    1292,
                    format!("Truncated incorrect CHAR({n}) value: '{text}'"),
                );
                text.chars().take(n).collect()
            }
            _ => text,
        }))
    })?;
    // SQLite's LIKE folds ASCII case only: `like(pattern, text[, escape])` replaces it. A
    // binary value (BLOB, VARBINARY) on either side: byte by byte, as MariaDB matches one; a
    // column in a `_bin` collation on either side (its collation wins over a literal's and a
    // `_ci` column's, as MariaDB's coercion rules say): character by character.
    // A side written with an explicit COLLATE, marked for the `LIKE` it is in.
    conn.create_scalar_function(
        crate::dialect::COLLATED_FN,
        2,
        pure | FunctionFlags::SQLITE_RESULT_SUBTYPE,
        |ctx| {
            let value: rusqlite::types::Value = ctx.get(0)?;
            let kind: String = ctx.get(1)?;
            Ok((
                value,
                if kind == "bin" {
                    crate::utf8mb4_bin::SUBTYPE
                } else {
                    crate::general_ci::SUBTYPE
                },
            ))
        },
    )?;
    for args in [2, 3] {
        conn.create_scalar_function("like", args, pure | FunctionFlags::SQLITE_SUBTYPE, |ctx| {
            let escape = if ctx.len() > 2 { escape_of(ctx)? } else { None };
            let binary = |i| matches!(ctx.get_raw(i), ValueRef::Blob(_));
            if binary(0) || binary(1) {
                let (Some(pattern), Some(text)) = (bytes_of(ctx, 0), bytes_of(ctx, 1)) else {
                    return Ok(None);
                };
                return Ok(Some(crate::general_ci::like_bytes(&text, &pattern, escape)));
            }
            let (Some(pattern), Some(text)) = (text_of(ctx, 0), text_of(ctx, 1)) else {
                return Ok(None);
            };
            // An explicit `_ci` decides; else a `_bin` column or an explicit `_bin`.
            let marked = |subtype| [0, 1].iter().any(|&i| Some(ctx.get_subtype(i)) == subtype);
            let ci = marked(crate::general_ci::SUBTYPE);
            Ok(Some(if !ci && marked(crate::utf8mb4_bin::SUBTYPE) {
                crate::utf8mb4_bin::like(&text, &pattern, escape)
            } else {
                crate::general_ci::like(&text, &pattern, escape)
            }))
        })?;
    }
    conn.create_scalar_function("mysql_hex", 1, pure, |ctx| {
        Ok(match ctx.get_raw(0) {
            ValueRef::Null => None,
            // Two's complement, as MySQL's BIGINT UNSIGNED view of a negative number.
            ValueRef::Integer(i) => Some(format!("{:X}", i.cast_unsigned())),
            ValueRef::Real(r) => Some(format!("{:X}", hex_of_double(r))),
            ValueRef::Text(b) | ValueRef::Blob(b) => {
                Some(authplugin::hex::encode(b).to_uppercase())
            }
        })
    })?;
    conn.create_scalar_function("mysql_quote", 1, pure, |ctx| {
        let text = match ctx.get_raw(0) {
            ValueRef::Null => return Ok("NULL".to_owned()),
            ValueRef::Integer(i) => i.to_string(),
            ValueRef::Real(r) => r.to_string(),
            ValueRef::Text(b) | ValueRef::Blob(b) => String::from_utf8_lossy(b).into_owned(),
        };
        Ok(quoted(&text))
    })?;
    conn.create_scalar_function("mysql_format", 2, pure, |ctx| {
        let Some(number) = decimal_text(ctx) else {
            return Ok(None);
        };
        let decimals: i64 = ctx.get::<Option<i64>>(1)?.unwrap_or(0);
        let decimals = usize::try_from(decimals.clamp(0, FORMAT_MAX_DECIMALS)).unwrap_or(0);
        Ok(Some(grouped(&rounded(&number, decimals))))
    })?;
    conn.create_scalar_function("repeat", 2, pure, |ctx| {
        let (Some(s), Some(n)) = (ctx.get::<Option<String>>(0)?, ctx.get::<Option<i64>>(1)?) else {
            return Ok(None);
        };
        let n = usize::try_from(n).unwrap_or(0);
        Ok((s.len().saturating_mul(n) <= MAX_MADE_BYTES).then(|| s.repeat(n)))
    })?;
    for (name, left) in [("lpad", true), ("rpad", false)] {
        conn.create_scalar_function(name, 3, pure, move |ctx| {
            let (Some(s), Some(len), Some(pad)) = (
                ctx.get::<Option<String>>(0)?,
                ctx.get::<Option<i64>>(1)?,
                ctx.get::<Option<String>>(2)?,
            ) else {
                return Ok(None);
            };
            Ok(padded(&s, len, &pad, left))
        })?;
    }
    conn.create_scalar_function("find_in_set", 2, pure, |ctx| {
        let (Some(needle), Some(list)) =
            (ctx.get::<Option<String>>(0)?, ctx.get::<Option<String>>(1)?)
        else {
            return Ok(None);
        };
        Ok(Some(find_in_set(&needle, &list)))
    })?;
    Ok(())
}

/// MySQL's `LPAD` (`left`) or `RPAD`: `s` padded with `pad` to `len` characters, or cut to
/// them; NULL for a negative length, or an empty pad with padding to do.
/// The integer `HEX` writes for a double, as MariaDB's `Item_func_hex` takes it: rounded half
/// away from zero, as a `BIGINT UNSIGNED` (a negative one in two's complement), all ones at
/// and beyond the ends of the 64-bit range (`HEX(1e20)` is `FFFFFFFFFFFFFFFF`).
#[expect(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    clippy::cast_precision_loss,
    reason = "the range is checked first; Rust's float casts saturate"
)]
fn hex_of_double(r: f64) -> u64 {
    if r.is_nan() || r <= i64::MIN as f64 || r >= u64::MAX as f64 {
        u64::MAX
    } else if r >= 0.0 {
        (r + 0.5) as u64
    } else {
        ((r - 0.5) as i64).cast_unsigned()
    }
}

fn padded(s: &str, len: i64, pad: &str, left: bool) -> Option<String> {
    let len = usize::try_from(len).ok()?;
    let have = s.chars().count();
    if len <= have {
        return Some(s.chars().take(len).collect());
    }
    if pad.is_empty() || len.saturating_mul(4) > MAX_MADE_BYTES {
        return None;
    }
    let fill: String = pad.chars().cycle().take(len - have).collect();
    Some(if left {
        format!("{fill}{s}")
    } else {
        format!("{s}{fill}")
    })
}

/// MySQL's `FIND_IN_SET`: the 1-based place of `needle` among the comma-separated `list`
/// (compared without case, as the default collation does), 0 when absent or when the needle
/// holds a comma.
fn find_in_set(needle: &str, list: &str) -> i64 {
    if needle.contains(',') {
        return 0;
    }
    let needle = needle.to_lowercase();
    list.split(',')
        .position(|item| item.to_lowercase() == needle)
        .and_then(|i| i64::try_from(i + 1).ok())
        .unwrap_or(0)
}

/// MySQL's `QUOTE`: single quotes around `text`, with backslash, quote, NUL and Ctrl-Z
/// escaped.
fn quoted(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('\'');
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            '\0' => out.push_str("\\0"),
            '\u{1a}' => out.push_str("\\Z"),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// The first argument as decimal digits (`-123.45`): an integer's, a real's shortest form, or
/// a text's leading number (`None` for NULL, and for a text that is no number: MySQL's 0
/// with a warning is not given here).
fn decimal_text(ctx: &Context<'_>) -> Option<String> {
    let text = match ctx.get_raw(0) {
        ValueRef::Null => return None,
        ValueRef::Integer(i) => return Some(i.to_string()),
        ValueRef::Real(r) if r.is_finite() => format!("{r}"),
        ValueRef::Real(_) => return None,
        ValueRef::Text(b) => String::from_utf8_lossy(b).trim().to_owned(),
        ValueRef::Blob(_) => return None,
    };
    let number: f64 = text.parse().ok()?;
    // Rust writes large and small reals without exponents only through `{}` of a value
    // in range; keep the text when it already is plain digits.
    let plain = text
        .trim_start_matches(['-', '+'])
        .chars()
        .all(|c| c.is_ascii_digit() || c == '.');
    Some(if plain {
        text.trim_start_matches('+').to_owned()
    } else {
        format!("{number}")
    })
}

/// `number` (plain decimal digits, maybe signed) rounded half away from zero to `decimals`
/// (`FORMAT`'s, and a `DECIMAL` written from a double: `column_shape::decimal_text`).
pub(crate) fn rounded(number: &str, decimals: usize) -> String {
    let (negative, digits) = match number.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, number),
    };
    let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
    let int = if int.is_empty() { "0" } else { int };
    let mut all: Vec<u8> = int.bytes().chain(frac.bytes()).map(|b| b - b'0').collect();
    let keep = int.len() + decimals;
    all.resize(all.len().max(keep + 1), 0);
    let round_up = all.get(keep).is_some_and(|d| *d >= 5);
    all.truncate(keep);
    if round_up {
        let mut i = all.len();
        loop {
            if i == 0 {
                all.insert(0, 1);
                break;
            }
            i -= 1;
            if let Some(d) = all.get_mut(i) {
                if *d == 9 {
                    *d = 0;
                } else {
                    *d += 1;
                    break;
                }
            }
        }
    }
    let int_len = all.len() - decimals;
    let text: String = all.iter().map(|d| char::from(b'0' + d)).collect();
    let (i, f) = text.split_at(int_len);
    let i = i.trim_start_matches('0');
    let i = if i.is_empty() { "0" } else { i };
    let zero = i == "0" && f.bytes().all(|b| b == b'0');
    let sign = if negative && !zero { "-" } else { "" };
    if decimals == 0 {
        format!("{sign}{i}")
    } else {
        format!("{sign}{i}.{f}")
    }
}

/// `number` with a comma between each three digits of its integer part.
fn grouped(number: &str) -> String {
    let (sign, rest) = match number.strip_prefix('-') {
        Some(r) => ("-", r),
        None => ("", number),
    };
    let (int, frac) = match rest.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (rest, None),
    };
    let mut out = String::with_capacity(number.len() + int.len() / 3);
    out.push_str(sign);
    for (k, c) in int.chars().enumerate() {
        if k > 0 && (int.len() - k) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if let Some(f) = frac {
        out.push('.');
        out.push_str(f);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// MariaDB 10.11's `utf8mb4_general_ci` (`SELECT 'a' < '_'` and so on).
    #[test]
    fn orders_text_as_mariadbs_default_collation() {
        for (a, b, mariadb) in [
            ("a", "_", -1),
            ("Z", "[", -1),
            ("_x", "b", 1),
            ("abc", "ABC", 0),
            ("a", "a  ", 0),
            ("a\t", "a", -1),
            ("a", "a\t", 1),
            ("ab", "a", 1),
            ("", " ", 0),
            ("é", "z", -1),
            ("É", "e", 0),
        ] {
            assert_eq!(compare_ci(a, b), mariadb, "{a:?} {b:?}");
        }
    }

    #[test]
    fn format_rounds_half_away_from_zero_and_groups_thousands() {
        let f = |n: &str, d: usize| grouped(&rounded(n, d));
        assert_eq!(f("1234.5", 2), "1,234.50");
        assert_eq!(f("1234567.891", 0), "1,234,568");
        assert_eq!(f("2.5", 0), "3");
        assert_eq!(f("-2.5", 0), "-3");
        assert_eq!(f("999.995", 2), "1,000.00");
        assert_eq!(f("-0.001", 2), "0.00");
        assert_eq!(f("0.5", 0), "1");
        assert_eq!(f("123", 0), "123");
    }

    #[test]
    fn pads_finds_and_unquotes_as_mysql_does() {
        assert_eq!(padded("5", 3, "0", true).as_deref(), Some("005"));
        assert_eq!(padded("5", 3, "ab", false).as_deref(), Some("5ab"));
        assert_eq!(padded("hello", 2, "x", true).as_deref(), Some("he"));
        assert_eq!(padded("5", 3, "", true), None);
        assert_eq!(padded("5", -1, "0", true), None);
        assert_eq!(find_in_set("b", "a,b,c"), 2);
        assert_eq!(find_in_set("B", "a,b,c"), 2);
        assert_eq!(find_in_set("d", "a,b,c"), 0);
        assert_eq!(find_in_set("a,b", "a,b,c"), 0);
    }

    #[test]
    fn quote_escapes_as_mysql_does() {
        assert_eq!(quoted("it's"), "'it\\'s'");
        assert_eq!(quoted("a\\b\0\u{1a}"), "'a\\\\b\\0\\Z'");
    }
}
