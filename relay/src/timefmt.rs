//! UTC timestamps for the usage CLI and API: `2026-11-29T14:00:00Z` out; that, a date, a time
//! without seconds, or Unix seconds in. The calendar is `humantime`'s RFC 3339 code; this
//! module only widens its input to the short forms and keeps the arithmetic overflow-checked.

use std::fmt;
use std::time::{Duration, UNIX_EPOCH};

/// The last second `humantime` can format (9999-12-31T23:59:59Z); later instants are shown as
/// this one rather than failing.
const MAX_FORMATTED_SECS: u64 = 253_402_300_799;

/// Formats Unix milliseconds as `YYYY-MM-DDTHH:MM:SSZ` (instants past the year 9999 as its
/// last second).
#[must_use]
pub fn format_utc(ms: u64) -> String {
    let secs = (ms / 1000).min(MAX_FORMATTED_SECS);
    let instant = UNIX_EPOCH
        .checked_add(Duration::from_secs(secs))
        .unwrap_or(UNIX_EPOCH);
    humantime::format_rfc3339_seconds(instant).to_string()
}

/// A time that [`parse_utc`] does not accept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimeError {
    /// What was given.
    pub input: String,
}

impl fmt::Display for TimeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "'{}': use 2026-11-29, 2026-11-29T14:00:00Z or Unix seconds",
            self.input
        )
    }
}

impl std::error::Error for TimeError {}

/// Parses `YYYY-MM-DD`, `YYYY-MM-DDTHH:MM[:SS][Z]` (UTC) or Unix seconds into Unix ms.
///
/// # Errors
/// [`TimeError`] for anything else, for impossible dates (`2025-02-30`), and for instants
/// before 1970 or too far ahead for milliseconds in a `u64`.
pub fn parse_utc(text: &str) -> Result<u64, TimeError> {
    let bad = || TimeError {
        input: text.to_owned(),
    };
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return text
            .parse::<u64>()
            .ok()
            .and_then(|s| s.checked_mul(1000))
            .ok_or_else(bad);
    }
    let t = text.strip_suffix('Z').unwrap_or(text);
    // humantime wants seconds; the short forms are completed here.
    let full = match t.len() {
        10 => format!("{t}T00:00:00"),
        16 => format!("{t}:00"),
        _ => t.to_owned(),
    };
    if full.len() != 19 || full.as_bytes().get(10) != Some(&b'T') {
        return Err(bad());
    }
    let instant = humantime::parse_rfc3339_weak(&full).map_err(|_| bad())?;
    let since_epoch = instant.duration_since(UNIX_EPOCH).map_err(|_| bad())?;
    u64::try_from(since_epoch.as_millis()).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_known_instants() {
        assert_eq!(format_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_utc(1_764_424_800_000), "2025-11-29T14:00:00Z");
        assert_eq!(parse_utc("2025-11-29T14:00:00Z"), Ok(1_764_424_800_000));
        assert_eq!(parse_utc("2025-11-29T14:00:00"), Ok(1_764_424_800_000));
        assert_eq!(parse_utc("2025-11-29T14:00"), Ok(1_764_424_800_000));
        assert_eq!(parse_utc("2025-11-29T14:00Z"), Ok(1_764_424_800_000));
        assert_eq!(parse_utc("2025-11-29"), Ok(1_764_374_400_000));
        assert_eq!(parse_utc("1764424800"), Ok(1_764_424_800_000));
        assert_eq!(
            parse_utc("2024-02-29T00:00:00Z").map(format_utc),
            Ok("2024-02-29T00:00:00Z".into())
        );
        let now = std::time::SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs()
            * 1000;
        assert_eq!(parse_utc(&format_utc(now)), Ok(now));
    }

    #[test]
    fn rejects_malformed_times() {
        for bad in [
            "",
            "yesterday",
            "2025-13-01",
            "2025-02-30",
            "2025-11-29T25:00",
            "2025/11/29",
            "2025-11-29 14:00:00",
            "1969-12-31",
            "-5",
        ] {
            assert!(parse_utc(bad).is_err(), "{bad}");
        }
        assert_eq!(
            parse_utc("nope").unwrap_err().to_string(),
            "'nope': use 2026-11-29, 2026-11-29T14:00:00Z or Unix seconds"
        );
    }

    #[test]
    fn rejects_unix_seconds_that_overflow_milliseconds() {
        assert!(parse_utc("18446744073709552").is_err());
        assert!(parse_utc("99999999999999999999").is_err());
        assert_eq!(
            parse_utc("18446744073709551"),
            Ok(18_446_744_073_709_551_000)
        );
    }

    #[test]
    fn formats_instants_past_year_9999_as_its_last_second() {
        assert_eq!(format_utc(u64::MAX), "9999-12-31T23:59:59Z");
        assert_eq!(
            format_utc(MAX_FORMATTED_SECS * 1000),
            "9999-12-31T23:59:59Z"
        );
    }
}
