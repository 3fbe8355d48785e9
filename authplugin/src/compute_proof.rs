//! The compute's proof that it holds the perceptron key, given before the relay sends it
//! anything secret of the client's (scramble A, the client's answer, queries).
//!
//! Without it, whatever greets on the compute's address receives a relayed login: enough for
//! an offline dictionary attack on the client's password. Three forms, because the computes
//! control different parts of the exchange:
//!
//! - **In the auth switch** (server-shim): the relay logs in with a [`Hello`] (below) as its
//!   answer; the compute switches to `mysql_native_password` with its scramble B, a NUL, and
//!   the proof (as in a challenge round) after them ([`switch_proof`]). Clients that send no
//!   Hello never see a proof, and the greeting's version is the plain one.
//! - **In the greeting** (server-shim before the auth switch form): scramble B is *timed*
//!   ([`Scramble::generate_timed`]) and the server version ends with
//!   ` pcpt2:<key id>=<tag>[,<key id>=<tag>…]`, one tag per key of the compute's ring (newest
//!   first, at most [`MAX_GREETING_PROOFS`]), so a relay holding any of them can check it.
//!   `tag = HMAC-SHA256(key, "perceptron-compute-greeting-v2" || B || key id)` truncated to
//!   [`TAG_LEN`] bytes, in lowercase hex. The relay accepts B's clock within
//!   [`MAX_GREETING_SKEW_MS`] of its own and each (key id, B) once ([`greeting_guard`]).
//! - **In a challenge round** (the MariaDB plugin, which cannot change the server's greeting
//!   and whose native challenge stock clients parse strictly): the relay answers the compute's
//!   challenge B with a [`Hello`] carrying its key id and a fresh nonce; the compute replies
//!   with `"PCPT" 2 0x80 | len8 key id | tag`, where
//!   `tag = HMAC-SHA256(key, "perceptron-compute-challenge-v2" || nonce || B || key id)`
//!   truncated to [`TAG_LEN`]; only then does the relay send the payload. The nonce makes
//!   every proof fresh, so none can be replayed.
//!
//! A Hello (`"PCPT" 2 0x00 …`) and a proof (`"PCPT" 2 0x80 …`) never parse as a payload, whose
//! sixth byte is a key id length (1..=32).

use core::fmt;

use rand::{CryptoRng, RngCore};

use crate::identity::{KeyId, KeyRing, PerceptronKey};
use crate::payload::{MAGIC, VERSION};
use crate::reader::{DecodeError, Reader};
use crate::replay::{ReplayError, ReplayGuard};
use crate::scramble::Scramble;

/// Bytes of a proof tag: HMAC-SHA256 truncated to 128 bits.
pub const TAG_LEN: usize = 16;
/// Bytes of a Hello's nonce.
pub const NONCE_LEN: usize = 32;
/// What precedes the proofs in a greeting's server version.
pub const GREETING_MARKER: &str = " pcpt2:";
/// The most proofs a greeting carries (one per key, newest first).
pub const MAX_GREETING_PROOFS: usize = 4;
/// How far scramble B's clock may be from the relay's, either way (plus the clock's
/// rounding to whole seconds). Relay and compute normally share a host or an NTP-synced
/// network, and the relay reads the greeting right after connecting.
pub const MAX_GREETING_SKEW_MS: u64 = 30_000;

const GREETING_CONTEXT: &[u8] = b"perceptron-compute-greeting-v2";
const CHALLENGE_CONTEXT: &[u8] = b"perceptron-compute-challenge-v2";
const KIND_HELLO: u8 = 0x00;
const KIND_PROOF: u8 = 0x80;

/// Why the relay does not believe a compute holds the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProofError {
    /// The greeting's server version carries no proof.
    Missing,
    /// The proof does not parse.
    Malformed(DecodeError),
    /// None of the proof's key ids is in the relay's ring.
    UnknownKeyId,
    /// A tag made with a key the relay holds does not verify.
    BadTag,
    /// Scramble B carries no clock.
    Untimed,
    /// Scramble B's clock is too far from the relay's: `now − clock` in milliseconds.
    Stale {
        /// `now − clock`, in milliseconds.
        age_ms: i128,
    },
    /// This scramble B was proven before (under any key id): a replayed greeting.
    Replayed,
    /// The relay's guard is full of greetings that are all still fresh.
    GuardFull,
}

impl ProofError {
    /// A short, fixed label for metrics and logs.
    #[must_use]
    pub const fn kind(&self) -> &'static str {
        match self {
            Self::Missing => "missing",
            Self::Malformed(_) => "malformed",
            Self::UnknownKeyId => "unknown_key_id",
            Self::BadTag => "bad_tag",
            Self::Untimed => "untimed",
            Self::Stale { .. } => "stale",
            Self::Replayed => "replayed",
            Self::GuardFull => "guard_full",
        }
    }
}

impl fmt::Display for ProofError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Missing => f.write_str("the compute offered no proof that it holds the key"),
            Self::Malformed(e) => write!(f, "the compute's proof is malformed: {e}"),
            Self::UnknownKeyId => f.write_str("the compute proved none of the relay's key ids"),
            Self::BadTag => f.write_str("the compute's proof does not verify"),
            Self::Untimed => f.write_str("the compute's scramble carries no clock"),
            Self::Stale { age_ms } => write!(
                f,
                "the compute's scramble is {age_ms} ms away from the relay's clock (a replayed \
                 greeting, or clocks out of sync)"
            ),
            Self::Replayed => f.write_str("the compute's greeting was proven before: replayed"),
            Self::GuardFull => f.write_str("the relay's greeting guard is full"),
        }
    }
}

impl std::error::Error for ProofError {}

fn tag(key: &PerceptronKey, parts: &[&[u8]]) -> [u8; TAG_LEN] {
    let full = key.sign(parts);
    let mut out = [0u8; TAG_LEN];
    out.copy_from_slice(full.get(..TAG_LEN).unwrap_or(&[0; TAG_LEN]));
    out
}

fn greeting_tag(key: &PerceptronKey, scramble_b: &Scramble) -> [u8; TAG_LEN] {
    let id = key.id().as_str().as_bytes();
    tag(key, &[GREETING_CONTEXT, scramble_b.as_bytes(), id])
}

/// The server version a compute greets with: `base` and the proofs for `scramble_b`, which
/// must be timed.
#[must_use]
pub fn greeting_version(base: &str, ring: &KeyRing, scramble_b: &Scramble) -> String {
    let keys: Vec<&KeyId> = ring.ids().collect();
    let proofs: Vec<String> = keys
        .iter()
        .rev()
        .take(MAX_GREETING_PROOFS)
        .filter_map(|id| ring.get(id))
        .map(|key| {
            format!(
                "{}={}",
                key.id(),
                crate::hex::encode(&greeting_tag(key, scramble_b))
            )
        })
        .collect();
    format!("{base}{GREETING_MARKER}{}", proofs.join(","))
}

/// The server version without its proofs: what a client should be shown.
#[must_use]
pub fn version_without_proof(server_version: &[u8]) -> &[u8] {
    find_marker(server_version).map_or(server_version, |at| {
        server_version.get(..at).unwrap_or(server_version)
    })
}

fn find_marker(server_version: &[u8]) -> Option<usize> {
    let marker = GREETING_MARKER.as_bytes();
    server_version
        .windows(marker.len())
        .rposition(|w| w == marker)
}

/// The guard a relay keeps over proven greetings (one per relay is enough: scramble B is
/// random per connection).
#[must_use]
pub fn greeting_guard() -> ReplayGuard {
    ReplayGuard::new(
        MAX_GREETING_SKEW_MS + 1_000,
        crate::replay::DEFAULT_CAPACITY,
    )
}

/// Checks a greeting's proof: one tag made with a key of `ring` over `scramble_b`, B's clock
/// within [`MAX_GREETING_SKEW_MS`] of `now_ms`, and this (key id, B) not proven before
/// (recorded in `guard`, made by [`greeting_guard`]). Returns the key id that proved it.
///
/// # Errors
/// [`ProofError`] for the first check that fails.
pub fn verify_greeting(
    server_version: &[u8],
    scramble_b: &Scramble,
    ring: &KeyRing,
    now_ms: u64,
    guard: &mut ReplayGuard,
) -> Result<KeyId, ProofError> {
    let at = find_marker(server_version).ok_or(ProofError::Missing)?;
    let proofs = server_version
        .get(at + GREETING_MARKER.len()..)
        .ok_or(ProofError::Missing)?;
    let mut proven = None;
    let mut known = false;
    for item in proofs.split(|&b| b == b',').take(MAX_GREETING_PROOFS) {
        let malformed = || ProofError::Malformed(DecodeError::InvalidValue("greeting proof"));
        let eq = item.iter().position(|&b| b == b'=').ok_or_else(malformed)?;
        let (id, hex) = (
            item.get(..eq).unwrap_or(&[]),
            item.get(eq + 1..).unwrap_or(&[]),
        );
        let id = KeyId::from_bytes(id).map_err(|_| malformed())?;
        let hex = core::str::from_utf8(hex).map_err(|_| malformed())?;
        let tag = crate::hex::decode_array::<TAG_LEN>(hex).ok_or_else(malformed)?;
        let Some(key) = ring.get(&id) else { continue };
        known = true;
        let parts: [&[u8]; 3] = [
            GREETING_CONTEXT,
            scramble_b.as_bytes(),
            id.as_str().as_bytes(),
        ];
        if key.verify_truncated(&parts, &tag) {
            proven = Some(id);
            break;
        }
    }
    let id = match (proven, known) {
        (Some(id), _) => id,
        (None, true) => return Err(ProofError::BadTag),
        (None, false) => return Err(ProofError::UnknownKeyId),
    };
    let clock = scramble_b.clock_ms().ok_or(ProofError::Untimed)?;
    // The clock is whole seconds, rounded down: allow the second's remainder.
    let age_ms = i128::from(now_ms) - i128::from(clock);
    if age_ms > i128::from(MAX_GREETING_SKEW_MS + 999) || age_ms < -i128::from(MAX_GREETING_SKEW_MS)
    {
        return Err(ProofError::Stale { age_ms });
    }
    guard
        .check_and_record(scramble_b, clock, now_ms)
        .map_err(|e| match e {
            ReplayError::OutsideWindow { age_ms } => ProofError::Stale { age_ms },
            ReplayError::Replayed => ProofError::Replayed,
            ReplayError::Full => ProofError::GuardFull,
        })?;
    Ok(id)
}

/// The relay's answer to a compute's own challenge: "prove you hold this key first".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    /// The relay's signing key id: the key the compute should prove.
    pub key_id: KeyId,
    /// Fresh per login, so every proof is new.
    pub nonce: [u8; NONCE_LEN],
}

impl Hello {
    /// A Hello for `key_id` with a nonce from `rng`.
    pub fn generate<R: RngCore + CryptoRng + ?Sized>(key_id: KeyId, rng: &mut R) -> Self {
        let mut nonce = [0u8; NONCE_LEN];
        rng.fill_bytes(&mut nonce);
        Self { key_id, nonce }
    }

    /// `"PCPT" 2 0x00 | len8 key id | nonce`.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let id = self.key_id.as_str().as_bytes();
        let mut out = Vec::with_capacity(7 + id.len() + NONCE_LEN);
        out.extend_from_slice(&MAGIC);
        out.push(VERSION);
        out.push(KIND_HELLO);
        // Key ids are at most 32 bytes.
        out.push(id.len() as u8);
        out.extend_from_slice(id);
        out.extend_from_slice(&self.nonce);
        out
    }

    /// Whether `bytes` claim to be a Hello (magic, version and kind); [`Hello::decode`]
    /// checks the rest.
    #[must_use]
    pub fn is_hello(bytes: &[u8]) -> bool {
        bytes.starts_with(&MAGIC)
            && bytes.get(4) == Some(&VERSION)
            && bytes.get(5) == Some(&KIND_HELLO)
    }

    /// Parses a Hello strictly.
    ///
    /// # Errors
    /// [`DecodeError`] naming the first field that is missing or invalid.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(bytes);
        expect_head(&mut r, KIND_HELLO)?;
        let key_id = KeyId::from_bytes(r.u8_prefixed("key_id")?)
            .map_err(|_| DecodeError::InvalidValue("key_id"))?;
        let nonce = r.array("nonce")?;
        r.expect_empty()?;
        Ok(Self { key_id, nonce })
    }

    fn parts<'a>(&'a self, scramble_b: &'a Scramble, key_id: &'a KeyId) -> [&'a [u8]; 4] {
        [
            CHALLENGE_CONTEXT,
            &self.nonce,
            scramble_b.as_bytes(),
            key_id.as_str().as_bytes(),
        ]
    }

    /// The compute's proof for this Hello and its challenge `scramble_b`: made with the key
    /// the Hello names if `ring` holds it, else with the ring's signing key (the relay then
    /// refuses it unless it holds that key too).
    #[must_use]
    pub fn prove(&self, scramble_b: &Scramble, ring: &KeyRing) -> Vec<u8> {
        let key = ring.get(&self.key_id).unwrap_or_else(|| ring.signing_key());
        let id = key.id().as_str().as_bytes();
        let mut out = Vec::with_capacity(7 + id.len() + TAG_LEN);
        out.extend_from_slice(&MAGIC);
        out.push(VERSION);
        out.push(KIND_PROOF);
        out.push(id.len() as u8);
        out.extend_from_slice(id);
        out.extend_from_slice(&tag(key, &self.parts(scramble_b, key.id())));
        out
    }

    /// Checks the compute's proof for this Hello and `scramble_b` against `ring`. Returns the
    /// key id that proved it.
    ///
    /// # Errors
    /// [`ProofError::Malformed`], [`ProofError::UnknownKeyId`] or [`ProofError::BadTag`].
    pub fn verify_proof(
        &self,
        proof: &[u8],
        scramble_b: &Scramble,
        ring: &KeyRing,
    ) -> Result<KeyId, ProofError> {
        let mut r = Reader::new(proof);
        expect_head(&mut r, KIND_PROOF).map_err(ProofError::Malformed)?;
        let key_id = r
            .u8_prefixed("key_id")
            .and_then(|id| KeyId::from_bytes(id).map_err(|_| DecodeError::InvalidValue("key_id")))
            .map_err(ProofError::Malformed)?;
        let tag: [u8; TAG_LEN] = r.array("tag").map_err(ProofError::Malformed)?;
        r.expect_empty().map_err(ProofError::Malformed)?;
        let key = ring.get(&key_id).ok_or(ProofError::UnknownKeyId)?;
        if key.verify_truncated(&self.parts(scramble_b, &key_id), &tag) {
            Ok(key_id)
        } else {
            Err(ProofError::BadTag)
        }
    }
}

/// The scramble and the proof in an AuthSwitchRequest's plugin data that carries one
/// (server-shim answering a [`Hello`]): 20 bytes, a NUL, then the proof; `None` for plugin data
/// without a proof (a plain native challenge: 20 bytes and a NUL).
#[must_use]
pub fn switch_proof(plugin_data: &[u8]) -> Option<(Scramble, &[u8])> {
    let (scramble, rest) = plugin_data.split_first_chunk::<20>()?;
    let proof = rest.strip_prefix(&[0])?;
    (!proof.is_empty()).then(|| (Scramble::from_bytes(*scramble), proof))
}

fn expect_head(r: &mut Reader<'_>, kind: u8) -> Result<(), DecodeError> {
    if r.array::<4>("magic")? != MAGIC {
        return Err(DecodeError::InvalidValue("magic"));
    }
    if r.u8("version")? != VERSION {
        return Err(DecodeError::InvalidValue("version"));
    }
    if r.u8("kind")? != kind {
        return Err(DecodeError::InvalidValue("kind"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::KeySecret;

    const NOW: u64 = 1_796_097_600_000;

    fn key(id: &str, byte: u8) -> PerceptronKey {
        PerceptronKey::new(KeyId::new(id).unwrap(), KeySecret::from_bytes([byte; 32]))
    }

    fn ring(keys: &[(&str, u8)]) -> KeyRing {
        KeyRing::new(keys.iter().map(|(id, b)| key(id, *b)).collect()).unwrap()
    }

    fn timed_b(now_ms: u64) -> Scramble {
        Scramble::with_clock(now_ms, *b"bbbbbbbbbbbbbb")
    }

    #[test]
    fn a_greeting_proof_verifies_once_with_any_shared_key() {
        let compute = ring(&[("old", 1), ("new", 2)]);
        let b = timed_b(NOW);
        let version = greeting_version("8.0.36-perceptron-shim", &compute, &b);
        assert!(version.starts_with("8.0.36-perceptron-shim pcpt2:new="));
        assert_eq!(
            version_without_proof(version.as_bytes()),
            b"8.0.36-perceptron-shim"
        );
        // A relay that still holds only the old key, or already only the new one.
        for relay in [ring(&[("old", 1)]), ring(&[("new", 2)])] {
            let mut guard = greeting_guard();
            assert!(verify_greeting(version.as_bytes(), &b, &relay, NOW + 300, &mut guard).is_ok());
            assert_eq!(
                verify_greeting(version.as_bytes(), &b, &relay, NOW + 400, &mut guard),
                Err(ProofError::Replayed)
            );
        }
    }

    #[test]
    fn greeting_proofs_fail_for_every_forgery() {
        let compute = ring(&[("k1", 1)]);
        let relay = ring(&[("k1", 1)]);
        let b = timed_b(NOW);
        let good = greeting_version("v", &compute, &b);
        let check = |version: &[u8], b: &Scramble, now: u64| {
            verify_greeting(version, b, &relay, now, &mut greeting_guard())
        };
        assert_eq!(check(b"8.0.36", &b, NOW), Err(ProofError::Missing));
        // Another scramble B (a greeting replayed onto another connection is the same B, so
        // this is a proof lifted from one greeting into another).
        assert_eq!(
            check(good.as_bytes(), &timed_b(NOW + 1_000), NOW),
            Err(ProofError::BadTag)
        );
        // Another key.
        let other = greeting_version("v", &ring(&[("k1", 7)]), &b);
        assert_eq!(check(other.as_bytes(), &b, NOW), Err(ProofError::BadTag));
        let unknown = greeting_version("v", &ring(&[("k9", 1)]), &b);
        assert_eq!(
            check(unknown.as_bytes(), &b, NOW),
            Err(ProofError::UnknownKeyId)
        );
        // Every flipped tag digit.
        let at = good.len() - 1;
        let mut flipped = good.clone().into_bytes();
        flipped[at] = if flipped[at] == b'0' { b'1' } else { b'0' };
        assert_eq!(check(&flipped, &b, NOW), Err(ProofError::BadTag));
        // Truncated tag, garbage.
        assert!(matches!(
            check(&good.as_bytes()[..good.len() - 2], &b, NOW),
            Err(ProofError::Malformed(_))
        ));
        assert!(matches!(
            check(b"v pcpt2:\xff=00", &b, NOW),
            Err(ProofError::Malformed(_))
        ));
        // Untimed B, and one from too long ago or the future.
        let untimed = Scramble::from_bytes([0x01; 20]);
        let v = greeting_version("v", &compute, &untimed);
        assert_eq!(check(v.as_bytes(), &untimed, NOW), Err(ProofError::Untimed));
        assert!(matches!(
            check(good.as_bytes(), &b, NOW + MAX_GREETING_SKEW_MS + 1_000),
            Err(ProofError::Stale { .. })
        ));
        assert!(matches!(
            check(good.as_bytes(), &b, NOW - MAX_GREETING_SKEW_MS - 1),
            Err(ProofError::Stale { .. })
        ));
        assert!(check(good.as_bytes(), &b, NOW + MAX_GREETING_SKEW_MS + 999).is_ok());
    }

    #[test]
    fn a_hello_round_trips_and_never_parses_as_a_payload() {
        let hello = Hello {
            key_id: KeyId::new("k1").unwrap(),
            nonce: [7; NONCE_LEN],
        };
        let bytes = hello.encode();
        assert!(Hello::is_hello(&bytes));
        assert_eq!(Hello::decode(&bytes), Ok(hello.clone()));
        assert!(crate::payload::decode(&bytes).is_err());
        for cut in 0..bytes.len() {
            assert!(Hello::decode(&bytes[..cut]).is_err(), "prefix {cut}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(Hello::decode(&longer).is_err());
        let proof = hello.prove(&timed_b(NOW), &ring(&[("k1", 1)]));
        assert!(!Hello::is_hello(&proof));
        assert!(crate::payload::decode(&proof).is_err());
    }

    #[test]
    fn a_challenge_proof_binds_nonce_challenge_and_key() {
        let compute = ring(&[("k1", 1), ("k2", 2)]);
        let relay = ring(&[("k1", 1)]);
        let b = Scramble::from_bytes([0x42; 20]);
        let hello = Hello {
            key_id: KeyId::new("k1").unwrap(),
            nonce: [7; NONCE_LEN],
        };
        // The compute proves with the key the relay named, although it signs with k2.
        let proof = hello.prove(&b, &compute);
        assert_eq!(
            hello.verify_proof(&proof, &b, &relay),
            Ok(KeyId::new("k1").unwrap())
        );
        let other_nonce = Hello {
            nonce: [8; NONCE_LEN],
            ..hello.clone()
        };
        assert_eq!(
            other_nonce.verify_proof(&proof, &b, &relay),
            Err(ProofError::BadTag)
        );
        assert_eq!(
            hello.verify_proof(&proof, &Scramble::from_bytes([0x43; 20]), &relay),
            Err(ProofError::BadTag)
        );
        // A compute without the named key proves with its own, which this relay lacks.
        let stranger = ring(&[("k9", 9)]);
        assert_eq!(
            hello.verify_proof(&hello.prove(&b, &stranger), &b, &relay),
            Err(ProofError::UnknownKeyId)
        );
        let wrong_secret = ring(&[("k1", 5)]);
        assert_eq!(
            hello.verify_proof(&hello.prove(&b, &wrong_secret), &b, &relay),
            Err(ProofError::BadTag)
        );
        for cut in 0..proof.len() {
            assert!(matches!(
                hello.verify_proof(&proof[..cut], &b, &relay),
                Err(ProofError::Malformed(_))
            ));
        }
        // A Hello echoed back is not a proof.
        assert!(matches!(
            hello.verify_proof(&hello.encode(), &b, &relay),
            Err(ProofError::Malformed(_))
        ));
    }

    #[test]
    fn a_proof_rides_after_the_switchs_scramble_and_nothing_else_is_one() {
        let b = Scramble::from_bytes([7; 20]);
        let ring = KeyRing::new(vec![key("k1", 1)]).unwrap();
        let hello = Hello::generate(KeyId::new("k1").unwrap(), &mut rand::rngs::OsRng);
        let proof = hello.prove(&b, &ring);
        let data = [&[7u8; 20][..], &[0], &proof].concat();
        let (scramble, found) = switch_proof(&data).unwrap();
        assert_eq!(scramble, b);
        assert!(hello.verify_proof(found, &scramble, &ring).is_ok());
        // A plain native challenge, a short one, one without the NUL: no proof.
        assert_eq!(switch_proof(&[[7u8; 20].as_slice(), &[0]].concat()), None);
        assert_eq!(switch_proof(&[7u8; 12]), None);
        assert_eq!(switch_proof(&[7u8; 40]), None);
    }
}
