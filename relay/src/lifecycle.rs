//! The lifecycle phases of an instance (architecture.md §4), defined once: the control plane moves
//! between them, the ledger records them and bills some of them, metrics and the admin API
//! show them by name.

/// The lifecycle phase of an instance: `Paused → Resuming → Running → Pausing → Paused`,
/// plus `Failed`, and with `stop_after` the frozen tier: `Running → Pausing → Frozen`, then
/// `Frozen → Resuming → Running` on a login or `Frozen → Pausing → Paused` after `stop_after`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Phase {
    /// No compute runs; the next login wakes it. Not billed.
    Paused,
    /// A wake is in flight. Billed.
    Resuming,
    /// The compute runs; new connections take the direct route. Billed.
    Running,
    /// The compute is being stopped; logins wait, then wake it again. Not billed.
    Pausing,
    /// The last wake failed or the compute died; the next login tries again. Not billed.
    Failed,
    /// The compute's processes are frozen with their memory and sockets; a login thaws them in
    /// milliseconds. Billed at the instance's frozen rate (nothing by default).
    Frozen,
}

impl Phase {
    /// Every phase, in lifecycle order (the state gauge exports one series per phase).
    pub const ALL: [Self; 6] = [
        Self::Paused,
        Self::Resuming,
        Self::Running,
        Self::Pausing,
        Self::Failed,
        Self::Frozen,
    ];

    /// The phase's name in the ledger, status output and metrics.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Paused => "paused",
            Self::Resuming => "resuming",
            Self::Running => "running",
            Self::Pausing => "pausing",
            Self::Failed => "failed",
            Self::Frozen => "frozen",
        }
    }

    /// The phase named `name`, if any.
    #[must_use]
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.as_str() == name)
    }

    /// Whether time in this phase is billed at the compute's capacity (the frozen rate is
    /// separate: see the ledger).
    #[must_use]
    pub const fn billable(self) -> bool {
        matches!(self, Self::Resuming | Self::Running)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_name() {
        for p in Phase::ALL {
            assert_eq!(Phase::from_name(p.as_str()), Some(p));
        }
        assert_eq!(Phase::from_name("thawing"), None);
    }

    #[test]
    fn bills_only_resuming_and_running() {
        let billed: Vec<_> = Phase::ALL.into_iter().filter(|p| p.billable()).collect();
        assert_eq!(billed, [Phase::Resuming, Phase::Running]);
    }
}
