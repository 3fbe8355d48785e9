//! MySQL's `TIME`: a signed duration up to 838:59:59.999999 (not a time of day), read from
//! the text forms MySQL reads (`12:30`, `-23:12:59.051`, `5 06:00:00`, `123000`, the time
//! of a date-time) and written as MySQL writes it (`-23:12:59.05100`, with as many decimals
//! as the value has). SQLite has no such type: a `TIME` column keeps the text written, and
//! SQLite's `time()` takes a time of day (`time('-12:30')` is NULL and it drops the
//! fraction), so `TIME(x)` is the engine's `mysql_time` and a `TIME` column's values are read
//! back through [`MysqlTime::parse`].
//!
//! Pure: text in, values out.

use std::fmt;

/// MySQL's largest `TIME`, in seconds (838:59:59).
const MAX_SECONDS: u64 = 838 * 3600 + 59 * 60 + 59;

/// A `TIME` value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MysqlTime {
    /// Below zero.
    pub negative: bool,
    /// The magnitude, in microseconds.
    pub micros: u64,
    /// Decimals of a second written (0 to 6).
    pub decimals: u8,
}

impl MysqlTime {
    /// `text` as MySQL reads a `TIME`; `None` where MySQL gives NULL (not a time: minutes or
    /// seconds past 59, no digits). Beyond 838:59:59 it is clipped there, as MySQL clips it.
    #[must_use]
    pub fn parse(text: &str) -> Option<Self> {
        let text = text.trim();
        let (negative, rest) = match text.strip_prefix('-') {
            Some(rest) => (true, rest.trim_start()),
            None => (false, text),
        };
        // A date-time's time, or days before the time.
        let (days, clock) = match rest.split_once([' ', 'T']) {
            Some((date, clock)) if date.len() == 10 && date.as_bytes().get(4) == Some(&b'-') => {
                (0, clock)
            }
            Some((days, clock)) => (days.parse::<u64>().ok()?, clock),
            None => (0, rest),
        };
        let (whole, fraction) = match clock.split_once('.') {
            Some((w, f)) => (w, Some(f)),
            None => (clock, None),
        };
        let (h, m, s) = if whole.contains(':') {
            let mut parts = whole.split(':');
            let h = number(parts.next()?)?;
            let m = number(parts.next()?)?;
            // What follows the seconds is ignored, as MySQL ignores it (with a warning).
            let s = match parts.next() {
                Some(s) => number(s)?,
                None => 0,
            };
            (h, m, s)
        } else {
            // `HHMMSS`, read from the right: `1230` is 00:12:30.
            let n = number(whole)?;
            (n / 10_000, n / 100 % 100, n % 100)
        };
        if m > 59 || s > 59 {
            return None;
        }
        let (micros, decimals) = match fraction {
            None => (0, 0),
            // The digits after the point, up to 6 (MariaDB cuts the rest, and ignores what
            // is not a digit).
            Some(f) => {
                let digits = f.bytes().take_while(u8::is_ascii_digit).count().min(6);
                let kept = f.get(..digits).unwrap_or_default();
                let micros: u64 = format!("{kept:0<6}").parse().ok()?;
                (micros, u8::try_from(digits).unwrap_or(6))
            }
        };
        let seconds = days
            .checked_mul(24)?
            .checked_add(h)?
            .checked_mul(3600)?
            .checked_add(m * 60 + s)?;
        let total = seconds.checked_mul(1_000_000)?.checked_add(micros)?;
        let max = MAX_SECONDS * 1_000_000 + 999_999;
        let micros = total.min(if decimals == 0 {
            MAX_SECONDS * 1_000_000
        } else {
            max
        });
        Some(Self {
            negative: negative && micros > 0,
            micros,
            decimals,
        })
    }

    /// The value with `decimals` decimals of a second (a `TIME(p)` column's `p`, `CAST(x AS
    /// TIME(p))`), the rest cut as MariaDB cuts it.
    #[must_use]
    pub fn with_decimals(self, decimals: u8) -> Self {
        let decimals = decimals.min(6);
        let unit = 10_u64.pow(u32::from(6 - decimals));
        let micros = self.micros / unit * unit;
        Self {
            negative: self.negative && micros > 0,
            micros,
            decimals,
        }
    }

    /// The binary protocol's `TIME` (length, sign, days, hours, minutes, seconds, micros).
    #[must_use]
    pub fn to_binary(self) -> Vec<u8> {
        if self.micros == 0 {
            return vec![0];
        }
        let seconds = self.micros / 1_000_000;
        let micros = u32::try_from(self.micros % 1_000_000).unwrap_or(0);
        let days = u32::try_from(seconds / 86_400).unwrap_or(u32::MAX);
        let clock = seconds % 86_400;
        let mut out = vec![if micros == 0 { 8 } else { 12 }, u8::from(self.negative)];
        out.extend_from_slice(&days.to_le_bytes());
        for part in [clock / 3600, clock / 60 % 60, clock % 60] {
            out.push(u8::try_from(part).unwrap_or(0));
        }
        if micros != 0 {
            out.extend_from_slice(&micros.to_le_bytes());
        }
        out
    }
}

/// Digits as a number; `None` for anything else.
fn number(digits: &str) -> Option<u64> {
    let digits = digits.trim();
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

impl fmt::Display for MysqlTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let seconds = self.micros / 1_000_000;
        let sign = if self.negative { "-" } else { "" };
        write!(
            f,
            "{sign}{:02}:{:02}:{:02}",
            seconds / 3600,
            seconds / 60 % 60,
            seconds % 60
        )?;
        if self.decimals > 0 {
            let fraction = format!("{:06}", self.micros % 1_000_000);
            write!(
                f,
                ".{}",
                fraction.get(..usize::from(self.decimals)).unwrap_or("")
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::MysqlTime;

    fn time(text: &str) -> Option<String> {
        MysqlTime::parse(text).map(|t| t.to_string())
    }

    /// As MariaDB 10.11 answers `SELECT TIME('...')`.
    #[test]
    fn reads_and_writes_times_as_mysql_does() {
        for (text, mysql) in [
            ("12:30", "12:30:00"),
            ("23:12:59", "23:12:59"),
            ("23:12:59.05100", "23:12:59.05100"),
            ("-12:30", "-12:30:00"),
            ("-23:12:59.05100", "-23:12:59.05100"),
            ("-00:30", "-00:30:00"),
            ("120:00:06", "120:00:06"),
            ("5 06:00:00", "126:00:00"),
            ("1230", "00:12:30"),
            ("123000", "12:30:00"),
            ("2024-03-01 10:11:12.5", "10:11:12.5"),
            ("900:00:00", "838:59:59"),
            ("00:00:00", "00:00:00"),
            ("-00:00:00", "00:00:00"),
            ("12:30:00.1234567", "12:30:00.123456"),
            ("1:2:3:4", "01:02:03"),
            ("12:30:00.x", "12:30:00"),
        ] {
            assert_eq!(time(text).as_deref(), Some(mysql), "TIME('{text}')");
        }
        for not_a_time in ["", "abc", "12:60", "12:30:61"] {
            assert_eq!(time(not_a_time), None, "{not_a_time}");
        }
    }

    #[test]
    fn a_column_rounds_to_its_decimals_and_the_binary_form_counts_days() {
        let t = MysqlTime::parse("-23:12:59.05160").unwrap();
        assert_eq!(t.with_decimals(0).to_string(), "-23:12:59");
        assert_eq!(t.with_decimals(3).to_string(), "-23:12:59.051");
        assert_eq!(
            MysqlTime::parse("120:00:06").unwrap().to_binary(),
            [8, 0, 5, 0, 0, 0, 0, 0, 6]
        );
        assert_eq!(
            t.to_binary(),
            [12, 1, 0, 0, 0, 0, 23, 12, 59, 0x90, 0xC9, 0, 0]
        );
        assert_eq!(MysqlTime::parse("0:0:0").unwrap().to_binary(), [0]);
    }
}
