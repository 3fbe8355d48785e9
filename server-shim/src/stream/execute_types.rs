//! Works around opensrv-mysql 0.7 misreading a `COM_STMT_EXECUTE` that does not send its
//! parameters' types again.
//!
//! A client sends the types with a statement's first execution (`new_params_bound_flag` 1)
//! and may leave them out of the next ones (flag 0: "as last time"), which libmysqlclient and
//! MariaDB Connector/C do, and so sysbench and PHP. opensrv keeps the types, but with flag 0 it
//! does not step over the flag byte and reads every value one byte early: sysbench's second
//! `INSERT` stored the `c` column's text in `pad` and an empty `c`, and a re-executed
//! `SELECT ... WHERE id = ?` looked for id 2816 instead of 11. The reader collects each
//! execution whole, keeps the types of the ones that send them, and gives the others the
//! types of their statement's last execution ([`with_bound_types`]): opensrv then reads the
//! types it would have kept, from the packet.
//!
//! Pure: bytes in, bytes out.

use std::collections::HashMap;

use authplugin::packet::command::COM_STMT_EXECUTE;
use authplugin::packet::framing::{HEADER_LEN, MAX_FRAME_PAYLOAD};

/// The prepared statements of a connection: each one's parameter count (from the shim's
/// `COM_STMT_PREPARE`), and the types its last execution that sent them sent.
#[derive(Debug, Default)]
pub(super) struct BoundTypes {
    statements: HashMap<u32, Statement>,
}

#[derive(Debug)]
struct Statement {
    params: u16,
    /// Two bytes per parameter, as on the wire.
    types: Option<Vec<u8>>,
}

impl BoundTypes {
    /// Statement `id` was prepared with `params` parameters.
    pub(super) fn prepared(&mut self, id: u32, params: u16) {
        self.statements.insert(
            id,
            Statement {
                params,
                types: None,
            },
        );
    }

    /// Statement `id` was closed.
    pub(super) fn closed(&mut self, id: u32) {
        self.statements.remove(&id);
    }

    /// `packet` (one whole frame, header included) with its parameters' types when it is an
    /// execution that left them out and its statement's are known; `None` to pass it as it
    /// is. An execution that sends types has them kept for the next ones.
    pub(super) fn with_bound_types(&mut self, packet: &[u8]) -> Option<Vec<u8>> {
        let (header, payload) = packet.split_at_checked(HEADER_LEN)?;
        let (&COM_STMT_EXECUTE, rest) = payload.split_first()? else {
            return None;
        };
        let id = u32::from_le_bytes(rest.get(..4)?.try_into().ok()?);
        let statement = self.statements.get_mut(&id)?;
        let params = usize::from(statement.params);
        if params == 0 {
            return None;
        }
        // Command, id, flags, iteration count, then the NULL bitmap and the flag.
        let flag_at = 1 + 4 + 1 + 4 + params.div_ceil(8);
        match payload.get(flag_at)? {
            1 => {
                let types = payload.get(flag_at + 1..flag_at + 1 + 2 * params)?;
                statement.types = Some(types.to_vec());
                None
            }
            0 => {
                let types = statement.types.as_ref()?;
                let len = payload.len() + types.len();
                if len >= MAX_FRAME_PAYLOAD {
                    return None;
                }
                let mut out = Vec::with_capacity(HEADER_LEN + len);
                out.extend_from_slice(u32::try_from(len).ok()?.to_le_bytes().get(..3)?);
                out.extend(header.get(3));
                out.extend_from_slice(payload.get(..flag_at)?);
                out.push(1);
                out.extend_from_slice(types);
                out.extend_from_slice(payload.get(flag_at + 1..)?);
                Some(out)
            }
            _ => None,
        }
    }
}

/// Whether `bytes`, read at a packet boundary, start a `COM_STMT_EXECUTE` in one frame, and if
/// so the length of that whole packet.
pub(super) fn execute_len(bytes: &[u8]) -> Option<usize> {
    super::one_frame_len(bytes, COM_STMT_EXECUTE)
}

/// Any client bytes as two executions of statement 1 (its parameter count from the first
/// two bytes): never a panic, and a rewritten execution is one frame whose header counts its
/// payload, with the types of the first.
///
/// # Panics
/// When the rewrite is wrong: what the fuzzer looks for.
#[cfg(feature = "fuzzing")]
pub fn fuzz_bound_types(data: &[u8]) {
    let Some((count, rest)) = data.split_first_chunk::<2>() else {
        return;
    };
    let mut bound = BoundTypes::default();
    bound.prepared(1, u16::from_le_bytes(*count));
    let (first, second) = rest.split_at(rest.len() / 2);
    let _ = bound.with_bound_types(first);
    if let Some(out) = bound.with_bound_types(second) {
        let len = out
            .first_chunk::<3>()
            .map(|&[a, b, c]| u32::from_le_bytes([a, b, c, 0]));
        assert_eq!(len, u32::try_from(out.len() - HEADER_LEN).ok(), "{out:?}");
        assert_eq!(
            out.len(),
            second.len() + 2 * usize::from(u16::from_le_bytes(*count))
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::test_support::packet;

    /// sysbench's `INSERT ... VALUES (?, ?, ?, ?)`: BIGINT, BIGINT, then two strings.
    const TYPES: [u8; 8] = [0x08, 0, 0x08, 0, 0xfd, 0, 0xfd, 0];

    fn execution(id: u8, types: Option<&[u8]>, values: &[u8]) -> Vec<u8> {
        let mut p = vec![COM_STMT_EXECUTE, id, 0, 0, 0, 0, 1, 0, 0, 0, 0x00];
        match types {
            Some(t) => {
                p.push(1);
                p.extend_from_slice(t);
            }
            None => p.push(0),
        }
        p.extend_from_slice(values);
        packet(0, &p)
    }

    #[test]
    fn a_later_execution_gets_the_types_its_statement_was_last_sent() {
        let mut bound = BoundTypes::default();
        bound.prepared(11, 4);
        let values = [
            8, 0, 0, 0, 0, 0, 0, 0, 11, 0, 0, 0, 0, 0, 0, 0, 1, b'c', 1, b'p',
        ];
        // Before any types, and the first execution's own: passed as they are.
        assert_eq!(bound.with_bound_types(&execution(11, None, &values)), None);
        assert_eq!(
            bound.with_bound_types(&execution(11, Some(&TYPES), &values)),
            None
        );
        assert_eq!(
            bound.with_bound_types(&execution(11, None, &values)),
            Some(execution(11, Some(&TYPES), &values))
        );
        assert_eq!(
            execute_len(&execution(11, None, &values)),
            Some(4 + 11 + 1 + 20)
        );
        // Another statement, a closed one, another command: as they are.
        assert_eq!(bound.with_bound_types(&execution(12, None, &values)), None);
        bound.closed(11);
        assert_eq!(bound.with_bound_types(&execution(11, None, &values)), None);
        assert_eq!(bound.with_bound_types(&packet(0, b"\x03SELECT 1")), None);
        assert_eq!(execute_len(&packet(0, b"\x03SELECT 1")), None);
    }

    /// Through the reader: an execution that arrives in pieces is handed to opensrv whole,
    /// with its statement's types, and what follows it in the same read comes after it.
    #[tokio::test]
    async fn the_reader_hands_out_an_execution_whole_with_its_types() {
        use std::sync::Arc;

        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        use tokio_util::sync::CancellationToken;

        use crate::stream::test_support::T;
        use crate::stream::{AuthReader, ConnShared};

        let (mut client, server) = tokio::io::duplex(4096);
        let shared = Arc::new(ConnShared::default());
        shared.mark_authenticated(None);
        shared.statement_prepared(11, 4);
        let mut reader = AuthReader::new(server, shared, T, CancellationToken::new());
        let values = [
            1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 1, b'c', 1, b'p',
        ];
        let first = execution(11, Some(&TYPES), &values);
        let again = execution(11, None, &values);
        let ping = packet(0, b"\x0e");
        let mut buf = vec![0u8; 4096];
        // The reader takes the first packet for the login's.
        client.write_all(&ping).await.unwrap();
        let n = reader.read(&mut buf).await.unwrap();
        assert_eq!(buf[..n], ping[..]);
        client.write_all(&first).await.unwrap();
        let n = reader.read(&mut buf).await.unwrap();
        assert_eq!(buf[..n], first[..]);
        let (a, b) = again.split_at(7);
        client.write_all(a).await.unwrap();
        let read = tokio::spawn(async move {
            let n = reader.read(&mut buf).await.unwrap();
            let got = buf[..n].to_vec();
            let n = reader.read(&mut buf).await.unwrap();
            (got, buf[..n].to_vec())
        });
        let mut rest = b.to_vec();
        rest.extend_from_slice(&ping);
        client.write_all(&rest).await.unwrap();
        let (got, next) = read.await.unwrap();
        assert_eq!(got, first);
        assert_eq!(next, ping);
    }

    #[test]
    fn truncated_executions_pass_as_they_are() {
        let mut bound = BoundTypes::default();
        bound.prepared(1, 4);
        let whole = execution(1, Some(&TYPES), &[]);
        for end in 0..whole.len() {
            assert_eq!(bound.with_bound_types(&whole[..end]), None, "{end}");
        }
    }
}
