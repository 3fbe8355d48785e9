//! An instance's lifecycle when its relay is one of a fleet (see `crate::fleet`): the wake
//! and the pause go through the store's lock and compare-and-swap, the relay publishes its
//! connections and follows the transitions other relays make. The protocol's steps are
//! `crate::fleet::protocol`'s (which `relay fleet-simulation` runs too); this module gives
//! them the relay's driver, billing rates and lifecycle.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::{Instance, Phase, State, WakeError, WakeOutcome};
use crate::control::driver::RunningCompute;
use crate::fleet::protocol::{self, PauseRefusal, UnderLock};
use crate::fleet::{FleetStore, Observed, OpenRecord};
use crate::future::BoxFuture;

/// How often the publisher looks at the connection count when nothing wakes it.
const PUBLISH_EVERY: Duration = Duration::from_millis(250);

/// A changed count that does not cross zero waits this long after the last publication: only
/// "some open" against "none since t" decides a pause, so busy instances do not write to the
/// store on every connection.
const COUNT_EVERY: Duration = Duration::from_secs(1);

/// The relay's side of the fleet's wake: its driver runs under the lock.
struct Driven<'a>(&'a Instance);

impl UnderLock for Driven<'_> {
    type Compute = Box<dyn RunningCompute>;
    type StartError = WakeError;

    fn instance(&self) -> &str {
        &self.0.config.name
    }

    fn shutting_down(&self) -> bool {
        self.0
            .shutting_down
            .load(std::sync::atomic::Ordering::Acquire)
    }

    fn adopt(&self) -> BoxFuture<'_, Option<Self::Compute>> {
        self.0.driver.adopt()
    }

    fn start(&self, left: Duration) -> BoxFuture<'_, Result<Self::Compute, WakeError>> {
        self.0.driver.start(left)
    }

    fn rate_milli(&self, phase: Phase) -> u64 {
        self.0
            .rate_milli(phase, self.0.config.capacity.map(|c| c.resume))
    }
}

impl Instance {
    /// Makes this instance's lifecycle the fleet's: from now on wakes and pauses go through
    /// `store`. Called once, before any connection.
    pub fn join_fleet(&self, store: Arc<dyn FleetStore>) {
        let _ = self.fleet.set(store);
    }

    /// The fleet's wake, in its own task: one relay takes the lock and runs the driver's start;
    /// the others wait on the store until the compute runs, then adopt it.
    pub(super) async fn fleet_resume(
        self: Arc<Self>,
        store: Arc<dyn FleetStore>,
        tx: watch::Sender<WakeOutcome>,
    ) {
        let started = Instant::now();
        let result = self.fleet_wake(store.as_ref()).await;
        if result.is_ok() {
            self.lock().trust = super::trust::Trust::Unproven;
            self.check_woken().await;
        }
        if result.as_ref().is_ok_and(|(_, adopted)| !adopted) {
            self.install_route().await;
        }
        let outcome = self.settle_wake(result, started);
        let _ = tx.send(Some(outcome));
    }

    /// The compute, running: started by this relay (`false`) or found running (`true`).
    async fn fleet_wake(
        &self,
        store: &dyn FleetStore,
    ) -> Result<(Box<dyn RunningCompute>, bool), WakeError> {
        let timeout = self.config.resume_timeout;
        protocol::wake(store, &Driven(self), timeout)
            .await
            .map_err(|e| match e {
                protocol::WakeError::Store(e) => WakeError::StoreUnavailable(e.to_string()),
                protocol::WakeError::Timeout => WakeError::Timeout(timeout),
                protocol::WakeError::ShuttingDown => WakeError::ShuttingDown,
                protocol::WakeError::Start(e) => e,
            })
    }

    /// Records the end of a transition this relay began, releasing the lock.
    pub(super) async fn fleet_finish(&self, store: &dyn FleetStore, phase: Phase, rate: u64) {
        protocol::finish(store, &self.config.name, phase, rate).await;
    }

    /// The fleet's half of a pause (see [`protocol::begin_pause`]).
    pub(super) async fn fleet_begin_pause(
        &self,
        store: &dyn FleetStore,
        force: bool,
    ) -> Result<(), super::PauseError> {
        use super::PauseError;
        let rate = Driven(self).rate_milli(Phase::Running);
        protocol::begin_pause(store, &self.config.name, force, rate)
            .await
            .map_err(|refusal| match refusal {
                PauseRefusal::NotRunning(phase) => PauseError::NotRunning(phase),
                PauseRefusal::Busy(n) => PauseError::Busy(usize::try_from(n).unwrap_or(usize::MAX)),
                other => PauseError::Fleet(other.to_string()),
            })
    }

    /// Whether the fleet agrees the instance is idle: every relay's connections have been
    /// closed for `idle_pause_after`. Always true for a single relay; false while the store
    /// is unreachable (a cut-off relay pauses nothing).
    pub(super) async fn fleet_idle(&self) -> bool {
        let Some(store) = self.fleet.get() else {
            return true;
        };
        protocol::idle(
            store.as_ref(),
            &self.config.name,
            self.config.idle_pause_after,
            crate::clock::now_ms(),
        )
        .await
    }

    /// This relay's part in the fleet, until `stop`: publishes its connections to the
    /// instance and follows the transitions other relays make.
    pub async fn take_part_in_fleet(self: Arc<Self>, stop: CancellationToken) {
        let Some(store) = self.fleet.get().cloned() else {
            return;
        };
        tokio::join!(
            self.publish_connections(store.as_ref(), &stop),
            self.follow_fleet(store.as_ref(), &stop)
        );
    }

    /// Publishes this relay's open connections whenever they change (and after a new lease).
    async fn publish_connections(&self, store: &dyn FleetStore, stop: &CancellationToken) {
        let mut published: Option<(u64, tokio::time::Instant, u64)> = None;
        let mut last_publication = tokio::time::Instant::now();
        loop {
            let (open, idle_since) = {
                let inner = self.lock();
                let open = inner.active.total() + inner.kernel_open;
                (u64::try_from(open).unwrap_or(u64::MAX), inner.idle_since)
            };
            let epoch = store.lease_epoch();
            let now = (open, idle_since, epoch);
            let due = match published {
                None => true,
                Some(before) if before == now => false,
                Some((before_open, before_idle, before_epoch)) => {
                    (before_open == 0) != (open == 0)
                        || before_epoch != epoch
                        || (open == 0 && before_idle != idle_since)
                        || last_publication.elapsed() >= COUNT_EVERY
                }
            };
            if due && store.available() {
                let idle_since_ms = crate::clock::now_ms().saturating_sub(
                    u64::try_from(idle_since.elapsed().as_millis()).unwrap_or(u64::MAX),
                );
                let record = OpenRecord {
                    open,
                    idle_since_ms,
                };
                match store.publish_open(&self.config.name, record).await {
                    Ok(()) => {
                        published = Some(now);
                        last_publication = tokio::time::Instant::now();
                    }
                    Err(e) => {
                        tracing::debug!(instance = %self.config.name, error = %e, "cannot publish connections");
                    }
                }
            }
            tokio::select! {
                () = self.connections_changed.notified() => {}
                () = tokio::time::sleep(PUBLISH_EVERY) => {}
                () = stop.cancelled() => return,
            }
        }
    }

    /// Mirrors other relays' transitions: a pause elsewhere ends this relay's view of the
    /// compute (without stopping anything itself), and a compute running in the fleet is
    /// adopted at once so new connections take the direct route here too.
    async fn follow_fleet(self: &Arc<Self>, store: &dyn FleetStore, stop: &CancellationToken) {
        protocol::follow(store, &self.config.name, stop, |seen| {
            self.apply_fleet_state(seen, store.relay_id());
        })
        .await;
    }

    fn apply_fleet_state(self: &Arc<Self>, seen: &Observed, me: &str) {
        let by_me = seen.lock.as_ref().is_some_and(|l| l.relay == me);
        if by_me {
            return;
        }
        let remote = seen.phase();
        let local = self.phase();
        let holder = seen
            .state
            .as_ref()
            .map_or("?", |s| s.relay.as_str())
            .to_owned();
        match (remote, local) {
            (Phase::Pausing | Phase::Paused | Phase::Failed, Phase::Running) => {
                let mut inner = self.lock();
                if matches!(inner.state, State::Running(_)) {
                    let open = inner.active.total();
                    if open > 0 {
                        tracing::warn!(instance = %self.config.name, relay = %holder, open, "another relay of the fleet is pausing the instance under this relay's connections");
                    }
                    tracing::info!(instance = %self.config.name, relay = %holder, "paused by another relay of the fleet");
                    self.transition(&mut inner, State::Paused);
                }
            }
            // This relay saw the compute exit before it heard of the pause that stopped it
            // (its watch was on an etcd member that had just gone): the fleet's record says
            // why, and the instance is paused, not failed.
            (Phase::Paused, Phase::Failed) => {
                let mut inner = self.lock();
                if matches!(inner.state, State::Failed(_)) {
                    tracing::info!(instance = %self.config.name, relay = %holder, "paused by another relay of the fleet");
                    self.transition(&mut inner, State::Paused);
                }
            }
            (Phase::Running, Phase::Paused | Phase::Failed) if seen.lock.is_none() => {
                let instance = Arc::clone(self);
                tokio::spawn(async move {
                    if let Err(e) = instance.ensure_running().await {
                        tracing::debug!(instance = %instance.config.name, error = %e, "cannot adopt the fleet's running compute");
                    }
                });
            }
            _ => {}
        }
    }
}
