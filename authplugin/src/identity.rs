//! The perceptron identity: a ring of HMAC-SHA256 keys shared by relays and computes.
//!
//! architecture.md §3: the relay signs each relayed-auth payload with the newest key of its ring; the
//! compute accepts a payload signed by any key in its ring. Rotation is therefore: append a
//! new key to the compute's ring, then to the relay's, then later delete the old line.
//!
//! # Key file format
//! UTF-8 text, one key per line: `<key-id> <64 hex digits>` (the 32-byte secret). Blank lines
//! and lines whose first non-blank character is `#` are ignored. A key id is 1 to 32 bytes
//! of `A-Z a-z 0-9 . _ -`. Ids are unique within a file. **The last key in the file is the
//! newest** and is the one that signs.

use core::fmt;

use hmac::{Hmac, Mac};
use rand::{CryptoRng, RngCore};
use sha2::Sha256;
use zeroize::{Zeroize, ZeroizeOnDrop};

/// Length of a key secret and of an HMAC-SHA256 tag.
pub const KEY_LEN: usize = 32;
/// Longest key id, so it fits the payload's one-byte length prefix with room to spare.
pub const MAX_KEY_ID_LEN: usize = 32;

type HmacSha256 = Hmac<Sha256>;

/// A key's public name, carried in every payload so the compute knows which key to check.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KeyId(String);

impl KeyId {
    /// Validates a key id.
    ///
    /// # Errors
    /// [`IdentityError::InvalidKeyId`] if empty, longer than [`MAX_KEY_ID_LEN`] or holding a
    /// byte outside `A-Z a-z 0-9 . _ -`.
    pub fn new(id: &str) -> Result<Self, IdentityError> {
        Self::from_bytes(id.as_bytes())
    }

    /// Validates a key id received as bytes.
    ///
    /// # Errors
    /// As [`KeyId::new`].
    pub fn from_bytes(id: &[u8]) -> Result<Self, IdentityError> {
        let valid = !id.is_empty()
            && id.len() <= MAX_KEY_ID_LEN
            && id
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        match core::str::from_utf8(id) {
            Ok(s) if valid => Ok(Self(s.to_owned())),
            _ => Err(IdentityError::InvalidKeyId),
        }
    }

    /// The id as text.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A 32-byte secret. Wiped on drop; `Debug` is redacted and there is no `Display`.
#[derive(Clone, Zeroize, ZeroizeOnDrop)]
pub struct KeySecret([u8; KEY_LEN]);

impl KeySecret {
    /// Wraps raw secret bytes.
    #[must_use]
    pub const fn from_bytes(bytes: [u8; KEY_LEN]) -> Self {
        Self(bytes)
    }
}

impl fmt::Debug for KeySecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("KeySecret(<redacted>)")
    }
}

/// One named key.
#[derive(Debug, Clone)]
pub struct PerceptronKey {
    id: KeyId,
    secret: KeySecret,
}

impl PerceptronKey {
    /// Pairs an id with a secret.
    #[must_use]
    pub const fn new(id: KeyId, secret: KeySecret) -> Self {
        Self { id, secret }
    }

    /// Generates a key with a fresh 32-byte secret from `rng`.
    pub fn generate<R: RngCore + CryptoRng + ?Sized>(id: KeyId, rng: &mut R) -> Self {
        let mut bytes = [0u8; KEY_LEN];
        rng.fill_bytes(&mut bytes);
        let key = Self::new(id, KeySecret(bytes));
        bytes.zeroize();
        key
    }

    /// The key's id.
    #[must_use]
    pub const fn id(&self) -> &KeyId {
        &self.id
    }

    /// HMAC-SHA256 over the concatenation of `parts`.
    #[must_use]
    pub fn sign(&self, parts: &[&[u8]]) -> [u8; KEY_LEN] {
        self.mac(parts).finalize().into_bytes().into()
    }

    /// Checks `tag` against HMAC-SHA256 over `parts`, in constant time.
    #[must_use]
    pub fn verify(&self, parts: &[&[u8]], tag: &[u8]) -> bool {
        self.mac(parts).verify_slice(tag).is_ok()
    }

    /// Checks a tag truncated to its leftmost bytes (at least 16) against HMAC-SHA256 over
    /// `parts`, in constant time: the compute's proofs carry 128-bit tags (RFC 2104 §5).
    #[must_use]
    pub fn verify_truncated(&self, parts: &[&[u8]], tag: &[u8]) -> bool {
        tag.len() >= 16 && self.mac(parts).verify_truncated_left(tag).is_ok()
    }

    /// The line this key takes in a key file. It contains the secret: write it only to a
    /// key file, never to a log.
    #[must_use]
    pub fn to_key_file_line(&self) -> String {
        format!("{} {}\n", self.id, crate::hex::encode(&self.secret.0))
    }

    fn mac(&self, parts: &[&[u8]]) -> HmacSha256 {
        hmac_over(&self.secret.0, parts)
    }
}

/// HMAC-SHA256 with a key of any length over the concatenation of `parts` (RFC 2104; the
/// known-answer tests use RFC 4231's vectors).
#[must_use]
pub fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> [u8; KEY_LEN] {
    hmac_over(key, parts).finalize().into_bytes().into()
}

fn hmac_over(key: &[u8], parts: &[&[u8]]) -> HmacSha256 {
    // HMAC is defined for keys of every length (long keys are hashed first), so
    // `new_from_slice` cannot fail for SHA-256.
    let mut mac = <HmacSha256 as Mac>::new_from_slice(key)
        .unwrap_or_else(|_| unreachable!("HMAC accepts any key length"));
    for p in parts {
        mac.update(p);
    }
    mac
}

/// Every key a party accepts; the last one signs.
#[derive(Debug, Clone)]
pub struct KeyRing {
    /// Never empty; ordered oldest to newest.
    keys: Vec<PerceptronKey>,
}

impl KeyRing {
    /// Builds a ring from keys ordered oldest to newest.
    ///
    /// # Errors
    /// [`IdentityError::EmptyRing`] for no keys, [`IdentityError::DuplicateKeyId`] if an id
    /// appears twice.
    pub fn new(keys: Vec<PerceptronKey>) -> Result<Self, IdentityError> {
        if keys.is_empty() {
            return Err(IdentityError::EmptyRing);
        }
        for (i, k) in keys.iter().enumerate() {
            if keys.iter().skip(i + 1).any(|other| other.id == k.id) {
                return Err(IdentityError::DuplicateKeyId(k.id.clone()));
            }
        }
        Ok(Self { keys })
    }

    /// Parses the key file format (see the module docs).
    ///
    /// # Errors
    /// [`IdentityError::Line`] naming the first bad line, or the errors of [`KeyRing::new`].
    pub fn parse(text: &str) -> Result<Self, IdentityError> {
        let mut keys = Vec::new();
        for (index, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bad = |reason: &'static str| IdentityError::Line {
                line: index + 1,
                reason,
            };
            let mut fields = line.split_ascii_whitespace();
            let (Some(id), Some(secret), None) = (fields.next(), fields.next(), fields.next())
            else {
                return Err(bad("expected '<key-id> <64 hex digits>'"));
            };
            let id = KeyId::new(id).map_err(|_| bad("invalid key id"))?;
            let secret = crate::hex::decode_array::<KEY_LEN>(secret)
                .ok_or_else(|| bad("secret is not 64 hex digits"))?;
            // An all-zero key is a placeholder or a wiped buffer written back, never a key.
            if secret.iter().all(|&b| b == 0) {
                return Err(bad("secret is all zero; generate one with `relay keygen`"));
            }
            keys.push(PerceptronKey::new(id, KeySecret(secret)));
        }
        Self::new(keys)
    }

    /// The key that signs: the newest.
    #[must_use]
    pub fn signing_key(&self) -> &PerceptronKey {
        // `keys` is never empty (checked in `new`); an empty ring cannot be constructed.
        self.keys
            .last()
            .unwrap_or_else(|| unreachable!("a KeyRing is never empty"))
    }

    /// Whether any key of `other` has the secret of a key of this ring (whatever their ids),
    /// compared in constant time: two rings that must stay apart (the relays' own, and the
    /// one the computes hold too) share none.
    #[must_use]
    pub fn shares_a_secret_with(&self, other: &Self) -> bool {
        self.keys.iter().any(|a| {
            other.keys.iter().any(|b| {
                bool::from(subtle::ConstantTimeEq::ct_eq(
                    &a.secret.0[..],
                    &b.secret.0[..],
                ))
            })
        })
    }

    /// The key with `id`, if this ring holds it.
    #[must_use]
    pub fn get(&self, id: &KeyId) -> Option<&PerceptronKey> {
        self.keys.iter().find(|k| &k.id == id)
    }

    /// The ids in the ring, oldest first.
    pub fn ids(&self) -> impl Iterator<Item = &KeyId> {
        self.keys.iter().map(|k| &k.id)
    }
}

/// A key id, key or key file that is not acceptable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdentityError {
    /// A key id is empty, too long or has a disallowed byte.
    InvalidKeyId,
    /// A key ring has no keys.
    EmptyRing,
    /// Two keys share an id.
    DuplicateKeyId(KeyId),
    /// A key file line could not be parsed (1-based line number).
    Line {
        /// 1-based line number.
        line: usize,
        /// What is wrong with it.
        reason: &'static str,
    },
}

impl fmt::Display for IdentityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidKeyId => write!(
                f,
                "key id must be 1 to {MAX_KEY_ID_LEN} characters of A-Z a-z 0-9 . _ -"
            ),
            Self::EmptyRing => {
                f.write_str("no keys (expected lines of '<key-id> <64 hex digits>')")
            }
            Self::DuplicateKeyId(id) => write!(f, "key id '{id}' appears more than once"),
            Self::Line { line, reason } => write!(f, "line {line}: {reason}"),
        }
    }
}

impl std::error::Error for IdentityError {}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(id: &str, byte: u8) -> PerceptronKey {
        PerceptronKey::new(KeyId::new(id).unwrap(), KeySecret([byte; 32]))
    }

    #[test]
    fn parses_key_file_with_comments_and_blank_lines() {
        let text = format!(
            "# ring\n\n  k1 {}\n# newer\nk2 {}  \n",
            "01".repeat(32),
            "AB".repeat(32)
        );
        let ring = KeyRing::parse(&text).unwrap();
        assert_eq!(
            ring.ids().map(KeyId::as_str).collect::<Vec<_>>(),
            ["k1", "k2"]
        );
        assert_eq!(ring.signing_key().id().as_str(), "k2");
    }

    #[test]
    fn rejects_bad_key_file_lines_naming_the_line() {
        let cases = [
            ("k1\n", 1, "expected '<key-id> <64 hex digits>'"),
            ("# c\nk1 abcd\n", 2, "secret is not 64 hex digits"),
            ("k/1 00\n", 1, "invalid key id"),
        ];
        for (text, line, reason) in cases {
            assert_eq!(
                KeyRing::parse(text).unwrap_err(),
                IdentityError::Line { line, reason },
                "{text:?}"
            );
        }
        let extra = format!("k1 {} extra\n", "00".repeat(32));
        assert!(matches!(
            KeyRing::parse(&extra),
            Err(IdentityError::Line { line: 1, .. })
        ));
    }

    #[test]
    fn rejects_empty_ring_and_duplicate_ids() {
        assert_eq!(
            KeyRing::parse("# nothing\n").unwrap_err(),
            IdentityError::EmptyRing
        );
        let dup = format!("k1 {0}\nk1 {0}\n", "11".repeat(32));
        assert_eq!(
            KeyRing::parse(&dup).unwrap_err(),
            IdentityError::DuplicateKeyId(KeyId::new("k1").unwrap())
        );
    }

    #[test]
    fn round_trips_key_file_line() {
        let k = PerceptronKey::generate(KeyId::new("gen-1").unwrap(), &mut rand::rngs::OsRng);
        let ring = KeyRing::parse(&k.to_key_file_line()).unwrap();
        let parsed = ring.signing_key();
        assert_eq!(parsed.id(), k.id());
        assert!(parsed.verify(&[b"m"], &k.sign(&[b"m"])));
    }

    #[test]
    fn rejects_invalid_key_ids() {
        for bad in ["", "a b", "ü", &"x".repeat(33)] {
            assert_eq!(KeyId::new(bad), Err(IdentityError::InvalidKeyId), "{bad:?}");
        }
        assert!(KeyId::new(&"x".repeat(32)).is_ok());
    }

    #[test]
    fn secrets_never_appear_in_debug() {
        let k = key("k1", 0xAB);
        let ring = KeyRing::new(vec![k.clone()]).unwrap();
        for s in [
            format!("{k:?}"),
            format!("{ring:?}"),
            format!("{:?}", k.secret),
        ] {
            assert!(!s.to_lowercase().contains("abab"), "{s}");
            assert!(!s.contains("171"), "{s}");
        }
    }

    #[test]
    fn verify_rejects_other_key_and_other_message() {
        let a = key("a", 1);
        let b = key("b", 2);
        let tag = a.sign(&[b"hello ", b"world"]);
        assert!(a.verify(&[b"hello world"], &tag), "parts are concatenated");
        assert!(!b.verify(&[b"hello world"], &tag));
        assert!(!a.verify(&[b"hello worle"], &tag));
        assert!(!a.verify(&[b"hello world"], &tag[..31]));
    }
}
