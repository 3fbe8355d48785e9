//! Client-supplied text in log lines (log injection): user names, request paths,
//! the compute's own output. Written raw, a user name holding a newline and an ESC forged a
//! whole relay log line (and could drive the operator's terminal). [`Escaped`] shows such text
//! on one line, unambiguously: printable characters as they are, everything else escaped.

use std::fmt;

/// Bytes from outside the relay, displayed safely for a log line: control characters as
/// `\n`, `\r`, `\t` or `\u{1b}`; the backslash as `\\` (so an escape cannot be faked);
/// Unicode format characters that reorder or hide text (bidi overrides, zero-width) as
/// `\u{202e}`; bytes that are not UTF-8 as `\xff`.
#[derive(Clone, Copy)]
pub struct Escaped<'a>(pub &'a [u8]);

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for chunk in self.0.utf8_chunks() {
            for c in chunk.valid().chars() {
                match c {
                    '\n' => f.write_str("\\n")?,
                    '\r' => f.write_str("\\r")?,
                    '\t' => f.write_str("\\t")?,
                    '\\' => f.write_str("\\\\")?,
                    c if c.is_control() || hides_text(c) => {
                        write!(f, "\\u{{{:x}}}", u32::from(c))?;
                    }
                    c => fmt::Write::write_char(f, c)?,
                }
            }
            for b in chunk.invalid() {
                write!(f, "\\x{b:02x}")?;
            }
        }
        Ok(())
    }
}

impl fmt::Debug for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "\"{self}\"")
    }
}

/// Format characters that change how a line reads without being visible: zero-width
/// characters, bidirectional embeddings, overrides and isolates, the BOM.
const fn hides_text(c: char) -> bool {
    matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn escaped(bytes: &[u8]) -> String {
        Escaped(bytes).to_string()
    }

    #[test]
    fn keeps_printable_text_as_it_is() {
        assert_eq!(escaped(b"app"), "app");
        assert_eq!(
            escaped("José O'Brien \"x\"".as_bytes()),
            "José O'Brien \"x\""
        );
    }

    #[test]
    fn escapes_a_forged_log_line_onto_one_line() {
        let user = b"x\n2026-01-01T00:00:00Z  INFO relay: \x1b[32mrelayed login accepted\x1b[0m\r";
        let shown = escaped(user);
        assert!(!shown.contains('\n') && !shown.contains('\r') && !shown.contains('\x1b'));
        assert_eq!(
            shown,
            "x\\n2026-01-01T00:00:00Z  INFO relay: \\u{1b}[32mrelayed login accepted\\u{1b}[0m\\r"
        );
    }

    #[test]
    fn escapes_backslashes_bidi_overrides_invalid_utf8_and_nul() {
        assert_eq!(escaped(b"a\\nb"), "a\\\\nb");
        assert_eq!(escaped("adm\u{202e}nimda".as_bytes()), "adm\\u{202e}nimda");
        assert_eq!(
            escaped(b"\xff\xfeok\x00\x7f\t"),
            "\\xff\\xfeok\\u{0}\\u{7f}\\t"
        );
        assert_eq!(escaped("\u{85}".as_bytes()), "\\u{85}");
    }
}
