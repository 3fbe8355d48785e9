//! Resumption tickets (docs/protocol.md, "Resumable sessions"): what a compute gives the relay
//! on a relayed login so the relay can reattach that one session after the compute has
//! stopped, without ever holding the user's password or hash.
//!
//! ```text
//! magic "PCTK" | version 1 | key_id | ticket_id [16] | instance | user | client_addr |
//! login_ms u64 | issued_ms u64 | expires_ms u64 | credential_tag [16] | mac [32]
//! mac = HMAC-SHA256(ticket_key[key_id], "perceptron-ticket-v1" || every byte before mac)
//! credential_tag = first 16 bytes of HMAC-SHA256(ticket_key, "perceptron-ticket-credential"
//!                  || the account's stored credential)
//! ```
//!
//! The ticket key is the compute's alone (a key file the relay never reads), so a relay, even
//! one holding its own signing key, cannot mint a ticket; the relay's HMAC identity is still
//! checked on every reattach, so a ticket without a relay key is worth nothing either. A
//! ticket is readable (it names nothing the relay does not already know: the user, the
//! client's address, the login's time) but cannot be changed. `credential_tag` ties it to
//! the account's credential as it was at the login: a password changed (or the account
//! dropped) while the session was parked refuses the ticket, and the tag is keyed, so it says
//! nothing about the hash to whoever reads the ticket. Integers are little-endian; strings
//! carry a one-byte length prefix.

use core::fmt;

use crate::identity::{KEY_LEN, KeyId, KeyRing, PerceptronKey};
use crate::reader::{DecodeError, Reader};

/// The ticket's first four bytes.
pub const MAGIC: [u8; 4] = *b"PCTK";
/// The only version this crate reads and writes.
pub const VERSION: u8 = 1;
/// Domain separation of the ticket's MAC.
const MAC_CONTEXT: &[u8] = b"perceptron-ticket-v1";
/// Domain separation of the credential tag.
const CREDENTIAL_CONTEXT: &[u8] = b"perceptron-ticket-credential";
/// Bytes of a ticket id and of a credential tag.
pub const ID_LEN: usize = 16;
/// The longest ticket: every string at 255 bytes.
pub const MAX_TICKET_LEN: usize =
    4 + 1 + (1 + 32) + ID_LEN + 3 * (1 + 255) + 3 * 8 + ID_LEN + KEY_LEN;
/// How long a ticket stays valid when the compute is not told otherwise: a day.
pub const DEFAULT_TTL_MS: u64 = 24 * 3600 * 1000;

/// What a ticket asserts. Built by the compute when it issues one.
#[derive(Clone, PartialEq, Eq)]
pub struct TicketClaims {
    /// Random; a ticket is accepted once, by this id.
    pub ticket_id: [u8; ID_LEN],
    /// The compute's instance name: a ticket for another instance is refused.
    pub instance: String,
    /// The session's user.
    pub user: String,
    /// The client's address (`ip:port`) as the relay saw it at the login: the reattached
    /// session is the same client connection.
    pub client_addr: String,
    /// When the session's original login was verified (ms since the Unix epoch); carried
    /// unchanged through every ticket of the session.
    pub login_ms: u64,
    /// When this ticket was issued.
    pub issued_ms: u64,
    /// After this the ticket is refused.
    pub expires_ms: u64,
    /// [`credential_tag`] of the account's credential when the ticket was issued.
    pub credential_tag: [u8; ID_LEN],
}

impl fmt::Debug for TicketClaims {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TicketClaims")
            .field("instance", &self.instance)
            .field("user", &self.user)
            .field("client_addr", &self.client_addr)
            .field("login_ms", &self.login_ms)
            .field("issued_ms", &self.issued_ms)
            .field("expires_ms", &self.expires_ms)
            .finish_non_exhaustive()
    }
}

/// Why a ticket is refused. The compute logs the reason; the relay only sees a refused login.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TicketError {
    /// Not a ticket of this format.
    Malformed(DecodeError),
    /// A string field is longer than 255 bytes (when sealing).
    TooLong(&'static str),
    /// Sealed under a key id the compute's ticket ring does not hold.
    UnknownKeyId(KeyId),
    /// The MAC does not verify: changed, or minted with another key.
    BadMac,
    /// Issued for another instance.
    WrongInstance,
    /// Issued for another user.
    WrongUser,
    /// Issued for another client connection.
    WrongClient,
    /// Past its expiry.
    Expired,
    /// Issued in the compute's future.
    NotYetValid,
    /// The account's credential changed since, or the account is gone.
    CredentialChanged,
    /// Already used for a reattach.
    Used,
    /// The compute could not record the ticket as used (its file), so it does not accept it.
    Unrecorded,
}

impl TicketError {
    /// A stable label for logs and metrics.
    #[must_use]
    pub const fn kind(&self) -> &'static str {
        match self {
            Self::Malformed(_) => "ticket_malformed",
            Self::TooLong(_) => "ticket_too_long",
            Self::UnknownKeyId(_) => "ticket_unknown_key_id",
            Self::BadMac => "ticket_bad_mac",
            Self::WrongInstance => "ticket_wrong_instance",
            Self::WrongUser => "ticket_wrong_user",
            Self::WrongClient => "ticket_wrong_client",
            Self::Expired => "ticket_expired",
            Self::NotYetValid => "ticket_not_yet_valid",
            Self::CredentialChanged => "ticket_credential_changed",
            Self::Used => "ticket_used",
            Self::Unrecorded => "ticket_unrecorded",
        }
    }
}

impl fmt::Display for TicketError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Malformed(e) => write!(f, "malformed ticket: {e}"),
            Self::TooLong(field) => write!(f, "ticket field {field} is longer than 255 bytes"),
            Self::UnknownKeyId(id) => write!(f, "ticket sealed with unknown key id {id}"),
            Self::BadMac => f.write_str("ticket MAC does not verify"),
            Self::WrongInstance => f.write_str("ticket issued for another instance"),
            Self::WrongUser => f.write_str("ticket issued for another user"),
            Self::WrongClient => f.write_str("ticket issued for another client connection"),
            Self::Expired => f.write_str("ticket expired"),
            Self::NotYetValid => f.write_str("ticket issued in the future"),
            Self::CredentialChanged => f.write_str("the account's credential changed"),
            Self::Used => f.write_str("ticket already used"),
            Self::Unrecorded => f.write_str("cannot record the ticket as used"),
        }
    }
}

impl std::error::Error for TicketError {}

/// The tag that ties a ticket to the account's stored `credential` (its hashes, as the
/// compute keeps them), keyed so that it reveals nothing about them.
#[must_use]
pub fn credential_tag(key: &PerceptronKey, credential: &[u8]) -> [u8; ID_LEN] {
    let mac = key.sign(&[CREDENTIAL_CONTEXT, credential]);
    let mut tag = [0; ID_LEN];
    tag.copy_from_slice(&mac[..ID_LEN]);
    tag
}

/// Seals `claims` with `key` (the compute's ticket ring's signing key).
///
/// # Errors
/// [`TicketError::TooLong`] if a string does not fit its length prefix.
pub fn seal(claims: &TicketClaims, key: &PerceptronKey) -> Result<Vec<u8>, TicketError> {
    let mut out = Vec::with_capacity(160);
    out.extend_from_slice(&MAGIC);
    out.push(VERSION);
    put_str(&mut out, key.id().as_str(), "key_id")?;
    out.extend_from_slice(&claims.ticket_id);
    put_str(&mut out, &claims.instance, "instance")?;
    put_str(&mut out, &claims.user, "user")?;
    put_str(&mut out, &claims.client_addr, "client_addr")?;
    out.extend_from_slice(&claims.login_ms.to_le_bytes());
    out.extend_from_slice(&claims.issued_ms.to_le_bytes());
    out.extend_from_slice(&claims.expires_ms.to_le_bytes());
    out.extend_from_slice(&claims.credential_tag);
    let mac = key.sign(&[MAC_CONTEXT, &out]);
    out.extend_from_slice(&mac);
    Ok(out)
}

fn put_str(out: &mut Vec<u8>, s: &str, field: &'static str) -> Result<(), TicketError> {
    let len = u8::try_from(s.len()).map_err(|_| TicketError::TooLong(field))?;
    out.push(len);
    out.extend_from_slice(s.as_bytes());
    Ok(())
}

/// Parses a ticket strictly (no trailing bytes), without checking its MAC.
///
/// # Errors
/// [`DecodeError`] naming the first field that is missing or invalid.
pub fn decode(bytes: &[u8]) -> Result<(KeyId, TicketClaims), DecodeError> {
    let mut r = Reader::new(bytes);
    if r.array::<4>("magic")? != MAGIC {
        return Err(DecodeError::InvalidValue("magic"));
    }
    if r.u8("version")? != VERSION {
        return Err(DecodeError::InvalidValue("version"));
    }
    let key_id = KeyId::from_bytes(r.u8_prefixed("key_id")?)
        .map_err(|_| DecodeError::InvalidValue("key_id"))?;
    let ticket_id = r.array("ticket_id")?;
    let instance = utf8(r.u8_prefixed("instance")?, "instance")?;
    let user = utf8(r.u8_prefixed("user")?, "user")?;
    let client_addr = utf8(r.u8_prefixed("client_addr")?, "client_addr")?;
    let login_ms = r.u64_le("login_ms")?;
    let issued_ms = r.u64_le("issued_ms")?;
    let expires_ms = r.u64_le("expires_ms")?;
    let credential_tag = r.array("credential_tag")?;
    let _mac: [u8; KEY_LEN] = r.array("mac")?;
    r.expect_empty()?;
    Ok((
        key_id,
        TicketClaims {
            ticket_id,
            instance,
            user,
            client_addr,
            login_ms,
            issued_ms,
            expires_ms,
            credential_tag,
        },
    ))
}

fn utf8(bytes: &[u8], field: &'static str) -> Result<String, DecodeError> {
    core::str::from_utf8(bytes)
        .map(str::to_owned)
        .map_err(|_| DecodeError::InvalidValue(field))
}

/// Parses a ticket and checks its MAC against `ring` (the compute's ticket ring): the id of
/// the key that sealed it, and its claims.
///
/// # Errors
/// [`TicketError::Malformed`], [`TicketError::UnknownKeyId`] or [`TicketError::BadMac`].
pub fn open(bytes: &[u8], ring: &KeyRing) -> Result<(KeyId, TicketClaims), TicketError> {
    let (key_id, claims) = decode(bytes).map_err(TicketError::Malformed)?;
    let key = ring
        .get(&key_id)
        .ok_or_else(|| TicketError::UnknownKeyId(key_id.clone()))?;
    // `decode` succeeded, so the ticket ends with exactly KEY_LEN bytes of MAC.
    let (signed, mac) = bytes.split_at(bytes.len() - KEY_LEN);
    if !key.verify(&[MAC_CONTEXT, signed], mac) {
        return Err(TicketError::BadMac);
    }
    Ok((key_id, claims))
}

/// What the compute expects of a ticket presented on a reattach.
#[derive(Debug, Clone, Copy)]
pub struct Expected<'a> {
    /// This compute's instance name.
    pub instance: &'a str,
    /// The reattach's user name.
    pub user: &'a str,
    /// The client address the relay asserts on the reattach.
    pub client_addr: &'a str,
    /// [`credential_tag`] of the account's credential now; `None` when the account is gone.
    pub credential_tag: Option<[u8; ID_LEN]>,
    /// The compute's clock.
    pub now_ms: u64,
    /// How far in the future `issued_ms` may be (the clocks' skew).
    pub skew_ms: u64,
}

/// Checks opened `claims` against what this reattach is: instance, user, client, time,
/// credential. Whether the ticket was used before is the caller's (it keeps the used ids).
///
/// # Errors
/// The first [`TicketError`] met.
pub fn check(claims: &TicketClaims, expected: &Expected<'_>) -> Result<(), TicketError> {
    if claims.instance != expected.instance {
        return Err(TicketError::WrongInstance);
    }
    if claims.user != expected.user {
        return Err(TicketError::WrongUser);
    }
    if claims.client_addr != expected.client_addr {
        return Err(TicketError::WrongClient);
    }
    if claims.issued_ms > expected.now_ms.saturating_add(expected.skew_ms) {
        return Err(TicketError::NotYetValid);
    }
    if expected.now_ms >= claims.expires_ms {
        return Err(TicketError::Expired);
    }
    let current = expected
        .credential_tag
        .ok_or(TicketError::CredentialChanged)?;
    if !bool::from(subtle::ConstantTimeEq::ct_eq(
        &current[..],
        &claims.credential_tag[..],
    )) {
        return Err(TicketError::CredentialChanged);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::{KeySecret, hmac_sha256};

    fn key(id: &str, byte: u8) -> PerceptronKey {
        PerceptronKey::new(
            KeyId::new(id).unwrap(),
            KeySecret::from_bytes([byte; KEY_LEN]),
        )
    }

    fn claims() -> TicketClaims {
        TicketClaims {
            ticket_id: [7; ID_LEN],
            instance: "demo".into(),
            user: "app".into(),
            client_addr: "10.0.0.5:40222".into(),
            login_ms: 1_000,
            issued_ms: 2_000,
            expires_ms: 2_000 + DEFAULT_TTL_MS,
            credential_tag: credential_tag(&key("t1", 1), b"stored hash"),
        }
    }

    fn expected(tag: Option<[u8; ID_LEN]>) -> Expected<'static> {
        Expected {
            instance: "demo",
            user: "app",
            client_addr: "10.0.0.5:40222",
            credential_tag: tag,
            now_ms: 5_000,
            skew_ms: 60_000,
        }
    }

    #[test]
    fn a_sealed_ticket_opens_with_its_ring_and_passes_its_own_checks() {
        let k = key("t1", 1);
        let ticket = seal(&claims(), &k).unwrap();
        let ring = KeyRing::new(vec![key("t0", 9), k.clone()]).unwrap();
        let (key_id, opened) = open(&ticket, &ring).unwrap();
        assert_eq!(key_id.as_str(), "t1");
        assert_eq!(opened, claims());
        let tag = credential_tag(&k, b"stored hash");
        assert_eq!(check(&opened, &expected(Some(tag))), Ok(()));
    }

    #[test]
    fn the_byte_layout_is_the_documented_one() {
        let ticket = seal(&claims(), &key("t1", 1)).unwrap();
        assert_eq!(&ticket[..5], b"PCTK\x01");
        assert_eq!(&ticket[5..8], b"\x02t1");
        assert_eq!(&ticket[8..24], &[7; ID_LEN]);
        assert_eq!(&ticket[24..29], b"\x04demo");
        assert_eq!(&ticket[29..33], b"\x03app");
        assert_eq!(ticket.len(), 33 + 15 + 24 + ID_LEN + KEY_LEN);
        let mac = hmac_sha256(
            &[1; KEY_LEN],
            &[b"perceptron-ticket-v1", &ticket[..ticket.len() - KEY_LEN]],
        );
        assert_eq!(&ticket[ticket.len() - KEY_LEN..], &mac);
    }

    #[test]
    fn a_ticket_minted_with_another_key_or_changed_is_refused() {
        let compute = KeyRing::new(vec![key("t1", 1)]).unwrap();
        // The relay's key, even under the ticket key's id, cannot mint one.
        let forged = seal(&claims(), &key("t1", 2)).unwrap();
        assert_eq!(open(&forged, &compute), Err(TicketError::BadMac));
        let other_id = seal(&claims(), &key("relay", 1)).unwrap();
        assert!(matches!(
            open(&other_id, &compute),
            Err(TicketError::UnknownKeyId(_))
        ));
        let mut ticket = seal(&claims(), &key("t1", 1)).unwrap();
        for i in 0..ticket.len() {
            ticket[i] ^= 1;
            assert!(open(&ticket, &compute).is_err(), "byte {i} flipped");
            ticket[i] ^= 1;
        }
        assert!(open(&ticket[..ticket.len() - 1], &compute).is_err());
        let mut longer = ticket.clone();
        longer.push(0);
        assert!(matches!(
            open(&longer, &compute),
            Err(TicketError::Malformed(_))
        ));
    }

    #[test]
    fn each_binding_is_checked() {
        let k = key("t1", 1);
        let tag = Some(credential_tag(&k, b"stored hash"));
        let c = claims();
        let mut e = expected(tag);
        e.instance = "other";
        assert_eq!(check(&c, &e), Err(TicketError::WrongInstance));
        let mut e = expected(tag);
        e.user = "root";
        assert_eq!(check(&c, &e), Err(TicketError::WrongUser));
        let mut e = expected(tag);
        e.client_addr = "10.0.0.5:40223";
        assert_eq!(check(&c, &e), Err(TicketError::WrongClient));
        let mut e = expected(tag);
        e.now_ms = c.expires_ms;
        assert_eq!(check(&c, &e), Err(TicketError::Expired));
        let mut e = expected(tag);
        e.now_ms = 0;
        e.skew_ms = 1_000;
        assert_eq!(check(&c, &e), Err(TicketError::NotYetValid));
        let changed = Some(credential_tag(&k, b"new hash"));
        assert_eq!(
            check(&c, &expected(changed)),
            Err(TicketError::CredentialChanged)
        );
        assert_eq!(
            check(&c, &expected(None)),
            Err(TicketError::CredentialChanged)
        );
    }

    #[test]
    fn the_credential_tag_depends_on_the_key_and_the_credential() {
        let a = credential_tag(&key("t1", 1), b"h");
        assert_ne!(a, credential_tag(&key("t1", 2), b"h"));
        assert_ne!(a, credential_tag(&key("t1", 1), b"g"));
        assert_eq!(a, credential_tag(&key("t1", 1), b"h"));
    }

    #[test]
    fn long_fields_are_refused_when_sealing() {
        let mut c = claims();
        c.user = "u".repeat(256);
        assert_eq!(seal(&c, &key("t1", 1)), Err(TicketError::TooLong("user")));
    }
}
