//! The 20-byte challenge ("scramble", MySQL's `auth_plugin_data`) of a MySQL login.
//!
//! DESIGN §2: the relay sends scramble **A** in its own greeting (P1); the compute sends
//! scramble **B** (P5). Both must be unpredictable per connection, so they come from a
//! CSPRNG passed in by the caller.

use core::fmt;

use rand::{CryptoRng, Rng};

/// Length of a `mysql_native_password` / `caching_sha2_password` scramble.
pub const SCRAMBLE_LEN: usize = 20;

/// A login challenge. Bytes are in `0x01..=0x7F` and never `$`, the range MySQL's own
/// `generate_user_salt` produces: no NUL (clients read the scramble as a C string) and no
/// high bit (some clients treat the greeting as text).
///
/// `Debug` is redacted: scrambles never reach a log line.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Scramble([u8; SCRAMBLE_LEN]);

impl Scramble {
    /// Draws a fresh scramble from `rng`, uniformly over the allowed byte range
    /// (rejection sampling, so no byte value is favoured).
    pub fn generate<R: Rng + CryptoRng + ?Sized>(rng: &mut R) -> Self {
        let mut bytes = [0u8; SCRAMBLE_LEN];
        for b in &mut bytes {
            *b = loop {
                let candidate = rng.r#gen::<u8>() & 0x7F;
                if is_scramble_byte(candidate) {
                    break candidate;
                }
            };
        }
        Self(bytes)
    }

    /// Wraps bytes received from a peer. Any 20 bytes are accepted: a server's scramble is
    /// what it is, and our own checks never depend on the byte range.
    #[must_use]
    pub const fn from_bytes(bytes: [u8; SCRAMBLE_LEN]) -> Self {
        Self(bytes)
    }

    /// Takes the first 20 bytes of a server's `auth_plugin_data`, which is longer on some
    /// servers (a trailing NUL) and must not be shorter.
    #[must_use]
    pub fn from_auth_plugin_data(data: &[u8]) -> Option<Self> {
        let bytes: [u8; SCRAMBLE_LEN] = data.get(..SCRAMBLE_LEN)?.try_into().ok()?;
        Some(Self(bytes))
    }

    /// The raw bytes.
    #[must_use]
    pub const fn as_bytes(&self) -> &[u8; SCRAMBLE_LEN] {
        &self.0
    }
}

impl fmt::Debug for Scramble {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Scramble(<redacted>)")
    }
}

/// Whether `b` is a byte our scrambles may contain.
#[must_use]
pub const fn is_scramble_byte(b: u8) -> bool {
    b != 0 && b != b'$' && b < 0x80
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    #[test]
    fn generates_only_allowed_bytes() {
        let mut rng = StdRng::seed_from_u64(7);
        let mut seen = [false; 256];
        for _ in 0..2_000 {
            for &b in Scramble::generate(&mut rng).as_bytes() {
                assert!(is_scramble_byte(b), "byte {b:#x}");
                seen[usize::from(b)] = true;
            }
        }
        // Every allowed value shows up: the sampling covers the whole range.
        let allowed = (0u8..=255).filter(|&b| is_scramble_byte(b)).count();
        assert_eq!(seen.iter().filter(|&&s| s).count(), allowed);
        assert_eq!(allowed, 126);
    }

    #[test]
    fn generates_distinct_scrambles() {
        let mut rng = rand::rngs::OsRng;
        assert_ne!(Scramble::generate(&mut rng), Scramble::generate(&mut rng));
    }

    #[test]
    fn debug_is_redacted() {
        let s = Scramble::from_bytes(*b"abcdefghijklmnopqrst");
        assert_eq!(format!("{s:?}"), "Scramble(<redacted>)");
    }

    #[test]
    fn rejects_short_auth_plugin_data() {
        assert!(Scramble::from_auth_plugin_data(&[1; 19]).is_none());
        assert!(Scramble::from_auth_plugin_data(&[1; 21]).is_some());
    }
}
