//! Compute capacity in CCUs (1 CCU ≈ 1 core and 2 GiB of memory; the floor is 0.25 CCU) and
//! an instance's `[instance.capacity]` settings: the range it scales in, the capacity it resumes
//! with, how long load must stay low before it scales down, and what a frozen compute is billed.

use std::fmt;
use std::time::Duration;

/// CPU time per CCU in each scheduler period: one whole core.
pub const CPU_PERIOD_US: u64 = 100_000;
/// Memory per CCU.
pub const MEMORY_PER_CCU: u64 = 2 << 30;
/// The capacity billed for an instance without `[instance.capacity]`: one CCU.
pub const NOMINAL: Ccu = Ccu(4);
/// The most an instance may scale to.
pub const MAX: Ccu = Ccu(256);

/// Why a number is not a capacity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CcuError {
    /// Not a positive multiple of 0.25.
    NotAQuarterStep(f64),
    /// More than [`MAX`].
    AboveMax(f64),
}

impl fmt::Display for CcuError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotAQuarterStep(ccu) => write!(f, "{ccu} is not a positive multiple of 0.25 CCU"),
            Self::AboveMax(ccu) => {
                write!(f, "{ccu} is more than the {MAX} CCU an instance may have")
            }
        }
    }
}

impl std::error::Error for CcuError {}

/// A capacity: a whole number of quarter CCUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ccu(u32);

impl Ccu {
    /// A capacity written as a number of CCUs: a positive multiple of 0.25, at most [`MAX`].
    ///
    /// # Errors
    /// [`CcuError`] saying what is wrong with it.
    pub fn parse(ccu: f64) -> Result<Self, CcuError> {
        let quarters = ccu * 4.0;
        if !quarters.is_finite() || quarters < 1.0 || quarters.fract() != 0.0 {
            return Err(CcuError::NotAQuarterStep(ccu));
        }
        if quarters > f64::from(MAX.0) {
            return Err(CcuError::AboveMax(ccu));
        }
        // Checked above: a whole number between 1 and 256.
        Ok(Self(quarters as u32))
    }

    /// The capacity in CCUs.
    #[must_use]
    pub fn as_f64(self) -> f64 {
        f64::from(self.0) / 4.0
    }

    /// In thousandths of a CCU (the ledger's unit).
    #[must_use]
    pub const fn milli(self) -> u64 {
        self.0 as u64 * 250
    }

    /// CPU time per [`CPU_PERIOD_US`], in microseconds.
    #[must_use]
    pub const fn cpu_quota_us(self) -> u64 {
        self.0 as u64 * CPU_PERIOD_US / 4
    }

    /// Memory limit in bytes.
    #[must_use]
    pub const fn memory_bytes(self) -> u64 {
        self.0 as u64 * MEMORY_PER_CCU / 4
    }

    /// The smallest capacity that is at least `ccu` CCUs (at least a quarter, at most
    /// [`MAX`]).
    #[must_use]
    pub fn at_least(ccu: f64) -> Self {
        let quarters = (ccu * 4.0).ceil().clamp(1.0, f64::from(MAX.0));
        // Clamped to 1..=256 above.
        Self(quarters as u32)
    }
}

impl fmt::Display for Ccu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.as_f64())
    }
}

/// `[instance.capacity]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CapacityConfig {
    /// The floor: never scaled below.
    pub min: Ccu,
    /// The ceiling.
    pub max: Ccu,
    /// What a wake starts with (default: `max`, so the start-up is as fast as it can be).
    pub resume: Ccu,
    /// How long load must stay low before a scale-down.
    pub scale_down_after: Duration,
    /// Thousandths of a CCU billed per second while the compute is frozen (its memory is
    /// kept); 0 bills nothing.
    pub frozen_milli_ccu: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_quarter_steps_and_refuses_the_rest() {
        assert_eq!(Ccu::parse(0.25), Ok(Ccu(1)));
        assert_eq!(Ccu::parse(1.5), Ok(Ccu(6)));
        assert_eq!(Ccu::parse(64.0), Ok(Ccu(256)));
        for bad in [0.0, 0.1, 0.3, -1.0, 64.25, f64::NAN, f64::INFINITY] {
            assert!(Ccu::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn maps_to_kernel_units() {
        let c = Ccu::parse(1.5).unwrap();
        assert_eq!(c.cpu_quota_us(), 150_000);
        assert_eq!(c.memory_bytes(), 3 << 30);
        assert_eq!(c.milli(), 1_500);
        assert_eq!(c.to_string(), "1.5");
        assert_eq!(Ccu(1).cpu_quota_us(), 25_000);
        assert_eq!(Ccu::at_least(0.0), Ccu(1));
        assert_eq!(Ccu::at_least(1.01), Ccu(5));
        assert_eq!(Ccu::at_least(1_000.0), MAX);
    }
}
