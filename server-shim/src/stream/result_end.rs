//! Works around opensrv-mysql 0.7 ending every result set with status flags 0 and no
//! warnings.
//!
//! MariaDB ends a result set (the EOF after its rows, or the OK that takes its place under
//! `CLIENT_DEPRECATE_EOF`) with the session's status flags and the count of the statement's
//! notes, and drivers read both: PyMySQL's `warning_count`, a driver's idea of whether
//! autocommit is on, and a relay's of whether a transaction is open. Told `0` after the
//! `SELECT` of an open transaction, a relay took the session for one that could be carried to
//! another compute, transaction and all. The writer follows the result set the shim
//! announced past its column definitions ([`super::column_charset`]) and its rows, and
//! writes the session's flags (opensrv's "more results" bit kept) and the count of notes into
//! its end; the EOF between the definitions and the rows gets the flags too, as do the EOFs
//! after a prepared statement's parameters and columns.
//!
//! Rows pass through as they come: only a packet too short to be a row that is not an end
//! is held until it is whole.

use authplugin::packet::framing::{HEADER_LEN, MAX_FRAME_PAYLOAD};
use authplugin::reader::Reader;

/// The longest payload that may end a result set: an EOF is 5 bytes, the OK opensrv writes
/// in its place 7 or 8. A row starting with the byte an end starts with (`0xFE`, a length
/// of 8 bytes) is longer.
const SHORTEST_ROW_STARTING_FE: usize = 9;

/// `SERVER_MORE_RESULTS_EXISTS`: opensrv's to set, not the session's.
const MORE_RESULTS: u16 = authplugin::packet::capabilities::SERVER_MORE_RESULTS_EXISTS;

/// The commands opensrv answers with an OK of its own, whose flags are 0 where MariaDB's are
/// the session's (`COM_STMT_RESET` it does not know, and answers OK).
pub(super) const OWN_OK_COMMANDS: [u8; 3] = [
    authplugin::packet::command::COM_INIT_DB,
    authplugin::packet::command::COM_PING,
    authplugin::packet::command::COM_STMT_RESET,
];

/// Whether `payload`, a client's packet, is the one query opensrv answers itself with a
/// result set of one column (`SELECT @@max_allowed_packet`, exactly so: go-sql-driver sends
/// it when it connects), whose end therefore needs the session's flags too.
pub(super) fn answered_by_opensrv(payload: &[u8]) -> bool {
    payload.split_first().is_some_and(|(&command, query)| {
        command == authplugin::packet::command::COM_QUERY
            && [
                &b"SELECT @@max_allowed_packet"[..],
                b"select @@max_allowed_packet",
            ]
            .contains(&query)
    })
}

/// The rest of a reply on its way out: a result set after its column definitions, or a
/// prepared statement's definitions.
#[derive(Debug)]
pub(super) struct ResultEnd {
    /// The session's status flags.
    status: u16,
    /// How many notes the statement left, for the last end; `None` to leave opensrv's.
    warnings: Option<u16>,
    /// The client did not ask for `CLIENT_DEPRECATE_EOF`: the ends are EOFs (else an OK
    /// with the header `0xFE` ends the rows).
    eofs: bool,
    /// How many ends are still to come: an EOF after definitions, the end of the rows.
    ends: usize,
    /// The packet being collected: its header, or a short packet whole.
    packet: Vec<u8>,
    /// Bytes of a long packet still to pass on.
    passing: usize,
    /// The next packet continues a payload (the last one was [`MAX_FRAME_PAYLOAD`] long).
    continued: bool,
    /// The packet being collected is short: held until it is whole.
    holding: bool,
}

impl ResultEnd {
    /// A result set's rows (and the EOF before them).
    pub(super) fn new(status: u16, warnings: u16, deprecate_eof: bool) -> Self {
        Self::ending(
            status,
            Some(warnings),
            !deprecate_eof,
            1 + usize::from(!deprecate_eof),
        )
    }

    /// The reply to a `COM_STMT_PREPARE` whose parameters and columns `eofs` EOFs end.
    pub(super) fn prepared(status: u16, eofs: usize) -> Self {
        Self::ending(status, None, true, eofs)
    }

    fn ending(status: u16, warnings: Option<u16>, eofs: bool, ends: usize) -> Self {
        Self {
            status,
            warnings,
            eofs,
            ends,
            packet: Vec::new(),
            passing: 0,
            continued: false,
            holding: false,
        }
    }

    /// Takes the next bytes opensrv writes (all of `buf`) and appends what to send to `out`.
    /// Returns `true` once the result set has ended (with an end or an ERR); the rest of
    /// `buf` is then in `out`.
    pub(super) fn feed(&mut self, mut buf: &[u8], out: &mut Vec<u8>) -> bool {
        loop {
            if self.passing > 0 {
                let (now, rest) = buf.split_at(self.passing.min(buf.len()));
                out.extend_from_slice(now);
                self.passing -= now.len();
                buf = rest;
            }
            if buf.is_empty() || !self.take(&mut buf, HEADER_LEN) {
                return false;
            }
            let len = payload_len(&self.packet);
            // The header and the payload's first byte decide what the packet is.
            let probe = HEADER_LEN + usize::from(len > 0);
            if !self.take(&mut buf, probe) {
                return false;
            }
            if !self.holding {
                let continues = std::mem::replace(&mut self.continued, len == MAX_FRAME_PAYLOAD);
                let first = self.packet.get(HEADER_LEN).copied();
                if !continues && first == Some(0xff) {
                    // An ERR ends the result set; it and what follows pass as they come.
                    out.append(&mut self.packet);
                    out.extend_from_slice(buf);
                    return true;
                }
                if continues || len >= SHORTEST_ROW_STARTING_FE {
                    // A row (or part of one): passed on as it comes.
                    out.append(&mut self.packet);
                    self.passing = len - (probe - HEADER_LEN);
                    continue;
                }
                self.holding = true;
            }
            if !self.take(&mut buf, HEADER_LEN + len) {
                return false;
            }
            self.holding = false;
            let mut packet = std::mem::take(&mut self.packet);
            let ended = packet.get(HEADER_LEN) == Some(&0xfe) && {
                self.ends = self.ends.saturating_sub(1);
                let warnings = self.warnings.filter(|_| self.ends == 0);
                if let Some(payload) = packet.get_mut(HEADER_LEN..) {
                    self.mark(payload, warnings);
                }
                self.ends == 0
            };
            out.append(&mut packet);
            if ended {
                out.extend_from_slice(buf);
                return true;
            }
        }
    }

    /// Moves bytes from `buf` into the packet being collected until it holds `want`; whether
    /// it does.
    fn take(&mut self, buf: &mut &[u8], want: usize) -> bool {
        let n = want.saturating_sub(self.packet.len()).min(buf.len());
        let (now, rest) = buf.split_at(n);
        self.packet.extend_from_slice(now);
        *buf = rest;
        self.packet.len() >= want
    }

    /// Writes the session's flags, and `warnings` when given, into `payload`, an EOF or an
    /// OK with the header `0xFE` (left as it is if it is neither).
    fn mark(&self, payload: &mut [u8], warnings: Option<u16>) {
        // EOF: 0xFE, warnings, status. OK: 0xFE, affected rows, last insert id, status,
        // warnings.
        let (status_at, warnings_at) = if self.eofs {
            (3, 1)
        } else {
            let mut r = Reader::new(payload.get(1..).unwrap_or_default());
            if r.lenenc_int("affected rows").is_err() || r.lenenc_int("insert id").is_err() {
                return;
            }
            let at = payload.len() - r.remaining();
            (at, at + 2)
        };
        if payload.len() < warnings_at.max(status_at) + 2 {
            return;
        }
        let Some(&[low, high]) = payload.get(status_at..status_at + 2) else {
            return;
        };
        let more = u16::from_le_bytes([low, high]) & MORE_RESULTS;
        let status = (self.status & !MORE_RESULTS) | more;
        if let Some(s) = payload.get_mut(status_at..status_at + 2) {
            s.copy_from_slice(&status.to_le_bytes());
        }
        if let (Some(warnings), Some(w)) = (warnings, payload.get_mut(warnings_at..warnings_at + 2))
        {
            w.copy_from_slice(&warnings.to_le_bytes());
        }
    }
}

/// A packet header's payload length.
fn payload_len(header: &[u8]) -> usize {
    match header {
        [a, b, c, ..] => usize::from(*a) | usize::from(*b) << 8 | usize::from(*c) << 16,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::test_support::packet;

    const AUTOCOMMIT_IN_TRANS: u16 = 0x0003;

    /// opensrv's EOF: no warnings, these flags.
    fn eof(status: u16) -> Vec<u8> {
        let mut p = vec![0xfe, 0, 0];
        p.extend_from_slice(&status.to_le_bytes());
        p
    }

    /// opensrv's OK ending rows under `CLIENT_DEPRECATE_EOF`.
    fn end_ok(status: u16, warnings: u16) -> Vec<u8> {
        let mut p = vec![0xfe, 0, 0];
        p.extend_from_slice(&status.to_le_bytes());
        p.extend_from_slice(&warnings.to_le_bytes());
        p
    }

    /// Feeds `bytes` in pieces of `piece`; what was sent, and whether the end was seen.
    fn through(end: &mut ResultEnd, bytes: &[u8], piece: usize) -> (Vec<u8>, bool) {
        let mut sent = Vec::new();
        let mut ended = false;
        for p in bytes.chunks(piece) {
            if ended {
                sent.extend_from_slice(p);
            } else {
                ended = end.feed(p, &mut sent);
            }
        }
        (sent, ended)
    }

    #[test]
    fn both_eofs_get_the_flags_and_the_last_the_warnings() {
        // After the definitions: their EOF, a short row, a row that starts with 0xFE (an
        // 8-byte length), the end; then the next reply, untouched.
        let long_row = [&[0xfe][..], &[1, 0, 0, 0, 0, 0, 0, 0], b"x"].concat();
        let after = packet(0, &eof(0));
        let opensrv = [
            packet(3, &eof(0)),
            packet(4, &[0x01, b'a']),
            packet(5, &long_row),
            packet(6, &eof(MORE_RESULTS)),
            after.clone(),
        ]
        .concat();
        for piece in [1, 3, 7, opensrv.len()] {
            let mut end = ResultEnd::new(AUTOCOMMIT_IN_TRANS, 2, false);
            let (sent, ended) = through(&mut end, &opensrv, piece);
            assert!(ended, "in pieces of {piece}");
            let mut last = vec![0xfe, 2, 0];
            last.extend_from_slice(&(AUTOCOMMIT_IN_TRANS | MORE_RESULTS).to_le_bytes());
            let want = [
                packet(3, &eof(AUTOCOMMIT_IN_TRANS)),
                packet(4, &[0x01, b'a']),
                packet(5, &long_row),
                packet(6, &last),
                after.clone(),
            ]
            .concat();
            assert_eq!(sent, want, "in pieces of {piece}");
        }
    }

    #[test]
    fn the_ok_that_ends_rows_under_deprecate_eof_gets_them() {
        let opensrv = [packet(3, &[0x01, b'a']), packet(4, &end_ok(0, 0))].concat();
        let mut end = ResultEnd::new(AUTOCOMMIT_IN_TRANS, 1, true);
        let (sent, ended) = through(&mut end, &opensrv, 2);
        assert!(ended);
        let want = [
            packet(3, &[0x01, b'a']),
            packet(4, &end_ok(AUTOCOMMIT_IN_TRANS, 1)),
        ]
        .concat();
        assert_eq!(sent, want);
        // No rows: the OK comes first.
        let mut end = ResultEnd::new(0x0002, 0, true);
        let (sent, ended) = through(&mut end, &packet(3, &end_ok(0, 0)), 5);
        assert!(ended);
        assert_eq!(sent, packet(3, &end_ok(0x0002, 0)));
    }

    #[test]
    fn a_prepared_statements_eofs_get_the_flags() {
        // PREPARE_OK (2 columns, 1 parameter), a parameter, its EOF, two columns, their EOF.
        let prepare_ok = [0x00, 1, 0, 0, 0, 2, 0, 1, 0, 0, 0, 0];
        let def = [&[0x03][..], b"def", &[0; 20]].concat();
        let opensrv = [
            packet(1, &prepare_ok),
            packet(2, &def),
            packet(3, &eof(0)),
            packet(4, &def),
            packet(5, &def),
            packet(6, &eof(0)),
        ]
        .concat();
        let mut end = ResultEnd::prepared(AUTOCOMMIT_IN_TRANS, 2);
        let (sent, ended) = through(&mut end, &opensrv, 5);
        assert!(ended);
        let want = [
            packet(1, &prepare_ok),
            packet(2, &def),
            packet(3, &eof(AUTOCOMMIT_IN_TRANS)),
            packet(4, &def),
            packet(5, &def),
            packet(6, &eof(AUTOCOMMIT_IN_TRANS)),
        ]
        .concat();
        assert_eq!(sent, want);
    }

    #[test]
    fn an_err_ends_the_result_set_as_it_is() {
        let err = [0xff, 0x28, 0x04, b'#', b'H', b'Y', b'0', b'0', b'0', b'x'];
        let opensrv = [packet(3, &[0x01, b'a']), packet(4, &err)].concat();
        let mut end = ResultEnd::new(0x0002, 1, true);
        let (sent, ended) = through(&mut end, &opensrv, 4);
        assert!(ended);
        assert_eq!(sent, opensrv);
    }

    #[test]
    fn a_continued_payload_that_starts_with_fe_is_not_an_end() {
        // A row of MAX_FRAME_PAYLOAD + 2 bytes: its second packet is 0xFE and one more byte.
        let mut row = vec![0x61; MAX_FRAME_PAYLOAD];
        row.extend_from_slice(&[0xfe, 0x61]);
        let opensrv = [packet(3, &row), packet(5, &end_ok(0, 0))].concat();
        let mut end = ResultEnd::new(0x0002, 0, true);
        let (sent, ended) = through(&mut end, &opensrv, 64 * 1024);
        assert!(ended);
        let want = [packet(3, &row), packet(5, &end_ok(0x0002, 0))].concat();
        assert!(
            sent == want,
            "the row passes as it came and the end is marked"
        );
    }
}
