//! Human durations in configuration: `250ms`, `15s`, `5m`, `1h`, and the serde functions that
//! read them (with the minimums some keys need) into `std::time::Duration`.

use std::fmt;
use std::time::Duration;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer};

/// A duration that cannot be read; the text is kept so the message can quote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DurationError {
    /// Digits only (or nothing), e.g. `15`.
    NoUnit(String),
    /// No leading integer that fits in 64 bits, e.g. `s`, `-1s`.
    NotANumber(String),
    /// An integer and a unit other than `ms`, `s`, `m`, `h`.
    UnknownUnit(String, String),
    /// More than `u64::MAX` milliseconds.
    TooLong(String),
}

impl fmt::Display for DurationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoUnit(text) => write!(f, "'{text}' has no unit (use e.g. 500ms, 15s, 5m, 1h)"),
            Self::NotANumber(text) => {
                write!(
                    f,
                    "'{text}' is not a duration (use e.g. 500ms, 15s, 5m, 1h)"
                )
            }
            Self::UnknownUnit(text, unit) => {
                write!(f, "'{text}' has unknown unit '{unit}' (use ms, s, m or h)")
            }
            Self::TooLong(text) => write!(f, "'{text}' is too long"),
        }
    }
}

impl std::error::Error for DurationError {}

/// Parses `<integer><unit>` with unit `ms`, `s`, `m` or `h`.
///
/// # Errors
/// [`DurationError`], saying what is accepted.
pub fn parse(text: &str) -> Result<Duration, DurationError> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| DurationError::NoUnit(text.to_owned()))?;
    let (number, unit) = text.split_at(split);
    let n: u64 = number
        .parse()
        .map_err(|_| DurationError::NotANumber(text.to_owned()))?;
    let ms = match unit {
        "ms" => Some(n),
        "s" => n.checked_mul(1_000),
        "m" => n.checked_mul(60_000),
        "h" => n.checked_mul(3_600_000),
        _ => {
            return Err(DurationError::UnknownUnit(text.to_owned(), unit.to_owned()));
        }
    }
    .ok_or_else(|| DurationError::TooLong(text.to_owned()))?;
    Ok(Duration::from_millis(ms))
}

/// `#[serde(deserialize_with)]` for any duration, including zero.
///
/// # Errors
/// A value that is not a string, or a [`DurationError`].
pub fn any<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(deserializer)?;
    parse(&text).map_err(D::Error::custom)
}

/// `#[serde(deserialize_with)]` for a bound on a wait: zero would fail every wait at once.
///
/// # Errors
/// As [`any`], and zero.
pub fn positive<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    let d = any(deserializer)?;
    if d.is_zero() {
        return Err(D::Error::custom("must be greater than zero"));
    }
    Ok(d)
}

/// `#[serde(deserialize_with)]` for `idle_pause_after`: shorter than a second would pause an
/// instance between a client's connect and its first query.
///
/// # Errors
/// As [`any`], and less than one second.
pub fn at_least_1s<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    let d = any(deserializer)?;
    if d < Duration::from_secs(1) {
        return Err(D::Error::custom("must be at least 1s"));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_each_unit() {
        assert_eq!(parse("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse("15s"), Ok(Duration::from_secs(15)));
        assert_eq!(parse(" 5m "), Ok(Duration::from_secs(300)));
        assert_eq!(parse("1h"), Ok(Duration::from_secs(3600)));
    }

    #[test]
    fn rejects_missing_or_unknown_units() {
        for bad in ["15", "s", "", "1.5s", "10d", "-1s", "99999999999999999999h"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        assert_eq!(
            parse("15").map_err(|e| e.to_string()),
            Err("'15' has no unit (use e.g. 500ms, 15s, 5m, 1h)".to_owned())
        );
        assert_eq!(
            parse("10d").map_err(|e| e.to_string()),
            Err("'10d' has unknown unit 'd' (use ms, s, m or h)".to_owned())
        );
    }
}
