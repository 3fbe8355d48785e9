//! What a fleet keeps in its store, as bytes: the key layout and the values, parsed and
//! formatted without I/O (so they are unit-tested here and fuzzed), and the fleet-wide idle
//! rule computed from the relays' connection records.
//!
//! Under the configured prefix `P`:
//!
//! | key | value | lifetime |
//! |---|---|---|
//! | `P/instances/<name>/state` | `<phase> <relay> <since_ms> <milli-CCU>` | kept |
//! | `P/instances/<name>/lock` | `<relay> <resuming\|pausing>` | the holder's lease |
//! | `P/connections/<name>/<relay>` | `<open> <idle_since_ms>` | that relay's lease |
//! | `P/relays/<relay>` | `<pid> <started_ms>` | that relay's lease |
//! | `P/ledger/<name>/<ms, 20 digits>-<relay>` | one usage-ledger line | kept |
//!
//! Every transition of `state` is a compare-and-swap on its revision, made in the same
//! transaction as the ledger line that bills it, so the fleet's ledger has each transition
//! exactly once.

use crate::ledger::Event;
use crate::lifecycle::Phase;

/// The keys of one fleet, under its prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keys {
    prefix: String,
}

impl Keys {
    /// Keys under `prefix` (a trailing `/` is ignored).
    #[must_use]
    pub fn new(prefix: &str) -> Self {
        Self {
            prefix: prefix.trim_end_matches('/').to_owned(),
        }
    }

    /// Everything the fleet keeps (the relays' one watch covers it).
    #[must_use]
    pub fn root(&self) -> String {
        format!("{}/", self.prefix)
    }

    /// Everything the fleet keeps about one instance's lifecycle (state and lock): watched
    /// as one range.
    #[must_use]
    pub fn instance(&self, instance: &str) -> String {
        format!("{}/instances/{instance}/", self.prefix)
    }

    /// The instance's lifecycle state.
    #[must_use]
    pub fn state(&self, instance: &str) -> String {
        format!("{}state", self.instance(instance))
    }

    /// The lock a relay holds while it wakes or pauses the instance.
    #[must_use]
    pub fn lock(&self, instance: &str) -> String {
        format!("{}lock", self.instance(instance))
    }

    /// Every instance's lifecycle records.
    #[must_use]
    pub fn all_instances(&self) -> String {
        format!("{}/instances/", self.prefix)
    }

    /// Every relay's connection records, for every instance.
    #[must_use]
    pub fn all_connections(&self) -> String {
        format!("{}/connections/", self.prefix)
    }

    /// Every relay's connection record for the instance.
    #[must_use]
    pub fn connections(&self, instance: &str) -> String {
        format!("{}/connections/{instance}/", self.prefix)
    }

    /// One relay's connection record for the instance.
    #[must_use]
    pub fn connections_of(&self, instance: &str, relay: &str) -> String {
        format!("{}{relay}", self.connections(instance))
    }

    /// Every live relay.
    #[must_use]
    pub fn relays(&self) -> String {
        format!("{}/relays/", self.prefix)
    }

    /// One relay's liveness record.
    #[must_use]
    pub fn relay(&self, relay: &str) -> String {
        format!("{}{relay}", self.relays())
    }

    /// Every instance defined in the store (`relay instances put`), each as
    /// `<prefix>/definitions/<name>.toml` holding its instance file.
    #[must_use]
    pub fn definitions(&self) -> String {
        format!("{}/definitions/", self.prefix)
    }

    /// Instance `name`'s definition.
    #[must_use]
    pub fn definition(&self, name: &str) -> String {
        format!("{}{name}.toml", self.definitions())
    }

    /// The whole fleet's usage ledger.
    #[must_use]
    pub fn ledger(&self) -> String {
        format!("{}/ledger/", self.prefix)
    }

    /// The ledger entry for a transition at `at_ms` made by `relay`; keys sort by instance,
    /// then time.
    #[must_use]
    pub fn ledger_entry(&self, instance: &str, at_ms: u64, relay: &str) -> String {
        format!("{}{instance}/{at_ms:020}-{relay}", self.ledger())
    }
}

/// An instance's lifecycle state as the fleet records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateRecord {
    /// The phase.
    pub phase: Phase,
    /// The relay that made the transition.
    pub relay: String,
    /// When (Unix ms).
    pub since_ms: u64,
    /// The billing rate from then on, in thousandths of a CCU.
    pub rate_milli: u64,
}

impl StateRecord {
    /// The stored value.
    #[must_use]
    pub fn format(&self) -> String {
        format!(
            "{} {} {} {}",
            self.phase.as_str(),
            self.relay,
            self.since_ms,
            self.rate_milli
        )
    }

    /// Parses a stored value; `None` for anything else.
    #[must_use]
    pub fn parse(value: &[u8]) -> Option<Self> {
        let text = std::str::from_utf8(value).ok()?;
        let mut parts = text.split(' ');
        let record = Self {
            phase: Phase::from_name(parts.next()?)?,
            relay: relay_id(parts.next()?)?.to_owned(),
            since_ms: parts.next()?.parse().ok()?,
            rate_milli: parts.next()?.parse().ok()?,
        };
        parts.next().is_none().then_some(record)
    }

    /// The usage-ledger line of this transition for `instance`, as a relay's own ledger
    /// writes it.
    #[must_use]
    pub fn ledger_line(&self, instance: &str) -> String {
        Event {
            at_ms: self.since_ms,
            instance: instance.to_owned(),
            state: self.phase,
            rate_milli: self.rate_milli,
        }
        .to_line()
    }
}

/// Why a relay holds an instance's lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockPurpose {
    /// It runs the driver's start.
    Resuming,
    /// It runs the driver's stop.
    Pausing,
}

impl LockPurpose {
    const fn as_str(self) -> &'static str {
        match self {
            Self::Resuming => "resuming",
            Self::Pausing => "pausing",
        }
    }
}

/// Who holds an instance's lock, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockRecord {
    /// The holder.
    pub relay: String,
    /// What it is doing.
    pub purpose: LockPurpose,
}

impl LockRecord {
    /// The stored value.
    #[must_use]
    pub fn format(&self) -> String {
        format!("{} {}", self.relay, self.purpose.as_str())
    }

    /// Parses a stored value.
    #[must_use]
    pub fn parse(value: &[u8]) -> Option<Self> {
        let (relay, purpose) = std::str::from_utf8(value).ok()?.split_once(' ')?;
        let purpose = match purpose {
            "resuming" => LockPurpose::Resuming,
            "pausing" => LockPurpose::Pausing,
            _ => return None,
        };
        Some(Self {
            relay: relay_id(relay)?.to_owned(),
            purpose,
        })
    }
}

/// One relay's open connections to an instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenRecord {
    /// Connections open now (both routes).
    pub open: u64,
    /// When its last connection closed (Unix ms); meaningful while `open` is 0.
    pub idle_since_ms: u64,
}

impl OpenRecord {
    /// The stored value.
    #[must_use]
    pub fn format(&self) -> String {
        format!("{} {}", self.open, self.idle_since_ms)
    }

    /// Parses a stored value.
    #[must_use]
    pub fn parse(value: &[u8]) -> Option<Self> {
        let (open, idle) = std::str::from_utf8(value).ok()?.split_once(' ')?;
        Some(Self {
            open: open.parse().ok()?,
            idle_since_ms: idle.parse().ok()?,
        })
    }
}

/// The fleet's view of an instance's connections: the sum over every live relay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FleetOpen {
    /// Open connections over all relays.
    pub open: u64,
    /// The latest moment any relay's last connection closed (Unix ms).
    pub idle_since_ms: u64,
    /// Records that did not parse (counted as one open connection each: a record the relay
    /// cannot read must not let the instance pause).
    pub unreadable: u64,
}

impl FleetOpen {
    /// Sums the relays' stored records.
    pub fn sum<'a>(values: impl IntoIterator<Item = &'a [u8]>) -> Self {
        Self::sum_records(values.into_iter().map(OpenRecord::parse))
    }

    /// Sums the relays' records, `None` for one that did not parse.
    pub fn sum_records(records: impl IntoIterator<Item = Option<OpenRecord>>) -> Self {
        records
            .into_iter()
            .fold(Self::default(), |acc, record| match record {
                Some(r) => Self {
                    open: acc.open.saturating_add(r.open),
                    idle_since_ms: acc.idle_since_ms.max(r.idle_since_ms),
                    unreadable: acc.unreadable,
                },
                None => Self {
                    open: acc.open.saturating_add(1),
                    unreadable: acc.unreadable + 1,
                    ..acc
                },
            })
    }

    /// Whether the whole fleet has had no connection for `idle_after_ms` at `now_ms`.
    #[must_use]
    pub const fn idle_for(&self, idle_after_ms: u64, now_ms: u64) -> bool {
        self.open == 0 && now_ms.saturating_sub(self.idle_since_ms) >= idle_after_ms
    }
}

/// `id` if it can name a relay: 1–64 characters of `A–Z a–z 0–9 . _ -` (it becomes a key
/// segment and a word in values).
#[must_use]
pub fn relay_id(id: &str) -> Option<&str> {
    let ok = (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    ok.then_some(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_nest_under_the_prefix_and_ledger_entries_sort_by_time() {
        let k = Keys::new("/perceptron/");
        assert_eq!(k.state("shop"), "/perceptron/instances/shop/state");
        assert_eq!(k.lock("shop"), "/perceptron/instances/shop/lock");
        assert!(k.state("shop").starts_with(&k.instance("shop")));
        assert_eq!(
            k.connections_of("shop", "relay-a"),
            "/perceptron/connections/shop/relay-a"
        );
        assert_eq!(k.relay("relay-a"), "/perceptron/relays/relay-a");
        let early = k.ledger_entry("shop", 9_999, "b");
        let late = k.ledger_entry("shop", 10_000, "a");
        assert!(early < late, "{early} {late}");
        assert!(early.starts_with(&k.ledger()));
    }

    #[test]
    fn state_records_round_trip_and_refuse_garbage() {
        let r = StateRecord {
            phase: Phase::Running,
            relay: "relay-a".into(),
            since_ms: 1_796_135_837_405,
            rate_milli: 1_000,
        };
        assert_eq!(r.format(), "running relay-a 1796135837405 1000");
        assert_eq!(StateRecord::parse(r.format().as_bytes()), Some(r.clone()));
        assert_eq!(r.ledger_line("shop"), "1796135837405 shop running 1000\n");
        for bad in [
            &b""[..],
            b"running",
            b"running relay-a 1 1 extra",
            b"sleeping relay-a 1 1",
            b"running relay/a 1 1",
            b"running relay-a -1 1",
            b"running relay-a 1 \xff",
        ] {
            assert_eq!(StateRecord::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn lock_records_round_trip() {
        let l = LockRecord {
            relay: "r1".into(),
            purpose: LockPurpose::Pausing,
        };
        assert_eq!(LockRecord::parse(l.format().as_bytes()), Some(l));
        assert_eq!(LockRecord::parse(b"r1 sleeping"), None);
        assert_eq!(LockRecord::parse(b"r1"), None);
    }

    #[test]
    fn the_fleet_is_idle_only_when_every_relay_is_and_for_long_enough() {
        let sum = FleetOpen::sum([&b"0 1000"[..], b"0 4000", b"0 2500"]);
        assert_eq!(
            sum,
            FleetOpen {
                open: 0,
                idle_since_ms: 4_000,
                unreadable: 0
            }
        );
        assert!(!sum.idle_for(1_000, 4_999), "idle since the latest close");
        assert!(sum.idle_for(1_000, 5_000));
        let busy = FleetOpen::sum([&b"0 1000"[..], b"2 0"]);
        assert_eq!(busy.open, 2);
        assert!(!busy.idle_for(0, u64::MAX));
        let unreadable = FleetOpen::sum([&b"0 1000"[..], b"zero"]);
        assert_eq!((unreadable.open, unreadable.unreadable), (1, 1));
        assert!(
            !unreadable.idle_for(0, u64::MAX),
            "an unreadable record holds"
        );
        assert!(FleetOpen::sum(std::iter::empty()).idle_for(0, 0));
    }

    #[test]
    fn relay_ids_are_key_segments() {
        assert_eq!(relay_id("relay-a.eu_1"), Some("relay-a.eu_1"));
        for bad in ["", "a/b", "a b", "é", &"x".repeat(65)] {
            assert_eq!(relay_id(bad), None, "{bad}");
        }
    }
}
