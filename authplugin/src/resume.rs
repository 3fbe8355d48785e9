//! The resume payload (docs/protocol.md, "Resumable sessions"): what the relay sends a compute
//! in place of a login payload to reattach a session the compute issued a ticket for.
//!
//! ```text
//! magic "PCPR" | version 1 | key_id | issued_at_ms u64 | client_addr | ticket (u16 length) |
//! mac [32]
//! mac = HMAC-SHA256(key[key_id], "perceptron-resume-v1" || scramble_b || user || 0x00 ||
//!                   database || 0x00 || every payload byte before mac)
//! ```
//!
//! The MAC is the relay's identity, bound to this compute connection's scramble B, as on every
//! login; the ticket inside is the compute's own ([`crate::ticket`]), which the relay cannot
//! make. Neither alone reattaches anything. The payload is the `auth_response` of the
//! HandshakeResponse41, with client plugin [`crate::payload::PLUGIN_NAME`].

use crate::identity::{KEY_LEN, KeyId, KeyRing, PerceptronKey};
use crate::payload::{Binding, DenyReason};
use crate::reader::{DecodeError, Reader};
use crate::replay::ReplayGuard;
use crate::ticket::MAX_TICKET_LEN;

/// The resume payload's first four bytes (a login payload's are `PCPT`).
pub const MAGIC: [u8; 4] = *b"PCPR";
/// The only version this crate reads and writes.
pub const VERSION: u8 = 1;
/// Domain separation of the MAC.
const MAC_CONTEXT: &[u8] = b"perceptron-resume-v1";
/// The longest resume payload.
pub const MAX_RESUME_LEN: usize = 4 + 1 + (1 + 32) + 8 + (1 + 255) + 2 + MAX_TICKET_LEN + KEY_LEN;

/// Whether `auth_data` is a resume payload (by its magic) rather than a login payload.
#[must_use]
pub fn is_resume(auth_data: &[u8]) -> bool {
    auth_data.starts_with(&MAGIC)
}

/// A resume payload whose MAC verified.
#[derive(Debug)]
pub struct VerifiedResume {
    /// The relay key that signed it.
    pub key_id: KeyId,
    /// The client's address the relay asserts (the ticket must name the same).
    pub client_addr: String,
    /// The compute's ticket, still to be opened and checked by the compute.
    pub ticket: Vec<u8>,
}

/// Builds and signs a resume payload with the relay's `key`.
///
/// # Errors
/// `None` when the address or the ticket is too long for its prefix.
#[must_use]
pub fn encode_signed(
    key: &PerceptronKey,
    issued_at_ms: u64,
    client_addr: &str,
    ticket: &[u8],
    binding: &Binding<'_>,
) -> Option<Vec<u8>> {
    let addr_len = u8::try_from(client_addr.len()).ok()?;
    if ticket.len() > MAX_TICKET_LEN {
        return None;
    }
    let ticket_len = u16::try_from(ticket.len()).ok()?;
    let key_id = key.id().as_str().as_bytes();
    let mut out = Vec::with_capacity(64 + ticket.len());
    out.extend_from_slice(&MAGIC);
    out.push(VERSION);
    // Key ids are at most 32 bytes.
    out.push(key_id.len() as u8);
    out.extend_from_slice(key_id);
    out.extend_from_slice(&issued_at_ms.to_le_bytes());
    out.push(addr_len);
    out.extend_from_slice(client_addr.as_bytes());
    out.extend_from_slice(&ticket_len.to_le_bytes());
    out.extend_from_slice(ticket);
    let mac = key.sign(&mac_input(binding, &out));
    out.extend_from_slice(&mac);
    Some(out)
}

/// Parses a resume payload strictly: `(key_id, issued_at_ms, client_addr, ticket)`; the MAC
/// is not checked here.
///
/// # Errors
/// [`DecodeError`] naming the first field that is missing or invalid.
pub fn decode(bytes: &[u8]) -> Result<(KeyId, u64, String, &[u8]), DecodeError> {
    let mut r = Reader::new(bytes);
    if r.array::<4>("magic")? != MAGIC {
        return Err(DecodeError::InvalidValue("magic"));
    }
    if r.u8("version")? != VERSION {
        return Err(DecodeError::InvalidValue("version"));
    }
    let key_id = KeyId::from_bytes(r.u8_prefixed("key_id")?)
        .map_err(|_| DecodeError::InvalidValue("key_id"))?;
    let issued_at_ms = r.u64_le("issued_at_ms")?;
    let client_addr = core::str::from_utf8(r.u8_prefixed("client_addr")?)
        .map_err(|_| DecodeError::InvalidValue("client_addr"))?
        .to_owned();
    let ticket_len = usize::from(r.u16_le("ticket_len")?);
    if ticket_len > MAX_TICKET_LEN {
        return Err(DecodeError::InvalidValue("ticket_len"));
    }
    let ticket = r.take(ticket_len, "ticket")?;
    let _mac: [u8; KEY_LEN] = r.array("mac")?;
    r.expect_empty()?;
    Ok((key_id, issued_at_ms, client_addr, ticket))
}

/// Verifies the relay's part of a resume: strict parse, known key id, constant-time MAC over
/// this connection's scramble B, user and database, `issued_at` within the window. The ticket
/// is returned unopened.
///
/// # Errors
/// The first [`DenyReason`] met.
pub fn verify(
    payload: &[u8],
    binding: &Binding<'_>,
    ring: &KeyRing,
    freshness: &ReplayGuard,
    now_ms: u64,
) -> Result<VerifiedResume, DenyReason> {
    let (key_id, issued_at_ms, client_addr, ticket) =
        decode(payload).map_err(DenyReason::Malformed)?;
    let key = ring
        .get(&key_id)
        .ok_or_else(|| DenyReason::UnknownKeyId(key_id.clone()))?;
    let (signed, mac) = payload.split_at(payload.len() - KEY_LEN);
    if !key.verify(&mac_input(binding, signed), mac) {
        return Err(DenyReason::BadMac);
    }
    freshness
        .check_fresh(issued_at_ms, now_ms)
        .map_err(DenyReason::Replay)?;
    Ok(VerifiedResume {
        key_id,
        client_addr,
        ticket: ticket.to_vec(),
    })
}

fn mac_input<'a>(binding: &Binding<'a>, signed: &'a [u8]) -> [&'a [u8]; 7] {
    crate::payload::bound_mac_input(MAC_CONTEXT, binding, signed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::KeySecret;
    use crate::scramble::Scramble;

    fn key(id: &str, byte: u8) -> PerceptronKey {
        PerceptronKey::new(
            KeyId::new(id).unwrap(),
            KeySecret::from_bytes([byte; KEY_LEN]),
        )
    }

    const NOW: u64 = 1_800_000_000_000;

    #[test]
    fn a_signed_resume_verifies_only_on_its_own_connection_user_and_database() {
        let b = Scramble::from_bytes([3; 20]);
        let binding = Binding {
            scramble_b: &b,
            user: b"app",
            database: b"shop",
        };
        let relay = key("r1", 5);
        let ring = KeyRing::new(vec![relay.clone()]).unwrap();
        let guard = ReplayGuard::new(60_000, 10);
        let p = encode_signed(&relay, NOW, "10.0.0.5:4000", b"TICKET", &binding).unwrap();
        assert!(is_resume(&p));
        let v = verify(&p, &binding, &ring, &guard, NOW + 5).unwrap();
        assert_eq!(v.ticket, b"TICKET");
        assert_eq!(v.client_addr, "10.0.0.5:4000");

        let other_b = Scramble::from_bytes([4; 20]);
        for other in [
            Binding {
                scramble_b: &other_b,
                ..binding
            },
            Binding {
                user: b"root",
                ..binding
            },
            Binding {
                database: b"",
                ..binding
            },
        ] {
            assert_eq!(
                verify(&p, &other, &ring, &guard, NOW).unwrap_err(),
                DenyReason::BadMac
            );
        }
        let stranger = KeyRing::new(vec![key("r1", 6)]).unwrap();
        assert_eq!(
            verify(&p, &binding, &stranger, &guard, NOW).unwrap_err(),
            DenyReason::BadMac
        );
        assert!(matches!(
            verify(&p, &binding, &ring, &guard, NOW + 120_000),
            Err(DenyReason::Replay(_))
        ));
        for cut in 0..p.len() {
            assert!(verify(&p[..cut], &binding, &ring, &guard, NOW).is_err());
        }
    }

    #[test]
    fn the_layout_is_the_documented_one() {
        let b = Scramble::from_bytes([3; 20]);
        let binding = Binding {
            scramble_b: &b,
            user: b"u",
            database: b"",
        };
        let p = encode_signed(&key("r1", 5), 7, "a:1", b"T", &binding).unwrap();
        assert_eq!(&p[..8], b"PCPR\x01\x02r1");
        assert_eq!(&p[8..16], &7u64.to_le_bytes());
        assert_eq!(&p[16..20], b"\x03a:1");
        assert_eq!(&p[20..23], b"\x01\x00T");
        assert_eq!(p.len(), 23 + KEY_LEN);
        assert!(decode(&p).is_ok());
        let mut bad = p.clone();
        bad[4] = 2;
        assert_eq!(decode(&bad), Err(DecodeError::InvalidValue("version")));
    }
}
