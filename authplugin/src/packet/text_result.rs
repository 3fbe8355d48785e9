//! A text-protocol result set (the response to a `COM_QUERY` that returns rows), read one
//! packet at a time: a column count, that many column definitions, an EOF unless
//! `CLIENT_DEPRECATE_EOF`, the rows, and a terminator (an EOF, or with
//! `CLIENT_DEPRECATE_EOF` an OK with the `0xFE` header). Each row is one length-encoded
//! string per column, `0xFB` for NULL. Only for responses the reader asked for itself (the
//! relay reading a session's state): anything else, including more than one result, is
//! refused.

use crate::packet::capabilities::SERVER_MORE_RESULTS_EXISTS;
use crate::packet::err::{ERR_HEADER, ErrPacket};
use crate::packet::ok::EOF_HEADER;
use crate::reader::{DecodeError, Reader};
/// A NULL column value in a text row.
const NULL_VALUE: u8 = 0xFB;
/// An EOF packet is shorter than this; a row that starts with `0xFE` is not.
const EOF_MAX_LEN: usize = 9;

/// One row: each column's value, `None` for NULL.
pub type Row = Vec<Option<Vec<u8>>>;

/// Why a response is not the one result set the reader expects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TextResultError {
    /// The server answered with an error.
    Refused(ErrPacket),
    /// Bytes that are not a result set of the announced shape.
    Malformed(DecodeError),
    /// More bytes of values than the reader keeps (the response was read to its end).
    TooLarge,
    /// The server announced another result after this one.
    MoreResults,
}

impl std::fmt::Display for TextResultError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Refused(err) => write!(
                f,
                "error {}: {}",
                err.error_code,
                String::from_utf8_lossy(&err.error_message)
            ),
            Self::Malformed(e) => write!(f, "not a result set: {e}"),
            Self::TooLarge => f.write_str("a result set larger than allowed"),
            Self::MoreResults => f.write_str("more than one result"),
        }
    }
}

impl std::error::Error for TextResultError {}

impl From<DecodeError> for TextResultError {
    fn from(e: DecodeError) -> Self {
        Self::Malformed(e)
    }
}

/// Whether the result needs more packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// Feed the next packet.
    More,
    /// The result is complete: [`TextResult::rows`].
    Done,
}

/// Reads one text result set, packet by packet.
#[derive(Debug)]
pub struct TextResult {
    deprecate_eof: bool,
    /// Bytes of row values the reader keeps at most.
    max_bytes: usize,
    bytes: usize,
    columns: Option<usize>,
    definitions_left: usize,
    /// The EOF after the definitions is still to come.
    eof_left: bool,
    rows: Vec<Row>,
    /// Values past `max_bytes` were seen: the rows are no longer kept.
    too_large: bool,
    done: bool,
}

impl TextResult {
    /// A reader for a connection that negotiated `CLIENT_DEPRECATE_EOF` (`deprecate_eof`),
    /// keeping at most `max_bytes` of values.
    #[must_use]
    pub const fn new(deprecate_eof: bool, max_bytes: usize) -> Self {
        Self {
            deprecate_eof,
            max_bytes,
            bytes: 0,
            columns: None,
            definitions_left: 0,
            eof_left: false,
            rows: Vec::new(),
            too_large: false,
            done: false,
        }
    }

    /// Takes the next packet's payload. A response of more values than the reader keeps is
    /// still read to its end, so the connection stays in step ([`Self::finish`] then refuses
    /// it); after any error here it is not.
    ///
    /// # Errors
    /// [`TextResultError`]: an ERR (the response's end), a packet that does not fit, another
    /// result announced, or a packet after the result ended.
    pub fn feed(&mut self, payload: &[u8]) -> Result<Progress, TextResultError> {
        if self.done {
            return Err(DecodeError::TrailingBytes(payload.len()).into());
        }
        if payload.first() == Some(&ERR_HEADER) {
            return Err(TextResultError::Refused(ErrPacket::decode(payload)?));
        }
        let Some(columns) = self.columns else {
            let mut r = Reader::new(payload);
            let n = r.lenenc_int("column count")?;
            r.expect_empty()?;
            let n = usize::try_from(n)
                .ok()
                .filter(|&n| n > 0 && n <= 4096)
                .ok_or(DecodeError::InvalidValue("column count"))?;
            self.columns = Some(n);
            self.definitions_left = n;
            self.eof_left = !self.deprecate_eof;
            return Ok(Progress::More);
        };
        if self.definitions_left > 0 {
            self.definitions_left -= 1;
            return Ok(Progress::More);
        }
        let eof = payload.first() == Some(&EOF_HEADER) && payload.len() < EOF_MAX_LEN;
        if self.eof_left {
            if !eof {
                return Err(DecodeError::InvalidValue("EOF after the column definitions").into());
            }
            self.eof_left = false;
            return Ok(Progress::More);
        }
        // With CLIENT_DEPRECATE_EOF the terminator is an OK with the 0xFE header, of any
        // length; a row that starts with 0xFE holds a value of 16 MiB or more, past any
        // limit this reader is given.
        if eof || (self.deprecate_eof && payload.first() == Some(&EOF_HEADER)) {
            if terminator_flags(payload, self.deprecate_eof)? & SERVER_MORE_RESULTS_EXISTS != 0 {
                return Err(TextResultError::MoreResults);
            }
            self.done = true;
            return Ok(Progress::Done);
        }
        let mut r = Reader::new(payload);
        let mut row = Vec::with_capacity(columns);
        for _ in 0..columns {
            if r.peek() == Some(NULL_VALUE) {
                r.take(1, "NULL")?;
                row.push(None);
            } else {
                let value = r.lenenc_bytes("column value")?;
                self.bytes = self.bytes.saturating_add(value.len());
                self.too_large |= self.bytes > self.max_bytes;
                if !self.too_large {
                    row.push(Some(value.to_vec()));
                }
            }
        }
        r.expect_empty()?;
        if self.too_large {
            self.rows = Vec::new();
        } else {
            self.rows.push(row);
        }
        Ok(Progress::More)
    }

    /// The rows, once [`Progress::Done`].
    ///
    /// # Errors
    /// [`TextResultError::TooLarge`]: more bytes of values than the reader keeps.
    pub fn finish(self) -> Result<Vec<Row>, TextResultError> {
        if self.too_large {
            return Err(TextResultError::TooLarge);
        }
        Ok(self.rows)
    }
}

/// The status flags of a terminator: an EOF (`0xFE`, warnings, flags), or with
/// `CLIENT_DEPRECATE_EOF` an OK with the `0xFE` header (affected rows, last insert id, flags).
fn terminator_flags(payload: &[u8], deprecate_eof: bool) -> Result<u16, DecodeError> {
    let mut r = Reader::new(payload);
    r.u8("header")?;
    if deprecate_eof {
        r.lenenc_int("affected rows")?;
        r.lenenc_int("last insert id")?;
        r.u16_le("status flags")
    } else {
        r.u16_le("warnings")?;
        r.u16_le("status flags")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(packets: &[&[u8]], deprecate_eof: bool) -> Result<Vec<Row>, TextResultError> {
        let mut result = TextResult::new(deprecate_eof, 1024);
        for (i, p) in packets.iter().enumerate() {
            if result.feed(p)? == Progress::Done {
                assert_eq!(i + 1, packets.len(), "done before the last packet");
                return result.finish();
            }
        }
        Err(DecodeError::MissingData("terminator").into())
    }

    const DEFINITION: &[u8] =
        b"\x03def\x00\x00\x00\x01a\x00\x0c\x21\x00\x00\x00\x00\x00\xfd\x00\x00\x00\x00\x00";

    #[test]
    fn reads_rows_with_nulls_either_way_a_result_may_end() {
        let rows = read(
            &[
                b"\x02",
                DEFINITION,
                DEFINITION,
                b"\xfe\x00\x00\x02\x00",
                b"\x03abc\xfb",
                b"\x00\x01x",
                b"\xfe\x00\x00\x02\x00",
            ],
            false,
        )
        .unwrap();
        assert_eq!(
            rows,
            [
                vec![Some(b"abc".to_vec()), None],
                vec![Some(Vec::new()), Some(b"x".to_vec())]
            ]
        );
        let rows = read(
            &[
                b"\x01",
                DEFINITION,
                b"\x01y",
                b"\xfe\x00\x00\x02\x00\x00\x00",
            ],
            true,
        )
        .unwrap();
        assert_eq!(rows, [vec![Some(b"y".to_vec())]]);
        // No rows at all.
        let rows = read(
            &[b"\x01", DEFINITION, b"\xfe\x00\x00\x02\x00\x00\x00"],
            true,
        )
        .unwrap();
        assert!(rows.is_empty());
    }

    #[test]
    fn refuses_what_is_not_one_result_set() {
        let err = read(&[b"\xff\x7a\x04#42S02Unknown table"], false).unwrap_err();
        assert!(matches!(err, TextResultError::Refused(e) if e.error_code == 1146));
        // An OK where a result set belongs, a zero column count.
        assert!(read(&[b"\x00\x00\x00\x02\x00\x00\x00"], false).is_err());
        // Another result announced.
        assert_eq!(
            read(
                &[
                    b"\x01",
                    DEFINITION,
                    b"\xfe\x00\x00\x02\x00",
                    b"\xfe\x00\x00\x0a\x00"
                ],
                false
            )
            .unwrap_err(),
            TextResultError::MoreResults
        );
        // A row with a column too many, a truncated value, a missing EOF.
        assert!(read(&[b"\x01", DEFINITION, b"\x01y\x01z"], true).is_err());
        assert!(read(&[b"\x01", DEFINITION, b"\x05y"], true).is_err());
        assert!(read(&[b"\x01", DEFINITION, b"\x01y"], false).is_err());
        // More bytes than allowed: read to the end, then refused.
        let mut result = TextResult::new(true, 2);
        result.feed(b"\x01").unwrap();
        result.feed(DEFINITION).unwrap();
        assert_eq!(result.feed(b"\x03abc"), Ok(Progress::More));
        assert_eq!(result.feed(b"\x01d"), Ok(Progress::More));
        assert_eq!(
            result.feed(b"\xfe\x00\x00\x02\x00\x00\x00"),
            Ok(Progress::Done)
        );
        assert_eq!(result.finish(), Err(TextResultError::TooLarge));
    }

    #[test]
    fn nothing_panics_on_any_short_packet() {
        for len in 0..12 {
            let bytes = vec![0xFE; len];
            for deprecate_eof in [false, true] {
                let mut result = TextResult::new(deprecate_eof, 64);
                let _ = result.feed(b"\x01");
                let _ = result.feed(&bytes);
                let _ = result.feed(&bytes);
                let _ = result.feed(&bytes);
            }
        }
    }
}
