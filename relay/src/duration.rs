//! Human durations in configuration: `250ms`, `15s`, `5m`, `1h`.

use std::time::Duration;

/// Parses `<integer><unit>` with unit `ms`, `s`, `m` or `h`.
///
/// # Errors
/// A message saying what is accepted.
pub fn parse(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("'{text}' has no unit (use e.g. 500ms, 15s, 5m, 1h)"))?;
    let (number, unit) = text.split_at(split);
    let n: u64 = number
        .parse()
        .map_err(|_| format!("'{text}' is not a duration (use e.g. 500ms, 15s, 5m, 1h)"))?;
    let ms = match unit {
        "ms" => Some(n),
        "s" => n.checked_mul(1_000),
        "m" => n.checked_mul(60_000),
        "h" => n.checked_mul(3_600_000),
        _ => {
            return Err(format!(
                "'{text}' has unknown unit '{unit}' (use ms, s, m or h)"
            ));
        }
    }
    .ok_or_else(|| format!("'{text}' is too long"))?;
    Ok(Duration::from_millis(ms))
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
    }
}
