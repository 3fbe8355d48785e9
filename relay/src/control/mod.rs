//! The control plane (DESIGN §4): each instance's lifecycle and the single-flight wake.
//!
//! Transitions are serialised per instance by one mutex over [`State`]. A wake runs in its own
//! task, so it finishes (and is cleaned up) even when the client that triggered it leaves;
//! every connection that arrives while it runs waits on the same outcome. That is how any
//! number of clients cause exactly one spawn (P3).
//!
//! The seams DESIGN §6 asks for: drivers are behind [`driver::Driver`], and the state lives
//! behind this module's small API so a shared store can replace the in-process map.

pub mod driver;
pub mod process;
pub mod readiness;

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::config::InstanceConfig;
use crate::metrics::{Counter, Metrics};
use driver::{Driver, RunningCompute};

/// Why an instance could not be woken.
#[derive(Debug, Clone)]
pub enum WakeError {
    /// The driver could not start the compute (e.g. the program does not exist).
    Driver(String),
    /// The compute exited before it became ready.
    Exited(String),
    /// The compute was not ready within `resume_timeout`.
    Timeout(Duration),
    /// The relay is shutting down.
    ShuttingDown,
}

impl WakeError {
    /// Metric label.
    #[must_use]
    pub const fn label(&self) -> &'static str {
        match self {
            Self::Driver(_) => "wake_driver_failed",
            Self::Exited(_) => "wake_compute_exited",
            Self::Timeout(_) => "wake_timeout",
            Self::ShuttingDown => "shutting_down",
        }
    }

    /// The part of the reason a client may see (no paths, no addresses).
    #[must_use]
    pub fn user_facing(&self) -> String {
        match self {
            Self::Driver(_) => "the compute could not be started".into(),
            Self::Exited(_) => "the compute stopped during start-up".into(),
            Self::Timeout(d) => format!("the compute was not ready within {}s", d.as_secs_f64()),
            Self::ShuttingDown => "the relay is shutting down".into(),
        }
    }
}

impl std::fmt::Display for WakeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Driver(e) => write!(f, "driver failed: {e}"),
            Self::Exited(e) => write!(f, "compute exited before it was ready: {e}"),
            Self::Timeout(d) => write!(f, "compute not ready within {d:?}"),
            Self::ShuttingDown => f.write_str("relay shutting down"),
        }
    }
}

impl std::error::Error for WakeError {}

type WakeOutcome = Option<Result<(), WakeError>>;

/// Where an instance is in its lifecycle.
enum State {
    /// No compute runs.
    Paused,
    /// A wake is in flight; its outcome arrives on the channel.
    Resuming(watch::Receiver<WakeOutcome>),
    /// The compute runs and was ready.
    Running(Arc<dyn RunningCompute>),
}

/// One instance: its configuration, its driver and its state.
pub struct Instance {
    /// The instance's configuration.
    pub config: InstanceConfig,
    driver: Box<dyn Driver>,
    state: Mutex<State>,
    shutting_down: std::sync::atomic::AtomicBool,
    metrics: Arc<Metrics>,
}

impl std::fmt::Debug for Instance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Instance")
            .field("name", &self.config.name)
            .finish_non_exhaustive()
    }
}

/// What a wake waited for, for the connection's log line.
#[derive(Debug, Clone, Copy)]
pub struct WakeReport {
    /// Whether this caller found the compute already running.
    pub was_running: bool,
    /// How long the caller waited.
    pub waited: Duration,
}

impl Instance {
    /// A paused instance.
    #[must_use]
    pub fn new(
        config: InstanceConfig,
        driver: Box<dyn Driver>,
        metrics: Arc<Metrics>,
    ) -> Arc<Self> {
        Arc::new(Self {
            config,
            driver,
            state: Mutex::new(State::Paused),
            shutting_down: false.into(),
            metrics,
        })
    }

    /// The state's name, for status and logs.
    #[must_use]
    pub fn state_name(&self) -> &'static str {
        match &*self.lock() {
            State::Paused => "paused",
            State::Resuming(_) => "resuming",
            State::Running(_) => "running",
        }
    }

    /// Makes sure the compute runs, starting it if needed, and waits at most
    /// `resume_timeout` (P3). Concurrent callers share one wake.
    ///
    /// # Errors
    /// [`WakeError`] when the wake fails or takes too long; the next call tries again.
    pub async fn ensure_running(self: &Arc<Self>) -> Result<WakeReport, WakeError> {
        let started = Instant::now();
        let mut rx = {
            let mut state = self.lock();
            if self
                .shutting_down
                .load(std::sync::atomic::Ordering::Acquire)
            {
                return Err(WakeError::ShuttingDown);
            }
            match &*state {
                State::Running(_) => {
                    return Ok(WakeReport {
                        was_running: true,
                        waited: started.elapsed(),
                    });
                }
                State::Resuming(rx) => rx.clone(),
                State::Paused => {
                    let (tx, rx) = watch::channel(None);
                    *state = State::Resuming(rx.clone());
                    tokio::spawn(Arc::clone(self).resume(tx));
                    rx
                }
            }
        };
        let timeout = self.config.resume_timeout;
        let outcome = tokio::time::timeout(timeout, rx.wait_for(Option::is_some)).await;
        match outcome {
            Ok(Ok(done)) => match &*done {
                Some(Ok(())) => Ok(WakeReport {
                    was_running: false,
                    waited: started.elapsed(),
                }),
                Some(Err(e)) => Err(e.clone()),
                None => Err(WakeError::Timeout(timeout)),
            },
            // The wake task ended without a word (cannot happen: it always sends), or our own
            // deadline passed first.
            Ok(Err(_)) | Err(_) => Err(WakeError::Timeout(timeout)),
        }
    }

    /// The wake itself, in its own task.
    async fn resume(self: Arc<Self>, tx: watch::Sender<WakeOutcome>) {
        let name = self.config.name.clone();
        tracing::info!(instance = %name, "resuming");
        let started = Instant::now();
        let result = self.driver.start(self.config.resume_timeout).await;
        let outcome = {
            let mut state = self.lock();
            match result {
                Ok(running) => {
                    let running: Arc<dyn RunningCompute> = Arc::from(running);
                    *state = State::Running(Arc::clone(&running));
                    tokio::spawn(Arc::clone(&self).watch_exit(running));
                    self.metrics.inc(Counter::Wakes, &name, "ok");
                    tracing::info!(instance = %name, resume_ms = started.elapsed().as_millis() as u64, "running");
                    Ok(())
                }
                Err(e) => {
                    *state = State::Paused;
                    self.metrics.inc(Counter::Wakes, &name, e.label());
                    tracing::warn!(instance = %name, error = %e, "resume failed");
                    Err(e)
                }
            }
        };
        // Nobody waiting is fine: the state is already updated.
        let _ = tx.send(Some(outcome));
    }

    /// Marks the instance paused when its compute exits on its own.
    async fn watch_exit(self: Arc<Self>, running: Arc<dyn RunningCompute>) {
        let reason = running.wait_exit().await;
        let mut state = self.lock();
        if let State::Running(current) = &*state {
            if Arc::ptr_eq(current, &running) {
                tracing::warn!(instance = %self.config.name, %reason, "compute exited; instance is paused");
                *state = State::Paused;
            }
        }
    }

    /// Stops the compute (relay shutdown): refuses new wakes, lets a wake in flight finish,
    /// then stops whatever runs.
    pub async fn shut_down(self: &Arc<Self>) {
        self.shutting_down
            .store(true, std::sync::atomic::Ordering::Release);
        let pending = match &*self.lock() {
            State::Resuming(rx) => Some(rx.clone()),
            _ => None,
        };
        if let Some(mut rx) = pending {
            let _ = rx.wait_for(Option::is_some).await;
        }
        let running = match std::mem::replace(&mut *self.lock(), State::Paused) {
            State::Running(r) => Some(r),
            _ => None,
        };
        if let Some(r) = running {
            tracing::info!(instance = %self.config.name, "stopping compute");
            r.stop().await;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave State half-written (every write is a
        // single assignment), so a poisoned lock is still consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests;
