//! Works around opensrv-mysql 0.7 writing every column definition with the character set
//! `utf8_general_ci` (33).
//!
//! A driver tells a binary column from a text one by its character set: `binary` (63) for
//! BLOB, VARBINARY and `_binary` values. Told that a BLOB column is utf8, PyMySQL decodes its
//! bytes and fails on the first one above 0x7f (`UnicodeDecodeError`), and then leaves the
//! rest of the result unread, so its next command on that connection reads leftovers ("Packet
//! sequence number wrong", or a lost connection: what PyMySQL's own `test_BLOB` showed). The
//! shim says which columns of the result set it is about to write are binary
//! ([`super::ConnShared::result_set_next`]); the writer gives their definitions the
//! character set `binary`, as MySQL does, and passes the rest of them untouched (the rows go
//! to [`super::result_end`]).

use authplugin::packet::framing::{HEADER_LEN, parse_packet};
use authplugin::reader::Reader;

/// The character set (and collation) id of `binary`.
pub(super) const BINARY: u16 = 63;

/// The longest packet the writer collects while it looks for column definitions: the shim's
/// `max_allowed_packet`. A definition is usually short, but the shim names an unaliased
/// column by its expression's text, which can be as long as the statement.
const MAX_HEADER_PACKET: usize = crate::variables::MAX_ALLOWED_PACKET as usize;

/// The start of a result set on its way out: the column count, then one definition per
/// column, of which those marked binary are rewritten.
#[derive(Debug)]
pub(super) struct ColumnCharsets {
    /// Whether each column is binary.
    binary: Vec<bool>,
    /// Packets of the result set seen so far (the first is the column count).
    seen: usize,
    /// The bytes of the packet being collected.
    packet: Vec<u8>,
}

impl ColumnCharsets {
    pub(super) fn new(binary: Vec<bool>) -> Self {
        Self {
            binary,
            seen: 0,
            packet: Vec::new(),
        }
    }

    /// Whether `payload` is a column count equal to the number of columns announced.
    fn counts_columns(&self, payload: &[u8]) -> bool {
        let mut r = Reader::new(payload);
        r.lenenc_int("column count").ok() == u64::try_from(self.binary.len()).ok()
            && r.remaining() == 0
    }

    /// Takes the next bytes opensrv writes (all of `buf`) and appends what to send to `out`,
    /// until every column definition has passed.
    pub(super) fn feed(&mut self, buf: &[u8], out: &mut Vec<u8>) -> Progress {
        self.packet.extend_from_slice(buf);
        loop {
            if self.seen > self.binary.len() {
                return Progress::Defined(std::mem::take(&mut self.packet));
            }
            match parse_packet(&self.packet, MAX_HEADER_PACKET) {
                Ok(Some((p, _))) if self.seen == 0 && !self.counts_columns(&p.payload) => {
                    // Not the result set the shim announced: pass everything on untouched.
                    out.append(&mut self.packet);
                    return Progress::Passed;
                }
                Ok(Some((p, used))) => {
                    let column = self.seen.checked_sub(1);
                    let binary = column.and_then(|i| self.binary.get(i)).copied() == Some(true);
                    match binary.then(|| with_binary_charset(&p.payload)).flatten() {
                        Some(payload) => {
                            authplugin::packet::write_packet(out, p.sequence_id, &payload);
                        }
                        None => out.extend_from_slice(self.packet.get(..used).unwrap_or_default()),
                    }
                    self.packet.drain(..used);
                    self.seen += 1;
                }
                Ok(None) if self.packet.len() <= HEADER_LEN + MAX_HEADER_PACKET => {
                    return Progress::More;
                }
                // Not the result set we expected (an ERR is short and parses): pass it on.
                Ok(None) | Err(_) => {
                    out.append(&mut self.packet);
                    return Progress::Passed;
                }
            }
        }
    }
}

/// How far [`ColumnCharsets::feed`] has come.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Progress {
    /// Definitions are still to come.
    More,
    /// Every definition has passed; these bytes opensrv wrote after them are not sent yet.
    Defined(Vec<u8>),
    /// Not the result set announced: everything is passed on as it came.
    Passed,
}

/// `payload`, a ColumnDefinition41, with the character set `binary`; `None` if it is not one.
fn with_binary_charset(payload: &[u8]) -> Option<Vec<u8>> {
    let mut r = Reader::new(payload);
    for what in [
        "catalog",
        "schema",
        "table",
        "org_table",
        "name",
        "org_name",
    ] {
        r.lenenc_bytes(what).ok()?;
    }
    if r.lenenc_int("fixed fields length").ok()? != 0x0c || r.remaining() < 0x0c {
        return None;
    }
    let at = payload.len() - r.remaining();
    let mut out = payload.to_vec();
    out.get_mut(at..at + 2)?
        .copy_from_slice(&BINARY.to_le_bytes());
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::test_support::packet;

    /// A ColumnDefinition41 as opensrv writes it: `def`, table and name, utf8_general_ci,
    /// length 1024, `coltype`, `flags`.
    fn definition(name: &str, coltype: u8, flags: u16) -> Vec<u8> {
        let mut p = Vec::new();
        for s in ["def", "", "", "", name, ""] {
            authplugin::reader::put_lenenc_bytes(&mut p, s.as_bytes());
        }
        p.push(0x0c);
        p.extend_from_slice(&33u16.to_le_bytes());
        p.extend_from_slice(&1024u32.to_le_bytes());
        p.push(coltype);
        p.extend_from_slice(&flags.to_le_bytes());
        p.extend_from_slice(&[0, 0, 0]);
        p
    }

    /// The character set of a definition [`definition`] made (12 bytes from its end).
    fn charset(payload: &[u8]) -> u16 {
        let at = payload.len() - 12;
        u16::from_le_bytes([payload[at], payload[at + 1]])
    }

    #[test]
    fn marks_only_the_binary_columns_and_passes_the_rest() {
        let count = packet(1, &[2]);
        let text = packet(2, &definition("t", 0xfd, 0));
        let blob = packet(3, &definition("b", 0xfc, 0x80));
        // A row that happens to read as a definition of a binary column stays as it is.
        let row = packet(4, &definition("r", 0xfc, 0x80));
        let opensrv = [count.clone(), text.clone(), blob, row.clone()].concat();
        let mut sent = Vec::new();
        let mut c = ColumnCharsets::new(vec![false, true]);
        // In pieces of 3 bytes, as a writer may get them; done once the last definition
        // has passed, with the rest of that piece passed on.
        let mut done_at = None;
        for (i, piece) in opensrv.chunks(3).enumerate() {
            if done_at.is_some() {
                sent.extend_from_slice(piece);
            } else if let Progress::Defined(rest) = c.feed(piece, &mut sent) {
                sent.extend(rest);
                done_at = Some(i);
            }
        }
        let through_blob = count.len() + text.len() + packet(3, &definition("b", 0xfc, 0x80)).len();
        assert_eq!(done_at, Some((through_blob - 1) / 3));
        let mut blob_binary = definition("b", 0xfc, 0x80);
        let at = blob_binary.len() - 12;
        blob_binary[at..at + 2].copy_from_slice(&63u16.to_le_bytes());
        assert_eq!(sent, [count, text, packet(3, &blob_binary), row].concat());
    }

    #[test]
    fn a_definition_longer_than_64_kib_is_marked_too() {
        // The shim names an unaliased column by its expression's text.
        let name = "x".repeat(70_000);
        let count = packet(1, &[1]);
        let long = definition(&name, 0xfc, 0x80);
        let mut sent = Vec::new();
        let done = ColumnCharsets::new(vec![true])
            .feed(&[count.clone(), packet(2, &long)].concat(), &mut sent);
        assert_eq!(done, Progress::Defined(Vec::new()));
        let marked = &sent[count.len() + 4..];
        assert_eq!(charset(marked), BINARY);
        assert_eq!(marked.len(), long.len());
    }

    #[test]
    fn a_column_count_other_than_announced_passes_byte_for_byte() {
        let opensrv = [
            packet(1, &[2]),
            packet(2, &definition("a", 0xfc, 0x80)),
            packet(3, &definition("b", 0xfc, 0x80)),
        ]
        .concat();
        let mut sent = Vec::new();
        assert_eq!(
            ColumnCharsets::new(vec![true]).feed(&opensrv, &mut sent),
            Progress::Passed
        );
        assert_eq!(sent, opensrv);
    }

    #[test]
    fn a_payload_that_is_not_a_definition_is_left_alone() {
        assert_eq!(with_binary_charset(b"\x03def"), None);
        assert_eq!(with_binary_charset(&[]), None);
        let d = definition("b", 0xfc, 0x80);
        assert_eq!(charset(&with_binary_charset(&d).unwrap()), BINARY);
    }
}
