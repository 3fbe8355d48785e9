//! The fleet's transition protocol (observe → begin → finish), written once: the relay's
//! lifecycle (`control::fleet`) and `relay fleet-simulation` both run these functions, so the
//! simulation measures the store requests the relay really makes.
//!
//! What runs under the lock is the caller's ([`UnderLock`]): the relay's driver, or the
//! simulation's instantaneous stand-in.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{FleetStore, LockPurpose, Observed, StoreError};
use crate::future::BoxFuture;
use crate::lifecycle::Phase;

/// How long a relay waits before reading the store again after it failed.
pub const RETRY_AFTER: Duration = Duration::from_millis(500);

/// What a fleet wake runs under the instance's lock, and what it finds running.
pub trait UnderLock: Sync {
    /// A running compute.
    type Compute: Send;
    /// Why a start failed.
    type StartError: Send;

    /// The instance's name.
    fn instance(&self) -> &str;

    /// Whether the relay is shutting down: no wake begins then.
    fn shutting_down(&self) -> bool;

    /// The compute the fleet records running, if it answers.
    fn adopt(&self) -> BoxFuture<'_, Option<Self::Compute>>;

    /// Starts the compute within `left`.
    fn start(&self, left: Duration) -> BoxFuture<'_, Result<Self::Compute, Self::StartError>>;

    /// The billing rate (thousandths of a CCU per second) from `phase` on, for a compute at
    /// its resume capacity.
    fn rate_milli(&self, phase: Phase) -> u64;
}

/// Why a fleet wake did not end with a running compute.
#[derive(Debug)]
pub enum WakeError<E> {
    /// The store did not answer.
    Store(StoreError),
    /// The wake's deadline passed while waiting on the store.
    Timeout,
    /// The relay is shutting down.
    ShuttingDown,
    /// The start under the lock failed (the fleet records the instance failed).
    Start(E),
}

/// A store request bounded by the wake's deadline.
async fn within<T, E>(
    deadline: tokio::time::Instant,
    request: impl Future<Output = Result<T, StoreError>>,
) -> Result<T, WakeError<E>> {
    tokio::time::timeout_at(deadline, request)
        .await
        .map_err(|_| WakeError::Timeout)?
        .map_err(WakeError::Store)
}

/// The fleet's wake within `timeout`: one relay takes the lock and starts the compute; the
/// others wait on the store until it runs, then adopt it. The compute, started here (`false`)
/// or found running (`true`).
///
/// # Errors
/// [`WakeError`]: the store, the deadline, a shutdown, or the start.
pub async fn wake<U: UnderLock>(
    store: &dyn FleetStore,
    side: &U,
    timeout: Duration,
) -> Result<(U::Compute, bool), WakeError<U::StartError>> {
    let name = side.instance();
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if side.shutting_down() {
            return Err(WakeError::ShuttingDown);
        }
        let seen = within(deadline, store.observe(name)).await?;
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
            return wake_under_lock(store, side, deadline).await;
        }
        if let Some(lock) = &seen.lock {
            tracing::debug!(instance = %name, holder = %lock.relay, "another relay is waking or pausing the instance; waiting");
            within(deadline, store.wait_change(name, seen.revision)).await?;
            continue;
        }
        if seen.phase() == Phase::Running {
            if let Some(compute) = side.adopt().await {
                return Ok((compute, true));
            }
            tracing::warn!(instance = %name, "the fleet records the instance running but its compute does not answer; waking it");
        }
        let rate = side.rate_milli(Phase::Resuming);
        let begin = store.begin(name, &seen, LockPurpose::Resuming, rate, None);
        if !within(deadline, begin).await? {
            // Another relay moved first; read what it did.
            continue;
        }
        tracing::info!(instance = %name, "resuming (this relay holds the fleet's wake lock)");
        return wake_under_lock(store, side, deadline).await;
    }
}

/// Starts the compute while this relay holds the instance's lock, then records the outcome
/// and releases the lock.
async fn wake_under_lock<U: UnderLock>(
    store: &dyn FleetStore,
    side: &U,
    deadline: tokio::time::Instant,
) -> Result<(U::Compute, bool), WakeError<U::StartError>> {
    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
    let result = side.start(left).await;
    let (phase, rate) = match &result {
        Ok(_) => (Phase::Running, side.rate_milli(Phase::Running)),
        Err(_) => (Phase::Failed, 0),
    };
    finish(store, side.instance(), phase, rate).await;
    result.map(|c| (c, false)).map_err(WakeError::Start)
}

/// Records the end of a transition this relay began, releasing the lock; whether it was
/// recorded (a relay that lost its lock or the store only logs it: the lock expires with its
/// lease).
pub async fn finish(store: &dyn FleetStore, instance: &str, phase: Phase, rate: u64) -> bool {
    match store.finish(instance, phase, rate).await {
        Ok(true) => true,
        Ok(false) => {
            tracing::warn!(instance = %instance, phase = phase.as_str(), "this relay lost the fleet's lock before it could record the outcome (its lease expired); another relay takes over");
            false
        }
        Err(e) => {
            tracing::warn!(instance = %instance, phase = phase.as_str(), error = %e, "cannot record the outcome in the fleet's store; the lock expires with this relay's lease");
            false
        }
    }
}

/// Why the fleet did not let a pause begin; the compute keeps running.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PauseRefusal {
    /// The store did not answer.
    Store(StoreError),
    /// This relay's own lock from a transition whose outcome was lost: released, with the
    /// state back at running, so the next tick pauses afresh.
    OwnLockReleased,
    /// Another relay is waking or pausing the instance.
    Locked {
        /// That relay.
        holder: String,
    },
    /// The fleet does not record the instance running.
    NotRunning(Phase),
    /// Connections are open on other relays (unreadable records count as one each).
    Busy(u64),
    /// A connection opened or a transition began elsewhere between the reads and the lock.
    Raced,
}

impl std::fmt::Display for PauseRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Store(e) => e.fmt(f),
            Self::OwnLockReleased => {
                f.write_str("released a lock of this relay whose transition's outcome was lost")
            }
            Self::Locked { holder } => write!(f, "relay {holder} is waking or pausing it"),
            Self::NotRunning(p) => write!(f, "instance is {}", p.as_str()),
            Self::Busy(n) => write!(f, "{n} connection(s) open on other relays"),
            Self::Raced => {
                f.write_str("a connection opened or a transition began elsewhere meanwhile")
            }
        }
    }
}

impl std::error::Error for PauseRefusal {}

/// The fleet's half of a pause: takes the instance's lock for the pause if the instance runs
/// in the fleet, nobody else holds its lock, (unforced) no other relay has a connection open,
/// and no connection record changed between that count and taking the lock. `running_rate`
/// is what a lost lock of this relay is released with.
///
/// # Errors
/// [`PauseRefusal`] when the pause may not begin.
pub async fn begin_pause(
    store: &dyn FleetStore,
    instance: &str,
    force: bool,
    running_rate: u64,
) -> Result<(), PauseRefusal> {
    let seen = store.observe(instance).await.map_err(PauseRefusal::Store)?;
    if seen
        .lock
        .as_ref()
        .is_some_and(|l| l.relay == store.relay_id())
    {
        // This relay's own lock with no transition running here: one whose answer was
        // lost. The compute runs (this relay holds it running), so the lock is released
        // with the state back at running, and the next tick pauses afresh.
        finish(store, instance, Phase::Running, running_rate).await;
        return Err(PauseRefusal::OwnLockReleased);
    }
    if let Some(lock) = &seen.lock {
        return Err(PauseRefusal::Locked {
            holder: lock.relay.clone(),
        });
    }
    if seen.phase() != Phase::Running {
        return Err(PauseRefusal::NotRunning(seen.phase()));
    }
    let unchanged_since = if force {
        None
    } else {
        let conns = store
            .connections(instance)
            .await
            .map_err(PauseRefusal::Store)?;
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
            return Err(PauseRefusal::Busy(elsewhere));
        }
        Some(conns.revision)
    };
    match store
        .begin(instance, &seen, LockPurpose::Pausing, 0, unchanged_since)
        .await
    {
        Ok(true) => Ok(()),
        Ok(false) => Err(PauseRefusal::Raced),
        Err(e) => Err(PauseRefusal::Store(e)),
    }
}

/// Whether the fleet agrees the instance is idle at `now_ms`: every relay's connections have
/// been closed for `idle_after`. False while the store is unreachable (a cut-off relay pauses
/// nothing).
pub async fn idle(
    store: &dyn FleetStore,
    instance: &str,
    idle_after: Duration,
    now_ms: u64,
) -> bool {
    // The relay's feed answers without a request; the pause itself reads the records.
    let total = match store.open_hint(instance) {
        Some(total) => total,
        None => match store.connections(instance).await {
            Ok(conns) => conns.total,
            Err(_) => return false,
        },
    };
    let after = u64::try_from(idle_after.as_millis()).unwrap_or(u64::MAX);
    total.idle_for(after, now_ms)
}

/// Follows the instance's records until `stop`: `apply` sees each state the feed reports,
/// then the relay waits for the next change.
pub async fn follow(
    store: &dyn FleetStore,
    instance: &str,
    stop: &CancellationToken,
    mut apply: impl FnMut(&Observed),
) {
    loop {
        // The relay's feed answers without a request. While it has no answer (etcd
        // unreachable, the feed restarting) there is nothing to follow: reading the store
        // instead, for every instance at once, would only add load to a store in trouble.
        let Some(seen) = store.observed_hint(instance) else {
            tokio::select! {
                () = tokio::time::sleep(RETRY_AFTER) => continue,
                () = stop.cancelled() => return,
            }
        };
        apply(&seen);
        tokio::select! {
            changed = store.wait_change(instance, seen.revision) => {
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
