//! The relayed-auth payload v2 (architecture.md §3, hardened): what the relay sends the compute in
//! place of a password answer, and the compute's verification of it.
//!
//! ```text
//! magic "PCPT" | version 2 | key_id | issued_at_ms u64 | scramble_a [20] |
//! answer_a | client_plugin | client_addr | mac [32]
//! mac = HMAC-SHA256(key[key_id], "perceptron-dual-auth-v2" || scramble_b || user || 0x00 ||
//!                   database || 0x00 || every payload byte before mac)
//! ```
//!
//! v2 differs from v1 in one rule: scramble A is *timed* ([`Scramble::generate_timed`]: its
//! first bytes carry the second it was drawn), and a payload is refused when A is older than
//! [`MAX_LOGIN_AGE_MS`] at `issued_at`, or newer. The client's answer is bound to every byte of
//! A, so an old (scramble A, answer) pair cannot be made young again: with v1, a stolen relay
//! key plus one sniffed login could be re-signed with a fresh `issued_at` for ever. The replay
//! guard remembers each A for as long as it could still pass. v1 payloads are refused.
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
/// The connect attribute that tells the compute which connection id the relay greeted the
/// client with: a compute that can (server-shim) takes it as the session's, so
/// `CONNECTION_ID()` and `KILL` agree with the greeting (docs/protocol.md).
pub const CONNECTION_ID_ATTR: &str = "_perceptron_connection_id";
/// The payload's first four bytes.
pub const MAGIC: [u8; 4] = *b"PCPT";
/// The version without flags, which every compute reads (the MariaDB plugin only this one).
pub const VERSION: u8 = 2;
/// v2 with a `flags` byte before the MAC: sent only to computes that issue resumption tickets
/// (`resumable_sessions`).
pub const VERSION_WITH_FLAGS: u8 = 3;
/// `flags` bit: the relay asks for a resumption ticket ([`crate::ticket`]) in the login's OK
/// exchange.
pub const FLAG_WANTS_TICKET: u8 = 0x01;
/// Domain separation for the MAC, so a tag made for anything else (a v1 payload included)
/// never verifies here.
pub const MAC_CONTEXT: &[u8] = b"perceptron-dual-auth-v2";
/// The MAC's domain separation in v3.
pub const MAC_CONTEXT_V3: &[u8] = b"perceptron-dual-auth-v3";
/// How long a relay may hold a login between greeting the client (scramble A's clock) and
/// signing the payload (`issued_at`): the relay's handshake, wake and compute timeouts must fit
/// in it. A sniffed (scramble A, answer) pair is worthless after this plus the freshness window.
pub const MAX_LOGIN_AGE_MS: u64 = 600_000;
/// The longest payload: every length-prefixed field at 255 bytes. Callers may reject bigger
/// auth data before decoding.
pub const MAX_PAYLOAD_LEN: usize = 4 + 1 + 1 + 255 + 8 + SCRAMBLE_LEN + 3 * (1 + 255) + 1 + KEY_LEN;

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
    /// v3's flags ([`FLAG_WANTS_TICKET`]); 0 in v2.
    pub flags: u8,
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

/// Builds and signs a v2 payload with `key` (the relay passes its ring's signing key).
///
/// # Errors
/// [`EncodeError`] if a field does not fit its one-byte length prefix.
pub fn encode_signed(
    claim: &LoginClaim,
    key: &PerceptronKey,
    issued_at_ms: u64,
    binding: &Binding<'_>,
) -> Result<Vec<u8>, EncodeError> {
    encode_signed_with(claim, key, issued_at_ms, binding, None)
}

/// As [`encode_signed`]; with `Some(flags)` a v3 payload carrying them.
///
/// # Errors
/// [`EncodeError`] if a field does not fit its one-byte length prefix.
pub fn encode_signed_with(
    claim: &LoginClaim,
    key: &PerceptronKey,
    issued_at_ms: u64,
    binding: &Binding<'_>,
    flags: Option<u8>,
) -> Result<Vec<u8>, EncodeError> {
    let answer_len = u8::try_from(claim.answer_a.len()).map_err(|_| EncodeError::AnswerTooLong)?;
    let addr_len =
        u8::try_from(claim.client_addr.len()).map_err(|_| EncodeError::ClientAddrTooLong)?;
    let key_id = key.id().as_str().as_bytes();
    let plugin = claim.client_plugin.name().as_bytes();
    let mut out = Vec::with_capacity(128);
    out.extend_from_slice(&MAGIC);
    out.push(if flags.is_some() {
        VERSION_WITH_FLAGS
    } else {
        VERSION
    });
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
    if let Some(flags) = flags {
        out.push(flags);
    }
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
    let version = r.u8("version")?;
    if version != VERSION && version != VERSION_WITH_FLAGS {
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
    let flags = if version == VERSION_WITH_FLAGS {
        r.u8("flags")?
    } else {
        0
    };
    let mac = r.array("mac")?;
    r.expect_empty()?;
    Ok(DecodedPayload {
        key_id,
        issued_at_ms,
        scramble_a,
        answer_a,
        client_plugin,
        client_addr,
        flags,
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
    /// The relay asked for a resumption ticket (v3, [`FLAG_WANTS_TICKET`]).
    pub wants_ticket: bool,
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
    /// Scramble A is untimed, older than [`MAX_LOGIN_AGE_MS`] at `issued_at`, or newer.
    LoginAge(LoginAgeError),
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
            Self::LoginAge(_) => "login_age",
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
                f.write_str("payload's scramble A already used (under this or another key id)")
            }
            Self::Replay(ReplayError::Full) => f.write_str("replay guard is full"),
            Self::LoginAge(e) => e.fmt(f),
            Self::UnknownUser => f.write_str("unknown user"),
            Self::WrongAnswer(e) => write!(f, "client answer refused: {e}"),
        }
    }
}

impl std::error::Error for DenyReason {}

/// Why scramble A's clock refuses a payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoginAgeError {
    /// Scramble A carries no clock (a v1 relay's scramble).
    Untimed,
    /// Scramble A was drawn after the payload was signed.
    AfterIssue {
        /// How much later, in milliseconds.
        by_ms: u64,
    },
    /// Scramble A was drawn longer than [`MAX_LOGIN_AGE_MS`] before the payload was signed.
    TooOld {
        /// `issued_at − A's clock`, in milliseconds.
        age_ms: u64,
    },
}

impl fmt::Display for LoginAgeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Untimed => f.write_str("scramble A carries no clock (a v1 relay?)"),
            Self::AfterIssue { by_ms } => {
                write!(f, "scramble A is {by_ms} ms younger than the payload")
            }
            Self::TooOld { age_ms } => write!(
                f,
                "scramble A is {age_ms} ms older than the payload (a login is held at most \
                 {MAX_LOGIN_AGE_MS} ms): an old login re-signed?"
            ),
        }
    }
}

/// Checks scramble A's clock against `issued_at_ms`, and returns A's clock.
///
/// # Errors
/// [`LoginAgeError`] saying why the pair cannot be this payload's.
pub fn check_login_age(scramble_a: &Scramble, issued_at_ms: u64) -> Result<u64, LoginAgeError> {
    let drawn_ms = scramble_a.clock_ms().ok_or(LoginAgeError::Untimed)?;
    // The clock is in whole seconds, rounded down: a scramble drawn up to 999 ms before the
    // signature shows an age up to 999 ms larger, never a negative one.
    if drawn_ms > issued_at_ms {
        return Err(LoginAgeError::AfterIssue {
            by_ms: drawn_ms - issued_at_ms,
        });
    }
    let age_ms = issued_at_ms - drawn_ms;
    if age_ms > MAX_LOGIN_AGE_MS + 999 {
        return Err(LoginAgeError::TooOld { age_ms });
    }
    Ok(drawn_ms)
}

/// Verifies a relayed login, running architecture.md §3's checks in order: strict parse, known key
/// id, constant-time MAC (binding this connection's scramble B, user and database),
/// `issued_at` within the window, scramble A's clock within [`MAX_LOGIN_AGE_MS`] before
/// `issued_at`, scramble A not seen before (under any key id: one login per sniffed A), then answer A against `credential`
/// (`None` for an unknown user).
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
        .check_fresh(decoded.issued_at_ms, now_ms)
        .map_err(DenyReason::Replay)?;
    let drawn_ms =
        check_login_age(&decoded.scramble_a, decoded.issued_at_ms).map_err(DenyReason::LoginAge)?;
    // Remembered for as long as any payload carrying this A could pass the two checks above.
    let passable_until = drawn_ms
        .saturating_add(MAX_LOGIN_AGE_MS + 999)
        .saturating_add(replay.window_ms());
    replay
        .check_and_record_until(
            &decoded.scramble_a,
            decoded.issued_at_ms,
            now_ms,
            passable_until,
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
        wants_ticket: decoded.flags & FLAG_WANTS_TICKET != 0,
        key_id: decoded.key_id,
        claim: LoginClaim {
            scramble_a: decoded.scramble_a,
            answer_a: decoded.answer_a,
            client_plugin: decoded.client_plugin,
            client_addr: decoded.client_addr,
        },
    })
}

/// The MAC's input; the version byte (signed[4]) picks the domain separation.
fn mac_input<'a>(binding: &Binding<'a>, signed: &'a [u8]) -> [&'a [u8]; 7] {
    let context = if signed.get(4) == Some(&VERSION_WITH_FLAGS) {
        MAC_CONTEXT_V3
    } else {
        MAC_CONTEXT
    };
    bound_mac_input(context, binding, signed)
}

/// What a relay's MAC covers on one compute connection: `context`, then the binding
/// (scramble B, user, database, each string NUL-ended), then the `signed` payload bytes. The
/// login payload and the resume payload ([`crate::resume`]) differ only in `context`.
pub(crate) fn bound_mac_input<'a>(
    context: &'a [u8],
    binding: &Binding<'a>,
    signed: &'a [u8],
) -> [&'a [u8]; 7] {
    [
        context,
        binding.scramble_b.as_bytes(),
        binding.user,
        &[0],
        binding.database,
        &[0],
        signed,
    ]
}
