//! What a relay knows of its fleet from one watch on the whole store: which instances'
//! lifecycle records changed (so a relay waiting for another's wake, or following the fleet,
//! needs no watch of its own per instance), and every relay's connection records (so the idle
//! tick reads memory, not the store). Fed by the store's watch task; pure bookkeeping here.
//!
//! Only hints come from here: a wait that returns means "read the store again", and the pause
//! itself still reads the connection records and swaps on their revision.

use std::collections::HashMap;
use std::sync::Mutex;

use tokio::sync::watch;

use super::StoreError;
use super::record::{FleetOpen, Keys, OpenRecord};

/// One change the watch delivered, classified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// An instance's state or lock changed at `revision`.
    Lifecycle {
        /// The instance.
        instance: String,
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
            let (instance, _) = rest.split_once('/')?;
            return Some(Self::Lifecycle {
                instance: instance.to_owned(),
                revision,
            });
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
    /// Per instance: the revision of its last lifecycle change seen.
    lifecycle: HashMap<String, watch::Sender<i64>>,
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

    /// (Re)starts following: the connection records as of `revision` replace what was known,
    /// and changes after it are applied as they come.
    pub fn start(&self, revision: i64, records: impl IntoIterator<Item = Change>) {
        {
            let mut known = self.known();
            known.connections.clear();
            for change in records {
                Self::apply_to(&mut known, change);
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
        match change {
            Change::Lifecycle { instance, revision } => match known.lifecycle.get(&instance) {
                Some(tx) => {
                    tx.send_if_modified(|seen| {
                        let newer = revision > *seen;
                        if newer {
                            *seen = revision;
                        }
                        newer
                    });
                }
                None => {
                    known
                        .lifecycle
                        .insert(instance, watch::Sender::new(revision));
                }
            },
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

    /// The fleet's connections to `instance` as last seen; `None` while the feed is down.
    #[must_use]
    pub fn open(&self, instance: &str) -> Option<FleetOpen> {
        if *self.status.borrow() == Status::Down {
            return None;
        }
        let known = self.known();
        let records = known.connections.get(instance);
        let mut total = FleetOpen::default();
        for record in records.into_iter().flat_map(HashMap::values) {
            total = match record {
                Some(r) => FleetOpen {
                    open: total.open.saturating_add(r.open),
                    idle_since_ms: total.idle_since_ms.max(r.idle_since_ms),
                    unreadable: total.unreadable,
                },
                None => FleetOpen {
                    open: total.open.saturating_add(1),
                    unreadable: total.unreadable.saturating_add(1),
                    ..total
                },
            };
        }
        Some(total)
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
                .or_insert_with(|| watch::Sender::new(0))
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
            if floor.is_some_and(|floor| floor > after) || *changes.borrow_and_update() > after {
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
        assert_eq!(
            Change::of(&k, b"/p/instances/shop/state", b"x", false, 7),
            Some(Change::Lifecycle {
                instance: "shop".into(),
                revision: 7
            })
        );
        assert_eq!(
            Change::of(&k, b"/p/instances/shop/lock", b"", true, 8),
            Some(Change::Lifecycle {
                instance: "shop".into(),
                revision: 8
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
            b"/p/connections/shop",
            b"\xff\xfe",
        ] {
            assert_eq!(Change::of(&k, other, b"1 1", false, 1), None, "{other:?}");
        }
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

    fn no_error() -> Option<StoreError> {
        None
    }

    #[tokio::test]
    async fn a_wait_ends_at_a_change_after_its_revision_only() {
        let feed = Arc::new(Feed::default());
        let (_lease_tx, lease) = watch::channel(Some(1));
        feed.start(10, []);
        // A change already seen after the caller's read ends the wait at once.
        feed.apply([Change::Lifecycle {
            instance: "shop".into(),
            revision: 12,
        }]);
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
        feed.apply([
            Change::Lifecycle {
                instance: "shop".into(),
                revision: 12,
            },
            Change::Lifecycle {
                instance: "other".into(),
                revision: 13,
            },
        ]);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiter.is_finished(), "woken by an old or unrelated change");
        feed.apply([Change::Lifecycle {
            instance: "shop".into(),
            revision: 14,
        }]);
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
