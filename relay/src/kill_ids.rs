//! The session a `KILL` names, and its id rewritten in place for the compute.
//!
//! A relayed session's client knows it by the id the relay's greeting gave
//! (`runtime::InstanceRuntime::next_connection_id`). server-shim takes that id as the
//! session's own; MariaDB cannot, and knows the session by an id of its own, another after
//! each reattach. A client that kills a session by the id it knows (`KILL QUERY 2147483904`
//! from a second connection, as JDBC's query timeout does; `COM_PROCESS_KILL`) would reach
//! no session there. The relay finds such a command in a whole packet and, where the id is
//! one of its sessions', writes the compute's id over it: in decimal, padded with leading
//! zeros to the digits it replaces (MariaDB reads `0000000017` as 17), so the packet keeps
//! its length.
//!
//! Pure: bytes in, a position out.

use core::ops::Range;

use authplugin::packet::command::{COM_PROCESS_KILL, COM_QUERY};

/// Where a command names the session it kills.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KilledId {
    /// The id named.
    pub id: u32,
    /// Its bytes in the command's payload.
    pub at: Range<usize>,
    /// `COM_PROCESS_KILL`'s four bytes (little-endian), else a statement's decimal digits.
    pub binary: bool,
}

/// The session `payload` (one command's whole payload) kills: `COM_PROCESS_KILL`, or a
/// `COM_QUERY` of `KILL [HARD | SOFT] [CONNECTION | QUERY] <id>` (spaces allowed, and after a
/// `;` other statements, which are left as they are: node-mysql2's tests send `KILL ?;
/// SELECT SLEEP(0.05)`). `KILL QUERY ID <query id>` names a query, `KILL USER` a user:
/// neither is found, nor is a `KILL` with a comment.
#[must_use]
pub fn killed_id(payload: &[u8]) -> Option<KilledId> {
    match payload.split_first()? {
        (&COM_PROCESS_KILL, &[a, b, c, d]) => Some(KilledId {
            id: u32::from_le_bytes([a, b, c, d]),
            at: 1..5,
            binary: true,
        }),
        (&COM_QUERY, text) => killed_in_statement(text).map(|(id, at)| KilledId {
            id,
            at: at.start + 1..at.end + 1,
            binary: false,
        }),
        _ => None,
    }
}

/// The id and where its digits are in `text`, a `KILL` statement's.
fn killed_in_statement(text: &[u8]) -> Option<(u32, Range<usize>)> {
    // Every statement of a session comes through here: any other is passed at its first word.
    let start = text.iter().position(|b| !b.is_ascii_whitespace())?;
    if !text.get(start..start + 4)?.eq_ignore_ascii_case(b"KILL") {
        return None;
    }
    let words = words(text)?;
    let mut rest = words.as_slice();
    match rest {
        [(kill, _), tail @ ..] if kill.eq_ignore_ascii_case(b"KILL") => rest = tail,
        _ => return None,
    }
    if let [(word, _), tail @ ..] = rest
        && (word.eq_ignore_ascii_case(b"HARD") || word.eq_ignore_ascii_case(b"SOFT"))
    {
        rest = tail;
    }
    if let [(word, _), tail @ ..] = rest
        && (word.eq_ignore_ascii_case(b"CONNECTION") || word.eq_ignore_ascii_case(b"QUERY"))
    {
        rest = tail;
    }
    let [(digits, at)] = rest else {
        return None;
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let id = core::str::from_utf8(digits).ok()?.parse().ok()?;
    Some((id, at.clone()))
}

/// The words (ASCII letters and digits only) of `text`'s first statement, up to its first
/// `;` (no quote or comment can hide one before it: anything else is `None`), and where each
/// is.
fn words(text: &[u8]) -> Option<Vec<(&[u8], Range<usize>)>> {
    let text = text.split(|b| *b == b';').next()?;
    let mut out = Vec::new();
    let mut i = 0;
    while i < text.len() {
        let byte = *text.get(i)?;
        if byte.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        if !byte.is_ascii_alphanumeric() {
            return None;
        }
        let start = i;
        while text.get(i).is_some_and(u8::is_ascii_alphanumeric) {
            i += 1;
        }
        out.push((text.get(start..i)?, start..i));
    }
    Some(out)
}

/// Writes `id` over `target` in `payload` (as [`killed_id`] found it there); `false`, and
/// nothing written, where its digits do not fit in those they replace.
#[must_use]
pub fn rewrite(payload: &mut [u8], target: &KilledId, id: u32) -> bool {
    let Some(slot) = payload.get_mut(target.at.clone()) else {
        return false;
    };
    if target.binary {
        slot.copy_from_slice(&id.to_le_bytes());
        return true;
    }
    let digits = id.to_string();
    let Some(pad) = slot.len().checked_sub(digits.len()) else {
        return false;
    };
    let (zeros, tail) = slot.split_at_mut(pad);
    zeros.fill(b'0');
    tail.copy_from_slice(digits.as_bytes());
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(text: &str) -> Vec<u8> {
        let mut p = vec![COM_QUERY];
        p.extend_from_slice(text.as_bytes());
        p
    }

    #[test]
    fn finds_the_session_a_kill_names() {
        for (text, id) in [
            ("KILL 2147483904", 2_147_483_904),
            ("kill query 2147483904", 2_147_483_904),
            ("KILL CONNECTION 17;", 17),
            ("  KILL HARD QUERY\t2147483904 ; ", 2_147_483_904),
            ("KILL SOFT 5", 5),
            ("KILL 5; DROP TABLE t", 5),
            ("kill 2147483904; select sleep(0.05)", 2_147_483_904),
        ] {
            let p = query(text);
            let found = killed_id(&p).unwrap_or_else(|| panic!("{text}"));
            assert_eq!(found.id, id, "{text}");
            assert_eq!(
                p.get(found.at.clone()),
                Some(id.to_string().as_bytes()),
                "{text}"
            );
        }
        let p = [COM_PROCESS_KILL, 0x11, 0, 0, 0x80];
        assert_eq!(
            killed_id(&p),
            Some(KilledId {
                id: 0x8000_0011,
                at: 1..5,
                binary: true
            })
        );
    }

    #[test]
    fn finds_nothing_in_other_statements() {
        for text in [
            "KILL QUERY ID 5",
            "KILL USER app",
            "KILL",
            "KILL 99999999999",
            "KILL 5 /* ; */",
            "SELECT 1; KILL 5",
            "KILL /* x */ 5",
            "KILL -5",
            "SELECT 5",
            "KILLQUERY 5",
            "KILL 0x10",
        ] {
            assert_eq!(killed_id(&query(text)), None, "{text}");
        }
        assert_eq!(killed_id(&[COM_PROCESS_KILL, 1, 2, 3]), None);
        assert_eq!(killed_id(&[]), None);
    }

    #[test]
    fn writes_the_computes_id_over_the_relays_keeping_the_length() {
        let mut p = query("KILL QUERY 2147483904");
        let found = killed_id(&p).unwrap();
        assert!(rewrite(&mut p, &found, 17));
        assert_eq!(p, query("KILL QUERY 0000000017"));
        let mut p = query("KILL 5");
        let found = killed_id(&p).unwrap();
        assert!(!rewrite(&mut p, &found, 17));
        assert_eq!(p, query("KILL 5"));
        let mut p = vec![COM_PROCESS_KILL, 0x11, 0, 0, 0x80];
        let found = killed_id(&p).unwrap();
        assert!(rewrite(&mut p, &found, 17));
        assert_eq!(p, [COM_PROCESS_KILL, 17, 0, 0, 0]);
    }
}
