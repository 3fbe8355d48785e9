//! The relayed-auth payload v1 (DESIGN §3): what the relay sends the compute in place of a
//! password answer, and the compute's verification of it.
//!
//! ```text
//! magic "PCPT" | version 1 | key_id | issued_at_ms u64 | scramble_a [20] |
//! answer_a | client_plugin | client_addr | mac [32]
//! mac = HMAC-SHA256(key[key_id], "perceptron-dual-auth-v1" || scramble_b || user || 0x00 ||
//!                   database || 0x00 || every payload byte before mac)
//! ```
//! Integers are little-endian; `key_id`, `answer_a`, `client_plugin` and `client_addr` carry a
//! one-byte length prefix. The payload is the `auth_response` of the HandshakeResponse41 the
//! relay sends at P6, with client plugin name [`PLUGIN_NAME`].

use core::fmt;

use zeroize::Zeroizing;

use crate::credential::{AnswerError, AuthPlugin, Credential};
use crate::identity::{KEY_LEN, KeyId, KeyRing, PerceptronKey};
use crate::reader::{DecodeError, Reader};
use crate::replay::{ReplayError, ReplayGuard};
use crate::scramble::{SCRAMBLE_LEN, Scramble};

/// The auth plugin name under which the relay sends the payload (P6).
pub const PLUGIN_NAME: &str = "perceptron_dual_auth";
/// The payload's first four bytes.
pub const MAGIC: [u8; 4] = *b"PCPT";
/// The only version this crate reads and writes.
pub const VERSION: u8 = 1;
/// Domain separation for the MAC, so a tag made for anything else never verifies here.
pub const MAC_CONTEXT: &[u8] = b"perceptron-dual-auth-v1";
/// The longest payload: every length-prefixed field at 255 bytes. Callers may reject bigger
/// auth data before decoding.
pub const MAX_PAYLOAD_LEN: usize = 4 + 1 + 1 + 255 + 8 + SCRAMBLE_LEN + 3 * (1 + 255) + KEY_LEN;

/// The connection-specific values the MAC binds: a payload made for one compute connection
/// and login is worthless on any other.
#[derive(Debug, Clone, Copy)]
pub struct Binding<'a> {
    /// The compute's scramble B, from its greeting on this connection (P5).
    pub scramble_b: &'a Scramble,
    /// The user name of the login, as sent in the HandshakeResponse41.
    pub user: &'a [u8],
    /// The database of the login; empty when none was named.
    pub database: &'a [u8],
}

/// What the relay asserts about the client's login. Built by the relay at P6.
#[derive(Clone)]
pub struct LoginClaim {
    /// The relay's scramble A, sent to the client in P1.
    pub scramble_a: Scramble,
    /// The client's answer to scramble A. Wiped from memory when dropped.
    pub answer_a: Zeroizing<Vec<u8>>,
    /// The plugin the client made `answer_a` with.
    pub client_plugin: AuthPlugin,
    /// The client's address as the relay saw it (`ip:port`), for the compute's logs and
    /// grants.
    pub client_addr: String,
}

impl fmt::Debug for LoginClaim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoginClaim")
            .field("client_plugin", &self.client_plugin)
            .field("client_addr", &self.client_addr)
            .finish_non_exhaustive()
    }
}

/// A payload that parsed, before any check of its MAC.
#[derive(Clone, PartialEq, Eq)]
pub struct DecodedPayload {
    /// The id of the key that (supposedly) signed it.
    pub key_id: KeyId,
    /// When the relay signed it, in milliseconds since the Unix epoch.
    pub issued_at_ms: u64,
    /// The relay's scramble A.
    pub scramble_a: Scramble,
    /// The client's answer to scramble A.
    pub answer_a: Zeroizing<Vec<u8>>,
    /// The plugin the answer was made with.
    pub client_plugin: AuthPlugin,
    /// The client's address.
    pub client_addr: String,
    /// The HMAC-SHA256 tag.
    pub mac: [u8; KEY_LEN],
}

impl fmt::Debug for DecodedPayload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DecodedPayload")
            .field("key_id", &self.key_id)
            .field("issued_at_ms", &self.issued_at_ms)
            .field("client_plugin", &self.client_plugin)
            .field("client_addr", &self.client_addr)
            .finish_non_exhaustive()
    }
}

/// A claim that does not fit the format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EncodeError {
    /// The answer is longer than 255 bytes.
    AnswerTooLong,
    /// The client address is longer than 255 bytes.
    ClientAddrTooLong,
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::AnswerTooLong => f.write_str("answer is longer than 255 bytes"),
            Self::ClientAddrTooLong => f.write_str("client address is longer than 255 bytes"),
        }
    }
}

impl std::error::Error for EncodeError {}

/// Builds and signs a payload with `key` (the relay passes its ring's signing key).
///
/// # Errors
/// [`EncodeError`] if a field does not fit its one-byte length prefix.
pub fn encode_signed(
    claim: &LoginClaim,
    key: &PerceptronKey,
    issued_at_ms: u64,
    binding: &Binding<'_>,
) -> Result<Vec<u8>, EncodeError> {
    let answer_len = u8::try_from(claim.answer_a.len()).map_err(|_| EncodeError::AnswerTooLong)?;
    let addr_len =
        u8::try_from(claim.client_addr.len()).map_err(|_| EncodeError::ClientAddrTooLong)?;
    let key_id = key.id().as_str().as_bytes();
    let plugin = claim.client_plugin.name().as_bytes();
    let mut out = Vec::with_capacity(128);
    out.extend_from_slice(&MAGIC);
    out.push(VERSION);
    // Key ids are at most 32 bytes and plugin names are constants: both fit a u8.
    out.push(key_id.len() as u8);
    out.extend_from_slice(key_id);
    out.extend_from_slice(&issued_at_ms.to_le_bytes());
    out.extend_from_slice(claim.scramble_a.as_bytes());
    out.push(answer_len);
    out.extend_from_slice(&claim.answer_a);
    out.push(plugin.len() as u8);
    out.extend_from_slice(plugin);
    out.push(addr_len);
    out.extend_from_slice(claim.client_addr.as_bytes());
    let mac = key.sign(&mac_input(binding, &out));
    out.extend_from_slice(&mac);
    Ok(out)
}

/// Parses a payload strictly: exact magic and version, every field complete, a known plugin,
/// UTF-8 address, and no trailing bytes. The MAC is *not* checked here.
///
/// # Errors
/// [`DecodeError`] naming the first field that is missing or invalid.
pub fn decode(bytes: &[u8]) -> Result<DecodedPayload, DecodeError> {
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
    let scramble_a = Scramble::from_bytes(r.array("scramble_a")?);
    let answer_a = Zeroizing::new(r.u8_prefixed("answer_a")?.to_vec());
    let client_plugin = AuthPlugin::from_name(r.u8_prefixed("client_plugin")?)
        .ok_or(DecodeError::InvalidValue("client_plugin"))?;
    let client_addr = core::str::from_utf8(r.u8_prefixed("client_addr")?)
        .map_err(|_| DecodeError::InvalidValue("client_addr"))?
        .to_owned();
    let mac = r.array("mac")?;
    r.expect_empty()?;
    Ok(DecodedPayload {
        key_id,
        issued_at_ms,
        scramble_a,
        answer_a,
        client_plugin,
        client_addr,
        mac,
    })
}

/// A login the compute has verified end to end.
#[derive(Debug)]
pub struct VerifiedLogin {
    /// The key that signed the payload.
    pub key_id: KeyId,
    /// The verified claim (scramble A, answer A, client plugin, client address).
    pub claim: LoginClaim,
}

/// Why the compute refused a relayed login. The client only ever sees a generic
/// `ER_ACCESS_DENIED_ERROR`; this precise reason is for the compute's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DenyReason {
    /// The payload does not parse.
    Malformed(DecodeError),
    /// The key id is not in the compute's ring.
    UnknownKeyId(KeyId),
    /// The MAC does not verify (forged, tampered, or made for another connection or login).
    BadMac,
    /// Freshness or replay check failed.
    Replay(ReplayError),
    /// The user does not exist on the compute.
    UnknownUser,
    /// The client's answer to scramble A does not match the account.
    WrongAnswer(AnswerError),
}

impl DenyReason {
    /// A short, fixed label for metrics and structured logs.
    #[must_use]
    pub const fn kind(&self) -> &'static str {
        match self {
            Self::Malformed(_) => "malformed",
            Self::UnknownKeyId(_) => "unknown_key_id",
            Self::BadMac => "bad_mac",
            Self::Replay(ReplayError::OutsideWindow { .. }) => "outside_window",
            Self::Replay(ReplayError::Replayed) => "replayed",
            Self::Replay(ReplayError::Full) => "replay_guard_full",
            Self::UnknownUser => "unknown_user",
            Self::WrongAnswer(_) => "wrong_answer",
        }
    }
}

impl fmt::Display for DenyReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Malformed(e) => write!(f, "malformed relayed-auth payload: {e}"),
            Self::UnknownKeyId(id) => write!(f, "payload signed with unknown key id '{id}'"),
            Self::BadMac => f.write_str("payload MAC does not verify"),
            Self::Replay(ReplayError::OutsideWindow { age_ms }) => {
                write!(f, "payload issued {age_ms} ms from now, outside the window")
            }
            Self::Replay(ReplayError::Replayed) => {
                f.write_str("payload (key id, scramble A) already used")
            }
            Self::Replay(ReplayError::Full) => f.write_str("replay guard is full"),
            Self::UnknownUser => f.write_str("unknown user"),
            Self::WrongAnswer(e) => write!(f, "client answer refused: {e}"),
        }
    }
}

impl std::error::Error for DenyReason {}

/// Verifies a relayed login, running DESIGN §3's checks in order: strict parse, known key
/// id, constant-time MAC (binding this connection's scramble B, user and database),
/// `issued_at` within the window, (key id, scramble A) not seen before, then answer A against
/// `credential` (`None` for an unknown user).
///
/// # Errors
/// The first [`DenyReason`] met.
pub fn verify(
    payload: &[u8],
    binding: &Binding<'_>,
    ring: &KeyRing,
    replay: &mut ReplayGuard,
    now_ms: u64,
    credential: Option<&Credential>,
) -> Result<VerifiedLogin, DenyReason> {
    let decoded = decode(payload).map_err(DenyReason::Malformed)?;
    let key = ring
        .get(&decoded.key_id)
        .ok_or_else(|| DenyReason::UnknownKeyId(decoded.key_id.clone()))?;
    // `decode` succeeded, so the payload ends with exactly KEY_LEN bytes of MAC.
    let signed = payload
        .get(..payload.len().saturating_sub(KEY_LEN))
        .ok_or(DenyReason::BadMac)?;
    if !key.verify(&mac_input(binding, signed), &decoded.mac) {
        return Err(DenyReason::BadMac);
    }
    replay
        .check_and_record(
            &decoded.key_id,
            &decoded.scramble_a,
            decoded.issued_at_ms,
            now_ms,
        )
        .map_err(DenyReason::Replay)?;
    let credential = credential.ok_or(DenyReason::UnknownUser)?;
    credential
        .check_answer(
            decoded.client_plugin,
            &decoded.scramble_a,
            &decoded.answer_a,
        )
        .map_err(DenyReason::WrongAnswer)?;
    Ok(VerifiedLogin {
        key_id: decoded.key_id,
        claim: LoginClaim {
            scramble_a: decoded.scramble_a,
            answer_a: decoded.answer_a,
            client_plugin: decoded.client_plugin,
            client_addr: decoded.client_addr,
        },
    })
}

fn mac_input<'a>(binding: &Binding<'a>, signed: &'a [u8]) -> [&'a [u8]; 7] {
    [
        MAC_CONTEXT,
        binding.scramble_b.as_bytes(),
        binding.user,
        &[0],
        binding.database,
        &[0],
        signed,
    ]
}
