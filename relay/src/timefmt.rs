//! UTC timestamps for the usage CLI and API: `2026-11-29T14:00:00Z` out, that (or a date, or
//! Unix seconds) in. Civil-date conversion after Howard Hinnant's `days_from_civil`.

/// Formats Unix milliseconds as `YYYY-MM-DDTHH:MM:SSZ`.
#[must_use]
pub fn format_utc(ms: u64) -> String {
    let secs = ms / 1000;
    let days = i64::try_from(secs / 86_400).unwrap_or(i64::MAX);
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Parses `YYYY-MM-DD`, `YYYY-MM-DDTHH:MM[:SS][Z]` (UTC) or Unix seconds into Unix ms.
///
/// # Errors
/// A message naming the accepted forms.
pub fn parse_utc(text: &str) -> Result<u64, String> {
    let bad = || format!("'{text}': use 2026-11-29, 2026-11-29T14:00:00Z or Unix seconds");
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return text.parse::<u64>().map(|s| s * 1000).map_err(|_| bad());
    }
    let t = text.strip_suffix('Z').unwrap_or(text);
    let (date, time) = t.split_once('T').unwrap_or((t, "00:00:00"));
    let nums = |s: &str, n: usize| -> Option<Vec<i64>> {
        let v: Vec<i64> = s
            .split(['-', ':'])
            .map(|p| p.parse().ok())
            .collect::<Option<_>>()?;
        (v.len() == n || (n == 3 && v.len() == 2 && s.contains(':'))).then_some(v)
    };
    let d = nums(date, 3)
        .filter(|_| date.contains('-'))
        .ok_or_else(bad)?;
    let mut tm = nums(time, 3).ok_or_else(bad)?;
    if tm.len() == 2 {
        tm.push(0);
    }
    let (&[y, mo, da], &[h, mi, s]) = (d.as_slice(), tm.as_slice()) else {
        return Err(bad());
    };
    if !(1..=12).contains(&mo)
        || !(1..=31).contains(&da)
        || h > 23
        || mi > 59
        || s > 60
        || h < 0
        || mi < 0
        || s < 0
    {
        return Err(bad());
    }
    let days = days_from_civil(y, mo, da);
    let secs = days * 86_400 + h * 3600 + mi * 60 + s;
    u64::try_from(secs).map(|s| s * 1000).map_err(|_| bad())
}

fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_known_instants() {
        assert_eq!(format_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_utc(1_764_424_800_000), "2025-11-29T14:00:00Z");
        assert_eq!(parse_utc("2025-11-29T14:00:00Z"), Ok(1_764_424_800_000));
        assert_eq!(parse_utc("2025-11-29T14:00"), Ok(1_764_424_800_000));
        assert_eq!(parse_utc("2025-11-29"), Ok(1_764_374_400_000));
        assert_eq!(parse_utc("1764424800"), Ok(1_764_424_800_000));
        assert_eq!(
            parse_utc("2024-02-29T00:00:00Z").map(format_utc),
            Ok("2024-02-29T00:00:00Z".into())
        );
    }

    #[test]
    fn rejects_malformed_times() {
        for bad in [
            "",
            "yesterday",
            "2025-13-01",
            "2025-11-29T25:00",
            "2025/11/29",
            "-5",
        ] {
            assert!(parse_utc(bad).is_err(), "{bad}");
        }
    }
}
