//! The 20-byte challenge ("scramble", MySQL's `auth_plugin_data`) of a MySQL login.
//!
//! architecture.md §2: the relay sends scramble **A** in its own greeting (P1); the compute sends
//! scramble **B** (P5). Both must be unpredictable per connection, so they come from a
//! CSPRNG passed in by the caller.

use core::fmt;

use rand::{CryptoRng, Rng};

/// Length of a `mysql_native_password` / `caching_sha2_password` scramble.
pub const SCRAMBLE_LEN: usize = 20;
/// Bytes of a timed scramble that carry its clock (6 × 6 bits: seconds until the year 4147).
pub const CLOCK_LEN: usize = 6;
/// The digits of a timed scramble's clock, 6 bits each; all of them are scramble bytes.
const CLOCK_DIGITS: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

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

    /// Draws a *timed* scramble (the relay's scramble A, payload v2): the first [`CLOCK_LEN`]
    /// bytes carry `now_ms` in whole seconds, the other 14 are random as in
    /// [`Scramble::generate`]. A client's answer is bound to every byte, so whoever holds an old
    /// (scramble, answer) pair cannot move its clock: a compute refuses the pair once it is older
    /// than a login can be held (architecture.md §6, hardening), even if it is re-signed with a stolen key.
    pub fn generate_timed<R: Rng + CryptoRng + ?Sized>(rng: &mut R, now_ms: u64) -> Self {
        let mut tail = [0u8; SCRAMBLE_LEN - CLOCK_LEN];
        for b in &mut tail {
            *b = loop {
                let candidate = rng.r#gen::<u8>() & 0x7F;
                if is_scramble_byte(candidate) {
                    break candidate;
                }
            };
        }
        Self::with_clock(now_ms, tail)
    }

    /// A timed scramble from its clock and its 14 other bytes (which should be scramble bytes).
    #[must_use]
    pub fn with_clock(now_ms: u64, tail: [u8; SCRAMBLE_LEN - CLOCK_LEN]) -> Self {
        let mut bytes = [0u8; SCRAMBLE_LEN];
        let seconds = now_ms / 1000;
        for (i, b) in bytes.iter_mut().take(CLOCK_LEN).enumerate() {
            let shift = 6 * (CLOCK_LEN - 1 - i);
            // Six bits index 64 digits; `& 63` keeps the index in range.
            let digit = (seconds >> shift) & 63;
            *b = CLOCK_DIGITS
                .get(usize::try_from(digit).unwrap_or(0))
                .copied()
                .unwrap_or(b'A');
        }
        for (b, t) in bytes.iter_mut().skip(CLOCK_LEN).zip(tail) {
            *b = t;
        }
        Self(bytes)
    }

    /// When a timed scramble was drawn, in milliseconds since the Unix epoch (whole seconds);
    /// `None` when its first bytes are not clock digits (an untimed scramble).
    #[must_use]
    pub fn clock_ms(&self) -> Option<u64> {
        let mut seconds = 0u64;
        for &b in self.0.iter().take(CLOCK_LEN) {
            let digit = CLOCK_DIGITS.iter().position(|&d| d == b)?;
            seconds = (seconds << 6) | u64::try_from(digit).ok()?;
        }
        Some(seconds * 1000)
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
    fn a_timed_scramble_carries_its_second() {
        let mut rng = StdRng::seed_from_u64(9);
        for now_ms in [0, 999, 1_796_097_600_123, (1u64 << 36) * 1000 - 1] {
            let s = Scramble::generate_timed(&mut rng, now_ms);
            assert_eq!(s.clock_ms(), Some(now_ms / 1000 * 1000));
            assert!(s.as_bytes().iter().all(|&b| is_scramble_byte(b)));
        }
        assert_eq!(
            Scramble::with_clock(1_796_097_600_000, *b"AAAAAAAAAAAAAA").as_bytes(),
            b"BrDkZAAAAAAAAAAAAAAA"
        );
        // An untimed scramble usually has bytes outside the clock digits.
        assert_eq!(Scramble::from_bytes([b'$'; 20]).clock_ms(), None);
    }

    #[test]
    fn rejects_short_auth_plugin_data() {
        assert!(Scramble::from_auth_plugin_data(&[1; 19]).is_none());
        assert!(Scramble::from_auth_plugin_data(&[1; 21]).is_some());
    }
}
