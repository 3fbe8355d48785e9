//! `mysql_native_password`: the SHA-1 challenge-response every MySQL and MariaDB client speaks.
//!
//! stage1 = SHA1(password), stage2 = SHA1(stage1). The server stores stage2 (as the text
//! `*` + 40 upper-case hex digits); the client answers a scramble with
//! `token = stage1 XOR SHA1(scramble || stage2)`. The server recovers a candidate stage1 from
//! the token and accepts when SHA1(candidate) equals stage2. An empty password is special: the
//! server stores an empty string and the client sends an empty token.

use core::fmt;

use sha1::Sha1;
use subtle::ConstantTimeEq;
use zeroize::Zeroize;

use crate::digest::{hash, xor};
use crate::scramble::Scramble;

/// Length of a SHA-1 digest, and so of a non-empty native token.
pub const NATIVE_TOKEN_LEN: usize = 20;

/// The hash a server stores for a `mysql_native_password` account: SHA1(SHA1(password)).
/// `Debug` is redacted.
#[derive(Clone, PartialEq, Eq)]
pub struct NativeStage2([u8; 20]);

impl NativeStage2 {
    /// Hashes a non-empty password. (An empty password has no stage2: see
    /// [`crate::Credential::EmptyPassword`].)
    #[must_use]
    pub fn from_password(password: &[u8]) -> Self {
        let mut stage1 = stage1(password);
        let stage2 = Self(hash::<Sha1, 20>(&[&stage1]));
        stage1.zeroize();
        stage2
    }

    /// Wraps a raw stage2 digest.
    #[must_use]
    pub const fn from_bytes(bytes: [u8; 20]) -> Self {
        Self(bytes)
    }

    /// The raw digest.
    #[must_use]
    pub const fn as_bytes(&self) -> &[u8; 20] {
        &self.0
    }

    /// The text form MySQL and MariaDB store and `PASSWORD()` returns: `*` and 40
    /// upper-case hex digits.
    #[must_use]
    pub fn to_text(&self) -> String {
        format!("*{}", crate::hex::encode(&self.0).to_ascii_uppercase())
    }

    /// Parses the `*HEX` text form (hex digits in either case).
    ///
    /// # Errors
    /// [`ParseStage2Error`] if the text is not `*` followed by exactly 40 hex digits.
    pub fn parse_text(text: &str) -> Result<Self, ParseStage2Error> {
        let hex = text.strip_prefix('*').ok_or(ParseStage2Error)?;
        crate::hex::decode_array(hex)
            .map(Self)
            .ok_or(ParseStage2Error)
    }
}

impl fmt::Debug for NativeStage2 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("NativeStage2(<redacted>)")
    }
}

/// The text was not a `*HEX` stage2 hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParseStage2Error;

impl fmt::Display for ParseStage2Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("expected '*' followed by 40 hex digits")
    }
}

impl std::error::Error for ParseStage2Error {}

/// SHA1(password).
#[must_use]
pub fn stage1(password: &[u8]) -> [u8; 20] {
    hash::<Sha1, 20>(&[password])
}

/// The client's answer to `scramble` for `password` (empty for an empty password, as every
/// client sends it).
#[must_use]
pub fn token(password: &[u8], scramble: &Scramble) -> Vec<u8> {
    if password.is_empty() {
        return Vec::new();
    }
    let mut s1 = stage1(password);
    let s2 = hash::<Sha1, 20>(&[&s1]);
    let mask = hash::<Sha1, 20>(&[scramble.as_bytes(), &s2]);
    let out = xor(&s1, &mask).to_vec();
    s1.zeroize();
    out
}

/// Checks a non-empty `token` against the stored `stage2` for `scramble`, in constant time
/// with respect to the token and the hash.
#[must_use]
pub fn verify(token: &[u8], scramble: &Scramble, stored: &NativeStage2) -> bool {
    let Ok(token) = <&[u8; 20]>::try_from(token) else {
        return false;
    };
    let mask = hash::<Sha1, 20>(&[scramble.as_bytes(), &stored.0]);
    let mut candidate_stage1 = xor(token, &mask);
    let candidate_stage2 = hash::<Sha1, 20>(&[&candidate_stage1]);
    candidate_stage1.zeroize();
    candidate_stage2.ct_eq(&stored.0).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scramble() -> Scramble {
        Scramble::from_bytes(*b"abcdefghijklmnopqrst")
    }

    #[test]
    fn verifies_own_token() {
        let stored = NativeStage2::from_password(b"secret");
        assert!(verify(&token(b"secret", &scramble()), &scramble(), &stored));
    }

    #[test]
    fn rejects_wrong_password_and_wrong_scramble() {
        let stored = NativeStage2::from_password(b"secret");
        assert!(!verify(
            &token(b"Secret", &scramble()),
            &scramble(),
            &stored
        ));
        let other = Scramble::from_bytes(*b"ABCDEFGHIJKLMNOPQRST");
        assert!(!verify(&token(b"secret", &other), &scramble(), &stored));
    }

    #[test]
    fn rejects_tokens_of_wrong_length() {
        let stored = NativeStage2::from_password(b"secret");
        let t = token(b"secret", &scramble());
        assert!(!verify(&t[..19], &scramble(), &stored));
        assert!(!verify(
            &[t.as_slice(), &[0]].concat(),
            &scramble(),
            &stored
        ));
        assert!(!verify(&[], &scramble(), &stored));
    }

    #[test]
    fn empty_password_gives_empty_token() {
        assert!(token(b"", &scramble()).is_empty());
    }

    #[test]
    fn round_trips_text_form() {
        let h = NativeStage2::from_password(b"secret");
        let text = h.to_text();
        assert_eq!(text.len(), 41);
        assert_eq!(NativeStage2::parse_text(&text), Ok(h.clone()));
        assert_eq!(NativeStage2::parse_text(&text.to_lowercase()), Ok(h));
    }

    #[test]
    fn rejects_malformed_text_form() {
        for bad in [
            "",
            "*",
            "14E65567ABDB5135D0CFD9A70B3032C179A49EE7",
            "*14E6",
            "*ZZE65567ABDB5135D0CFD9A70B3032C179A49EE7",
        ] {
            assert_eq!(
                NativeStage2::parse_text(bad),
                Err(ParseStage2Error),
                "{bad}"
            );
        }
    }

    #[test]
    fn debug_is_redacted() {
        assert_eq!(
            format!("{:?}", NativeStage2::from_password(b"x")),
            "NativeStage2(<redacted>)"
        );
    }
}
