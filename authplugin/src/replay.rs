//! The replay window: each scramble A is accepted once while it is fresh, whatever key signed it.
//!
//! architecture.md §3: a payload is already bound to one compute connection by the MAC over scramble
//! B, so a captured payload is useless on another connection. The replay guard adds a second
//! line: the same relay login (same scramble A) is never accepted twice within the window,
//! whatever the transport did. The guard remembers scramble A alone, not (key id, scramble A):
//! A and the client's answer are what a sniffer of a plaintext client leg holds, and a thief of
//! the whole key ring could sign them once under each key id (two during every rotation); keyed
//! by A, a stolen ring plus a sniffed login is worth one login in total. Time is a parameter:
//! no clock is read here.

use std::collections::{BTreeSet, HashSet};

use crate::scramble::Scramble;

/// Default freshness window: a payload issued more than this far from the compute's clock,
/// in either direction, is refused. Relay and compute may run on different hosts, so it
/// tolerates clock skew; the relay signs immediately before sending, so it can be small.
pub const DEFAULT_WINDOW_MS: u64 = 60_000;
/// Default bound on remembered scrambles. At about 100 bytes each this is ~10 MB at most, and it
/// takes ~1,600 logins a second, sustained for a whole window, to fill it.
pub const DEFAULT_CAPACITY: usize = 100_000;

/// Why the replay guard refused a scramble.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplayError {
    /// `issued_at` is further than the window from `now`. The signed distance `now − issued`
    /// in milliseconds: positive for a stale payload, negative for one from the future.
    OutsideWindow {
        /// `now − issued_at`, in milliseconds.
        age_ms: i128,
    },
    /// The scramble was accepted before, within the window.
    Replayed,
    /// The guard is full of scrambles that are all still fresh; refusing is the only safe
    /// answer.
    Full,
}

/// A bounded, time-windowed set of scrambles (scramble A of relayed logins, scramble B of
/// proven greetings).
#[derive(Debug)]
pub struct ReplayGuard {
    window_ms: u64,
    capacity: usize,
    seen: HashSet<Scramble>,
    /// The same scrambles, ordered by the time after which they can be forgotten.
    by_expiry: BTreeSet<(u64, Scramble)>,
}

impl ReplayGuard {
    /// A guard with the given window and capacity.
    #[must_use]
    pub fn new(window_ms: u64, capacity: usize) -> Self {
        Self {
            window_ms,
            capacity,
            seen: HashSet::new(),
            by_expiry: BTreeSet::new(),
        }
    }

    /// The freshness window in milliseconds.
    #[must_use]
    pub const fn window_ms(&self) -> u64 {
        self.window_ms
    }

    /// How many scrambles are remembered now.
    #[must_use]
    pub fn len(&self) -> usize {
        self.seen.len()
    }

    /// Whether no scramble is remembered.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }

    /// Checks that `issued_at_ms` is within the window of `now_ms`.
    ///
    /// # Errors
    /// [`ReplayError::OutsideWindow`] otherwise.
    pub fn check_fresh(&self, issued_at_ms: u64, now_ms: u64) -> Result<(), ReplayError> {
        let age_ms = i128::from(now_ms) - i128::from(issued_at_ms);
        if age_ms.unsigned_abs() > u128::from(self.window_ms) {
            return Err(ReplayError::OutsideWindow { age_ms });
        }
        Ok(())
    }

    /// Checks freshness, then records the scramble, refusing one already recorded.
    ///
    /// A scramble can be forgotten once `issued_at + window` has passed, because from then on the
    /// freshness check refuses it anyway; that is what keeps the set bounded by time.
    ///
    /// # Errors
    /// [`ReplayError`] saying why the pair is refused.
    pub fn check_and_record(
        &mut self,
        scramble: &Scramble,
        issued_at_ms: u64,
        now_ms: u64,
    ) -> Result<(), ReplayError> {
        let expires_at = issued_at_ms.saturating_add(self.window_ms);
        self.check_and_record_until(scramble, issued_at_ms, now_ms, expires_at)
    }

    /// As [`ReplayGuard::check_and_record`], remembering the scramble until `expires_at_ms` (at
    /// least `issued_at + window`): payload v2 keeps a scramble A for as long as its clock lets
    /// any payload carrying it pass, whatever `issued_at` a re-signed copy claims.
    ///
    /// # Errors
    /// [`ReplayError`] saying why the pair is refused.
    pub fn check_and_record_until(
        &mut self,
        scramble: &Scramble,
        issued_at_ms: u64,
        now_ms: u64,
        expires_at_ms: u64,
    ) -> Result<(), ReplayError> {
        self.check_fresh(issued_at_ms, now_ms)?;
        self.forget_expired(now_ms);
        if self.seen.contains(scramble) {
            return Err(ReplayError::Replayed);
        }
        if self.seen.len() >= self.capacity {
            return Err(ReplayError::Full);
        }
        let expires_at = expires_at_ms.max(issued_at_ms.saturating_add(self.window_ms));
        self.by_expiry.insert((expires_at, scramble.clone()));
        self.seen.insert(scramble.clone());
        Ok(())
    }

    fn forget_expired(&mut self, now_ms: u64) {
        while let Some(first) = self.by_expiry.first() {
            if first.0 >= now_ms {
                break;
            }
            if let Some((_, scramble)) = self.by_expiry.pop_first() {
                self.seen.remove(&scramble);
            }
        }
    }
}

impl Default for ReplayGuard {
    fn default() -> Self {
        Self::new(DEFAULT_WINDOW_MS, DEFAULT_CAPACITY)
    }
}

// `Scramble` orders by bytes so it can sit in the expiry index.
impl PartialOrd for Scramble {
    fn partial_cmp(&self, other: &Self) -> Option<core::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Scramble {
    fn cmp(&self, other: &Self) -> core::cmp::Ordering {
        self.as_bytes().cmp(other.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(b: u8) -> Scramble {
        Scramble::from_bytes([b; 20])
    }

    #[test]
    fn accepts_once_then_rejects_replay() {
        let mut g = ReplayGuard::new(1_000, 10);
        assert_eq!(g.check_and_record(&s(1), 5_000, 5_000), Ok(()));
        assert_eq!(
            g.check_and_record(&s(1), 5_000, 5_500),
            Err(ReplayError::Replayed)
        );
        assert_eq!(g.check_and_record(&s(2), 5_000, 5_500), Ok(()));
    }

    #[test]
    fn rejects_outside_window_in_both_directions() {
        let mut g = ReplayGuard::new(1_000, 10);
        assert_eq!(
            g.check_and_record(&s(1), 3_999, 5_000),
            Err(ReplayError::OutsideWindow { age_ms: 1_001 })
        );
        assert_eq!(
            g.check_and_record(&s(1), 6_001, 5_000),
            Err(ReplayError::OutsideWindow { age_ms: -1_001 })
        );
        assert_eq!(g.check_and_record(&s(1), 4_000, 5_000), Ok(()));
        assert_eq!(g.check_and_record(&s(2), 6_000, 5_000), Ok(()));
    }

    #[test]
    fn forgets_pairs_only_after_they_expire() {
        let mut g = ReplayGuard::new(1_000, 2);
        g.check_and_record(&s(1), 0, 0).unwrap();
        g.check_and_record(&s(2), 500, 500).unwrap();
        // Full, and nothing has expired yet.
        assert_eq!(g.check_and_record(&s(3), 900, 900), Err(ReplayError::Full));
        // At 1_001 the first pair (issued 0) is past its window and is forgotten.
        assert_eq!(g.check_and_record(&s(3), 1_001, 1_001), Ok(()));
        assert_eq!(g.len(), 2);
        // A forgotten pair cannot come back: its issued_at is now outside the window.
        assert!(matches!(
            g.check_and_record(&s(1), 0, 1_001),
            Err(ReplayError::OutsideWindow { .. })
        ));
    }

    #[test]
    fn stays_bounded_under_sustained_load() {
        let mut g = ReplayGuard::new(100, 1_000);
        for i in 0u64..10_000 {
            let mut b = [1u8; 20];
            b[..8].copy_from_slice(&i.to_le_bytes());
            g.check_and_record(&Scramble::from_bytes(b), i, i).unwrap();
            assert!(g.len() <= 102);
        }
    }
}
