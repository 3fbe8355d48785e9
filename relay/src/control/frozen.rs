//! The frozen tier (architecture.md §4): a compute kept in memory with its processes frozen
//! (cgroup freezer), thawed in microseconds by the next client, stopped after `stop_after`.

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::watch;

use super::driver::{RunningCompute, WakeError};
use super::{Instance, Phase, State, WakeOutcome};
use crate::metrics::Counter;

impl Instance {
    /// For the pump, with `stop_after`: a callback that thaws the compute when a client sends
    /// bytes on a connection that stayed open while it was frozen (its bytes wait in the
    /// compute's socket until then).
    #[must_use]
    pub fn thaw_on_upload(self: &Arc<Self>) -> Option<crate::passthrough::OnRead> {
        self.config.stop_after?;
        let instance = Arc::clone(self);
        Some(Arc::new(move || {
            if instance.phase() == Phase::Frozen {
                tracing::info!(instance = %instance.config.name, "a client sent bytes to the frozen compute; thawing it");
                let instance = Arc::clone(&instance);
                tokio::spawn(async move {
                    if let Err(e) = instance.ensure_running().await {
                        tracing::warn!(instance = %instance.config.name, error = %e, "thaw for an open connection failed");
                    }
                });
            }
        }))
    }

    /// A wake of a frozen compute, in its own task: thaws it, or stops it and fails.
    pub(super) async fn thaw(
        self: Arc<Self>,
        frozen: Arc<dyn RunningCompute>,
        tx: watch::Sender<WakeOutcome>,
    ) {
        let name = self.config.name.clone();
        let started = Instant::now();
        let thawed = frozen.thaw().await;
        if let Err(e) = &thawed {
            tracing::warn!(instance = %name, error = %e, "cannot thaw the compute; stopping it");
            frozen.stop().await;
        }
        if thawed.is_ok() {
            // As for a fresh compute: routed before it counts as running.
            self.install_route().await;
        }
        let outcome = {
            let mut inner = self.lock();
            match thawed {
                Ok(()) => {
                    self.transition(&mut inner, State::Running(frozen));
                    inner.last_resume = Some(started.elapsed());
                    inner.idle_since = tokio::time::Instant::now();
                    self.metrics
                        .inc(Counter::Wakes, &name, crate::metrics::outcome::WOKE);
                    self.metrics.observe_resume(&name, started.elapsed());
                    tracing::info!(instance = %name, resume_ms = started.elapsed().as_millis() as u64, "running (thawed)");
                    Ok(())
                }
                Err(e) => {
                    let e = WakeError::Driver(format!("cannot thaw the compute: {e}"));
                    self.transition(&mut inner, State::Failed(super::Failure::Wake(e.clone())));
                    self.metrics.inc(Counter::Wakes, &name, e.label());
                    Err(e)
                }
            }
        };
        let _ = tx.send(Some(outcome));
    }

    /// Stops a frozen compute (it stayed frozen for `stop_after`, or the relay shuts down).
    pub(super) async fn stop_frozen(&self, why: &str) {
        let (frozen, tx) = {
            let mut inner = self.lock();
            let State::Frozen(frozen) = &inner.state else {
                return;
            };
            let frozen = Arc::clone(frozen);
            let (tx, rx) = watch::channel(false);
            self.transition(&mut inner, State::Pausing(rx));
            (frozen, tx)
        };
        tracing::info!(instance = %self.config.name, why, "stopping the frozen compute");
        self.stop_compute(frozen, tx).await;
    }

    /// After `stop_after`, stops a frozen compute whose open connections are all resumable
    /// sessions (docs/parking.md, "Sessions across a stop"): decided under the lock a command
    /// takes to turn its connection busy, so either the command thaws the compute first or
    /// every session is between commands when the stop begins. Their pumps then keep the
    /// clients, and each session is reattached to a new compute at its next command.
    pub(super) async fn stop_frozen_under_resumable_sessions(&self) {
        let (frozen, tx, sessions) = {
            let mut inner = self.lock();
            let State::Frozen(frozen) = &inner.state else {
                return;
            };
            let sessions = inner.active.total();
            if sessions == 0 || sessions != inner.resumable_conns || inner.kernel_parked > 0 {
                return;
            }
            let frozen = Arc::clone(frozen);
            self.detaching
                .store(true, std::sync::atomic::Ordering::Release);
            let (tx, rx) = watch::channel(false);
            self.transition(&mut inner, State::Pausing(rx));
            (frozen, tx, sessions)
        };
        tracing::info!(instance = %self.config.name, sessions, "stopping the frozen compute under resumable sessions; each reattaches at its next command");
        self.stop_compute(frozen, tx).await;
    }

    /// Whether the compute is being, or was, stopped under resumable sessions (cleared when
    /// a compute runs again).
    pub fn detaching(&self) -> bool {
        self.detaching.load(std::sync::atomic::Ordering::Acquire)
    }
}
