//! What each phase is billed and its record in the usage ledger.

use super::{Inner, Instance, Phase};
use crate::capacity::{Ccu, NOMINAL};

impl Instance {
    /// What a phase is billed, in thousandths of a CCU per second: the capacity while the
    /// compute starts or runs (one CCU without `[instance.capacity]`), the frozen rate while
    /// it is frozen, nothing otherwise.
    pub(super) fn rate_milli(&self, phase: Phase, ccu: Option<Ccu>) -> u64 {
        match (phase, self.config.capacity) {
            (Phase::Resuming | Phase::Running, Some(c)) => ccu.unwrap_or(c.resume).milli(),
            (Phase::Resuming | Phase::Running, None) => NOMINAL.milli(),
            (Phase::Frozen, Some(c)) => c.frozen_milli_ccu,
            _ => 0,
        }
    }

    /// Appends the phase and its billing rate to the ledger.
    pub(super) fn record(&self, inner: &Inner, phase: Phase) {
        if let Some(ledger) = &self.ledger {
            let rate = self.rate_milli(phase, inner.ccu);
            if let Err(e) = ledger.record(&self.config.name, phase, rate) {
                tracing::error!(instance = %self.config.name, error = %e, ledger = %ledger.path().display(), "cannot append to the usage ledger");
            }
        }
    }
}
