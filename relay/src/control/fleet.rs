//! An instance's lifecycle when its relay is one of a fleet (see `crate::fleet`): the wake
//! and the pause go through the store's lock and compare-and-swap, the relay publishes its
//! connections and follows the transitions other relays make.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::{Instance, Phase, State, WakeError, WakeOutcome};
use crate::control::driver::RunningCompute;
use crate::fleet::{FleetStore, LockPurpose, Observed, OpenRecord, StoreError};

/// How often the publisher looks at the connection count when nothing wakes it.
const PUBLISH_EVERY: Duration = Duration::from_millis(250);

/// A changed count that does not cross zero waits this long after the last publication: only
/// "some open" against "none since t" decides a pause, so busy instances do not write to the
/// store on every connection.
const COUNT_EVERY: Duration = Duration::from_secs(1);

/// How long a relay waits before reading the store again after it failed.
const RETRY_AFTER: Duration = Duration::from_millis(500);

/// A store request bounded by the wake's deadline.
async fn within<T>(
    deadline: tokio::time::Instant,
    timeout: Duration,
    request: impl Future<Output = Result<T, StoreError>>,
) -> Result<T, WakeError> {
    tokio::time::timeout_at(deadline, request)
        .await
        .map_err(|_| WakeError::Timeout(timeout))?
        .map_err(|e| WakeError::StoreUnavailable(e.to_string()))
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
        let name = &self.config.name;
        let timeout = self.config.resume_timeout;
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if self
                .shutting_down
                .load(std::sync::atomic::Ordering::Acquire)
            {
                return Err(WakeError::ShuttingDown);
            }
            let seen = within(deadline, timeout, store.observe(name)).await?;
            if seen
                .lock
                .as_ref()
                .is_some_and(|l| l.relay == store.relay_id())
            {
                // This relay's own lock, yet no transition of this instance runs here (wakes
                // are single-flight and pauses hold the lifecycle): a transition whose answer
                // was lost (a timeout after etcd committed it). Its lease is live, so nobody
                // else will ever take the lock: finish the job — a start is idempotent, and a
                // pause that never ran left the compute running.
                tracing::warn!(instance = %name, "found this relay's own fleet lock from a transition whose outcome was lost; completing the wake under it");
                return self.wake_under_lock(store, deadline).await;
            }
            if let Some(lock) = &seen.lock {
                tracing::debug!(instance = %name, holder = %lock.relay, "another relay is waking or pausing the instance; waiting");
                within(deadline, timeout, store.wait_change(name, seen.revision)).await?;
                continue;
            }
            if seen.phase() == Phase::Running {
                if let Some(compute) = self.driver.adopt().await {
                    return Ok((compute, true));
                }
                tracing::warn!(instance = %name, "the fleet records the instance running but its compute does not answer; waking it");
            }
            let rate = self.rate_milli(Phase::Resuming, self.config.capacity.map(|c| c.resume));
            let begin = store.begin(name, &seen, LockPurpose::Resuming, rate, None);
            let locked = within(deadline, timeout, begin).await?;
            if !locked {
                // Another relay moved first; read what it did.
                continue;
            }
            tracing::info!(instance = %name, "resuming (this relay holds the fleet's wake lock)");
            return self.wake_under_lock(store, deadline).await;
        }
    }

    /// Runs the driver's start while this relay holds the instance's lock, then records the
    /// outcome and releases the lock.
    async fn wake_under_lock(
        &self,
        store: &dyn FleetStore,
        deadline: tokio::time::Instant,
    ) -> Result<(Box<dyn RunningCompute>, bool), WakeError> {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let result = self.driver.start(left).await;
        let (phase, rate) = match &result {
            Ok(_) => (
                Phase::Running,
                self.rate_milli(Phase::Running, self.config.capacity.map(|c| c.resume)),
            ),
            Err(_) => (Phase::Failed, 0),
        };
        self.fleet_finish(store, phase, rate).await;
        result.map(|c| (c, false))
    }

    /// Records the end of a transition this relay began, releasing the lock.
    pub(super) async fn fleet_finish(&self, store: &dyn FleetStore, phase: Phase, rate: u64) {
        let name = &self.config.name;
        match store.finish(name, phase, rate).await {
            Ok(true) => {}
            Ok(false) => {
                tracing::warn!(instance = %name, phase = phase.as_str(), "this relay lost the fleet's lock before it could record the outcome (its lease expired); another relay takes over");
            }
            Err(e) => {
                tracing::warn!(instance = %name, phase = phase.as_str(), error = %e, "cannot record the outcome in the fleet's store; the lock expires with this relay's lease");
            }
        }
    }

    /// The fleet's half of a pause: the instance runs in the fleet, nobody else holds its
    /// lock, (unforced) no other relay has a connection open, and no connection record changed
    /// between that count and taking the lock.
    pub(super) async fn fleet_begin_pause(
        &self,
        store: &dyn FleetStore,
        force: bool,
    ) -> Result<(), super::PauseError> {
        use super::PauseError;
        let name = &self.config.name;
        let fleet_error = |e: StoreError| PauseError::Fleet(e.to_string());
        let seen = store.observe(name).await.map_err(fleet_error)?;
        if seen
            .lock
            .as_ref()
            .is_some_and(|l| l.relay == store.relay_id())
        {
            // This relay's own lock with no transition running here: one whose answer was
            // lost. The compute runs (this relay holds it running), so the lock is released
            // with the state back at running, and the next tick pauses afresh.
            let rate = self.rate_milli(Phase::Running, self.config.capacity.map(|c| c.resume));
            self.fleet_finish(store, Phase::Running, rate).await;
            return Err(PauseError::Fleet(
                "released a lock of this relay whose transition's outcome was lost".into(),
            ));
        }
        if let Some(lock) = &seen.lock {
            return Err(PauseError::Fleet(format!(
                "relay {} is waking or pausing it",
                lock.relay
            )));
        }
        if seen.phase() != Phase::Running {
            return Err(PauseError::NotRunning(seen.phase()));
        }
        let unchanged_since = if force {
            None
        } else {
            let conns = store.connections(name).await.map_err(fleet_error)?;
            // This relay's own count was checked under its lock; its record may lag by a
            // publish.
            let elsewhere: u64 = conns
                .by_relay
                .iter()
                .filter(|(relay, _)| relay != store.relay_id())
                .map(|(_, r)| r.open)
                .sum::<u64>()
                + conns.total.unreadable;
            if elsewhere > 0 {
                return Err(PauseError::Busy(
                    usize::try_from(elsewhere).unwrap_or(usize::MAX),
                ));
            }
            Some(conns.revision)
        };
        match store
            .begin(name, &seen, LockPurpose::Pausing, 0, unchanged_since)
            .await
        {
            Ok(true) => Ok(()),
            Ok(false) => Err(PauseError::Fleet(
                "a connection opened or a transition began elsewhere meanwhile".into(),
            )),
            Err(e) => Err(fleet_error(e)),
        }
    }

    /// Whether the fleet agrees the instance is idle: every relay's connections have been
    /// closed for `idle_pause_after`. Always true for a single relay; false while the store
    /// is unreachable (a cut-off relay pauses nothing).
    pub(super) async fn fleet_idle(&self) -> bool {
        let Some(store) = self.fleet.get() else {
            return true;
        };
        // The relay's feed answers without a request; the pause itself reads the records.
        let total = match store.open_hint(&self.config.name) {
            Some(total) => total,
            None => match store.connections(&self.config.name).await {
                Ok(conns) => conns.total,
                Err(_) => return false,
            },
        };
        let after = u64::try_from(self.config.idle_pause_after.as_millis()).unwrap_or(u64::MAX);
        total.idle_for(after, crate::clock::now_ms())
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
        let name = &self.config.name;
        loop {
            // The relay's feed answers without a request. While it has no answer (etcd
            // unreachable, the feed restarting) there is nothing to follow: reading the store
            // instead, for every instance at once, would only add load to a store in trouble.
            let Some(seen) = store.observed_hint(name) else {
                tokio::select! {
                    () = tokio::time::sleep(RETRY_AFTER) => continue,
                    () = stop.cancelled() => return,
                }
            };
            self.apply_fleet_state(&seen, store.relay_id());
            let revision = seen.revision;
            tokio::select! {
                changed = store.wait_change(name, revision) => {
                    if changed.is_err() {
                        tokio::select! {
                            () = tokio::time::sleep(RETRY_AFTER) => {}
                            () = stop.cancelled() => return,
                        }
                    }
                }
                () = stop.cancelled() => return,
            }
        }
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
