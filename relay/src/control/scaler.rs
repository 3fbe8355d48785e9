//! The autoscaler's decision, without I/O: CPU use samples in, a new capacity out.
//!
//! - **Up, fast:** two samples in a row (one second at the default sampling interval) using at
//!   least [`SATURATED`] of the capacity double it (up to `max`). A compute held at its quota
//!   shows exactly that, so a sustained load is met within about 1.5 s.
//! - **Down, slowly:** when the capacity that would leave [`HEADROOM`] spare has been below the
//!   current one for a whole `scale_down_after`, the capacity drops to it (never below `min`).
//!   A short lull never shrinks a busy compute, and one step down lands where the load fits.

use std::time::{Duration, Instant};

use crate::capacity::{CapacityConfig, Ccu};

/// How often the scaler samples.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(500);
/// The share of the capacity in use that counts as saturated.
pub const SATURATED: f64 = 0.85;
/// Consecutive saturated samples before scaling up.
pub const HOT_SAMPLES: u32 = 2;
/// The share of the capacity a scale-down leaves spare.
pub const HEADROOM: f64 = 0.4;

/// The scaler's state for one running compute.
#[derive(Debug, Clone)]
pub struct Scaler {
    config: CapacityConfig,
    current: Ccu,
    hot: u32,
    low_since: Option<Instant>,
}

impl Scaler {
    /// A scaler for a compute that has `current` capacity now.
    #[must_use]
    pub const fn new(config: CapacityConfig, current: Ccu) -> Self {
        Self {
            config,
            current,
            hot: 0,
            low_since: None,
        }
    }

    /// The capacity the compute has.
    #[cfg(test)]
    #[must_use]
    pub const fn current(&self) -> Ccu {
        self.current
    }

    /// One sample: the CPU the compute used since the last one, in cores (CCUs), at `now`.
    /// Returns the capacity to resize to, if it changes; the caller applies it and, should
    /// that fail, calls [`Scaler::resized_to`] with what the compute has.
    pub fn sample(&mut self, used: f64, now: Instant) -> Option<Ccu> {
        let current = self.current.as_f64();
        if used >= SATURATED * current && self.current < self.config.max {
            self.low_since = None;
            self.hot += 1;
            if self.hot < HOT_SAMPLES {
                return None;
            }
            self.hot = 0;
            let up = Ccu::at_least(current * 2.0).min(self.config.max);
            return Some(self.set(up));
        }
        self.hot = 0;
        let fits = Ccu::at_least(used / (1.0 - HEADROOM)).clamp(self.config.min, self.config.max);
        if fits >= self.current {
            self.low_since = None;
            return None;
        }
        let since = *self.low_since.get_or_insert(now);
        if now.saturating_duration_since(since) < self.config.scale_down_after {
            return None;
        }
        self.low_since = None;
        Some(self.set(fits))
    }

    /// Records the capacity the compute really has (after a failed resize).
    pub fn resized_to(&mut self, ccu: Ccu) {
        self.current = ccu;
    }

    fn set(&mut self, ccu: Ccu) -> Ccu {
        self.current = ccu;
        ccu
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> CapacityConfig {
        CapacityConfig {
            min: Ccu::parse(0.25).unwrap(),
            max: Ccu::parse(2.0).unwrap(),
            resume: Ccu::parse(2.0).unwrap(),
            scale_down_after: Duration::from_secs(10),
            frozen_milli_ccu: 0,
        }
    }

    fn ccu(c: f64) -> Ccu {
        Ccu::parse(c).unwrap()
    }

    #[test]
    fn scales_up_after_two_saturated_samples_doubling_up_to_the_ceiling() {
        let t = Instant::now();
        let mut s = Scaler::new(config(), ccu(0.25));
        assert_eq!(
            s.sample(0.25, t),
            None,
            "one saturated sample is not sustained"
        );
        assert_eq!(s.sample(0.25, t + SAMPLE_EVERY), Some(ccu(0.5)));
        assert_eq!(s.sample(0.5, t), None);
        assert_eq!(s.sample(0.49, t), Some(ccu(1.0)));
        assert_eq!(s.sample(1.0, t), None);
        assert_eq!(s.sample(1.0, t), Some(ccu(2.0)));
        // At the ceiling, saturation changes nothing.
        assert_eq!(s.sample(2.0, t), None);
        assert_eq!(s.sample(2.0, t), None);
        assert_eq!(s.current(), ccu(2.0));
    }

    #[test]
    fn a_lull_between_saturated_samples_resets_the_count() {
        let t = Instant::now();
        let mut s = Scaler::new(config(), ccu(1.0));
        assert_eq!(s.sample(0.9, t), None);
        assert_eq!(s.sample(0.5, t), None);
        assert_eq!(s.sample(0.9, t), None);
        assert_eq!(s.sample(0.9, t), Some(ccu(2.0)));
    }

    #[test]
    fn scales_down_only_after_the_quiet_window_to_what_fits_never_below_the_floor() {
        let t = Instant::now();
        let mut s = Scaler::new(config(), ccu(2.0));
        assert_eq!(s.sample(0.3, t), None);
        assert_eq!(s.sample(0.3, t + Duration::from_secs(9)), None);
        // 0.3 cores with 40 % spare needs 0.5 CCU.
        assert_eq!(s.sample(0.3, t + Duration::from_secs(10)), Some(ccu(0.5)));
        // Idle: down to the floor, again only after a whole window.
        assert_eq!(s.sample(0.0, t + Duration::from_secs(11)), None);
        assert_eq!(s.sample(0.0, t + Duration::from_secs(21)), Some(ccu(0.25)));
        assert_eq!(s.sample(0.0, t + Duration::from_secs(40)), None);
    }

    #[test]
    fn load_returning_during_the_window_cancels_the_scale_down() {
        let t = Instant::now();
        let mut s = Scaler::new(config(), ccu(2.0));
        assert_eq!(s.sample(0.1, t), None);
        assert_eq!(s.sample(1.5, t + Duration::from_secs(5)), None);
        assert_eq!(s.sample(0.1, t + Duration::from_secs(11)), None);
        assert_eq!(s.sample(0.1, t + Duration::from_secs(21)), Some(ccu(0.25)));
    }
}
