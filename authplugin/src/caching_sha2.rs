//! `caching_sha2_password`, fast path only: the SHA-256 challenge-response that MySQL 8 uses
//! when the server has the account's SHA256(SHA256(password)) in its cache.
//!
//! token = SHA256(pw) XOR SHA256(SHA256(SHA256(pw)) || scramble). The full-authentication
//! path (cleartext over TLS, or RSA) needs the password itself and is deliberately absent:
//! nothing in Perceptron may see a password.

use core::fmt;

use sha2::Sha256;
use subtle::ConstantTimeEq;
use zeroize::Zeroize;

use crate::digest::{hash, xor};
use crate::scramble::Scramble;

/// Length of a non-empty `caching_sha2_password` fast-path token.
pub const CACHING_SHA2_TOKEN_LEN: usize = 32;

/// What a server keeps in its fast-path cache for an account: SHA256(SHA256(password)).
/// `Debug` is redacted.
#[derive(Clone, PartialEq, Eq)]
pub struct CachingSha2Digest([u8; 32]);

impl CachingSha2Digest {
    /// Hashes a non-empty password.
    #[must_use]
    pub fn from_password(password: &[u8]) -> Self {
        let mut h1 = hash::<Sha256, 32>(&[password]);
        let d = Self(hash::<Sha256, 32>(&[&h1]));
        h1.zeroize();
        d
    }

    /// Wraps a raw digest.
    #[must_use]
    pub const fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// The raw digest.
    #[must_use]
    pub const fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl fmt::Debug for CachingSha2Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CachingSha2Digest(<redacted>)")
    }
}

/// The client's fast-path answer to `scramble` (empty for an empty password).
#[must_use]
pub fn token(password: &[u8], scramble: &Scramble) -> Vec<u8> {
    if password.is_empty() {
        return Vec::new();
    }
    let mut h1 = hash::<Sha256, 32>(&[password]);
    let h2 = hash::<Sha256, 32>(&[&h1]);
    let mask = hash::<Sha256, 32>(&[&h2, scramble.as_bytes()]);
    let out = xor(&h1, &mask).to_vec();
    h1.zeroize();
    out
}

/// Checks a non-empty fast-path `token` against the stored digest, in constant time.
#[must_use]
pub fn verify(token: &[u8], scramble: &Scramble, stored: &CachingSha2Digest) -> bool {
    let Ok(token) = <&[u8; 32]>::try_from(token) else {
        return false;
    };
    let mask = hash::<Sha256, 32>(&[&stored.0, scramble.as_bytes()]);
    let mut h1 = xor(token, &mask);
    let h2 = hash::<Sha256, 32>(&[&h1]);
    h1.zeroize();
    h2.ct_eq(&stored.0).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scramble() -> Scramble {
        Scramble::from_bytes(*b"abcdefghijklmnopqrst")
    }

    #[test]
    fn verifies_own_token() {
        let d = CachingSha2Digest::from_password(b"secret");
        assert!(verify(&token(b"secret", &scramble()), &scramble(), &d));
    }

    #[test]
    fn rejects_wrong_password_scramble_or_length() {
        let d = CachingSha2Digest::from_password(b"secret");
        assert!(!verify(&token(b"secreT", &scramble()), &scramble(), &d));
        let other = Scramble::from_bytes([7; 20]);
        assert!(!verify(&token(b"secret", &other), &scramble(), &d));
        let t = token(b"secret", &scramble());
        assert!(!verify(&t[..31], &scramble(), &d));
        assert!(!verify(&[], &scramble(), &d));
    }

    #[test]
    fn empty_password_gives_empty_token() {
        assert!(token(b"", &scramble()).is_empty());
    }
}
