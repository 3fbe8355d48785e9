//! The wall clock every record is stamped with: ledger events, fleet records, the state an
//! instance entered and when. One function, so that they all agree on the time base.

use std::time::{SystemTime, UNIX_EPOCH};

/// Unix time in milliseconds (0 before 1970, `u64::MAX` after the year 584,000,000).
#[must_use]
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
