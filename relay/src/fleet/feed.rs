//! What a relay knows of its fleet from one watch on the whole store: every instance's
//! lifecycle records (state and lock, so following the fleet and waiting for another relay's
//! wake need neither a watch nor a read per instance) and every relay's connection records (so
//! the idle tick reads memory, not the store). Fed by the store's watch task after one read of
//! both; pure bookkeeping here.
//!
//! Only hints come from here: a wake or a pause still reads the store and swaps on what it
//! read, so a stale view costs a retry, never a wrong transition.

use std::collections::HashMap;
use std::sync::Mutex;

use tokio::sync::watch;

use super::record::{FleetOpen, Keys, LockPurpose, LockRecord, OpenRecord, StateRecord};
use super::{Observed, StoreError};

/// One change the watch delivered (or one record of the first read), classified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// An instance's state was written at `revision` (`None`: unreadable, taken as paused).
    State {
        /// The instance.
        instance: String,
        /// The record.
        record: Option<StateRecord>,
        /// The write's revision.
        revision: i64,
    },
    /// An instance's lock was taken (`Some`) or released (`None`) at `revision`.
    Lock {
        /// The instance.
        instance: String,
        /// The holder (an unreadable lock still locks).
        lock: Option<LockRecord>,
        /// The change's revision.
        revision: i64,
    },
    /// A relay's connection record for an instance was written (`None`: unreadable).
    Open {
        /// The instance.
        instance: String,
        /// The relay.
        relay: String,
        /// The record.
        record: Option<OpenRecord>,
    },
    /// A relay's connection record vanished (its lease ended).
    Gone {
        /// The instance.
        instance: String,
        /// The relay.
        relay: String,
    },
}

impl Change {
    /// Classifies a watched key; `None` for keys the feed does not track (ledger, relays).
    #[must_use]
    pub fn of(keys: &Keys, key: &[u8], value: &[u8], deleted: bool, revision: i64) -> Option<Self> {
        let key = std::str::from_utf8(key).ok()?;
        let rest = key.strip_prefix(keys.root().as_str())?;
        if let Some(rest) = rest.strip_prefix("instances/") {
            let (instance, field) = rest.split_once('/')?;
            let instance = instance.to_owned();
            return match field {
                "state" => Some(Self::State {
                    instance,
                    record: (!deleted).then(|| StateRecord::parse(value)).flatten(),
                    revision,
                }),
                "lock" => Some(Self::Lock {
                    instance,
                    lock: (!deleted).then(|| {
                        LockRecord::parse(value).unwrap_or(LockRecord {
                            relay: "?".into(),
                            purpose: LockPurpose::Resuming,
                        })
                    }),
                    revision,
                }),
                _ => None,
            };
        }
        let rest = rest.strip_prefix("connections/")?;
        let (instance, relay) = rest.split_once('/')?;
        let (instance, relay) = (instance.to_owned(), relay.to_owned());
        Some(if deleted {
            Self::Gone { instance, relay }
        } else {
            Self::Open {
                instance,
                relay,
                record: OpenRecord::parse(value),
            }
        })
    }
}

/// One instance's lifecycle records as the feed last saw them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Lifecycle {
    state: Option<StateRecord>,
    state_revision: i64,
    lock: Option<LockRecord>,
    /// The revision of its last change seen (or of the read the feed started from).
    revision: i64,
}

/// Whether the feed is following the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    /// Not following (never started, or the watch broke): no hints.
    Down,
    /// Following every change after `floor`; what happened before it is unknown here.
    Up {
        /// The store revision the feed started after.
        floor: i64,
    },
}

#[derive(Debug, Default)]
struct Known {
    /// Per instance: its lifecycle records, which waiters subscribe to.
    lifecycle: HashMap<String, watch::Sender<Lifecycle>>,
    /// Per instance, per relay: its connection record (`None`: unreadable).
    connections: HashMap<String, HashMap<String, Option<OpenRecord>>>,
}

/// A relay's view of the fleet's changes.
#[derive(Debug)]
pub struct Feed {
    known: Mutex<Known>,
    status: watch::Sender<Status>,
}

impl Default for Feed {
    fn default() -> Self {
        Self {
            known: Mutex::new(Known::default()),
            status: watch::Sender::new(Status::Down),
        }
    }
}

impl Feed {
    fn known(&self) -> std::sync::MutexGuard<'_, Known> {
        // Nothing here can leave the maps half-updated, so a poisoned lock is still usable.
        self.known
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// (Re)starts following: the records read at `revision` replace what was known (an
    /// instance absent from them has neither state nor lock), and changes after it are
    /// applied as they come. Every waiter re-reads.
    pub fn start(&self, revision: i64, records: impl IntoIterator<Item = Change>) {
        {
            let mut known = self.known();
            known.connections.clear();
            let mut read: HashMap<String, Lifecycle> = HashMap::new();
            for change in records {
                match change {
                    Change::State {
                        instance,
                        record,
                        revision,
                    } => {
                        let l = read.entry(instance).or_default();
                        l.state = record;
                        l.state_revision = revision;
                    }
                    Change::Lock { instance, lock, .. } => {
                        read.entry(instance).or_default().lock = lock;
                    }
                    other => Self::apply_to(&mut known, other),
                }
            }
            for (instance, tx) in &known.lifecycle {
                let now = read.remove(instance).unwrap_or_default();
                tx.send_replace(Lifecycle { revision, ..now });
            }
            for (instance, now) in read {
                known
                    .lifecycle
                    .insert(instance, watch::Sender::new(Lifecycle { revision, ..now }));
            }
        }
        self.status.send_replace(Status::Up { floor: revision });
    }

    /// The watch broke: no hints until the next `start`.
    pub fn stop(&self) {
        self.status.send_replace(Status::Down);
    }

    /// Applies changes the watch delivered.
    pub fn apply(&self, changes: impl IntoIterator<Item = Change>) {
        let mut known = self.known();
        for change in changes {
            Self::apply_to(&mut known, change);
        }
    }

    fn apply_to(known: &mut Known, change: Change) {
        let lifecycle =
            |known: &mut Known, instance: String, revision: i64, f: &dyn Fn(&mut Lifecycle)| {
                let tx = known
                    .lifecycle
                    .entry(instance)
                    .or_insert_with(|| watch::Sender::new(Lifecycle::default()));
                tx.send_if_modified(|l| {
                    // Changes arrive in revision order (the keys one transaction writes
                    // share its revision); an older one is already in what the feed read.
                    let newer = revision >= l.revision;
                    if newer {
                        f(l);
                        l.revision = revision;
                    }
                    newer
                });
            };
        match change {
            Change::State {
                instance,
                record,
                revision,
            } => lifecycle(known, instance, revision, &|l| {
                l.state = record.clone();
                l.state_revision = revision;
            }),
            Change::Lock {
                instance,
                lock,
                revision,
            } => lifecycle(known, instance, revision, &|l| l.lock = lock.clone()),
            Change::Open {
                instance,
                relay,
                record,
            } => {
                known
                    .connections
                    .entry(instance)
                    .or_default()
                    .insert(relay, record);
            }
            Change::Gone { instance, relay } => {
                if let Some(by_relay) = known.connections.get_mut(&instance) {
                    by_relay.remove(&relay);
                    if by_relay.is_empty() {
                        known.connections.remove(&instance);
                    }
                }
            }
        }
    }

    /// `instance`'s state and lock as last seen, as a read of the store would return them
    /// (its `revision` is what to wait for a change after); `None` while the feed is down.
    #[must_use]
    pub fn observed(&self, instance: &str) -> Option<Observed> {
        let Status::Up { floor } = *self.status.borrow() else {
            return None;
        };
        let known = self.known();
        let l = known
            .lifecycle
            .get(instance)
            .map(|tx| tx.borrow().clone())
            .unwrap_or_default();
        Some(Observed {
            state: l.state,
            state_revision: l.state_revision,
            lock: l.lock,
            revision: l.revision.max(floor),
        })
    }

    /// The fleet's connections to `instance` as last seen; `None` while the feed is down.
    #[must_use]
    pub fn open(&self, instance: &str) -> Option<FleetOpen> {
        if *self.status.borrow() == Status::Down {
            return None;
        }
        let known = self.known();
        let records = known.connections.get(instance);
        Some(FleetOpen::sum_records(
            records.into_iter().flat_map(HashMap::values).copied(),
        ))
    }

    /// Resolves once `instance`'s lifecycle may have changed after `after` (a store revision):
    /// a change seen, or the feed (re)started after `after` so it cannot tell. Waits while the
    /// feed is down. Errors only when `gone` says the caller should stop waiting.
    pub async fn wait_change(
        &self,
        instance: &str,
        after: i64,
        mut gone: impl FnMut() -> Option<StoreError>,
        mut lease: watch::Receiver<Option<i64>>,
    ) -> Result<(), StoreError> {
        let mut changes = {
            let mut known = self.known();
            known
                .lifecycle
                .entry(instance.to_owned())
                .or_insert_with(|| watch::Sender::new(Lifecycle::default()))
                .subscribe()
        };
        let mut status = self.status.subscribe();
        loop {
            if let Some(e) = gone() {
                return Err(e);
            }
            let floor = match *status.borrow_and_update() {
                Status::Up { floor } => Some(floor),
                Status::Down => None,
            };
            if floor.is_some_and(|floor| floor > after)
                || changes.borrow_and_update().revision > after
            {
                return Ok(());
            }
            tokio::select! {
                r = changes.changed() => if r.is_err() { return Ok(()); },
                r = status.changed() => if r.is_err() { return Ok(()); },
                r = lease.changed() => if r.is_err() { return Ok(()); },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    fn keys() -> Keys {
        Keys::new("/p")
    }

    #[test]
    fn classifies_the_fleets_keys_and_ignores_the_rest() {
        let k = keys();
        let running = StateRecord {
            phase: crate::lifecycle::Phase::Running,
            relay: "r1".into(),
            since_ms: 5,
            rate_milli: 1000,
        };
        assert_eq!(
            Change::of(
                &k,
                b"/p/instances/shop/state",
                running.format().as_bytes(),
                false,
                7
            ),
            Some(Change::State {
                instance: "shop".into(),
                record: Some(running),
                revision: 7
            })
        );
        assert_eq!(
            Change::of(&k, b"/p/instances/shop/state", b"garbage", false, 7),
            Some(Change::State {
                instance: "shop".into(),
                record: None,
                revision: 7
            })
        );
        assert_eq!(
            Change::of(&k, b"/p/instances/shop/lock", b"r2 pausing", false, 8),
            Some(Change::Lock {
                instance: "shop".into(),
                lock: Some(LockRecord {
                    relay: "r2".into(),
                    purpose: LockPurpose::Pausing
                }),
                revision: 8
            })
        );
        // An unreadable lock still locks; a deleted one is released.
        assert!(matches!(
            Change::of(&k, b"/p/instances/shop/lock", b"\xff", false, 8),
            Some(Change::Lock { lock: Some(_), .. })
        ));
        assert_eq!(
            Change::of(&k, b"/p/instances/shop/lock", b"", true, 9),
            Some(Change::Lock {
                instance: "shop".into(),
                lock: None,
                revision: 9
            })
        );
        assert_eq!(
            Change::of(&k, b"/p/connections/shop/r1", b"2 100", false, 9),
            Some(Change::Open {
                instance: "shop".into(),
                relay: "r1".into(),
                record: Some(OpenRecord {
                    open: 2,
                    idle_since_ms: 100
                })
            })
        );
        assert_eq!(
            Change::of(&k, b"/p/connections/shop/r1", b"garbage", false, 9),
            Some(Change::Open {
                instance: "shop".into(),
                relay: "r1".into(),
                record: None
            })
        );
        assert_eq!(
            Change::of(&k, b"/p/connections/shop/r1", b"", true, 10),
            Some(Change::Gone {
                instance: "shop".into(),
                relay: "r1".into()
            })
        );
        for other in [
            &b"/p/ledger/shop/0001-r1"[..],
            b"/p/relays/r1",
            b"/px/instances/shop/state",
            b"/p/instances/shop",
            b"/p/instances/shop/other",
            b"/p/connections/shop",
            b"\xff\xfe",
        ] {
            assert_eq!(Change::of(&k, other, b"1 1", false, 1), None, "{other:?}");
        }
    }

    #[test]
    fn follows_an_instances_state_and_lock_from_the_first_read_on() {
        let feed = Feed::default();
        assert_eq!(feed.observed("shop"), None);
        let k = keys();
        let state = |phase: &str, relay: &str| format!("{phase} {relay} 1 1000");
        feed.start(
            10,
            Change::of(
                &k,
                b"/p/instances/shop/state",
                state("running", "r1").as_bytes(),
                false,
                4,
            ),
        );
        let seen = feed.observed("shop").unwrap();
        assert_eq!(seen.phase(), crate::lifecycle::Phase::Running);
        assert_eq!(
            (seen.state_revision, seen.revision, seen.lock),
            (4, 10, None)
        );
        // A pause by another relay: lock, state, state and release, in revision order.
        feed.apply(
            [
                Change::of(&k, b"/p/instances/shop/lock", b"r2 pausing", false, 11),
                Change::of(
                    &k,
                    b"/p/instances/shop/state",
                    state("pausing", "r2").as_bytes(),
                    false,
                    11,
                ),
            ]
            .into_iter()
            .flatten(),
        );
        let seen = feed.observed("shop").unwrap();
        assert_eq!(seen.phase(), crate::lifecycle::Phase::Pausing);
        assert_eq!(seen.lock.map(|l| l.relay), Some("r2".into()));
        feed.apply(
            [
                Change::of(
                    &k,
                    b"/p/instances/shop/state",
                    state("paused", "r2").as_bytes(),
                    false,
                    12,
                ),
                Change::of(&k, b"/p/instances/shop/lock", b"", true, 12),
            ]
            .into_iter()
            .flatten(),
        );
        let seen = feed.observed("shop").unwrap();
        assert_eq!(seen.phase(), crate::lifecycle::Phase::Paused);
        assert_eq!(
            (seen.state_revision, seen.revision, seen.lock),
            (12, 12, None)
        );
        // An instance never written reads as paused, at the feed's floor.
        let other = feed.observed("other").unwrap();
        assert_eq!(
            (other.phase(), other.revision),
            (crate::lifecycle::Phase::Paused, 10)
        );
        // A restart replaces everything with its read: the lock taken while down is there.
        feed.stop();
        assert_eq!(feed.observed("shop"), None);
        feed.start(
            20,
            Change::of(&k, b"/p/instances/shop/lock", b"r3 resuming", false, 18),
        );
        let seen = feed.observed("shop").unwrap();
        assert_eq!((seen.state, seen.revision), (None, 20));
        assert_eq!(seen.lock.map(|l| l.relay), Some("r3".into()));
    }

    #[test]
    fn sums_connections_and_knows_nothing_while_down() {
        let feed = Feed::default();
        assert_eq!(feed.open("shop"), None);
        let k = keys();
        feed.start(
            5,
            [
                Change::of(&k, b"/p/connections/shop/r1", b"0 100", false, 3),
                Change::of(&k, b"/p/connections/shop/r2", b"0 200", false, 4),
            ]
            .into_iter()
            .flatten(),
        );
        let idle = feed.open("shop").unwrap();
        assert_eq!((idle.open, idle.idle_since_ms), (0, 200));
        assert!(idle.idle_for(50, 250) && !idle.idle_for(60, 250));
        feed.apply(Change::of(
            &k,
            b"/p/connections/shop/r2",
            b"3 200",
            false,
            6,
        ));
        assert_eq!(feed.open("shop").unwrap().open, 3);
        feed.apply(Change::of(&k, b"/p/connections/shop/r1", b"bad", false, 7));
        let with_bad = feed.open("shop").unwrap();
        assert_eq!((with_bad.open, with_bad.unreadable), (4, 1));
        feed.apply(Change::of(&k, b"/p/connections/shop/r2", b"", true, 8));
        feed.apply(Change::of(&k, b"/p/connections/shop/r1", b"", true, 9));
        assert_eq!(feed.open("shop"), Some(FleetOpen::default()));
        feed.stop();
        assert_eq!(feed.open("shop"), None);
        // A restart forgets records that vanished while it was down.
        feed.start(20, []);
        assert_eq!(feed.open("shop"), Some(FleetOpen::default()));
    }

    fn lock_change(instance: &str, revision: i64) -> [Change; 1] {
        [Change::Lock {
            instance: instance.into(),
            lock: None,
            revision,
        }]
    }

    fn no_error() -> Option<StoreError> {
        None
    }

    #[tokio::test]
    async fn a_wait_ends_at_a_change_after_its_revision_only() {
        let feed = Arc::new(Feed::default());
        let (_lease_tx, lease) = watch::channel(Some(1));
        feed.start(10, []);
        // A change already seen after the caller's read ends the wait at once.
        feed.apply(lock_change("shop", 12));
        tokio::time::timeout(
            Duration::from_secs(5),
            feed.wait_change("shop", 11, no_error, lease.clone()),
        )
        .await
        .unwrap()
        .unwrap();
        // One at or before it does not; a later one does, and another instance's does not.
        let waiter = {
            let (feed, lease) = (Arc::clone(&feed), lease.clone());
            tokio::spawn(async move { feed.wait_change("shop", 12, no_error, lease).await })
        };
        feed.apply(
            lock_change("shop", 12)
                .into_iter()
                .chain(lock_change("other", 13)),
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiter.is_finished(), "woken by an old or unrelated change");
        feed.apply(lock_change("shop", 14));
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
    }

    #[tokio::test]
    async fn a_wait_from_before_the_feed_started_ends_at_once_and_waits_out_an_outage() {
        let feed = Arc::new(Feed::default());
        let (_lease_tx, lease) = watch::channel(Some(1));
        feed.start(10, []);
        // The feed cannot know what happened between revisions 5 and 10: read again.
        tokio::time::timeout(
            Duration::from_secs(5),
            feed.wait_change("shop", 5, no_error, lease.clone()),
        )
        .await
        .unwrap()
        .unwrap();
        feed.stop();
        let waiter = {
            let (feed, lease) = (Arc::clone(&feed), lease.clone());
            tokio::spawn(async move { feed.wait_change("shop", 10, no_error, lease).await })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiter.is_finished(), "a down feed ended the wait");
        // Back after an outage: changes meanwhile are unknown, so the wait ends.
        feed.start(15, []);
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
    }

    #[tokio::test]
    async fn a_lost_lease_ends_the_wait_with_an_error() {
        let feed = Arc::new(Feed::default());
        let (lease_tx, lease) = watch::channel(Some(1));
        feed.start(10, []);
        let waiter = {
            let feed = Arc::clone(&feed);
            let lost = lease.clone();
            tokio::spawn(async move {
                feed.wait_change(
                    "shop",
                    10,
                    move || {
                        lost.borrow()
                            .is_none()
                            .then(|| StoreError::Unavailable("lease lost".into()))
                    },
                    lease,
                )
                .await
            })
        };
        lease_tx.send_replace(None);
        let result = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .unwrap()
            .unwrap();
        assert!(result.is_err());
    }
}
