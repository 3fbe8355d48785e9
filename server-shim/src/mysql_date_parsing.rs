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
use rusqlite::types::ValueRef;

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
    let mut rest = text;
    read(&mut p, &mut rest, format)?;
    if p.twelve_hour {
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

/// Reads `rest` by `format` into `p`, as MySQL's `extract_date_time` does: spaces before each
/// part skipped, done when either runs out (the parts left stay zero); `None` where the text
/// does not fit.
fn read(p: &mut Parts, rest: &mut &str, format: &str) -> Option<()> {
    let mut spec = format.chars();
    while let Some(f) = spec.next() {
        *rest = rest.trim_start_matches(|c: char| c.is_ascii_whitespace());
        if rest.is_empty() {
            break;
        }
        if f != '%' {
            if !f.is_ascii_whitespace() {
                *rest = rest.strip_prefix(f)?;
            }
            continue;
        }
        match spec.next()? {
            'Y' => {
                let (y, width) = number(rest, 4)?;
                p.year = if width <= 2 { two_digit_year(y) } else { y };
            }
            'y' => p.year = two_digit_year(number(rest, 2)?.0),
            'm' | 'c' => p.month = number(rest, 2)?.0,
            'd' | 'e' => p.day = number(rest, 2)?.0,
            'H' | 'k' => p.hour = number(rest, 2)?.0,
            'h' | 'I' | 'l' => {
                p.hour = number(rest, 2)?.0;
                p.twelve_hour = true;
            }
            'i' => p.minute = number(rest, 2)?.0,
            's' | 'S' => p.second = number(rest, 2)?.0,
            'f' => {
                let (digits, width) = number(rest, 6)?;
                p.micros = digits * 10_u32.pow(6 - width);
            }
            // Only after an hour on a 12-hour clock, as MySQL reads it.
            'p' if p.twelve_hour => p.pm = Some(meridiem(rest)?),
            'p' => return None,
            'M' => p.month = month_name(rest, false)?,
            'b' => p.month = month_name(rest, true)?,
            'T' => read(p, rest, "%H:%i:%S")?,
            'r' => read(p, rest, "%I:%i:%S %p")?,
            '%' => *rest = rest.strip_prefix('%')?,
            _ => return None,
        }
    }
    Some(())
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

/// A month's English name (`short`: its first three letters) that the word at the front of
/// `rest` begins, when it begins only one (`Jan` is January; `Ju` is June or July: none), as
/// MySQL's `check_word` matches it.
fn month_name(rest: &mut &str, short: bool) -> Option<u32> {
    let len = rest
        .find(|c: char| !c.is_ascii_alphabetic())
        .unwrap_or(rest.len());
    let word = rest.get(..len)?.to_ascii_lowercase();
    if word.is_empty() {
        return None;
    }
    let mut matches = MONTHS.iter().enumerate().filter(|(_, name)| {
        let name = if short {
            name.get(..3).unwrap_or(name)
        } else {
            name
        };
        name.starts_with(word.as_str())
    });
    let (Some((i, _)), None) = (matches.next(), matches.next()) else {
        return None;
    };
    *rest = rest.get(len..)?;
    u32::try_from(i + 1).ok()
}

/// Registers `STR_TO_DATE` on `conn`.
///
/// # Errors
/// SQLite's, if the function cannot be registered.
pub fn register(conn: &Connection) -> rusqlite::Result<()> {
    let pure = FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC;
    conn.create_scalar_function("STR_TO_DATE", 2, pure, |ctx| {
        let as_text = |i: usize| match ctx.get_raw(i) {
            ValueRef::Null => None,
            ValueRef::Integer(n) => Some(n.to_string()),
            ValueRef::Real(f) => Some(crate::engine::double_text(f)),
            ValueRef::Text(t) | ValueRef::Blob(t) => Some(String::from_utf8_lossy(t).into_owned()),
        };
        let (Some(text), Some(format)) = (as_text(0), as_text(1)) else {
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
            ("", "%Y", Some("0000-00-00")),
            (
                "2013-05-01",
                "%Y-%m-%d %H:%i:%s",
                Some("2013-05-01 00:00:00"),
            ),
            ("10:00 PM", "%H:%i %p", None),
            ("2013 -05-01", "%Y-%m-%d", Some("2013-05-01")),
            ("Jan 5 2020", "%M %e %Y", Some("2020-01-05")),
            ("Ju 5 2020", "%M %e %Y", None),
            ("January 5 2020", "%b %e %Y", None),
            ("2013-", "%Y-%m", Some("2013-00-00")),
            ("12 AM", "%h %p", Some("00:00:00")),
            ("13 PM", "%h %p", None),
            ("10:00", "%T", Some("10:00:00")),
            ("\u{a0}2013", "%Y", None),
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
