//! Prepared statements' ids across a reattach (docs/protocol.md, "Resumable sessions").
//!
//! A compute numbers a session's prepared statements itself, from 1. When a session is
//! reattached, the relay prepares its open statements again on the new compute, which numbers
//! them afresh, while the client goes on using the ids it was given. From then on the relay
//! translates: the id in every command that names a statement (client → compute), and the id
//! in every `COM_STMT_PREPARE_OK` (compute → client), where a new statement gets an id no open
//! statement of the client's has. When the re-prepared statements kept their ids (the client's
//! were 1, 2, … as the new compute's are) nothing is translated.
//!
//! Pure: the caller finds where commands and `COM_STMT_PREPARE_OK` begin
//! ([`crate::conversation::Conversation::client_bytes_marking`]) and hands over the bytes from
//! there to the end of the chunk, before forwarding them. An id cut by the chunk's end cannot
//! be translated before its first bytes go on: [`Untranslatable`], and the caller ends the
//! session rather than let a command reach another statement.

use std::collections::HashMap;

use authplugin::packet::command::{
    COM_CHANGE_USER, COM_RESET_CONNECTION, COM_STMT_BULK_EXECUTE, COM_STMT_CLOSE, COM_STMT_EXECUTE,
    COM_STMT_FETCH, COM_STMT_RESET, COM_STMT_SEND_LONG_DATA,
};

/// MariaDB's "the statement prepared last" (`mariadb_stmt_execute_direct`): passed on as is.
const LAST_PREPARED: u32 = u32::MAX;
/// No statement has id 0: an id the client was never given (or closed), or one a reattach
/// could not prepare again, is sent as 0, so the compute answers "unknown prepared
/// statement" instead of running another one.
pub const NO_STATEMENT: u32 = 0;

/// Why a chunk could not be translated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Untranslatable {
    /// The id continues in the next chunk.
    Split,
    /// A `COM_STMT_PREPARE` was answered with neither `COM_STMT_PREPARE_OK` nor ERR.
    Unexpected,
}

impl std::fmt::Display for Untranslatable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Split => "a statement id split across reads",
            Self::Unexpected => "an unexpected answer to COM_STMT_PREPARE",
        })
    }
}

/// The client's statement ids and the compute's, for a reattached session.
#[derive(Debug, Default)]
pub struct StatementIds {
    /// Every open statement: the client's id → the compute's.
    to_compute: HashMap<u32, u32>,
}

impl StatementIds {
    /// The translation after a reattach that prepared the client's statements again:
    /// `(client id, new compute id)` for each. `None` when every statement kept its id, so
    /// there is nothing to translate (and a new statement's id cannot meet an old one's).
    #[must_use]
    pub fn after_reattach(pairs: &[(u32, u32)]) -> Option<Self> {
        if pairs.iter().all(|(client, compute)| client == compute) {
            return None;
        }
        Some(Self {
            to_compute: pairs.iter().copied().collect(),
        })
    }

    /// The client's ids of the open statements, with the compute's (for the next reattach).
    #[must_use]
    pub fn compute_id(&self, client: u32) -> Option<u32> {
        self.to_compute.get(&client).copied()
    }

    /// Translates the command whose payload begins `payload` (the rest of the chunk from its
    /// command byte; `len`: the payload's whole length).
    ///
    /// # Errors
    /// [`Untranslatable::Split`]: the id is not wholly in `payload`.
    pub fn command(&mut self, payload: &mut [u8], len: usize) -> Result<(), Untranslatable> {
        let Some(&command) = payload.first() else {
            return if len == 0 {
                Ok(())
            } else {
                Err(Untranslatable::Split)
            };
        };
        match command {
            COM_RESET_CONNECTION | COM_CHANGE_USER => {
                // Every statement of the session is gone: new ones cannot meet an old id.
                self.to_compute.clear();
                Ok(())
            }
            COM_STMT_EXECUTE
            | COM_STMT_SEND_LONG_DATA
            | COM_STMT_CLOSE
            | COM_STMT_RESET
            | COM_STMT_FETCH
            | COM_STMT_BULK_EXECUTE => {
                if len < 5 {
                    return Ok(()); // malformed: the compute refuses it
                }
                let Some(id) = id_at(payload) else {
                    return Err(Untranslatable::Split);
                };
                let client = u32::from_le_bytes(*id);
                if client == LAST_PREPARED {
                    return Ok(());
                }
                let compute = self.compute_id(client).unwrap_or(NO_STATEMENT);
                *id = compute.to_le_bytes();
                if command == COM_STMT_CLOSE {
                    self.to_compute.remove(&client);
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// Translates the compute's first reply to a `COM_STMT_PREPARE`, whose payload begins
    /// `payload` (the rest of the chunk): the new statement gets the compute's id when no open
    /// statement of the client's has it, else the next free one.
    ///
    /// # Errors
    /// [`Untranslatable`]: the id is not wholly in `payload`, or the reply is neither
    /// `COM_STMT_PREPARE_OK` nor ERR.
    pub fn prepared(&mut self, payload: &mut [u8]) -> Result<(), Untranslatable> {
        match payload.first() {
            None => Err(Untranslatable::Split),
            Some(0xFF) => Ok(()),
            Some(0x00) => {
                let Some(id) = id_at(payload) else {
                    return Err(Untranslatable::Split);
                };
                let compute = u32::from_le_bytes(*id);
                let client = self.free_id(compute);
                self.to_compute.insert(client, compute);
                *id = client.to_le_bytes();
                Ok(())
            }
            Some(_) => Err(Untranslatable::Unexpected),
        }
    }

    /// `wanted` when no open statement has it, else the next id after it that none has.
    fn free_id(&self, wanted: u32) -> u32 {
        let mut id = wanted;
        while self.to_compute.contains_key(&id) || id == NO_STATEMENT || id == LAST_PREPARED {
            id = id.wrapping_add(1);
        }
        id
    }
}

/// The 4-byte id after a payload's first byte, when all of it is there.
fn id_at(payload: &mut [u8]) -> Option<&mut [u8; 4]> {
    payload.get_mut(1..5)?.try_into().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn execute(id: u32) -> Vec<u8> {
        let mut p = vec![COM_STMT_EXECUTE];
        p.extend_from_slice(&id.to_le_bytes());
        p.extend_from_slice(&[0, 1, 0, 0, 0]); // flags, iteration count
        p
    }

    fn id_of(payload: &[u8]) -> u32 {
        u32::from_le_bytes(payload[1..5].try_into().unwrap())
    }

    #[test]
    fn kept_ids_need_no_translation() {
        assert!(StatementIds::after_reattach(&[(1, 1), (2, 2)]).is_none());
        assert!(StatementIds::after_reattach(&[]).is_none());
        assert!(StatementIds::after_reattach(&[(1, 1), (5, 2)]).is_some());
    }

    #[test]
    fn commands_name_the_computes_statement() {
        let mut ids = StatementIds::after_reattach(&[(5, 1), (9, 2)]).unwrap();
        let mut p = execute(9);
        let len = p.len();
        ids.command(&mut p, len).unwrap();
        assert_eq!(id_of(&p), 2);
        assert_eq!(&p[5..], &[0, 1, 0, 0, 0], "only the id changes");
        for command in [
            COM_STMT_SEND_LONG_DATA,
            COM_STMT_RESET,
            COM_STMT_FETCH,
            COM_STMT_BULK_EXECUTE,
        ] {
            let mut p = vec![command, 5, 0, 0, 0, 7];
            ids.command(&mut p, 6).unwrap();
            assert_eq!(id_of(&p), 1, "{command:#x}");
        }
        // An id the client was never given reaches no statement; MariaDB's "last prepared"
        // passes as it is; other commands are untouched.
        let mut p = execute(3);
        ids.command(&mut p, 10).unwrap();
        assert_eq!(id_of(&p), NO_STATEMENT);
        let mut p = execute(LAST_PREPARED);
        ids.command(&mut p, 10).unwrap();
        assert_eq!(id_of(&p), LAST_PREPARED);
        let mut q = b"\x03SELECT 5".to_vec();
        ids.command(&mut q, 9).unwrap();
        assert_eq!(q, b"\x03SELECT 5");
    }

    #[test]
    fn a_closed_statement_is_forgotten() {
        let mut ids = StatementIds::after_reattach(&[(5, 1)]).unwrap();
        let mut close = vec![COM_STMT_CLOSE, 5, 0, 0, 0];
        ids.command(&mut close, 5).unwrap();
        assert_eq!(id_of(&close), 1);
        assert_eq!(ids.compute_id(5), None);
        let mut again = execute(5);
        ids.command(&mut again, 10).unwrap();
        assert_eq!(id_of(&again), NO_STATEMENT);
    }

    #[test]
    fn a_new_statement_never_takes_an_open_ones_id() {
        // The client holds 2 (now the compute's 1); the compute numbers the next one 2.
        let mut ids = StatementIds::after_reattach(&[(2, 1)]).unwrap();
        let mut ok = vec![0x00, 2, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0];
        ids.prepared(&mut ok).unwrap();
        assert_eq!(id_of(&ok), 3, "2 is taken: the next free id");
        assert_eq!(&ok[5..], &[1, 0, 0, 0, 0, 0, 0]);
        assert_eq!(ids.compute_id(3), Some(2));
        assert_eq!(ids.compute_id(2), Some(1));
        // The compute's 3 is free on the client's side: kept as it is.
        let mut ok = vec![0x00, 3, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0];
        ids.prepared(&mut ok).unwrap();
        assert_eq!(id_of(&ok), 4, "3 is the client's now");
        let mut err = b"\xff\x10\x04#HY000bad".to_vec();
        ids.prepared(&mut err).unwrap();
        assert_eq!(err, b"\xff\x10\x04#HY000bad");
        assert_eq!(
            ids.prepared(&mut [0xFE, 0, 0]),
            Err(Untranslatable::Unexpected)
        );
    }

    #[test]
    fn a_reset_session_has_no_statements_left() {
        let mut ids = StatementIds::after_reattach(&[(2, 1)]).unwrap();
        ids.command(&mut [COM_RESET_CONNECTION], 1).unwrap();
        let mut ok = vec![0x00, 2, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0];
        ids.prepared(&mut ok).unwrap();
        assert_eq!(id_of(&ok), 2);
    }

    #[test]
    fn an_id_cut_by_the_chunk_is_refused_whole() {
        let mut ids = StatementIds::after_reattach(&[(2, 1)]).unwrap();
        let mut cut = vec![COM_STMT_EXECUTE, 2, 0];
        assert_eq!(ids.command(&mut cut, 10), Err(Untranslatable::Split));
        assert_eq!(cut, [COM_STMT_EXECUTE, 2, 0], "nothing written");
        assert_eq!(ids.command(&mut [], 10), Err(Untranslatable::Split));
        assert_eq!(ids.prepared(&mut [0x00, 1]), Err(Untranslatable::Split));
        assert_eq!(ids.prepared(&mut []), Err(Untranslatable::Split));
        // A packet too short to name a statement is the compute's to refuse.
        let mut short = vec![COM_STMT_CLOSE, 2];
        assert_eq!(ids.command(&mut short, 2), Ok(()));
    }
}
