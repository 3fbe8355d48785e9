//! MySQL's `STR_TO_DATE(text, format)`, which SQLite lacks, as MariaDB 10.11 reads text:
//! leading spaces skipped, numbers of one digit up to the specifier's width (`'2013-5-1'`
//! with `'%Y-%m-%d'`), a literal character matched as written, anything after the format
//! ignored, and NULL where the text does not fit. A format with a specifier not read here
//! (`%U`, `%j`, ...) is an error, and so is a date with a zero or impossible part (`'9'` with
//! `'%m'` is MariaDB's `0000-09-00`, `2013-02-30` its too), which the shim cannot send as a
//! `DATE`. The value is a `DATE`, `TIME` or `DATETIME` by the specifiers
//! the format uses ([`Kind::of_format`]); the dialect accepts only a literal format, so the
//! result column's type is known before the statement runs.

use rusqlite::Connection;
use rusqlite::functions::FunctionFlags;

/// What a format gives: a date, a time of day, or both; `fraction` when it reads `%f`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Date,
    Time { fraction: bool },
    DateTime { fraction: bool },
}

impl Kind {
    /// What `format` gives; `None` when it uses a specifier this engine does not read (the
    /// dialect then refuses the call).
    pub(crate) fn of_format(format: &str) -> Option<Self> {
        let (mut date, mut time, mut fraction) = (false, false, false);
        let mut chars = format.chars();
        while let Some(c) = chars.next() {
            if c != '%' {
                continue;
            }
            match chars.next()? {
                'Y' | 'y' | 'm' | 'c' | 'd' | 'e' | 'M' | 'b' => date = true,
                'H' | 'k' | 'h' | 'I' | 'l' | 'i' | 's' | 'S' | 'p' | 'r' | 'T' => time = true,
                'f' => (time, fraction) = (true, true),
                '%' => {}
                _ => return None,
            }
        }
        Some(match (date, time) {
            (_, false) => Self::Date,
            (false, true) => Self::Time { fraction },
            (true, true) => Self::DateTime { fraction },
        })
    }
}

/// The parts read so far.
#[derive(Debug, Default)]
struct Parts {
    year: u32,
    month: u32,
    day: u32,
    hour: u32,
    minute: u32,
    second: u32,
    micros: u32,
    /// `%p`: `Some(true)` for PM.
    pm: Option<bool>,
    /// The hour was read on a 12-hour clock (`%h`, `%I`, `%l`, `%r`).
    twelve_hour: bool,
}

const MONTHS: [&str; 12] = [
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
];

/// The text `STR_TO_DATE(text, format)` gives, written as MySQL writes its type; `None` for
/// MySQL's NULL (the text does not fit the format).
#[must_use]
pub(crate) fn str_to_date(text: &str, format: &str) -> Option<String> {
    let kind = Kind::of_format(format)?;
    let mut p = Parts::default();
    let mut rest = text.trim_start();
    let mut spec = format.chars();
    while let Some(f) = spec.next() {
        if f != '%' {
            if f.is_whitespace() {
                rest = rest.trim_start();
                continue;
            }
            rest = rest.strip_prefix(f)?;
            continue;
        }
        rest = rest.trim_start();
        match spec.next()? {
            'Y' => {
                let (y, width) = number(&mut rest, 4)?;
                p.year = if width <= 2 { two_digit_year(y) } else { y };
            }
            'y' => p.year = two_digit_year(number(&mut rest, 2)?.0),
            'm' | 'c' => p.month = number(&mut rest, 2)?.0,
            'd' | 'e' => p.day = number(&mut rest, 2)?.0,
            'H' | 'k' => p.hour = number(&mut rest, 2)?.0,
            'h' | 'I' | 'l' => {
                p.hour = number(&mut rest, 2)?.0;
                p.twelve_hour = true;
            }
            'i' => p.minute = number(&mut rest, 2)?.0,
            's' | 'S' => p.second = number(&mut rest, 2)?.0,
            'f' => {
                let (digits, width) = number(&mut rest, 6)?;
                p.micros = digits * 10_u32.pow(6 - width);
            }
            'p' => p.pm = Some(meridiem(&mut rest)?),
            'M' => p.month = month_name(&mut rest, false)?,
            'b' => p.month = month_name(&mut rest, true)?,
            'T' => {
                (p.hour, p.minute, p.second) = clock(&mut rest)?;
            }
            'r' => {
                (p.hour, p.minute, p.second) = clock(&mut rest)?;
                p.twelve_hour = true;
                rest = rest.trim_start();
                p.pm = Some(meridiem(&mut rest)?);
            }
            '%' => rest = rest.strip_prefix('%')?,
            _ => return None,
        }
    }
    if p.twelve_hour || p.pm.is_some() {
        if p.hour == 0 || p.hour > 12 {
            return None;
        }
        p.hour = p.hour % 12 + if p.pm == Some(true) { 12 } else { 0 };
    }
    if p.month > 12 || p.day > 31 || p.hour > 23 || p.minute > 59 || p.second > 59 {
        return None;
    }
    let date = format!("{:04}-{:02}-{:02}", p.year, p.month, p.day);
    let time = format!("{:02}:{:02}:{:02}", p.hour, p.minute, p.second);
    let micros = format!(".{:06}", p.micros);
    Some(match kind {
        Kind::Date => date,
        Kind::Time { fraction } => time + if fraction { &micros } else { "" },
        Kind::DateTime { fraction } => {
            format!("{date} {time}") + if fraction { &micros } else { "" }
        }
    })
}

/// Up to `width` digits (at least one) from the front of `rest`, and how many there were.
fn number(rest: &mut &str, width: u32) -> Option<(u32, u32)> {
    let digits = rest
        .bytes()
        .take(width as usize)
        .take_while(u8::is_ascii_digit)
        .count();
    if digits == 0 {
        return None;
    }
    let (n, tail) = rest.split_at(digits);
    *rest = tail;
    Some((n.parse().ok()?, u32::try_from(digits).ok()?))
}

/// MySQL's two-digit years: 70-99 are 19xx, 00-69 20xx.
const fn two_digit_year(y: u32) -> u32 {
    if y < 70 { 2000 + y } else { 1900 + y }
}

/// `AM` or `PM` (any case): whether it is PM.
fn meridiem(rest: &mut &str) -> Option<bool> {
    let head = rest.get(..2)?.to_ascii_uppercase();
    let pm = match head.as_str() {
        "AM" => false,
        "PM" => true,
        _ => return None,
    };
    *rest = rest.get(2..)?;
    Some(pm)
}

/// A month's English name, or its first three letters when `short`: its number.
fn month_name(rest: &mut &str, short: bool) -> Option<u32> {
    let lower = rest.to_ascii_lowercase();
    for (i, name) in MONTHS.iter().enumerate() {
        let name = if short { name.get(..3)? } else { name };
        if lower.starts_with(name) {
            *rest = rest.get(name.len()..)?;
            return u32::try_from(i + 1).ok();
        }
    }
    None
}

/// `hh:mm:ss`, each part one or two digits.
fn clock(rest: &mut &str) -> Option<(u32, u32, u32)> {
    let h = number(rest, 2)?.0;
    *rest = rest.strip_prefix(':')?;
    let m = number(rest, 2)?.0;
    *rest = rest.strip_prefix(':')?;
    let s = number(rest, 2)?.0;
    Some((h, m, s))
}

/// Registers `STR_TO_DATE` on `conn`.
///
/// # Errors
/// SQLite's, if the function cannot be registered.
pub fn register(conn: &Connection) -> rusqlite::Result<()> {
    let pure = FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC;
    conn.create_scalar_function("STR_TO_DATE", 2, pure, |ctx| {
        let (Some(text), Some(format)) =
            (ctx.get::<Option<String>>(0)?, ctx.get::<Option<String>>(1)?)
        else {
            return Ok(None);
        };
        if Kind::of_format(&format).is_none() {
            // Refused rather than read otherwise than MySQL would.
            return Err(rusqlite::Error::UserFunctionError(
                format!(
                    "STR_TO_DATE with the format {format:?} (a specifier this engine does not read)"
                )
                .into(),
            ));
        }
        let value = str_to_date(&text, &format);
        if let Some(v) = &value
            && !matches!(Kind::of_format(&format), Some(Kind::Time { .. }))
            && v.get(..10)
                .is_none_or(|date| chrono::NaiveDate::parse_from_str(date, "%Y-%m-%d").is_err())
        {
            return Err(rusqlite::Error::UserFunctionError(
                format!(
                    "STR_TO_DATE giving {v:?}, a date with a zero or impossible part (which \
                     this engine does not send as a DATE)"
                )
                .into(),
            ));
        }
        Ok(value)
    })
}

#[cfg(test)]
mod tests {
    use super::{Kind, str_to_date};

    /// MariaDB 10.11's answers (`SELECT STR_TO_DATE(text, format)`).
    #[test]
    fn reads_text_as_mariadb_does() {
        for (text, format, mariadb) in [
            ("01,5,2013", "%d,%m,%Y", Some("2013-05-01")),
            ("May 1, 2013", "%M %d,%Y", Some("2013-05-01")),
            ("a09:30:17", "a%h:%i:%s", Some("09:30:17")),
            ("09:30:17a", "%h:%i:%s", Some("09:30:17")),
            ("abc", "abc", Some("0000-00-00")),
            ("9", "%m", Some("0000-09-00")),
            (
                "2013-05-01 14:03:04.5",
                "%Y-%m-%d %H:%i:%s.%f",
                Some("2013-05-01 14:03:04.500000"),
            ),
            (
                "2013-05-01 02:03:04 PM",
                "%Y-%m-%d %h:%i:%s %p",
                Some("2013-05-01 14:03:04"),
            ),
            ("  2013-05-01", "%Y-%m-%d", Some("2013-05-01")),
            ("2013-5-1", "%Y-%m-%d", Some("2013-05-01")),
            ("13-05-01", "%y-%m-%d", Some("2013-05-01")),
            ("2013-02-30", "%Y-%m-%d", Some("2013-02-30")),
            ("2013/05/01", "%Y-%m-%d", None),
            ("20130501", "%Y%m%d", Some("2013-05-01")),
            ("12:00:00 AM", "%r", Some("00:00:00")),
            ("23:59:59", "%T", Some("23:59:59")),
            ("2013-05-01 x", "%Y-%m-%d", Some("2013-05-01")),
            ("99-1-1", "%y-%c-%e", Some("1999-01-01")),
            ("69-1-1", "%y-%c-%e", Some("2069-01-01")),
            (
                "2013-05-01T10:00",
                "%Y-%m-%dT%H:%i",
                Some("2013-05-01 10:00:00"),
            ),
            ("Jan 5 2020", "%b %e %Y", Some("2020-01-05")),
            ("2013-13-01", "%Y-%m-%d", None),
            ("", "%Y", None),
        ] {
            assert_eq!(
                str_to_date(text, format).as_deref(),
                mariadb,
                "STR_TO_DATE({text:?}, {format:?})"
            );
        }
    }

    #[test]
    fn the_format_decides_the_type() {
        assert_eq!(Kind::of_format("%d,%m,%Y"), Some(Kind::Date));
        assert_eq!(
            Kind::of_format("%h:%i:%s"),
            Some(Kind::Time { fraction: false })
        );
        assert_eq!(
            Kind::of_format("%Y-%m-%d %H:%i:%s.%f"),
            Some(Kind::DateTime { fraction: true })
        );
        assert_eq!(Kind::of_format("abc"), Some(Kind::Date));
        // A specifier not read here: refused, never read otherwise.
        assert_eq!(Kind::of_format("%U %Y"), None);
        assert_eq!(Kind::of_format("%"), None);
    }
}
