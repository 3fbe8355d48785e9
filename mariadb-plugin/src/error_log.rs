//! Lines for the server's error log.
//!
//! `mariadbd` sends its stderr to the error log (`--log-error`), so a plugin that writes one
//! whole line per `write` to stderr lands in the same file, in order, without the server's
//! logging services (whose C varargs API would need more `unsafe`). Client-supplied text
//! (user names) is escaped so a login cannot forge a log line.

use std::io::Write;
use std::time::SystemTime;

/// How serious a line is, in MariaDB's own words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Start-up and key reloads.
    Note,
    /// Refused logins.
    Warning,
    /// The plugin cannot work (missing key file, internal error).
    Error,
}

impl Level {
    const fn as_str(self) -> &'static str {
        match self {
            Self::Note => "Note",
            Self::Warning => "Warning",
            Self::Error => "ERROR",
        }
    }
}

/// Formats one line (without the trailing newline), e.g.
/// `2026-12-01T06:00:00Z [Warning] perceptron_dual: ...`.
#[must_use]
pub fn format_line(now: SystemTime, level: Level, message: &str) -> String {
    format!(
        "{} [{}] perceptron_dual: {}",
        humantime::format_rfc3339_seconds(now),
        level.as_str(),
        message
    )
}

/// Writes one line to stderr (the error log). Failures are ignored: there is nowhere else to
/// report them, and a login must not fail because the log is full.
pub fn write(level: Level, message: &str) {
    let mut line = format_line(SystemTime::now(), level, message);
    line.push('\n');
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

/// Client-supplied bytes as printable ASCII for a log line: control characters, quotes,
/// backslashes and non-ASCII bytes escaped, at most 128 input bytes.
#[must_use]
pub fn escape(raw: &[u8]) -> String {
    let shown = raw.get(..raw.len().min(128)).unwrap_or_default();
    let mut out = shown.escape_ascii().to_string();
    if raw.len() > shown.len() {
        out.push_str("...");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn formats_a_line_with_level_and_prefix() {
        let t = UNIX_EPOCH + Duration::from_secs(1_796_097_600);
        assert_eq!(
            format_line(t, Level::Warning, "refused"),
            "2026-12-01T04:00:00Z [Warning] perceptron_dual: refused"
        );
    }

    #[test]
    fn escapes_what_could_forge_a_line() {
        assert_eq!(escape(b"app"), "app");
        assert_eq!(escape(b"a\nb\x1b[31m'"), "a\\nb\\x1b[31m\\'");
        assert_eq!(escape(&[b'x'; 200]).len(), 131);
    }
}
