//! The fleet: several relays in front of the same instances, coordinated through a shared
//! state store (etcd). The single relay keeps its state in `state_dir` and needs none of this.
//!
//! What the store decides for the fleet (see [`record`] for the keys, [`protocol`] for the
//! steps of a transition):
//! - **one wake**: the relay that takes an instance's lock (bound to its lease, so it vanishes
//!   if that relay dies) runs the driver's start; the others wait (on their [`feed`], one
//!   watch per relay) until the state says `running`, then complete their own clients' logins
//!   against the compute;
//! - **no pause under a live connection**: each relay publishes its open connections under its
//!   own lease; a pause needs the sum over all relays to have been zero for `idle_pause_after`
//!   and is a compare-and-swap that fails if any relay's record changed since it was read;
//! - **one ledger**: each transition's ledger line is written in the transaction that makes it.
//!
//! A relay that cannot reach the store keeps forwarding what it holds and serves the direct
//! route, refuses new wakes (ERR 1053, retryable), pauses nothing, and re-reads the state when
//! the store is back.

#[cfg(feature = "etcd")]
pub mod etcd;
pub mod feed;
pub mod protocol;
pub mod record;
pub mod seal;
#[cfg(feature = "etcd")]
pub mod simulation;

use std::sync::Arc;

use crate::config::StoreSettings;
use crate::future::BoxFuture;
use crate::lifecycle::Phase;
pub use record::{FleetOpen, LockPurpose, LockRecord, OpenRecord, StateRecord};

/// Why the store could not answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreError {
    /// The store is unreachable, or this relay's lease is lost (its records are gone).
    Unavailable(String),
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Unavailable(why) => write!(f, "state store unavailable: {why}"),
        }
    }
}

impl std::error::Error for StoreError {}

/// One read of an instance's lifecycle records.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observed {
    /// The state, if any relay ever recorded one.
    pub state: Option<StateRecord>,
    /// The state key's revision (0: never written); transitions compare against it.
    pub state_revision: i64,
    /// Who holds the instance's lock, if anyone.
    pub lock: Option<LockRecord>,
    /// The store's revision at this read; a watch from the next one sees every later change.
    pub revision: i64,
}

impl Observed {
    /// The recorded phase (`paused` when none was ever recorded).
    #[must_use]
    pub fn phase(&self) -> Phase {
        self.state.as_ref().map_or(Phase::Paused, |s| s.phase)
    }
}

/// The fleet's connections to one instance, with each relay's record.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FleetConnections {
    /// The sum.
    pub total: FleetOpen,
    /// Each live relay's record.
    pub by_relay: Vec<(String, OpenRecord)>,
    /// The store's revision at this read: a pause compares the records against it.
    pub revision: i64,
}

/// A shared instance-state store.
pub trait FleetStore: Send + Sync + std::fmt::Debug {
    /// This relay's id in the fleet.
    fn relay_id(&self) -> &str;

    /// Whether the store is reachable and this relay's lease is live.
    fn available(&self) -> bool;

    /// Changes whenever this relay's lease is replaced (the records under the old one are
    /// gone and must be published again).
    fn lease_epoch(&self) -> u64;

    /// Reads an instance's state and lock.
    fn observe<'a>(&'a self, instance: &'a str) -> BoxFuture<'a, Result<Observed, StoreError>>;

    /// Takes the instance's lock for `purpose` and records the phase it starts (`resuming` or
    /// `pausing`, at `rate_milli`), if the lock is free and the state is still as `seen`; with
    /// `connections_unchanged_since`, also only if no relay's connection record changed after
    /// that revision. `false` when another relay got there first.
    fn begin<'a>(
        &'a self,
        instance: &'a str,
        seen: &'a Observed,
        purpose: LockPurpose,
        rate_milli: u64,
        connections_unchanged_since: Option<i64>,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// Records the phase a transition this relay began ends in and releases the lock. `false`
    /// when this relay no longer held the lock (its lease expired meanwhile): nothing written.
    fn finish<'a>(
        &'a self,
        instance: &'a str,
        phase: Phase,
        rate_milli: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// Resolves at the first change of the instance's state or lock after `after_revision`.
    fn wait_change<'a>(
        &'a self,
        instance: &'a str,
        after_revision: i64,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    /// Publishes this relay's connections to the instance (under its lease).
    fn publish_open<'a>(
        &'a self,
        instance: &'a str,
        record: OpenRecord,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    /// Every live relay's connections to the instance.
    fn connections<'a>(
        &'a self,
        instance: &'a str,
    ) -> BoxFuture<'a, Result<FleetConnections, StoreError>>;

    /// The instance's state and lock as this relay last heard of them, without a request;
    /// `None` when it cannot tell (then [`FleetStore::observe`] reads them).
    fn observed_hint(&self, instance: &str) -> Option<Observed>;

    /// The fleet's connections to the instance as this relay last heard of them, without a
    /// request; `None` when it cannot tell (then [`FleetStore::connections`] reads them).
    fn open_hint(&self, instance: &str) -> Option<FleetOpen>;

    /// What says whether the instances defined in the store changed: how many there are and
    /// the newest revision of any (a put raises it, a delete lowers the count), in one
    /// request that carries no definition.
    fn definitions_stamp(&self) -> BoxFuture<'_, Result<(u64, i64), StoreError>>;

    /// Every instance defined in the store: name and instance file text, by name.
    fn definitions(&self) -> BoxFuture<'_, Result<Vec<(String, String)>, StoreError>>;

    /// Writes instance `name`'s definition (`None` deletes it); returns the one it replaced.
    fn define<'a>(
        &'a self,
        name: &'a str,
        text: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Option<String>, StoreError>>;

    /// The fleet's usage ledger, in the ledger's text format, in time order.
    fn ledger_text(&self) -> BoxFuture<'_, Result<String, StoreError>>;

    /// The live relays' ids.
    fn relays(&self) -> BoxFuture<'_, Result<Vec<String>, StoreError>>;

    /// Leaves the fleet: revokes the lease, so this relay's records vanish at once.
    fn leave(&self) -> BoxFuture<'_, ()>;
}

/// Why a relay could not join its fleet.
#[derive(Debug)]
pub enum JoinError {
    /// This build has no etcd support.
    #[cfg(not(feature = "etcd"))]
    NotBuilt,
    /// The store did not answer.
    Store(StoreError),
}

impl std::fmt::Display for JoinError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            #[cfg(not(feature = "etcd"))]
            Self::NotBuilt => f.write_str(
                "this relay was built without etcd support (cargo feature `etcd`, on by default)",
            ),
            Self::Store(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for JoinError {}

/// Joins the fleet `settings` describe; `None` for the single relay (`kind = "local"`).
///
/// # Errors
/// [`JoinError`] when the store cannot be reached within its dial timeout.
pub async fn join(settings: &StoreSettings) -> Result<Option<Arc<dyn FleetStore>>, JoinError> {
    match settings {
        StoreSettings::Local => Ok(None),
        #[cfg(feature = "etcd")]
        StoreSettings::Etcd(etcd) => Ok(Some(
            etcd::EtcdStore::connect(etcd)
                .await
                .map_err(JoinError::Store)?,
        )),
        #[cfg(not(feature = "etcd"))]
        StoreSettings::Etcd(_) => Err(JoinError::NotBuilt),
    }
}
