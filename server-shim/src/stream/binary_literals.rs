//! Lets a `COM_QUERY` carry bytes that are not UTF-8 inside its string literals, as MySQL
//! lets it: a client that quotes binary data itself (PyMySQL's `_binary'...'` with the raw
//! bytes, `mysql_real_escape_string` in C and PHP) sends them in the statement's text.
//! opensrv 0.7 reads the text as UTF-8 and ends the connection when it is not ("Lost
//! connection to MySQL server during query"); the shim speaks UTF-8 only. The reader gives
//! opensrv each such statement with every string literal that is not UTF-8 written as the
//! hexadecimal literal of its bytes (`X'00FF'`, escapes undone), which MySQL reads as the same
//! binary string; a statement that is UTF-8 passes as it is. Bytes that are not UTF-8 outside
//! a literal (in a comment, a name) become U+FFFD: a comment stays a comment, and a name
//! gets its error (no such table) instead of a lost connection.
//!
//! Literals are found as MySQL's tokenizer finds them: single- or double-quoted, a backslash
//! escaping the next byte (`\n`, `\0`, ...; `\%` and `\_` keep their backslash), a doubled
//! quote standing for one; backquoted names and comments (`#`, `-- `, `/* */`, but `/*!`,
//! which MySQL runs) are skipped.
//!
//! Pure: bytes in, bytes out.

use authplugin::packet::command::COM_QUERY;
use authplugin::packet::framing::{HEADER_LEN, MAX_FRAME_PAYLOAD};

/// Whether `bytes`, read at a packet boundary, start a `COM_QUERY` in one frame, and if so
/// the length of that whole packet.
pub(super) fn query_len(bytes: &[u8]) -> Option<usize> {
    super::one_frame_len(bytes, COM_QUERY)
}

/// `packet` (one whole `COM_QUERY` frame, header included) with its literals that are not
/// UTF-8 written in hexadecimal; `None` when it is UTF-8 (or not a query), to pass as it is.
pub(super) fn as_utf8(packet: &[u8]) -> Option<Vec<u8>> {
    let (header, payload) = packet.split_at_checked(HEADER_LEN)?;
    let (&COM_QUERY, text) = payload.split_first()? else {
        return None;
    };
    if std::str::from_utf8(text).is_ok() {
        return None;
    }
    let rewritten = rewrite(text);
    let rewritten = String::from_utf8_lossy(&rewritten);
    let len = rewritten.len() + 1;
    if len >= MAX_FRAME_PAYLOAD {
        return None;
    }
    let mut out = Vec::with_capacity(HEADER_LEN + len);
    out.extend_from_slice(u32::try_from(len).ok()?.to_le_bytes().get(..3)?);
    out.extend(header.get(3));
    out.push(COM_QUERY);
    out.extend_from_slice(rewritten.as_bytes());
    Some(out)
}

/// `text` with each string literal that is not UTF-8 as `X'<hex>'`.
fn rewrite(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len() * 2);
    let mut i = 0;
    while let Some(&b) = text.get(i) {
        match b {
            b'\'' | b'"' => {
                let (end, value) = literal(text, i);
                let raw = text.get(i..end).unwrap_or_default();
                if std::str::from_utf8(raw).is_ok() {
                    out.extend_from_slice(raw);
                } else {
                    // `_binary'..'` → `_binary X'..'`, not the name `_binaryX`.
                    if out
                        .last()
                        .is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_')
                    {
                        out.push(b' ');
                    }
                    out.extend_from_slice(b"X'");
                    for byte in value {
                        out.extend_from_slice(format!("{byte:02X}").as_bytes());
                    }
                    out.push(b'\'');
                }
                i = end;
            }
            b'`' => i = copy_through(text, i, i + 1, b"`", &mut out),
            b'#' => i = copy_through(text, i, i + 1, b"\n", &mut out),
            b'-' if text.get(i + 1) == Some(&b'-')
                && text.get(i + 2).is_some_and(u8::is_ascii_whitespace) =>
            {
                i = copy_through(text, i, i + 2, b"\n", &mut out);
            }
            b'/' if text.get(i + 1) == Some(&b'*') && text.get(i + 2) != Some(&b'!') => {
                i = copy_through(text, i, i + 2, b"*/", &mut out);
            }
            _ => {
                out.push(b);
                i += 1;
            }
        }
    }
    out
}

/// Copies from `start` through the first `end` found from `scan_from` on (or to the end of
/// `text`); returns where copying stopped.
fn copy_through(
    text: &[u8],
    start: usize,
    scan_from: usize,
    end: &[u8],
    out: &mut Vec<u8>,
) -> usize {
    let stop = text
        .get(scan_from..)
        .and_then(|rest| rest.windows(end.len()).position(|w| w == end))
        .map_or(text.len(), |at| scan_from + at + end.len());
    out.extend_from_slice(text.get(start..stop).unwrap_or_default());
    stop
}

/// The string literal starting at `start` (its quote): where it ends (past its closing quote,
/// or the end of `text`) and the bytes it stands for.
fn literal(text: &[u8], start: usize) -> (usize, Vec<u8>) {
    let quote = text.get(start).copied().unwrap_or(b'\'');
    let mut value = Vec::new();
    let mut i = start + 1;
    while let Some(&b) = text.get(i) {
        if b == b'\\' {
            let Some(&next) = text.get(i + 1) else {
                value.push(b);
                return (text.len(), value);
            };
            match next {
                b'0' => value.push(0),
                b'b' => value.push(8),
                b'n' => value.push(b'\n'),
                b'r' => value.push(b'\r'),
                b't' => value.push(b'\t'),
                b'Z' => value.push(26),
                b'%' | b'_' => value.extend_from_slice(&[b'\\', next]),
                other => value.push(other),
            }
            i += 2;
        } else if b == quote {
            if text.get(i + 1) == Some(&quote) {
                value.push(quote);
                i += 2;
            } else {
                return (i + 1, value);
            }
        } else {
            value.push(b);
            i += 1;
        }
    }
    (text.len(), value)
}

/// Any bytes as a `COM_QUERY`'s text: never a panic, and a rewritten statement is UTF-8 in
/// one frame whose header counts its payload.
///
/// # Panics
/// When the rewrite is wrong: what the fuzzer looks for.
#[cfg(feature = "fuzzing")]
pub fn fuzz_binary_literals(data: &[u8]) {
    let mut packet = Vec::with_capacity(data.len() + HEADER_LEN + 1);
    let len = u32::try_from(data.len() + 1).unwrap_or(u32::MAX);
    packet.extend_from_slice(len.to_le_bytes().get(..3).unwrap_or_default());
    packet.push(0);
    packet.push(COM_QUERY);
    packet.extend_from_slice(data);
    if let Some(out) = as_utf8(&packet) {
        let payload = out.get(HEADER_LEN..).unwrap_or_default();
        let len = out
            .first_chunk::<3>()
            .map(|&[a, b, c]| u32::from_le_bytes([a, b, c, 0]));
        assert_eq!(len, u32::try_from(payload.len()).ok(), "{out:?}");
        assert!(
            std::str::from_utf8(payload.get(1..).unwrap_or_default()).is_ok(),
            "{out:?}"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::test_support::packet;

    fn query(text: &[u8]) -> Vec<u8> {
        let mut payload = vec![COM_QUERY];
        payload.extend_from_slice(text);
        packet(0, &payload)
    }

    fn rewritten(text: &[u8]) -> Option<String> {
        let out = as_utf8(&query(text))?;
        assert_eq!(
            out.len(),
            HEADER_LEN + usize::from(out[0]) + (usize::from(out[1]) << 8)
        );
        Some(String::from_utf8(out[HEADER_LEN + 1..].to_vec()).unwrap())
    }

    /// PyMySQL's `_binary'...'` with the bytes 0x00-0xFF as it escapes them.
    #[test]
    fn a_literal_that_is_not_utf8_becomes_its_bytes_in_hexadecimal() {
        assert_eq!(
            rewritten(b"INSERT INTO t (b) VALUES (_binary'\\0\x01\xff\\'\\\\z', 'caf\xc3\xa9')")
                .as_deref(),
            Some("INSERT INTO t (b) VALUES (_binary X'0001FF275C7A', 'caf\u{e9}')")
        );
        assert_eq!(
            rewritten(b"SELECT \"\xfe\"\"\", 'it''s'").as_deref(),
            Some("SELECT X'FE22', 'it''s'")
        );
        // `\%` and `\_` keep their backslash, as MySQL keeps it.
        assert_eq!(
            rewritten(b"SELECT '\\%\xff'").as_deref(),
            Some("SELECT X'5C25FF'")
        );
    }

    #[test]
    fn utf8_statements_pass_as_they_are_and_other_bytes_outside_literals_become_u_fffd() {
        assert_eq!(rewritten("SELECT 'café', `naïve`".as_bytes()), None);
        assert_eq!(
            rewritten(b"SELECT 1 /* '\xff */, '\xfe' -- '\xff\n, `\xfd`").as_deref(),
            Some("SELECT 1 /* '\u{fffd} */, X'FE' -- '\u{fffd}\n, `\u{fffd}`")
        );
        // A literal left open runs to the end of the text.
        assert_eq!(rewritten(b"SELECT '\xff").as_deref(), Some("SELECT X'FF'"));
        assert_eq!(as_utf8(&packet(0, &[0x16, 0xff])), None);
    }
}
